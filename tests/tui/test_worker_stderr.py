"""What the dashboard shows of a dead worker's stderr: its last meaningful lines, without
the run-folder notes and the plain progress lines `qvr run` prints when its stderr is not
a terminal (as in the worker)."""
from qvr.events import PLAIN_PREFIX
from qvr_tui.fit_runner import FitRunner


def test_progress_lines_are_not_a_failure_cause(tmp_path):
    runner = FitRunner.__new__(FitRunner)  # no worker: only the stderr file is read
    runner.stderr_path = tmp_path / "worker.err"
    runner.stderr_path.write_text(
        "qvr run: run folder runs/x-1\n"
        f"{PLAIN_PREFIX}svi step 60/1000, 4.7 steps/s, loss 20, ETA 02:59\n"
        "qvr run: examples/x.qvr: the loss is NaN at step 61\n"
        f"{PLAIN_PREFIX}svi step 61/1000, 4.7 steps/s, loss nan, ETA 02:59\n"
        "qvr run: results in runs/x-1\n", encoding="utf-8")
    assert runner.stderr_tail() == "qvr run: examples/x.qvr: the loss is NaN at step 61"


def test_the_prefix_is_qvr_runs_own():
    """`qvr run`'s progress lines and the fit runner take the prefix from one place,
    `qvr.events` (it was spelled out again here: a change there would have let progress
    lines through as the cause)."""
    from qvr import events
    from qvr.commands import progress
    from qvr_tui import fit_runner
    assert fit_runner.PLAIN_PREFIX is events.PLAIN_PREFIX is progress.PLAIN_PREFIX
