"""The Live header before any fit says that none was started (it said "waiting for the
worker to start the fit" above "Nothing is running"), also after `--run` named a folder
that holds no run; once a fit is started and before its first event it is waiting."""
from pathlib import Path

import pytest

from qvr_tui.app import QvrDash
NO_FIT_YET = "no fit yet: set one up (2) and press r"

from conftest import EXAMPLES


def header(app) -> str:
    return str(app.query_one("#live-header").content)


@pytest.mark.asyncio
async def test_before_any_fit(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("3")
        await pilot.pause(3 * app.poll_interval)  # some ticks of the timer have run
        assert header(app) == NO_FIT_YET
        assert "waiting" not in header(app)


@pytest.mark.asyncio
async def test_run_folder_that_is_not_a_run(tmp_path):
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), run=str(empty),
                  runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.pause(3 * app.poll_interval)
        assert header(app) == NO_FIT_YET


def test_a_started_fit_waits_for_its_worker():
    from qvr_tui.state import RunState
    s = RunState()
    s.run_dir = "runs/hmm-20260101-000000"
    assert s.status_line() == "waiting for the worker to start the fit"


def test_a_folder_without_a_record_lists_three_entries_and_says_there_are_more():
    """"(only a, b, c)" read as if the folder held just those three."""
    from qvr_tui.screens.live import LivePane
    from qvr_tui.state import RunState
    pane = LivePane()
    s = RunState()
    s.requested, s.run_dir = "svi", "runs/x-1"
    s.start_failed("exit status 2", ["a", "b", "c", "d"])
    pane.state = s
    assert pane.note_text() == "runs/x-1 holds no record (only a, b, c, …)"
    s.start_failed("exit status 2", ["a", "b", "c"])
    assert pane.note_text() == "runs/x-1 holds no record (only a, b, c)"
