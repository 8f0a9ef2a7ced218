"""The dashboard driving real fits in its worker process (`qvr run`), under Pilot: SVI on
the seed transformer, NUTS on a small model, SMC on the recurrent LM; cancel leaves a
complete record; a SIGKILLed worker is shown as interrupted; bad input (a program with
errors, a bad data file, an unwritable runs folder) is named and nothing starts.

Every wait is on the app's state (polled while the app runs), with a generous safety
limit: the machine may be shared and the seed model takes about a second a step."""
import json
import math
import os
import signal

import numpy as np
import pytest

from qvr.runs import open_run
from qvr_tui.app import QvrDash
from qvr_tui.program_model import source_sha256
from qvr_tui.screens.program import ProgramPane
from qvr_tui.screens.setup import SetupPane
from qvr_tui.widgets.chain_table import ChainTable
from qvr_tui.widgets.loss_plot import LossPlot
from qvr_tui.widgets.particles import ParticlesTable

from conftest import EXAMPLES, wait_until



@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("QVR_MCMC_COMPILER", "torchscript")


async def configure(pilot, method, **values):
    await pilot.app.ready.wait()
    setup = pilot.app.query_one(SetupPane)
    setup.preset(method)
    await pilot.pause()
    for name, text in values.items():
        if name == "synthetic":
            from textual.widgets import Input, Select
            setup.query_one("#data-kind", Select).value = "synthetic"
            await pilot.pause()
            setup.query_one("#data-value", Input).value = str(text)
        else:
            setup.set_value(name, str(text))
    await pilot.pause()


def ended(app) -> bool:
    """The record has its end and the worker has exited."""
    return app.state.finished and app.runner is None


def text_of(app, selector) -> str:
    return str(app.query_one(selector).render())


