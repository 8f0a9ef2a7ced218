"""Snapshot of the Results pane on the recorded NUTS run at 100x30 (pytest-textual-snapshot;
refresh with `--snapshot-update` after a deliberate change and look at the SVG diff).
The run folder is shown relative to the working directory: run pytest from the root."""
from qvr_tui.screens.results import ResultsPane

from conftest import Harness
from results_fixtures import FIXTURES, RUNS


def test_results_pane_snapshot(snap_compare, monkeypatch):
    monkeypatch.chdir(FIXTURES.parents[2])
    app = Harness(ResultsPane(RUNS / "nuts", program_path=FIXTURES / "tiny.qvr"))

    async def expand_probs(pilot):
        await pilot.app.workers.wait_for_complete()  # the record is read in a thread
        await pilot.app.workers.wait_for_complete()  # then the check chips are mounted
        await pilot.pause()
        pilot.app.query_one("#summary").focus()
        await pilot.press("down", "down", "enter", "down", "down")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=expand_probs)
