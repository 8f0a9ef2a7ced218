"""The SVI guide table at 80 columns: every column is on screen ("guide scale" was
pushed off), and the shape column reads naturally (a site of shape 1 read
``1 (u scalar)``)."""
import asyncio

import numpy as np
import pytest

from qvr_tui.results_model import GuideSite
from qvr_tui.screens.results import ResultsPane, guide_shape_text

from conftest import Harness
from results_fixtures import copy_runs


@pytest.mark.parametrize("loc_shape, site_shape, shown", [
    ((1,), (1,), "scalar"),        # was "1 (u scalar)"
    ((1,), (), "scalar"),
    ((1,), None, "scalar"),
    ((8, 1), (8,), "8"),           # one number per entry: the same coordinates
    ((3, 3), (3, 4), "3×4 (u 3×3)"),  # a simplex plate: the guide is unconstrained
    ((2, 5), None, "2×5"),
])
def test_guide_shape_text(loc_shape, site_shape, shown):
    g = GuideSite("w", np.zeros(loc_shape), np.ones(loc_shape), site_shape)
    assert guide_shape_text(g) == shown


class ResultsHarness(Harness):
    def __init__(self, *widgets) -> None:
        super().__init__(*widgets)
        self.loaded: asyncio.Queue = asyncio.Queue()

    def on_results_pane_loaded(self, event) -> None:
        self.loaded.put_nowait(event.results)


@pytest.mark.asyncio
async def test_every_guide_column_is_on_screen_at_80_columns(tmp_path):
    runs_dir, program = copy_runs(tmp_path)
    pane = ResultsPane(runs_dir / "svi", program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.loaded.get()
        await pilot.pause()
        table = pane.query_one("#guide-table")
        header = table.render_line(0).text
        for name in ("site", "shape", "guide loc", "guide scale"):
            assert name in header, header
        assert table.region.right <= 80
        assert pane.query_one("#svi-loss").region.width >= 24
