"""`qvr dash [FILE] [--run RUN] [--start svi|hmc|nuts|smc]`: the terminal dashboard.

Opens the Textual dashboard (`qvr_tui`, the ``tui`` extra) on a program, a saved run, or
both; ``--start M`` starts a fit with method M and its defaults at once (data: the data
shipped beside the program, ``data/NAME.json``, when there is some, else
`HEADLESS_SYNTHETIC` synthetic rows drawn from the prior predictive).

Without a terminal (stdout not a TTY: piped, CI) ``qvr dash FILE --start M`` runs the same
fit headless through the code path of ``qvr run`` (the same record in ``runs/``, the same
summary printed); without ``--start`` it says that it needs a terminal (exit 2).

Nothing heavy is imported when the command is registered: Textual is imported when the
dashboard opens, torch only by the headless fit (and by the dashboard's worker process).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qvr.inference.config import METHODS

HEADLESS_SYNTHETIC = 8


def register(sub) -> None:
    p = sub.add_parser("dash", help="the terminal dashboard: fit, watch live, explore runs",
                       description="Open the terminal dashboard on a program (and/or a saved "
                                   "run); --start fits at once with a method's defaults.")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p) -> None:
    p.add_argument("file", nargs="?", help="the .qvr program")
    p.add_argument("--run", metavar="RUN", help="open a saved run folder (runs/NAME-...)")
    p.add_argument("--start", choices=METHODS, metavar="METHOD",
                   help="start a fit with this method's defaults at once "
                        "(svi, hmc, nuts or smc)")
    p.add_argument("--export", metavar="NAME",
                   help="the exported program or morphism to fit (default: the first)")
    p.add_argument("--runs-dir", default="runs", metavar="DIR",
                   help="where run folders are created and listed (default ./runs)")


def _has_terminal() -> bool:
    try:
        return sys.stdout.isatty() and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def run(args) -> int:
    tool = "qvr dash"
    if args.file is not None and not Path(args.file).is_file():
        print(f"{tool}: {args.file}: no such file", file=sys.stderr)
        return 2
    if args.run is not None and not Path(args.run).is_dir():
        print(f"{tool}: --run {args.run}: no such run folder", file=sys.stderr)
        return 2
    if args.start and args.file is None:
        print(f"{tool}: --start needs a program file", file=sys.stderr)
        return 2
    if not _has_terminal():
        if args.start:
            return headless(args)
        print(f"{tool}: the dashboard needs a terminal (stdout and stdin are not a TTY); "
              f"use `qvr dash FILE --start METHOD` or `qvr run` to fit without one",
              file=sys.stderr)
        return 2
    try:
        from qvr_tui.app import QvrDash
    except ImportError as exc:
        print(f"{tool}: the dashboard is not installed ({exc}); install the tui extra "
              f"(`bash scripts/setup.sh`)", file=sys.stderr)
        return 2
    app = QvrDash(program=args.file, run=args.run, start=args.start, runs_dir=args.runs_dir,
                  export=args.export)
    app.run()
    return 0


def headless_argv(args) -> list[str]:
    """The `qvr run` command line of `qvr dash FILE --start M` without a terminal."""
    from qvr.datafiles import find_data
    argv = ["run", args.file, "--method", args.start, "--runs-dir", args.runs_dir]
    if getattr(args, "export", None):
        argv += ["--export", args.export]
    if args.start != "smc" and find_data(args.file) is None:
        argv += ["--synthetic", str(HEADLESS_SYNTHETIC)]
    return argv


def headless(args) -> int:
    from qvr.commands import run as run_cmd
    p = argparse.ArgumentParser(prog="qvr")
    sub = p.add_subparsers(dest="command")
    run_cmd.register(sub)
    argv = headless_argv(args)
    print(f"qvr dash: no terminal: running `qvr {' '.join(argv)}`", file=sys.stderr)
    return run_cmd.run(p.parse_args(argv))
