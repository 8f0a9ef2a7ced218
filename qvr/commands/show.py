"""`qvr show RUN...`: print a saved run's summary, whatever its status (finished,
cancelled, failed, interrupted, or still running).  Torch-free: it reads the run record
(`qvr.runs`) and renders it as `qvr run` does at the end of a fit, after a line naming
the program, its export (with the arguments of a parametric program:
``export shrink(spread=2)``) and when the run started, and a line of the options the run
set beyond its method's defaults (``options: seed 3, uturn displacement``).

Exit status: 0, or 2 when a folder is not a readable run record.
"""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("show", help="print a saved run's summary",
                       description="Print the summary of saved runs (any status).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders (runs/NAME-TIMESTAMP)")
    p.add_argument("--rows", type=int, default=20, metavar="N",
                   help="sites shown in the summary (default 20)")
    p.set_defaults(func=run)


def run(args) -> int:
    from qvr.commands.report import render_run
    from qvr.runs import RunRecordError, open_run
    status = 0
    for i, path in enumerate(args.runs):
        try:
            rec = open_run(path)
        except RunRecordError as exc:
            print(f"qvr show: {exc}", file=sys.stderr)
            status = 2
            continue
        if len(args.runs) > 1:
            print(("\n" if i else "") + f"== {rec.path} ({rec.status})")
        print(f"program {rec.program.get('path')}{_export_text(rec)}, started {rec.started}")
        options = _options_text(rec)
        if options:
            print(options)
        print(render_run(rec, max_rows=max(1, args.rows)))
    return status


def _export_text(rec) -> str:
    """`` (export NAME)``, ``NAME(spread=2)`` for a parametric program's arguments."""
    given = rec.config.get("args") or {}
    called = ", ".join(f"{k}={_number(v)}" for k, v in dict(given).items()) \
        if isinstance(given, dict) else str(given)
    export = rec.program.get("export")
    if export:
        return f" (export {export}({called}))" if called else f" (export {export})"
    return f" (arguments {called})" if called else ""


def _options_text(rec) -> str:
    """``options: seed 1, uturn displacement``: what the run set beyond the defaults of its
    method (the shipped ones included); "" when nothing.  A parametric program's
    arguments are on the program line already."""
    from qvr.inference.config import FitConfig
    config = dict(rec.config or {})
    shown = [f"{name} {_value(v)}" for name, v in FitConfig.set_options(config)
             if name != "args"]
    return "options: " + ", ".join(shown) if shown else ""


def _value(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, dict):
        return ",".join(f"{k}={_value(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ",".join(_value(x) for x in v)
    return _number(v)


def _number(v) -> str:
    return format(v, "g") if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else str(v)
