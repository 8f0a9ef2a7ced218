"""Option blocks: reading entries and checking value shapes (qvr-language.md 5.2, 11.4).

`read_options` reports duplicate keys (QVR202) and returns the first entry of each key;
the `expect_*` helpers check one value's shape (QVR203) and range (QVR205).
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import errors as E
from qvr.sema.context import DeclContext
from qvr.syntax import ast as A


def read_options(ctx: DeclContext, block: Optional[A.OptionBlock], position: str) -> dict:
    out: dict[str, A.OptionEntry] = {}
    if block is None:
        return out
    for entry in block.entries:
        key = entry.key.text
        ctx.fact(entry.key.span, "option", (position, key))
        if key in out:
            ctx.report(E.duplicate_option(entry.key.span, key))
            continue
        out[key] = entry
    return out


def expect_name(ctx, entry: A.OptionEntry, what: str = "a name") -> Optional[str]:
    v = entry.value
    if isinstance(v, A.OVName):
        return v.text
    ctx.report(E.option_shape(entry.key.span, entry.key.text, what))
    return None


def expect_int(ctx, entry: A.OptionEntry, minimum: int) -> Optional[int]:
    v = entry.value
    if not (isinstance(v, A.Number) and v.is_int):
        ctx.report(E.option_shape(entry.key.span, entry.key.text, "an integer"))
        return None
    if v.value < minimum:
        rule = "at least 1" if minimum == 1 else f"at least {minimum}"
        ctx.report(E.out_of_range(entry.key.span, entry.key.text, rule, v.text))
        return None
    return int(v.value)


def expect_number(ctx, entry: A.OptionEntry, positive: bool = False, nonneg: bool = False) -> Optional[float]:
    v = entry.value
    if not isinstance(v, A.Number):
        ctx.report(E.option_shape(entry.key.span, entry.key.text, "a number"))
        return None
    if positive and v.value <= 0:
        ctx.report(E.out_of_range(entry.key.span, entry.key.text, "positive", v.text))
        return None
    if nonneg and v.value < 0:
        ctx.report(E.out_of_range(entry.key.span, entry.key.text, "at least 0", v.text))
        return None
    return float(v.value)


def expect_names(ctx, entry: A.OptionEntry) -> Optional[list[A.OVName]]:
    """A name or a bracketed list of names."""
    v = entry.value
    if isinstance(v, A.OVName):
        return [v]
    if isinstance(v, A.OVList) and all(isinstance(i, A.OVName) for i in v.items):
        return list(v.items)
    ctx.report(E.option_shape(entry.key.span, entry.key.text, "a name or a list of names"))
    return None
