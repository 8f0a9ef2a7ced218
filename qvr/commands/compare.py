"""`qvr compare RUN RUN... [--format text|json]`: compare fitted models by PSIS-LOO
(`qvr.inference.criticism.checks.compare`, torch-free).

A RUN is a run folder, or a run id under ``runs/`` (``runs/NAME-TIMESTAMP``).  Text output
is a table (rank, run, program/export, elpd_loo, SE, elpd_diff and its SE, p_loo, stacking
weight, warnings) and a one-line verdict: which run predicts better, by how much, or no
clear difference (< 2 SE).  ``--format json`` prints the comparison dict.

Exit status: 0; 2 when a folder is not a readable run record or the runs cannot be
compared (different data, no pointwise terms: the message says which and why).
"""
from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare fitted runs by PSIS-LOO",
                       description="Compare runs fitted to the same data by PSIS-LOO "
                                   "(expected log predictive density).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders (runs/NAME-TIMESTAMP) or run ids under runs/")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format (default text)")
    p.set_defaults(func=run)


def resolve_run(arg: str) -> Path:
    """A run argument as a folder: the path itself, else ``runs/ARG``."""
    p = Path(arg)
    if not p.is_dir() and not p.is_absolute() and (Path("runs") / arg).is_dir():
        return Path("runs") / arg
    return p


def run(args) -> int:
    from qvr.inference.criticism.checks import CompareError, compare
    from qvr.runs import RunRecordError, open_run
    records = []
    for arg in args.runs:
        try:
            records.append(open_run(resolve_run(arg)))
        except RunRecordError as exc:
            print(f"qvr compare: {exc}", file=sys.stderr)
            return 2
    try:
        result = compare(records)
    except CompareError as exc:
        print(f"qvr compare: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        import json
        print(json.dumps(result, indent=2, allow_nan=True))
    else:
        print(render(result))
    return 0


def _num(v, spec: str) -> str:
    import math
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def render(result: dict) -> str:
    """The comparison as a table and the verdict line."""
    head = ["rank", "run", "program/export", "elpd_loo", "SE", "elpd_diff", "dSE", "p_loo",
            "weight", "warnings"]
    rows = []
    for r in result["runs"]:
        prog = Path(r.get("program") or "").name or "?"
        export = r.get("export")
        warn = f"{r['n_high_k']} high k" if r.get("n_high_k") else \
            ("high k" if r.get("warning") else "")
        rows.append([str(r["rank"]), r["run_id"], f"{prog}/{export}" if export else prog,
                     _num(r["elpd_loo"], ".1f"), _num(r["se"], ".1f"),
                     _num(r["elpd_diff"], ".1f"), _num(r["dse"], ".1f"),
                     _num(r["p_loo"], ".1f"), _num(r["weight"], ".2f"), warn])
    widths = [max(len(head[i]), *(len(row[i]) for row in rows)) for i in range(len(head))]
    left = {1, 2, 9}

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(head)] + [line(r) for r in rows]
    out.append(f"({result['n_rows']} rows; elpd_diff and dSE against the best run)")
    if result.get("verdict"):
        out.append(result["verdict"])
    return "\n".join(out)
