"""Run records: what a fit leaves on disk, readable from any process (format 1).

* `RunWriter` (`writer.py`) — the one writer; `qvr.inference.fit(..., run_dir=...)` uses it.
* `open(path)` / `open_run(path)` → `Run` (`reader.py`) — the one reader: typed events,
  draws as arrays, summary, results and a status (``running``, ``finished``, ``failed``,
  ``cancelled``, ``interrupted``); `Run.tail()` follows a live record.
* `list_runs(root, program=...)` — past runs, newest first.
* `layout.py` — the files and their meaning (also in the README).

Torch-free (numpy for arrays): the dashboard's UI process reads records with it.
"""
from qvr.runs.layout import FORMAT, STATUSES
from qvr.runs.reader import Run, RunRecordError, Tail, list_runs, open_run
from qvr.runs.writer import RecordError, RunWriter, end_abandoned, new_run_dir

open = open_run  # noqa: A001 - `qvr.runs.open(path)` reads a record

__all__ = ["FORMAT", "STATUSES", "Run", "RunRecordError", "Tail", "list_runs", "open",
           "open_run", "RecordError", "RunWriter", "end_abandoned", "new_run_dir"]
