"""The Live pane under Pilot, driven by recorded run folders (no worker, no torch): plotted
series lengths, the log-scale toggle, chain rows and the red row of a diverging chain,
running R-hat/ESS, SMC particles, and the texts of failed and interrupted runs."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qvr_tui.app import QvrDash
from qvr_tui.screens.live import LivePane
from qvr_tui.widgets.chain_table import ChainTable
from qvr_tui.widgets.loss_plot import LogFormatter, LossPlot
from qvr_tui.widgets.particles import ParticlesTable
from qvr_tui.widgets.trace_plot import TracePlot
from qvr_tui.widgets.worst_params import WorstParams

from conftest import EXAMPLES, ROOT, settle, text_of

RECORDED = Path(__file__).parent / "recorded"


@pytest.fixture
def recorded(tmp_path):
    def copy(name):
        dst = tmp_path / name
        shutil.copytree(RECORDED / name, dst)
        return dst
    return copy


@pytest.mark.asyncio
async def test_svi_loss_series_decimated_to_twice_the_plot_width(recorded):
    run = recorded("svi_regression")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.query_one("#tabs").active == "live"
        plot = app.query_one(LossPlot)
        target = 2 * plot.size.width
        assert plot.size.width > 40
        raw, smooth = plot.plotted_points
        assert len(app.state.loss) == 600 and len(app.state.smooth) == 600
        assert target // 2 <= raw <= target and target // 2 <= smooth <= target
        header = text_of(app, "#live-header")
        assert header.startswith("SVI finished · step 600/600 · ")
        assert "loss 22.05" in header
        note = text_of(app, "#live-note")
        assert "the loss has stopped falling" in note and "l: log scale off" in note
        await pilot.press("l")
        assert plot.log_scale and isinstance(plot._y_formatter, LogFormatter)
        assert plot.ylabel == "loss (log)"
        assert "l: log scale on" in text_of(app, "#live-note")
        # the formatter labels log10 ticks with the losses themselves
        assert LogFormatter().get_labels_for_ticks([1.0, 2.0, 0.5]) == ["10", "100", "3.16"]


@pytest.mark.asyncio
async def test_nuts_chain_rows_red_row_and_running_diagnostics(recorded):
    run = recorded("nuts_regression")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.query_one(ChainTable)
        assert table.row_count == 2
        rows = table.rows_text()
        assert rows[0].startswith("0 | sampling | 60/60 | ")
        assert rows[1].startswith("1 | sampling | 60/60 | ")
        assert rows[1].split(" | ")[8] == "2 @17" and rows[0].split(" | ")[8] == "0"
        assert table.red_rows() == [1]
        worst = [str(t) for t in app.query_one(WorstParams).lines]
        assert worst[0] == "worst after 60 draws/chain"
        assert worst[3].split() == ["intercept[2]", "1.086", "23/77"]
        assert len(worst) == 3 + 5
        trace = app.query_one("#mcmc-trace", TracePlot)
        assert trace.title == "acceptance" and set(trace.plotted) == {"chain 0", "chain 1"}
        assert text_of(app, "#live-header") == "NUTS finished · 100% · 2 divergences · 44s elapsed"
        await pilot.press("v")
        assert trace.title == "step size"
        await pilot.press("v", "v")
        assert trace.title == "tree depth"


@pytest.mark.asyncio
async def test_smc_particles_and_series(recorded):
    run = recorded("smc_recurrent")
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        vocab = json.loads((run / "sequences.json").read_text())["vocab"]
        table = app.query_one(ParticlesTable)
        assert table.row_count == 16
        first = table.shown[0]
        top = app.state.particles[0]
        assert first[2] == f"{top.weight:.3f}"
        assert first[4] == "".join(vocab[t] for t in top.tokens)
        ess = app.query_one("#smc-ess", TracePlot)
        assert ess.plotted == {"ess": 12}
        assert text_of(app, "#live-header").startswith("SMC finished · step 12/12 · log Ẑ ")


@pytest.mark.asyncio
async def test_interrupted_record_is_shown_as_interrupted(recorded):
    run = recorded("interrupted_svi")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert text_of(app, "#live-header").startswith("SVI interrupted · step 10/600")
        problem = text_of(app, "#live-problem")
        assert problem.startswith("interrupted after step 10: the writer stopped without "
                                  "finishing the record")
        assert len(app.state.loss) == 10  # up to its last complete line (the torn one dropped)


@pytest.mark.asyncio
async def test_failed_record_names_cause_and_step(recorded):
    run = recorded("failed_svi")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert text_of(app, "#live-problem") == (
            "failed: the loss is nan at step 7 (the model's log density is not finite at "
            "the current parameters)")
        assert len(app.state.loss) == 6


@pytest.mark.asyncio
async def test_run_from_an_older_text_is_marked(recorded, tmp_path):
    run = recorded("svi_regression")
    prog = tmp_path / "regression_plates.qvr"
    prog.write_text((EXAMPLES / "regression_plates.qvr").read_text() + "\n# edited\n")
    app = QvrDash(program=str(prog), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "made from an older text of the program" in text_of(app, "#live-note")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "older text" not in text_of(app, "#live-note")


SCRIPT = r"""
import asyncio, sys
from qvr_tui.app import QvrDash
async def main():
    for name, prog in [("svi_regression", "regression_plates"),
                       ("nuts_regression", "regression_plates"),
                       ("smc_recurrent", "recurrent_lm")]:
        app = QvrDash(program=f"examples/{prog}.qvr", run=sys.argv[1] + "/" + name, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.ready.wait()
            await pilot.pause()
            for key in ("1", "2", "3", "4", "5", "3", "v", "l"):
                await pilot.press(key)
            assert app.state.status == "finished", app.state.status
    heavy = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")
                   or m.startswith("qvr.runtime") or m.startswith("qvr.inference.")
                   and m not in ("qvr.events", "qvr.inference.config",
                                 "qvr.inference.criticism",  # the room's docstring only
                                 "qvr.inference.criticism.diagnostics",
                                 # numpy only: the k-hat line and warning (issue 39)
                                 "qvr.inference.criticism.khat",
                                 "qvr.inference.criticism.khat_text",
                                 # numpy only: the dense-metric note of a NUTS record
                                 "qvr.inference.criticism.correlation"))
    print("HEAVY", heavy)
asyncio.run(main())
"""


def test_the_ui_process_never_imports_torch(tmp_path):
    for name in ("svi_regression", "nuts_regression", "smc_recurrent"):
        shutil.copytree(RECORDED / name, tmp_path / name)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout


@pytest.mark.asyncio
async def test_nuts_with_nothing_to_sample_shows_one_line_not_an_empty_chain_view(recorded):
    """examples/hmm.qvr under NUTS: no chain runs.  Live showed an empty chain-table
    header, an empty acceptance plot and "R-hat / ESS: after 20 draws per chain (now 0)";
    now one line says why, with the log marginal likelihood, and the note offers no
    ``v: trace``."""
    run = recorded("nuts_nothing_to_sample")
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        assert app.query_one("#live-body").current == "body-nothing"
        assert not app.query_one(ChainTable).region.area
        assert not app.query_one("#mcmc-trace", TracePlot).region.area
        assert not app.query_one(WorstParams).region.area
        assert text_of(app, "#body-nothing") == (
            "Nothing to sample: the program has no continuous latent site (its finite "
            "latents are summed out exactly), so no chain ran and there are no draws, "
            "traces or R-hat/ESS. Log marginal likelihood: -184.85.")
        assert "v: trace" not in text_of(app, "#live-note")
