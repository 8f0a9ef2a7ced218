"""`qvr show RUN...`: print a saved run's summary, whatever its status (finished,
cancelled, failed, interrupted, or still running).  Torch-free: it reads the run record
(`qvr.runs`) and renders it as `qvr run` does at the end of a fit.

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
        prog = rec.program
        print(f"program {prog.get('path')}" + (f" (export {prog['export']})"
                                               if prog.get("export") else "")
              + f", started {rec.started}")
        print(render_run(rec, max_rows=max(1, args.rows)))
    return status
