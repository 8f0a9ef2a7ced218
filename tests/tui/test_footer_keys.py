"""The footer shows only the keys that do something where they are pressed (Textual's
`check_action`): ``l`` Log scale for an SVI run and ``v`` Trace for HMC/NUTS on Live,
neither for SMC; on Results the ArviZ export, filter and sort for MCMC only, ``c``
Circuits only for a run that has circuits; ``x`` Cancel while a fit runs, ``g`` SMC from
run for a finished SVI/HMC/NUTS run.  Regression: ``e ArviZ`` showed on SVI
Results, ``l``/``v`` on SMC Live."""
import asyncio
import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable

from qvr_tui.app import QvrDash
from qvr_tui.widgets.summary_table import SummaryTable

RECORDED = Path(__file__).parent / "recorded"
pytestmark = pytest.mark.asyncio


def footer_keys(app) -> set:
    """The descriptions of the bindings the footer shows now."""
    return {b.binding.description for b in app.screen.active_bindings.values()
            if b.binding.show}


async def opened(pilot, name_of_tab="live"):
    app = pilot.app
    await app.ready.wait()
    await app.workers.wait_for_complete()  # the Results pane read the record
    await pilot.pause()
    await pilot.pause()


@pytest.mark.parametrize("run, live_keys, absent", [
    ("svi_attention", {"Log scale", "SMC from run"}, {"Trace", "Cancel"}),
    ("nuts_regression", {"Trace", "SMC from run"}, {"Log scale", "Cancel"}),
    ("smc_recurrent", set(), {"Log scale", "Trace", "SMC from run", "Cancel"}),
])
async def test_live_keys_follow_the_method(tmp_path, run, live_keys, absent):
    path = tmp_path / run
    shutil.copytree(RECORDED / run, path)
    app = QvrDash(run=str(path), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(pilot)
        assert app.query_one("#tabs").active == "live"
        keys = footer_keys(app)
        assert live_keys <= keys and not (absent & keys), keys
        await pilot.press("4")  # not on another tab
        assert not ({"Log scale", "Trace"} & footer_keys(app))


async def test_results_keys_follow_the_run(tmp_path):
    svi = tmp_path / "svi_attention"
    nuts = tmp_path / "nuts_regression"
    shutil.copytree(RECORDED / "svi_attention", svi)
    shutil.copytree(RECORDED / "nuts_regression", nuts)
    app = QvrDash(run=str(svi), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(pilot)
        await pilot.press("4")
        app.query_one("#guide-table", DataTable).focus()
        await pilot.pause()
        keys = footer_keys(app)
        assert "Circuits" in keys  # this SVI run recorded its attention circuits
        assert not ({"ArviZ", "Filter", "Sort"} & keys), keys
        app.open_run(nuts)
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.query_one("#summary", SummaryTable).focus()
        await pilot.pause()
        keys = footer_keys(app)
        assert {"ArviZ", "Filter", "Sort", "Heatmap"} <= keys, keys
        assert "Circuits" not in keys  # no circuits in a NUTS run of regression_plates


async def test_a_run_with_nothing_to_sample_offers_no_trace_generation_or_table_keys(tmp_path):
    """NUTS on examples/hmm.qvr (every latent finite, summed out) has no chain and no
    draw: Live offered ``v Trace`` and ``g SMC from run`` (g preset SMC from a run with no
    draws), Results with the table focused ArviZ/Filter/Heatmap/Mean-sd/Sort (``e``
    answered "the run has no draws to export")."""
    run = tmp_path / "hmm-nuts"
    shutil.copytree(RECORDED / "nuts_nothing_to_sample", run)
    app = QvrDash(run=str(run), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(pilot)
        assert app.state.nothing_sampled
        keys = footer_keys(app)
        assert not ({"Trace", "SMC from run"} & keys), keys
        await pilot.press("g")  # disabled: Setup is not preset to SMC
        assert app.query_one("#tabs").active == "live"
        assert app.setup_pane.method == "svi"
        await pilot.press("4")
        app.query_one("#summary", SummaryTable).focus()
        await pilot.pause()
        keys = footer_keys(app)
        assert not ({"ArviZ", "Filter", "Sort", "Heatmap", "Mean/sd"} & keys), keys
        pane = app.query_one("#results-pane")
        await pilot.press("e")
        assert pane.last_export == ""  # the key does nothing (it said "no draws")
