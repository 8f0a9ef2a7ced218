"""The SVI guide table at 80 columns: every column is on screen ("guide scale" was
pushed off), and the shape column reads naturally (a site of shape 1 read
``1 (u scalar)``)."""
import asyncio

import numpy as np
import pytest

from qvr_tui.results_data import GuideSite
from qvr_tui.screens.results import ResultsPane, guide_shape_text

from conftest import ResultsHarness
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


@pytest.mark.parametrize("loc_shape, site_shape, unconstrained, is_matrix", [
    ((8, 1), (8,), False, False),    # an 8-vector: was unconstrained and a matrix
    ((1,), (), False, False),
    ((1, 3, 3), (3, 3), False, True),  # a matrix with a leading length-1 axis
    ((3, 3), (3, 4), True, True),
    ((3,), (4,), True, False),       # a simplex: K-1 unconstrained coordinates
])
def test_one_squeeze_rule_for_the_guide_shape(loc_shape, site_shape, unconstrained,
                                              is_matrix):
    """`GuideSite.unconstrained`, `is_matrix` and the table's shape column follow one
    rule (length-1 axes are no difference): they disagreed on an 8×1 guide of an
    8-vector (the table read ``8``, the heatmap title "unconstrained", the row ▦)."""
    g = GuideSite("w", np.arange(np.prod(loc_shape), dtype=float).reshape(loc_shape),
                  np.ones(loc_shape), site_shape)
    assert (g.unconstrained, g.is_matrix) == (unconstrained, is_matrix)
    assert ("(u " in guide_shape_text(g)) == unconstrained
    m = g.matrix("loc")
    assert (m is not None) == is_matrix
    if is_matrix:
        assert m.ndim == 2 and m.size == g.loc.size


@pytest.mark.asyncio
async def test_an_8_vector_with_an_8x1_guide_is_no_matrix_on_results(tmp_path):
    """tests/tui/recorded/svi_regression: `intercept` has loc 8×1, site shape 8: its row
    was marked ▦ and `h Heatmap` was offered for a vector."""
    import shutil
    from pathlib import Path
    run = tmp_path / "svi_regression"
    shutil.copytree(Path(__file__).parent / "recorded" / "svi_regression", run)
    pane = ResultsPane(run)
    app = ResultsHarness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        g = next(g for g in res.guide if g.site == "intercept")
        assert g.shape == (8, 1) and g.site_shape == (8,)
        assert not g.unconstrained and not g.is_matrix and guide_shape_text(g) == "8"
        table = pane.query_one("#guide-table")
        assert str(table.get_row("intercept")[0]) == "  intercept"
        assert pane.check_action("toggle_heatmap", ()) is False
        table.focus()
        table.move_cursor(row=[g.site for g in res.guide].index("intercept"))
        await pilot.pause()
        assert not pane.query_one("#svi-heatmap").display
