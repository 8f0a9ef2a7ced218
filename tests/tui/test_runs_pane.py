"""RunsPane under Pilot on copies of the recorded runs: rows and statuses, Enter opens a
run, marking two and `o` overlays their curves; curves of different kinds are refused."""
from __future__ import annotations

import asyncio

import pytest

from qvr_tui.screens.runs import RunsPane
from qvr_tui.widgets.runs_table import RunsTable

from conftest import Harness
from results_fixtures import copy_runs


pytestmark = pytest.mark.asyncio

class RunsHarness(Harness):
    def __init__(self, *widgets) -> None:
        super().__init__(*widgets)
        self.opened: asyncio.Queue = asyncio.Queue()
        self.overlays: asyncio.Queue = asyncio.Queue()

    def on_runs_pane_open_run(self, event) -> None:
        self.opened.put_nowait(event.path)

    def on_runs_pane_overlay(self, event) -> None:
        self.overlays.put_nowait(event.paths)


@pytest.fixture
def runs(tmp_path):
    return copy_runs(tmp_path)


def cursor_to(pilot_table: RunsTable, name: str) -> None:
    pilot_table.move_cursor(row=[r.name for r in pilot_table.runs].index(name))


async def test_rows_open_and_overlay(runs):
    runs_dir, program = runs
    pane = RunsPane(program, runs_dir)
    app = RunsHarness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = pane.query_one(RunsTable)
        assert {r.name: r.status for r in table.runs} == {
            "nuts": "finished", "svi": "finished", "failed": "failed",
            "interrupted": "interrupted"}
        assert table.row_count == 4
        by = {r.name: r for r in table.runs}
        assert str(table.get_row(str(by["nuts"].path))[4]).startswith("R-hat 1.0")
        table.focus()
        cursor_to(table, "svi")
        await pilot.press("enter")
        assert await app.opened.get() == by["svi"].path
        # mark nuts and interrupted (both MCMC log densities), overlay them
        cursor_to(table, "nuts")
        await pilot.press("space")
        cursor_to(table, "interrupted")
        await pilot.press("space")
        assert table.marked == [by["nuts"].path, by["interrupted"].path]
        assert str(table.get_row(str(by["nuts"].path))[0]) == "●"
        await pilot.press("o")
        assert await app.overlays.get() == [by["nuts"].path, by["interrupted"].path]
        assert [s[0] for s in pane.overlay_series] == ["nuts", "interrupted"]
        assert pane.overlay_series[0][1] == 60 and 0 < pane.overlay_series[1][1] < 60
        assert pane.query_one("#runs-overlay").has_class("-shown")
        # unmark interrupted, mark svi: a loss and a log density cannot share a plot
        await pilot.press("space")
        cursor_to(table, "svi")
        await pilot.press("space", "o")
        msg = str(pane.query_one("#runs-message").render())
        assert msg == "Cannot overlay curves of different kinds: nuts (log density), svi (loss)"
        assert app.overlays.empty()


async def test_refresh_sees_new_runs_and_stale(runs, tmp_path):
    runs_dir, program = runs
    pane = RunsPane(program, runs_dir)
    app = RunsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = pane.query_one(RunsTable)
        assert table.row_count == 4
        assert not any(r.stale for r in table.runs)
        program.write_text(program.read_text() + "\n# edited\n")
        import shutil
        shutil.rmtree(runs_dir / "failed")
        table.focus()
        await pilot.press("f5")
        assert table.row_count == 3
        assert all(r.stale for r in table.runs)
        assert str(table.get_row(str(table.runs[0].path))[5]) == "stale"


async def test_empty_runs_folder(tmp_path):
    pane = RunsPane(tmp_path / "x.qvr", tmp_path / "runs")
    app = RunsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert pane.query_one(RunsTable).row_count == 0
        assert str(pane.query_one("#runs-message").render()) == \
            f"No runs of x.qvr in {tmp_path / 'runs'}/ yet."


async def test_all_five_statuses(runs):
    """finished, failed and interrupted from the fixtures; cancelled: the interrupted copy
    ending with a FitCancelled line; running: a copy whose writer lock is held."""
    import fcntl
    import shutil

    from qvr.events import FitCancelled, to_json
    from qvr_tui.widgets.runs_table import STATUS_STYLE

    runs_dir, program = runs
    shutil.copytree(runs_dir / "interrupted", runs_dir / "cancelled")
    with open(runs_dir / "cancelled" / "events.jsonl", "a") as fh:
        fh.write("\n" + to_json(FitCancelled(step=30, elapsed=1.0)) + "\n")
    shutil.copytree(runs_dir / "interrupted", runs_dir / "running")
    lock = open(runs_dir / "running" / "writer.lock", "a+")
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        pane = RunsPane(program, runs_dir)
        app = RunsHarness(pane)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            table = pane.query_one(RunsTable)
            statuses = {r.name: r.status for r in table.runs}
            assert statuses == {"nuts": "finished", "svi": "finished", "failed": "failed",
                                "interrupted": "interrupted", "cancelled": "cancelled",
                                "running": "running"}
            for r in table.runs:
                cell = table.get_row(str(r.path))[1]
                assert str(cell) == r.status and cell.style == STATUS_STYLE[r.status]
    finally:
        lock.close()


async def test_refresh_if_changed_follows_runs_written_elsewhere(runs):
    """A run that appears (another process writes it) or changes status is picked up by
    `refresh_if_changed` (the app calls it every few seconds while the tab is shown); an
    unchanged folder is not redrawn."""
    import fcntl
    import shutil

    from qvr.events import FitCancelled, to_json
    runs_dir, program = runs
    pane = RunsPane(program, runs_dir)
    app = RunsHarness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = pane.query_one(RunsTable)
        assert table.row_count == 4
        assert pane.refresh_if_changed() is False
        shutil.copytree(runs_dir / "interrupted", runs_dir / "elsewhere")
        lock = open(runs_dir / "elsewhere" / "writer.lock", "a+")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            assert pane.refresh_if_changed() is True
            assert {r.name: r.status for r in table.runs}["elsewhere"] == "running"
            assert pane.refresh_if_changed() is False
            with open(runs_dir / "elsewhere" / "events.jsonl", "a") as fh:
                fh.write("\n" + to_json(FitCancelled(step=30, elapsed=1.0)) + "\n")
        finally:
            lock.close()
        assert pane.refresh_if_changed() is True
        assert {r.name: r.status for r in table.runs}["elsewhere"] == "cancelled"
        assert table.row_count == 5