@pytest.mark.asyncio
async def test_svi_on_the_seed_transformer(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "transformer_lm.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "svi", steps=4, synthetic=8, pointwise_draws=10)  # LOO unused
        await pilot.press("r")
        assert app.runner is not None
        run_dir = app.runner.run_dir
        await wait_until(pilot, lambda: ended(app), "the SVI fit to end")
        assert app.state.status == "finished", app.state.problem()
        losses = open_run(run_dir).losses()
        assert len(losses) == 4
        # the live series is exactly the recorded progress (throttled: first and last step
        # always; how many in between depends on the machine's speed)
        progress = [e for e in open_run(run_dir).events() if type(e).__name__ == "FitProgress"]
        steps = [float(e.step) for e in progress]
        assert steps[0] == 1.0 and steps[-1] == 4.0
        assert list(app.state.loss.x) == steps
        assert list(app.state.loss.y) == pytest.approx(
            [losses[int(s) - 1] for s in steps], rel=1e-6)
        assert app.query_one(LossPlot).plotted_points == (len(steps), len(steps))
        assert text_of(app, "#live-header").startswith("SVI finished · step 4/4 · ")
        assert open_run(run_dir).status == "finished"
        assert open_run(run_dir).config["synthetic"] == 8


@pytest.mark.asyncio
async def test_nuts_rows_match_the_record(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "nuts", num_warmup=30, num_samples=30, num_chains=2,
                        max_tree_depth=5)
        await pilot.press("r")
        run_dir = app.runner.run_dir
        await wait_until(pilot, lambda: ended(app), "the NUTS fit to end")
        assert app.state.status == "finished", app.state.problem()
        rows = app.query_one(ChainTable).rows_text()
        assert [r.split(" | ")[:3] for r in rows] == [["0", "sampling", "30/30"],
                                                      ["1", "sampling", "30/30"]]
        # every column is as wide as its longest cell (widened as the values grew)
        table = app.query_one(ChainTable)
        widths = [col.content_width for col in table.columns.values()]
        for r in rows:
            assert all(w >= len(v) for w, v in zip(widths, r.split(" | "))), (widths, r)
        assert " sampling " in table.render_line(1).text
        stats = open_run(run_dir).summary["stats"]
        assert [app.state.chains[c].divergences for c in (0, 1)] == \
            [int(v) for v in stats["divergence_counts"]]
        assert app.state.diagnostics_draws == 30
        assert app.state.worst[0].r_hat == pytest.approx(stats["max_r_hat"], abs=1e-9)


@pytest.mark.asyncio
async def test_smc_on_the_recurrent_lm_shows_text(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    vocab = json.loads((EXAMPLES / "data" / "recurrent_lm.vocab.json").read_text())
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "smc", particles=8, max_len=6)
        await pilot.press("r")
        await wait_until(pilot, lambda: ended(app), "the SMC run to end")
        assert app.state.status == "finished", app.state.problem()
        table = app.query_one(ParticlesTable)
        assert table.row_count == 8
        for p in app.state.particles:
            assert p.text == "".join(vocab[t] for t in p.tokens)
        assert sum(p.weight for p in app.state.particles) == pytest.approx(1.0)
        assert len(app.state.ess) >= 1


@pytest.mark.asyncio
async def test_cancel_key_leaves_a_complete_record(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "nuts", num_warmup=5000, num_samples=100, num_chains=2,
                        max_tree_depth=5)
        await pilot.press("r")
        run_dir = app.runner.run_dir
        await wait_until(pilot, lambda: app.state.step >= 2, "the first warmup steps")
        await pilot.press("ctrl+c")  # the first Ctrl-C cancels the fit, it does not quit
        assert app.is_running
        await wait_until(pilot, lambda: ended(app), "the cancelled fit to end")
        assert app.state.status == "cancelled"
        assert app.last_runner.outcome == "cancelled"
        run = open_run(run_dir)
        assert run.status == "cancelled" and run.summary["status"] == "cancelled"
        last = [e for e in run.events(load_draws=False)][-1]
        assert type(last).__name__ == "FitCancelled"
        assert app.state.message == f"cancelled at step {last.step}"


@pytest.mark.asyncio
async def test_a_killed_worker_is_shown_interrupted(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "svi", steps=1000000)
        await pilot.press("r")
        runner = app.runner
        await wait_until(pilot, lambda: app.state.step >= 20, "20 SVI steps")
        shown = len(app.state.loss)
        os.kill(runner.pid, signal.SIGKILL)
        await wait_until(pilot, lambda: ended(app), "the dead worker to be noticed")
        assert app.state.status == "interrupted"
        problem = text_of(app, "#live-problem")
        assert problem.startswith(f"interrupted after step {app.state.step}: the worker "
                                  f"stopped (killed by signal 9) without finishing the record")
        assert open_run(runner.run_dir).status == "interrupted"
        # nothing already shown is lost, and everything flushed to the record is shown
        recorded = [e for e in open_run(runner.run_dir).events(load_draws=False)
                    if type(e).__name__ == "FitProgress"]
        assert len(app.state.loss) == len(recorded) >= shown >= 1
        assert app.is_running  # the dashboard keeps working


@pytest.mark.asyncio
async def test_bad_data_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        from textual.widgets import Input, Select
        setup = app.query_one(SetupPane)
        setup.query_one("#data-kind", Select).value = "file"
        await pilot.pause()
        setup.query_one("#data-value", Input).value = str(tmp_path / "missing.json")
        await pilot.press("r")
        assert app.runner is None
        assert str(setup.query_one("#data-error").render()) == \
            f"{tmp_path / 'missing.json'}: no such file"
        setup.query_one("#data-value", Input).value = str(bad)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: ended(app), "the worker to reject the data")
        assert app.state.status == "failed"
        assert str(bad) in app.state.message or "bad.json" in app.state.message, \
            app.state.message
        assert "bad.json" in text_of(app, "#live-problem")


@pytest.mark.asyncio
async def test_invalid_options_shown_in_place_and_nothing_starts(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "nuts", num_chains=0, step_size="fast")
        await pilot.press("r")
        assert app.runner is None and not (tmp_path / "runs").exists()
        assert app.query_one("#tabs").active == "setup"
        err = lambda name: str(app.query_one(f"#row-{name} .opt-error").render())
        assert err("num_chains") == "must be an integer >= 1, got 0"
        assert err("step_size") == "expected a number, got 'fast'"
        assert err("num_samples") == ""


