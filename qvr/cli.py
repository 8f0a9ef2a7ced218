"""The `qvr` command line; each subcommand lives in `qvr.commands.<name>`.

Heavy imports (torch, pygls, textual) are deferred into the command functions so that
`qvr check` stays fast.  Exit status convention: 0 success, 1 the command found errors,
2 usage or I/O errors, 3 internal error (an unexpected exception: its traceback is saved
by `qvr.internal_error`, never printed), 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules under qvr/commands/, in help order.  A module that is not present in
# this build (a later issue) is simply not offered.
COMMANDS = ("check", "fmt", "run", "predict", "show", "compare", "lsp", "dash")


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
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `qvr run --nproc` relaunches
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("qvr: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`qvr check ... | head`): not a bug
        import os
        try:  # what is still buffered can go nowhere: flushing it at exit must not fail
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover
            pass
        return 2
    except Exception as exc:  # a bug: one message, the traceback saved to a file
        from qvr.internal_error import report
        return report(exc, args, argv=sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
