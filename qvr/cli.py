"""The `qvr` command line; each subcommand lives in `qvr.commands.<name>`.

Heavy imports (torch, pygls, textual) are deferred into the command functions so that
`qvr check` stays fast.  Exit status convention: 0 success, 1 the command found errors,
2 usage or I/O errors, 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules under qvr/commands/, in help order.  A module that is not present in
# this build (a later issue) is simply not offered.
COMMANDS = ("check", "fmt", "run", "lsp", "dash")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="qvr", description="The QVR toolchain")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"qvr.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"qvr.commands.{name}":
                continue
            raise
        module.register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("qvr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