@pytest.mark.asyncio
async def test_program_with_errors_cannot_run(tmp_path):
    prog = tmp_path / "broken.qvr"
    prog.write_text("object A : FinSet 2\nprogram p : A -> A\n    sample x <- Nowhere(1.0)\n"
                    "    return x\nexport p\n")
    app = QvrDash(program=str(prog), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("r")
        assert app.runner is None and not (tmp_path / "runs").exists()
        await wait_until(pilot, lambda: str(app.query_one("#setup-status").render())
                         .startswith("cannot run"), "the setup pane's blocker")
        status = str(app.query_one("#setup-status").render())
        assert status.startswith(f"cannot run: {prog}:3:")
        assert app.query_one("#tabs").active == "program"


@pytest.mark.asyncio
async def test_unwritable_runs_folder_is_named(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the runs folder should be")
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=blocker,
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("r")
        assert app.runner is None
        assert app.state.status == "failed"
        assert text_of(app, "#live-problem").startswith(
            f"failed: cannot create the runs folder {blocker}")


@pytest.mark.asyncio
async def test_fit_a_language_model_then_generate_in_two_keystrokes(tmp_path):
    """SVI on the recurrent LM, then `g` (SMC from this run) and `r`: the SMC record
    names the SVI run it started from."""
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "svi", steps=3, synthetic=4, pointwise_draws=10)  # LOO unused
        await pilot.press("r")
        svi_dir = app.runner.run_dir
        await wait_until(pilot, lambda: ended(app), "the SVI fit to end")
        assert app.state.status == "finished", app.state.problem()
        await pilot.press("g")
        # SMC's rows are mounted by the preset, after the key (a busy machine: later)
        await wait_until(pilot, lambda: app.setup_pane.method == "smc"
                         and bool(app.setup_pane.query("#opt-max_len")),
                         "g to set up SMC from the run")
        app.setup_pane.set_value("particles", "8")  # keep the generation short
        app.setup_pane.set_value("max_len", "5")
        await pilot.press("r")
        await wait_until(pilot, lambda: app.runner is not None, "r to start the SMC run")
        assert app.runner.request.config.method == "smc"
        smc_dir = app.runner.run_dir
        await wait_until(pilot, lambda: ended(app), "the SMC run to end")
        assert app.state.status == "finished", app.state.problem()
        rec = open_run(smc_dir)
        assert rec.method == "smc" and rec.status == "finished"
        start = rec.meta["start_from"]
        assert start is not None and svi_dir.name in json.dumps(start)
        assert len(app.state.particles) == 8


@pytest.mark.asyncio
async def test_editing_the_program_while_a_fit_runs(tmp_path):
    """Saving the program during a fit re-checks it (the file watcher), does not disturb
    the fit (it goes on, and ends with a complete record) and marks its results as made
    from an older text.  Waits on conditions only: the fit has more steps than any
    machine runs before the re-check lands (whatever the machine's speed and load), and
    is cancelled once it has gone on past the re-check."""
    prog = tmp_path / "regression_plates.qvr"
    text = (EXAMPLES / "regression_plates.qvr").read_text()
    prog.write_text(text)
    app = QvrDash(program=str(prog), runs_dir=tmp_path / "runs", watch=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await configure(pilot, "svi", steps=1_000_000, synthetic=8)
        pane = app.query_one(ProgramPane)
        await wait_until(pilot, pane.watch_ready.is_set, "the file watcher to start")
        await pilot.press("r")
        run_dir = app.runner.run_dir
        await wait_until(pilot, lambda: app.state.step >= 1, "the first SVI steps")
        assert app.runner is not None  # the fit is running while the file is saved
        prog.write_text(text + "\n# edited while the fit runs\n")
        await wait_until(pilot, lambda: "edited while" in pane.model.text,
                         "the watcher to re-check the program")
        assert app.runner is not None and app.state.status == "running"
        step = app.state.step
        await wait_until(pilot, lambda: app.state.step > step, "the fit to go on")
        await pilot.press("ctrl+c")  # cancels the fit
        await wait_until(pilot, lambda: ended(app), "the SVI fit to end")
        assert app.state.status == "cancelled", app.state.problem()
        run = open_run(run_dir)
        assert run.status == "cancelled" and run.summary["status"] == "cancelled"
        last = run.events(load_draws=False)[-1]
        assert type(last).__name__ == "FitCancelled" and last.step > step
        assert run.source_sha256 != source_sha256(prog.read_text())
        assert "made from an older text of the program" in text_of(app, "#live-note")
        results = app.query_one("#results-pane")
        await wait_until(pilot, lambda: results.results is not None
                         and results.results.path == run.path, "the results of the fit")
        assert results.stale.startswith("made from an older text of regression_plates.qvr")
