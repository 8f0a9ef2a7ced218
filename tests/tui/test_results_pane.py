"""ResultsPane under Pilot on the recorded runs: check chips and their colours, sorting,
filtering and expanding the summary, the parameter plots, the heatmap of the matrix site,
partial/failed/stale headers, SVI and SMC results, the ArviZ message."""
from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest
from textual.widgets import ContentSwitcher, DataTable, Static

from qvr_tui.screens.results import ResultsPane
from qvr_tui.widgets.checks import CheckChip
from qvr_tui.widgets.heatmap import Heatmap
from qvr_tui.widgets.param_plots import ParamPlots
from qvr_tui.widgets.summary_table import SummaryTable

from conftest import Harness
from results_fixtures import copy_runs


pytestmark = pytest.mark.asyncio

class ResultsHarness(Harness):
    def __init__(self, *widgets) -> None:
        super().__init__(*widgets)
        self.loaded: asyncio.Queue = asyncio.Queue()
        self.exported: asyncio.Queue = asyncio.Queue()

    def on_results_pane_loaded(self, event) -> None:
        self.loaded.put_nowait(event.results)

    def on_results_pane_exported(self, event) -> None:
        self.exported.put_nowait(event)


def text_of(widget: Static) -> str:
    return str(widget.render())


@pytest.fixture
def runs(tmp_path):
    return copy_runs(tmp_path)


async def open_pane(path, program=None, size=(100, 30)):
    pane = ResultsPane(path, program_path=program)
    app = ResultsHarness(pane)
    return app, pane


def keys_shown(pane):
    return [r.key for r in pane.query_one("#summary", SummaryTable).rows_shown]


async def test_nuts_checks_table_and_plots(runs):
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "nuts", program)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        chips = {c.check.key: c for c in pane.query(CheckChip)}
        assert list(chips) == ["divergences", "r_hat", "ess", "tree_depth", "e_bfmi"]
        for key, chip in chips.items():
            want = {True: "-ok", False: "-bad", None: "-na"}[chip.check.ok]
            assert chip.has_class(want)
        assert chips["r_hat"].has_class("-bad") and chips["divergences"].has_class("-ok")
        assert text_of(chips["r_hat"]).startswith("✗ R-hat\n")
        header = text_of(pane.query_one("#results-header", Static))
        assert header.startswith("NUTS nuts  finished")
        assert "stale" not in text_of(pane.query_one("#results-notes", Static))
        assert keys_shown(pane) == ["mu", "sigma", "probs"]
        table = pane.query_one("#summary", SummaryTable)
        # R-hat above 1.01 and ESS under 100 per chain in the error style
        probs, mu = table.get_row("probs"), table.get_row("mu")
        assert str(probs[9]) == f"{res.site('probs').worst_r_hat:.3g}"
        assert probs[9].style == "bold red" and mu[9].style == ""
        assert str(mu[7]) == f"{res.site('mu').min_ess_bulk:.3g}" and mu[7].style == "red"
        table.focus()
        # the cursor starts on mu: its plots
        plots = pane.query_one("#param-plots", ParamPlots)
        assert plots.series.label == "mu"
        assert plots.plotted["trace"][:2] == [("line", 60), ("line", 60)]
        assert plots.plotted["rank"][:2] == [("line", 12), ("line", 12)]
        assert plots.plotted["hist"] == [("bar", len(plots.series.hist_counts))]
        # s: worst R-hat first
        await pilot.press("s")
        assert pane.sort == "r_hat"
        worst = sorted(res.sites, key=lambda s: -s.worst_r_hat)
        assert keys_shown(pane) == [s.site for s in worst]
        # expand probs with enter and walk onto a coordinate
        await pilot.press("s", "s", "s", "s")  # back to record order
        assert pane.sort == "order"
        await pilot.press("down", "down", "enter")
        assert keys_shown(pane)[:4] == ["mu", "sigma", "probs", "probs[0,0]"]
        assert len(keys_shown(pane)) == 15
        await pilot.press("down", "down")
        assert pane.current_label() == "probs[0,1]"
        assert plots.series.label == "probs[0,1]"
        # h: heatmap of the posterior mean, m: sd
        await pilot.press("h")
        assert pane.query_one("#detail", ContentSwitcher).current == "param-heatmap"
        hm = pane.query_one("#param-heatmap", Heatmap)
        assert hm.matrix.shape == (3, 4) and hm.diverging
        np.testing.assert_allclose(hm.matrix.sum(axis=1), 1.0, atol=1e-5)
        await pilot.press("m")
        assert not hm.diverging and "posterior sd" in hm.title
        assert float(hm.matrix.min()) > 0
        await pilot.press("h")
        assert pane.query_one("#detail", ContentSwitcher).current == "param-plots"
        # enter on a coordinate folds its site and goes back to it
        await pilot.press("enter")
        assert keys_shown(pane) == ["mu", "sigma", "probs"] and pane.current_label() == "probs"


