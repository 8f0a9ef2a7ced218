"""Argument types shared by the `qvr` subcommands (argparse `type=` callables).

Each returns the parsed value or raises `argparse.ArgumentTypeError` with a message that
names what was expected, so argparse reports a clear usage error (exit status 2).
"""
from __future__ import annotations

import argparse
import math


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    value = _int(text, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def token_id(text: str) -> int:
    value = _int(text, "a token id")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a token id >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value
