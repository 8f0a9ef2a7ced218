"""E9.6 recorded quantities (`record v = e`) in the dashboard's Results: a saved NUTS run
lists `theta` in the summary like a site, marked recorded, plots its draws (trace, ranks,
histogram of the recorded values) and leaves it out of the sampler's checks; a saved SVI
run lists it in the guide table with its posterior mean and sd.  The runs are made by
`qvr run` in a subprocess (the dashboard's process stays torch-free)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from textual.widgets import DataTable, Static

from qvr.runs import open_run
from qvr_tui.plots_model import param_series
from qvr_tui.results_model import load_results
from qvr_tui.screens.results import ResultsPane
from qvr_tui.widgets.param_plots import ParamPlots
from qvr_tui.widgets.summary_table import SummaryTable

from conftest import ResultsHarness

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent("""\
    object School : FinSet 8

    program schools : School -> School
        sample mu <- Normal(0.0, 5.0)
        sample tau <- HalfCauchy(5.0)
        sample theta_raw : School <- Normal(0.0, 1.0)
        let s = 1.0 * sigma
        record theta = mu + tau * theta_raw
        observe y : School <- Normal(theta, s)
        return theta

    export schools
    """)
DATA = {"y": [28, 8, -3, 7, -1, 1, 18, 12], "sigma": [15, 10, 16, 11, 9, 11, 10, 18]}


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("record")
    program = folder / "schools.qvr"
    program.write_text(PROGRAM, encoding="utf-8")
    data = folder / "schools.json"
    data.write_text(json.dumps(DATA), encoding="utf-8")
    runs = {}
    for method, extra in (("nuts", ["--warmup", "150", "--samples", "150", "--chains", "2"]),
                          ("svi", ["--steps", "200", "--lr", "0.05"])):
        run_dir = folder / method
        out = subprocess.run([sys.executable, "-m", "qvr.cli", "run", str(program),
                              "--method", method, "--data", str(data), "--run-dir",
                              str(run_dir), "--seed", "2", "--dtype", "float64", "--no-pointwise",
                              *extra],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        runs[method] = run_dir
    return program, runs


def test_results_model_marks_theta_recorded(saved_runs):
    _, runs = saved_runs
    res = load_results(open_run(runs["nuts"]))
    assert res.recorded == ("theta",)
    assert [s.site for s in res.sites] == ["mu", "tau", "theta_raw", "theta"]
    assert [s.recorded for s in res.sites] == [False, False, False, True]
    theta = res.site("theta")
    assert theta.shape == (8,) and len(theta.coords) == 8
    d = res.draws
    np.testing.assert_array_equal(d["theta"], d["mu"] + d["tau"] * d["theta_raw"])
    s = param_series(res, "theta[3]")
    assert s is not None and len(s.traces) == 2
    np.testing.assert_array_equal(s.traces[1], d["theta"][1, :, 3])
    # the checks are the sites': the R-hat check's worst coordinate is never theta's
    rh = next(c for c in res.checks if c.key == "r_hat")
    worst = max(c.get("r_hat") for site in res.sites if not site.recorded for c in site.coords)
    assert rh.value == f"{worst:.3f}"


@pytest.mark.asyncio
async def test_results_pane_lists_and_plots_theta(saved_runs):
    program, runs = saved_runs
    pane = ResultsPane(runs["nuts"], program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(110, 34)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        table = pane.query_one("#summary", SummaryTable)
        assert [r.key for r in table.rows_shown] == ["mu", "tau", "theta_raw", "theta"]
        assert str(table.get_row("theta")[0]) == "▸ theta (recorded)"
        assert str(table.get_row("theta_raw")[0]) == "▸ theta_raw"
        assert str(table.get_row("mu")[0]) == "mu"
        bar = str(pane.query_one("#summary-bar", Static).render())
        assert bar.startswith("4 sites (1 recorded), 18 coordinates, 2 chains × 150 draws")
        # onto theta, expand it, walk to theta[2]: its draws are plotted
        table.focus()
        await pilot.press("down", "down", "down")
        assert pane.current_label() == "theta"
        plots = pane.query_one("#param-plots", ParamPlots)
        assert plots.series.label == "theta[0]"
        await pilot.press("enter", "down", "down", "down")
        assert pane.current_label() == "theta[2]"
        assert plots.series.label == "theta[2]"
        np.testing.assert_array_equal(plots.series.traces[0], res.draws["theta"][0, :, 2])
        assert [k for k, _ in plots.plotted["trace"][:2]] == ["line", "line"]
        row = table.get_row("theta[2]")
        assert str(row[0]) == "  theta[2]"
        assert str(row[2]) == f"{res.site('theta').coords[2].get('mean'):.3g}"


@pytest.mark.asyncio
async def test_results_pane_lists_theta_for_an_svi_run(saved_runs):
    program, runs = saved_runs
    pane = ResultsPane(runs["svi"], program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(110, 34)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        assert res.recorded == ("theta",)
        g = next(g for g in res.guide if g.site == "theta")
        assert g.recorded and g.loc.shape == (8,)
        summary = open_run(runs["svi"]).summary
        np.testing.assert_allclose(g.loc, [summary["parameters"][f"theta[{j}]"]["mean"]
                                           for j in range(8)])
        np.testing.assert_allclose(g.scale, [summary["parameters"][f"theta[{j}]"]["sd"]
                                             for j in range(8)])
        table = pane.query_one("#guide-table", DataTable)
        row = table.get_row("theta")
        assert str(row[0]) == "  theta (recorded)" and str(row[1]) == "8"
        header = table.render_line(0).text
        assert "guide loc · mean" in header
