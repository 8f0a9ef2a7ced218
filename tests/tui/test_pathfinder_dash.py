"""The dashboard and a Pathfinder run: the method select offers it, the live state folds
its per-path progress, and Results shows its draws' table (mean, sd) like SVI's guide
table, with its k-hat in the notes."""
import asyncio
from pathlib import Path

import pytest

from qvr.inference.config import METHODS
from qvr_tui.screens.results import ResultsPane
from qvr_tui.screens.setup import METHOD_LABELS
from qvr_tui.state import RunState

from conftest import ResultsHarness

ROOT = Path(__file__).resolve().parents[2]


def test_the_method_select_offers_pathfinder():
    assert "pathfinder" in METHODS and METHOD_LABELS["pathfinder"] == "Pathfinder"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    """A small Pathfinder run of kid_scores (2 paths, 300 draws), its events kept."""
    from qvr import load
    from qvr.inference import fit
    runs = tmp_path_factory.mktemp("runs")
    path = ROOT / "examples" / "kid_scores.qvr"
    events = []
    res = fit(load(str(path)), config={"method": "pathfinder", "paths": 2,
                                       "path_draws": 200, "psis_draws": 300, "seed": 2},
              run_dir=str(runs / "pf"), program_path=str(path), on_event=events.append)
    assert res.status == "finished"
    return runs / "pf", events


def test_the_live_state_folds_the_paths(record):
    _, events = record
    state = RunState()
    state.apply(events)
    assert state.method == "pathfinder" and state.status == "finished"
    assert sorted(state.paths) == [0, 1]
    line = state.status_line()
    assert line.startswith("PATHFINDER finished · path 2/2 · iteration "), line
    assert "best ELBO" in line
    assert len(state.loss) == 0  # never folded into SVI's loss series


@pytest.mark.asyncio
async def test_results_show_the_draws_table(record):
    folder, _ = record
    pane = ResultsPane(folder, program_path=str(ROOT / "examples" / "kid_scores.qvr"))
    app = ResultsHarness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        assert res.method == "pathfinder"
        assert [g.site for g in res.guide] == ["beta", "sigma"]
        table = pane.query_one("#guide-table")
        header = table.render_line(0).text
        assert header.split()[:4] == ["site", "shape", "mean", "sd"], header
        assert not pane.query_one("#svi-loss").display
        assert res.khat.startswith("Pareto k-hat"), res.khat
