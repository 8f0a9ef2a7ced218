"""`qvr predict RUN --data NEW [--draws K] [--seed S]`: draws of a fitted program's
observed sites (and recorded quantities) at new covariates — the posterior predictive
for new data (`qvr.inference.front.predict`).

RUN is a saved HMC, NUTS, SVI or prior run (`qvr run`); NEW a data file holding the
covariates (host data, the input) the program reads, with any number of rows where the
program allows it.  The prediction is a run record like any other (method ``predict``,
``RUNS-DIR/NAME-predict-TIMESTAMP``, by default beside RUN), printed as ``qvr show``
prints it: one row per predicted element (mean, sd, 5/50/95 %).

Exit status: 0 success, 1 the run or the data cannot give a prediction (a message naming
the file and the cause), 2 usage or I/O errors (no such run folder or data file).
"""
from __future__ import annotations

import sys
from pathlib import Path

TOOL = "qvr predict"


def register(sub) -> None:
    p = sub.add_parser("predict", help="draw a fitted program's observations at new data",
                       description="Draw the observed sites (and recorded quantities) of a "
                                   "fitted program at new covariates, from the fit's "
                                   "draws: the posterior predictive for new data, kept in "
                                   "a run record (method predict).")
    p.add_argument("run", metavar="RUN", help="a saved HMC, NUTS, SVI or prior run folder")
    p.add_argument("--data", required=True, metavar="FILE",
                   help="the new data: the covariates the program reads (.json, .npz, "
                        ".pt or a folder of .npy)")
    p.add_argument("--draws", type=int, metavar="K",
                   help="use K of the fit's draws in all, evenly spaced (default: all)")
    p.add_argument("--seed", type=int, metavar="S",
                   help="seed of the forward draws (default: a fresh one, recorded)")
    p.add_argument("--name", help="run folder name (default: the program's stem + -predict)")
    p.add_argument("--runs-dir", metavar="DIR",
                   help="where the run folder is created (default: the folder holding RUN)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="write the record into exactly this folder")
    p.add_argument("--rows", type=int, default=20, metavar="N",
                   help="elements shown in the table (default 20)")
    p.set_defaults(func=run)


def run(args) -> int:
    from qvr.runs import RecordError, RunRecordError, new_run_dir, open_run
    source = Path(args.run)
    if not source.is_dir():
        print(f"{TOOL}: {args.run}: no such run folder", file=sys.stderr)
        return 2
    try:
        record = open_run(source)
    except RunRecordError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 2
    if not Path(args.data).exists():
        print(f"{TOOL}: --data {args.data}: no such data file or folder", file=sys.stderr)
        return 2
    if args.draws is not None and args.draws < 1:
        print(f"{TOOL}: --draws {args.draws}: must be at least 1", file=sys.stderr)
        return 2
    try:
        if args.run_dir:
            folder = Path(args.run_dir)
            if (folder / "run.json").exists():
                print(f"{TOOL}: --run-dir {folder}: already holds a run record",
                      file=sys.stderr)
                return 2
        else:
            stem = Path(record.program.get("path") or "run").stem
            folder = new_run_dir(args.runs_dir or source.resolve().parent,
                                 args.name or f"{stem}-predict")
    except RecordError as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        return 2
    from qvr.commands.report import render_run
    from qvr.inference.data.fit_data import DataError
    from qvr.events import FitWarning
    from qvr.inference.front.predict import predict
    from qvr.runtime.errors import QvrRuntimeError

    def on_event(ev):
        if isinstance(ev, FitWarning):
            print(f"{TOOL}: note: {ev.message}", file=sys.stderr)
    print(f"{TOOL}: run folder {folder}", file=sys.stderr)
    try:
        predict(record, args.data, draws=args.draws, seed=args.seed, run_dir=folder,
                on_event=on_event)
    except (DataError, QvrRuntimeError, RecordError) as exc:
        print(f"{TOOL}: {exc}", file=sys.stderr)
        _drop_empty(folder)
        return 1
    print(f"program {record.program.get('path')}, predicted from {record.path}")
    print(render_run(open_run(folder), max_rows=max(1, args.rows)))
    print(f"{TOOL}: results in {folder}", file=sys.stderr)
    return 0


def _drop_empty(folder: Path) -> None:
    """A prediction refused before its record was opened leaves no empty folder behind
    (a record that was opened keeps its failure, as any run does)."""
    try:
        if not (folder / "run.json").exists():
            folder.rmdir()
    except OSError:
        pass
