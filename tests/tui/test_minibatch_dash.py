"""Minibatch SVI in the dashboard (issue 26): Setup's ``batch_size`` row for SVI (empty:
all rows; ``0`` is an error in place), HMC/NUTS's ``chain_method`` without
"distributed" (the dashboard runs one worker process), the Live view's epoch line from
progress events carrying ``epoch``/``epoch_step``/``steps_per_epoch``/``rows``/
``batch_size`` (and ``world_size``), unchanged without them, and the Results header's
batch facts from run.json's ``batch``."""
import json
import shutil
from pathlib import Path

import pytest
from textual.widgets import Input, Select

from qvr.events import FitFinished, FitProgress, FitStarted
from qvr_tui.app import QvrDash
from qvr_tui.results_data import Results
from qvr_tui.results_model import batch_facts
from qvr_tui.state import RunState

from conftest import EXAMPLES, option_error as err, settle, setup_tab, text_of

RECORDED = Path(__file__).parent / "recorded"
MINIBATCH = {"rows": 40, "batch_size": 8, "steps_per_epoch": 5}


# ---------------------------------------------------------------- Setup

@pytest.mark.asyncio
async def test_setup_batch_size_row_for_svi(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        await pilot.pause()
        row = setup.query_one("#row-batch_size")
        assert row.display  # SVI is the first method
        field = setup.query_one("#opt-batch_size", Input)
        assert field.value == "" and field.placeholder == "all rows"
        help_text = str(row.query_one(".opt-help").render())
        assert help_text.startswith("SVI: rows of the data per step")
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.batch_size is None  # empty: all rows
        field.focus()
        await pilot.press("0")
        await pilot.pause()
        assert err(setup, "batch_size") == "must be an integer >= 1, got 0"  # no `r`
        assert "batch_size" in setup.build_config()[1]
        field.value = ""
        await pilot.press("2", "5", "6")
        await pilot.pause()
        assert err(setup, "batch_size") == ""
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.batch_size == 256
        field.value = "many"
        await pilot.pause()
        assert err(setup, "batch_size").startswith("expected an integer")
        field.value = ""
        await pilot.pause()
        assert err(setup, "batch_size") == ""
        setup.preset("nuts")
        await pilot.pause()
        assert not row.display  # SVI only
        assert setup.build_config()[0].batch_size is None


@pytest.mark.asyncio
async def test_setup_chain_method_leaves_out_distributed(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        setup.preset("nuts")
        await pilot.pause()
        sel = setup.query_one("#opt-chain_method", Select)
        offered = [v for _, v in sel._options if v is not Select.NULL]
        assert offered == ["vectorized", "sequential", "parallel"]
        assert sel.value == "vectorized"


def test_a_shipped_distributed_chain_method_shows_as_the_default():
    """A program's data/NAME.fit.json may say ``chain_method: distributed`` (for `qvr run
    --nproc`); the form, which cannot launch processes, starts from the default."""
    from qvr.inference.config import FitConfig
    from qvr_tui.widgets.form_rows import OptionRow, opt_of
    row = OptionRow("chain_method", opt_of("chain_method"), "distributed")
    assert row.value == FitConfig.default("chain_method") == "vectorized"
    assert "distributed" not in row.choices and "parallel" in row.choices


# ---------------------------------------------------------------- Live, from events

def minibatch_events(steps=12, world_size=None, **batch):
    batch = batch or MINIBATCH
    k = batch["steps_per_epoch"]
    yield FitStarted("svi", steps, 1, {"method": "svi", "steps": steps,
                                       "batch_size": batch["batch_size"]})
    for i in range(1, steps + 1):
        m = {"loss": 10.0 / i, "loss_mean": 10.0 / i, "epoch": (i - 1) // k + 1,
             "epoch_step": (i - 1) % k + 1, **batch}
        if world_size:
            m["world_size"] = world_size
        yield FitProgress("svi", "optimization", i, steps, 0, m, elapsed=0.01 * i)


def test_run_state_batch_text():
    st = RunState.from_events(minibatch_events())
    assert st.batch == {"epoch": 3, "epoch_step": 2, **MINIBATCH}
    assert st.batch_text() == "epoch 3 of 3 · step 2/5 of this epoch · batch 8 of 40 rows"
    big = RunState.from_events(minibatch_events(
        steps=1200, world_size=2, rows=1_000_000, batch_size=256, steps_per_epoch=400))
    assert big.batch_text() == ("epoch 3 of 3 · step 400/400 of this epoch · batch 256 of "
                                "1,000,000 rows · 2 processes")
    # full-batch SVI: no batch keys, nothing to say
    plain = RunState.from_events(
        [FitStarted("svi", 3, 1, {}),
         *(FitProgress("svi", "optimization", i, 3, 0, {"loss": 1.0, "loss_mean": 1.0})
           for i in (1, 2, 3))])
    assert plain.batch == {} and plain.batch_text() == ""
    assert "epoch" not in plain.status_line()


@pytest.mark.asyncio
async def test_live_view_shows_epochs_fed_events(tmp_path):
    """Events applied to the app's state as its timer does for a running worker."""
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"),
                  runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.ready.wait()
        await pilot.press("3")
        app.state = RunState()
        app.state.apply(minibatch_events())
        pane = app.live
        pane.show(app.state, force=True)
        await pilot.pause()
        note = text_of(app, "#live-note")
        assert note.startswith("epoch 3 of 3 · step 2/5 of this epoch · batch 8 of 40 rows")
        assert text_of(app, "#live-header").startswith("SVI running · step 12/12")
        app.state.apply([FitFinished({"final_loss": 1.0}, 0.2)])
        pane.show(app.state)
        await pilot.pause()
        assert text_of(app, "#live-note").startswith("epoch 3 of 3 · step 2/5 of this epoch")


# ---------------------------------------------------------------- a recorded minibatch run

@pytest.fixture
def minibatch_run(tmp_path):
    """svi_regression (600 steps, 40 rows) as if fitted with --batch-size 8 over two
    processes: its progress events carry the batch keys, its run.json the batch."""
    run = tmp_path / "svi_minibatch"
    shutil.copytree(RECORDED / "svi_regression", run)
    k = MINIBATCH["steps_per_epoch"]
    lines = []
    for line in (run / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("type") == "progress":
            i = ev["step"]
            ev["metrics"].update(epoch=(i - 1) // k + 1, epoch_step=(i - 1) % k + 1,
                                 world_size=2, **MINIBATCH)
        lines.append(json.dumps(ev))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["batch_size"] = MINIBATCH["batch_size"]
    meta["batch"] = {**MINIBATCH, "epochs": 120, "world_size": 2}
    (run / "run.json").write_text(json.dumps(meta, indent=1))
    return run


@pytest.mark.asyncio
async def test_recorded_minibatch_run_live_and_results(minibatch_run):
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(minibatch_run),
                  watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.query_one("#tabs").active == "live"
        note = text_of(app, "#live-note")
        assert note.startswith("epoch 120 of 120 · step 5/5 of this epoch · batch 8 of 40 "
                               "rows · 2 processes · ")
        assert "l: log scale off" in note
        assert text_of(app, "#live-header").startswith("SVI finished · step 600/600 · ")
        await pilot.press("4")
        await pilot.pause()
        from qvr_tui.screens.results import ResultsPane
        pane = app.query_one(ResultsPane)
        for _ in range(50):
            if pane.results is not None:
                break
            await pilot.pause(0.05)
        header = text_of(app, "#results-header")
        assert "finished · batch 8 of 40 rows · 120 epochs of 5 steps · 2 processes" in header


@pytest.mark.asyncio
async def test_full_batch_run_unchanged(tmp_path):
    run = tmp_path / "svi_regression"
    shutil.copytree(RECORDED / "svi_regression", run)
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), run=str(run), watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.state.batch == {} and app.state.world_size == 1
        note = text_of(app, "#live-note")
        assert "epoch" not in note and "processes" not in note
        assert note.split(" · ")[0].endswith("steps/s")  # as before: the rate first
        await pilot.press("4")
        from qvr_tui.screens.results import ResultsPane
        pane = app.query_one(ResultsPane)
        for _ in range(50):
            if pane.results is not None:
                break
            await pilot.pause(0.05)
        header = text_of(app, "#results-header")
        assert "batch" not in header and "processes" not in header
        assert header.rstrip().endswith("finished")


def test_batch_facts():
    res = Results(path=Path("r"), method="svi", status="finished")
    assert batch_facts(res) == ""
    res.batch = {"rows": 1_000_000, "batch_size": 256, "steps_per_epoch": 3907,
                 "epochs": 1}
    assert batch_facts(res) == "batch 256 of 1,000,000 rows · 1 epoch of 3,907 steps"
    res.batch["epochs"] = 2.5
    res.world_size = 4
    assert batch_facts(res) == ("batch 256 of 1,000,000 rows · 2.50 epochs of 3,907 steps · "
                                "4 processes")


def test_batch_facts_take_the_epochs_from_the_summary():
    """run.json's ``batch`` as `fit` writes it (no ``epochs``: the summary has them)."""
    res = Results(path=Path("r"), method="svi", status="finished",
                  stats={"epochs": 150.0, "batch_size": 40, "rows": 400})
    res.batch = {"rows": 400, "batch_size": 40, "steps_per_epoch": 10, "world_size": 1,
                 "mapped": False}
    assert batch_facts(res) == "batch 40 of 400 rows · 150 epochs of 10 steps"
    res.batch = {}
    assert batch_facts(res) == ""  # a full-batch run: its stats say nothing here