async def test_filter_box(runs):
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "nuts", program)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        pane.query_one("#summary", SummaryTable).focus()
        await pilot.press("slash", "[", "2", ",")
        assert keys_shown(pane) == ["probs", "probs[2,0]", "probs[2,1]", "probs[2,2]",
                                    "probs[2,3]"]
        assert "filter “[2,”: 1 sites" in text_of(pane.query_one("#summary-bar", Static))
        await pilot.press("enter")
        assert isinstance(app.focused, SummaryTable)
        await pilot.press("escape")
        assert keys_shown(pane) == ["mu", "sigma", "probs"]


async def test_heatmap_refused_on_scalar(runs):
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "nuts", program)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        pane.query_one("#summary", SummaryTable).focus()
        await pilot.press("h")
        assert not pane.heatmap_on
        assert pane.query_one("#detail", ContentSwitcher).current == "param-plots"


async def test_interrupted_failed_and_stale(runs):
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "interrupted", program)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        notes = text_of(pane.query_one("#results-notes", Static))
        assert "◐ partial: the worker stopped without finishing" in notes
        assert "interrupted" in text_of(pane.query_one("#results-header", Static))
        assert pane.query_one(CheckChip.__name__ + "#check-e_bfmi").has_class("-na")
        pane.show_run(runs_dir / "failed")
        await app.loaded.get()
        header = text_of(pane.query_one("#results-header", Static))
        assert "failed: the data does not fit the program" in header
        program.write_text(program.read_text() + "\n# changed\n")
        pane.show_run(runs_dir / "nuts")
        await app.loaded.get()
        assert "⚠ stale: made from an older text of tiny.qvr" in text_of(
            pane.query_one("#results-notes", Static))


async def test_svi_results(runs):
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "svi", program)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        assert pane.query_one("#results-switcher", ContentSwitcher).current == "svi"
        table = pane.query_one("#guide-table", DataTable)
        assert table.row_count == 3
        loss = pane.query_one("#svi-loss")
        assert loss.border_title.startswith("final loss ")
        assert f"ELBO {-res.final_loss:.6g}" in loss.border_title
        # move onto the matrix site: its loc heatmap shows
        table.focus()
        order = [g.site for g in res.guide]
        for _ in range(order.index("probs")):
            await pilot.press("down")
        hm = pane.query_one("#svi-heatmap", Heatmap)
        assert hm.display and hm.matrix.shape == (3, 3)  # unconstrained simplex coordinates
        assert hm.title == "probs guide loc unconstrained (m: loc/scale)"
        row = table.get_row("probs")
        assert str(row[1]) == "3×4 (u 3×3)"
        await pilot.press("m")
        np.testing.assert_allclose(hm.matrix, res.guide[order.index("probs")].scale)


async def test_smc_results(runs):
    runs_dir, _ = runs
    app, pane = await open_pane(runs_dir / "smc")
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        table = pane.query_one("#smc-table", DataTable)
        assert table.row_count == len(res.sequences) == 6
        assert f"log Z-hat {res.log_Z:.4f}" in text_of(pane.query_one("#results-header", Static))
        assert str(table.get_row_at(0)[4]) == repr(res.sequences[0].text)


async def test_no_run_and_bad_folder(tmp_path):
    app, pane = await open_pane(None)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await app.loaded.get() is None
        pane.show_run(tmp_path)
        assert await app.loaded.get() is None
        assert text_of(pane.query_one("#empty", Static)) == \
            f"{tmp_path}: not a run record (no run.json)"


async def test_export_without_arviz(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)  # import arviz -> ImportError
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "nuts", program)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        pane.query_one("#summary", SummaryTable).focus()
        await pilot.press("e")
        ev = await app.exported.get()
        assert ev.path is None
        assert ev.message == "Export to ArviZ needs the arviz package: pip install arviz (into .venv)."


