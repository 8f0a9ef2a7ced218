"""Shared pieces of the dashboard tests: the examples folder and a tiny harness App that
composes one widget and records the messages the tests wait on (no sleeps)."""
from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from textual.app import App

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: seconds: a safety limit on waiting for a fit or the app, not a timing assertion
LIMIT = 600


async def wait_until(pilot, cond, what: str, limit: float = LIMIT):
    """Pause the app until `cond()` holds (never a sleep-wait for an outcome); past
    `limit` seconds fail, naming `what` and the dashboard's status line."""
    import time
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; state: "
                                 f"{pilot.app.state.status_line()}")
        await pilot.pause(0.05)


class Harness(App):
    """Composes the given widgets; ProgramChanged messages land in `changes`."""

    def __init__(self, *widgets) -> None:
        super().__init__()
        self._widgets = widgets
        self.changes: asyncio.Queue = asyncio.Queue()

    def compose(self):
        yield from self._widgets

    def on_program_pane_program_changed(self, event) -> None:
        self.changes.put_nowait(event.model)


class ResultsHarness(Harness):
    """A `Harness` whose ResultsPane's Loaded messages land in `loaded`."""

    def __init__(self, *widgets) -> None:
        super().__init__(*widgets)
        self.loaded: asyncio.Queue = asyncio.Queue()

    def on_results_pane_loaded(self, event) -> None:
        self.loaded.put_nowait(event.results)


@pytest.fixture
def transformer_path() -> Path:
    return EXAMPLES / "transformer_lm.qvr"


def text_of(app, selector) -> str:
    """The rendered text of the widget `selector` finds in `app`."""
    return str(app.query_one(selector).render())


async def settle(pilot):
    await pilot.app.ready.wait()  # every tab mounted, the run opened
    await pilot.pause()
    await pilot.pause()


def option_error(setup, name) -> str:
    """The in-place error text of the Setup row of option `name`."""
    return str(setup.query_one(f"#row-{name} .opt-error").render())


@contextlib.asynccontextmanager
async def setup_tab(tmp_path, program: str = "regression_plates.qvr", size=(100, 40)):
    """A dashboard on `examples/PROGRAM` (runs under `tmp_path/runs`) with its Setup tab
    shown: yields ``(app, pilot, setup pane)``."""
    from qvr_tui.app import QvrDash
    from qvr_tui.screens.setup import SetupPane
    app = QvrDash(program=str(EXAMPLES / program), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=size) as pilot:
        await app.ready.wait()
        await pilot.press("2")
        yield app, pilot, app.query_one(SetupPane)
