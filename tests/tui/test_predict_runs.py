"""A prediction (`qvr predict`, method ``predict``) in the dashboard under Pilot: the
Runs table lists it with its program's runs (method, status, draws used), and the
Results pane shows its predicted sites' means and sds (the record only: the model reads
no torch)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from qvr_tui.results_model import load_results
from qvr_tui.runs_model import run_rows
from qvr_tui.screens.results import ResultsPane
from qvr_tui.screens.runs import RunsPane
from qvr_tui.widgets.runs_table import RunsTable

from conftest import Harness, ResultsHarness, text_of

sys.path.append(str(Path(__file__).resolve().parents[1] / "inference"))
from predict_records import X_NEW, predictive, write_fit, write_program  # noqa: E402

pytestmark = pytest.mark.asyncio


@pytest.fixture
def predicted(tmp_path):
    from qvr.inference.front.predict import predict
    from qvr.runs import open_run
    program = write_program(tmp_path / "prog")
    runs = tmp_path / "runs"
    fit = write_fit(runs / "fit", program)
    predict(fit, {"xc": X_NEW}, draws=400, seed=0, run_dir=runs / "pred")
    assert open_run(runs / "pred").status == "finished"
    return runs, program


async def test_the_runs_table_lists_a_prediction(predicted):
    runs, program = predicted
    rows = {r.name: r for r in run_rows(runs, program)}
    assert (rows["pred"].method, rows["pred"].status, rows["pred"].key_text) == \
        ("predict", "finished", "draws 400")
    pane = RunsPane(program, runs)
    app = Harness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = pane.query_one(RunsTable)
        assert {r.name: r.method for r in table.runs} == {"fit": "nuts", "pred": "predict"}
        cells = [str(c) for c in table.get_row(str(runs / "pred"))]
        assert "predict" in cells and "finished" in cells and "draws 400" in cells


async def test_results_show_the_predicted_means_and_sds(predicted):
    runs, program = predicted
    from qvr.runs import open_run
    res = load_results(open_run(runs / "pred"))
    assert res.predicted_from == "fit" and res.stats["rows"] == 4
    rows = {g.site: g for g in res.guide}
    assert set(rows) == {"y", "mean_y"} and rows["mean_y"].recorded
    mean, var = predictive()
    n = 400
    assert np.all(np.abs(rows["y"].loc - mean) < 4 * np.sqrt(var / n))
    pane = ResultsPane(runs / "pred", program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        await pilot.pause()
        table = pane.query_one("#guide-table")
        header = table.render_line(0).text
        for name in ("site", "shape", "predicted mean", "predicted sd"):
            assert name in header, header
        assert table.row_count == 2
        assert text_of(app, "#results-notes") == \
            "ⓘ prediction at 4 new rows: 2 x 200 draws of fit"
        assert not pane.query_one("#svi-loss").display