async def test_running_record_is_read_again_until_it_ends(runs):
    """A record whose writer lock is held shows as running (partial) and is re-read; once
    the writer is gone the next read says interrupted (no sleeps: waits on Loaded)."""
    import fcntl
    import shutil

    runs_dir, program = runs
    shutil.copytree(runs_dir / "interrupted", runs_dir / "live")
    lock = open(runs_dir / "live" / "writer.lock", "a+")
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        pane = ResultsPane(runs_dir / "live", program_path=program)
        pane.RUNNING_REFRESH = 0.05
        app = ResultsHarness(pane)
        async with app.run_test(size=(100, 30)) as pilot:
            res = await app.loaded.get()
            assert res.status == "running" and res.partial
            assert "partial: the fit is still running" in text_of(
                pane.query_one("#results-notes", Static))
            res = await app.loaded.get()  # the re-read, still running
            assert res.status == "running"
            lock.close()
            while res.status == "running":
                res = await app.loaded.get()
            assert res.status == "interrupted"
            assert "interrupted" in text_of(pane.query_one("#results-header", Static))
    finally:
        lock.close()


async def test_a_new_run_clears_and_hides_the_filter_box(runs):
    """The filter is reset when another run is shown, and so is its box (it kept the old
    text, shown, although the table was no longer filtered)."""
    runs_dir, program = runs
    app, pane = await open_pane(runs_dir / "nuts", program)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        pane.query_one("#summary", SummaryTable).focus()
        await pilot.press("slash", "p", "r")
        box = pane.query_one("#results-filter")
        assert box.value == "pr" and box.has_class("-shown")
        pane.show_run(runs_dir / "nuts")
        await app.loaded.get()
        assert box.value == "" and not box.has_class("-shown") and not box.display
        assert pane.query_text == "" and keys_shown(pane) == ["mu", "sigma", "probs"]


async def test_an_mcmc_run_with_nothing_to_sample_gives_its_log_marginal_likelihood(tmp_path):
    """NUTS on a program whose latents are all finite (examples/hmm.qvr: summed out) runs
    no chain; Results says so with the log marginal likelihood, not "partial: no summary
    was written" (seen in tmux)."""
    import shutil
    from pathlib import Path
    run = tmp_path / "hmm-nuts"
    shutil.copytree(Path(__file__).parent / "recorded" / "nuts_nothing_to_sample", run)
    app, pane = await open_pane(run)
    async with app.run_test(size=(80, 24)):
        res = await app.loaded.get()
        assert not res.partial and res.num_chains == 0
        notes = text_of(pane.query_one("#results-notes", Static))
        assert notes == ("ⓘ nothing to sample (no continuous latent site): log marginal "
                         "likelihood -184.85")


async def test_an_svi_run_cancelled_before_its_first_step(tmp_path):
    """`qvr run` cancelled at step 0 writes a summary (final loss NaN) and no losses:
    Results said "partial: no summary was written" over "final loss nan · ELBO nan"."""
    import shutil
    from pathlib import Path
    run = tmp_path / "cancelled"
    shutil.copytree(Path(__file__).parent / "recorded" / "svi_cancelled_at_start", run)
    app, pane = await open_pane(run)
    async with app.run_test(size=(100, 30)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        assert res.status == "cancelled" and not res.partial and res.final_loss is None
        assert pane.query_one("#results-notes").has_class("-empty")
        assert pane.query_one("#svi-loss").border_title == "no step was taken: no loss"



async def test_an_mcmc_run_with_nothing_to_sample_shows_no_empty_checks_table_or_plots(tmp_path):
    """Beside the note, Results showed empty checks, an empty summary table, empty
    trace/rank/histogram plots and "e: export draws to ArviZ" (seen in tmux)."""
    import shutil
    from pathlib import Path
    run = tmp_path / "hmm-nuts"
    shutil.copytree(Path(__file__).parent / "recorded" / "nuts_nothing_to_sample", run)
    app, pane = await open_pane(run)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.loaded.get()
        await pilot.pause()
        for wid in ("#checks", "#summary", "#detail"):
            assert not pane.query_one(wid).display, wid
        assert text_of(pane.query_one("#summary-bar", Static)) == \
            "no chain ran: nothing to summarise"
        assert "ArviZ" not in text_of(pane.query_one("#results-footer", Static))
