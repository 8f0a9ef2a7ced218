"""The app's keys without a real fit: tabs by number, `?` help, `d` light/dark, `q` quits
at once when idle and asks while a fit runs (a stand-in worker that never writes a
record), Ctrl-C cancels instead of quitting, `g` sets up SMC from the run shown, the
generated setup options, and a worker that dies before writing a record."""
import os
import stat
import sys
from pathlib import Path

import pytest
from textual.widgets import Select

from qvr.inference.config import FitConfig
from qvr_tui.app import QvrDash
from qvr_tui.screens.confirm import Confirm
from qvr_tui.screens.setup import COMMON, FIRST_ROWS, SetupPane
from qvr_tui.widgets.form_rows import OptionRow

from conftest import EXAMPLES, wait_until

RECORDED = Path(__file__).parent / "recorded"


def stand_in_worker(tmp_path, body=None):
    """An executable used as the worker's python: ignores its arguments.  By default it
    waits until SIGINT ends it and says it started by creating ``tmp_path/started``; it
    dies of SIGINT even when the suite inherited SIGINT ignored (started in the
    background, `cmd &` in a script): `sleep` or Python left alone keep it ignored."""
    if body is None:
        body = (f"exec {sys.executable} -c \"import signal; signal.signal(signal.SIGINT, "
                f"signal.SIG_DFL); open('{tmp_path / 'started'}', 'w').close(); "
                f"signal.pause()\"")
    exe = tmp_path / "fake-python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@pytest.mark.asyncio
async def test_tabs_help_and_theme(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        tabs = app.query_one("#tabs")
        assert tabs.active == "program"
        for key, name in (("2", "setup"), ("3", "live"), ("4", "results"), ("5", "runs"),
                          ("1", "program")):
            await pilot.press(key)
            assert tabs.active == name
            if name == "runs":  # its header says "enter open": enter reaches the table
                assert app.focused is app.query_one("#runs-table")
        await pilot.press("question_mark")
        assert len(app.screen.query("HelpPanel")) == 1
        await pilot.press("question_mark")
        assert len(app.screen.query("HelpPanel")) == 0
        dark = app.current_theme.dark
        await pilot.press("d")
        assert app.current_theme.dark is (not dark)


@pytest.mark.asyncio
async def test_setup_options_generated_from_fitconfig(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        setup = app.query_one(SetupPane)
        for method in ("svi", "hmc", "nuts", "smc"):
            setup.preset(method)
            await pilot.pause()
            shown = [r.opt_name for r in setup.query("#method-options OptionRow") if r.display]
            # `start_at` only with a run to start from (below)
            assert shown == [r.opt_name for r in setup.method_rows() if r.opt_name != "start_at"]
            declared = [f.name for f, _ in FitConfig.options(method)
                        if f.name not in COMMON and f.name != "start_at"]
            first = [n for n in FIRST_ROWS if n in declared]  # SMC: the LM's rows first
            assert shown == first + [n for n in declared if n not in first]
        setup.preset("nuts", start_from=str(tmp_path / "runs" / "hmm-1"))
        await pilot.pause()
        shown = [r.opt_name for r in setup.query("#method-options OptionRow") if r.display]
        assert shown == [f.name for f, _ in FitConfig.options("nuts") if f.name not in COMMON]
        setup.query_one("#start-from", Select).clear()
        await pilot.pause()
        assert not setup.query_one("#row-start_at").display
        setup.preset("nuts")
        await pilot.pause()
        assert setup.query_one("#opt-num_warmup").value == "500"
        assert setup.query_one("#opt-mass_matrix", Select).value is Select.NULL  # default
        setup.set_value("num_warmup", "40")
        setup.preset("svi")
        await pilot.pause()
        setup.preset("nuts")
        await pilot.pause()
        assert setup.query_one("#opt-num_warmup").value == "40"  # kept across methods
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.num_warmup == 40 and cfg.method == "nuts"
        setup.set_value("num_warmup", "")  # an empty field is the default it shows
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.num_warmup == FitConfig.default("num_warmup") == 500
        setup.preset("smc")
        await pilot.pause()
        setup.set_value("forbid", "3 ; 4,5 ; dog")
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.forbid == [[3], [4, 5], ["dog"]]


@pytest.mark.asyncio
async def test_quit_asks_while_a_fit_runs_and_ctrl_c_cancels(tmp_path):
    started = tmp_path / "started"
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                  python=stand_in_worker(tmp_path), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("r")
        runner = app.runner
        assert runner is not None and runner.proc.poll() is None
        # the stand-in runs: a SIGINT between fork and exec would be lost
        await wait_until(pilot, started.exists, "the stand-in worker to start")
        shown = {b.binding.description for b in app.screen.active_bindings.values()
                 if b.binding.show}
        assert "Cancel" in shown  # `x` is in the footer while the fit runs
        await pilot.press("q")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        assert not isinstance(app.screen, Confirm) and app.is_running
        await pilot.press("ctrl+c")  # cancels the fit (SIGINT to the worker), not the app
        assert app.is_running and runner.cancel_requests == 1
        await wait_until(pilot, lambda: app.runner is None, "the stand-in worker to end")
        # it died of the SIGINT without writing a record: cancelled (not "failed to
        # start"), said so, and the app keeps going
        assert app.state.status == "cancelled"
        assert app.state.message == "cancelled before the worker wrote a record"
        assert app.state.problem() is None
        await pilot.press("q")
    assert not app.is_running


@pytest.mark.asyncio
async def test_cancelling_before_the_record_exists_is_a_cancel_not_a_failure(tmp_path):
    """`r` then `x` before the worker wrote run.json (~0.3 s on a real fit): the header
    said "SVI failed to start: no record was written", the problem line "failed: qvr:
    interrupted", and an error was notified.  The worker stands in: it exits on SIGINT
    as `qvr run` does, saying "qvr: interrupted", without writing a record."""
    exe = tmp_path / "fake-python"
    started = tmp_path / "started"
    exe.write_text(f"#!{sys.executable}\n"
                   "import signal, sys\n"
                   # a suite started in the background (`cmd &` in a script) inherits
                   # SIGINT ignored, and Python keeps an ignored SIGINT ignored
                   "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                   f"open({str(started)!r}, 'w').close()\n"
                   "try:\n"
                   "    signal.pause()\n"
                   "except KeyboardInterrupt:\n"
                   "    sys.stderr.write('qvr: interrupted\\n')\n"
                   "    sys.exit(130)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"),
                  runs_dir=tmp_path / "runs", python=str(exe), watch=False)
    async with app.run_test(size=(100, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("r")
        runner = app.runner
        assert runner is not None
        # the stand-in runs (a SIGINT between fork and exec is lost: on a busy machine
        # that window is long enough for the key to land in it, and nothing then ended)
        await wait_until(pilot, started.exists, "the stand-in worker to start")
        await pilot.press("x")
        assert runner.cancel_requests == 1
        assert runner.wait(timeout=60) is not None  # the process ended (no sleep)
        app.tick()
        assert app.runner is None and runner.tail is None  # no record was written
        assert app.state.status == "cancelled"
        assert app.state.problem() is None
        await pilot.pause()
        assert str(app.query_one("#live-header").render()) == \
            "SVI cancelled before the worker wrote a record"
        assert not app.query_one("#live-problem").has_class("-shown")
        note = str(app.query_one("#live-note").render())
        assert note.endswith("holds no record (left empty)"), note
        last = list(app._notifications)[-1]
        assert (last.message, last.severity) == (
            "fit cancelled before the worker wrote a record: nothing was saved", "warning")


@pytest.mark.asyncio
async def test_worker_stderr_is_shown_when_it_fails_to_start(tmp_path):
    exe = stand_in_worker(tmp_path, 'echo "qvr run: --data x.json: no such file" >&2; exit 2')
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"),
                  runs_dir=tmp_path / "runs", python=exe, watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("r")
        await wait_until(pilot, lambda: app.runner is None, "the worker to exit")
        assert app.state.problem() == "failed: qvr run: --data x.json: no such file"
        # the header names the method and that nothing was recorded (it read "? failed"),
        # the note says the folder holds no record (it read "record: runs/…")
        await pilot.pause()
        header = str(app.query_one("#live-header").render())
        assert header == "SVI failed to start: no record was written"
        note = str(app.query_one("#live-note").render())
        assert note.endswith("holds no record (left empty)") and "record: " not in note


@pytest.mark.asyncio
async def test_g_sets_up_smc_from_the_finished_run(tmp_path):
    import shutil
    run = tmp_path / "svi_transformer"
    shutil.copytree(RECORDED / "svi_transformer", run)
    app = QvrDash(program=str(EXAMPLES / "transformer_lm.qvr"), run=str(run),
                  runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("g")
        setup = app.query_one(SetupPane)
        assert app.query_one("#tabs").active == "setup"
        assert setup.method == "smc"
        assert setup.query_one("#start-from", Select).value == str(run)
        req = setup.build_request(str(tmp_path / "runs" / "x"))
        assert req.start_from == str(run) and req.config.method == "smc"


@pytest.mark.asyncio
async def test_a_tab_key_pressed_before_the_other_tabs_are_built(tmp_path):
    app = QvrDash(program=str(EXAMPLES / "hmm.qvr"), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")  # possibly before `ready`: the tab is chosen, built later
        await app.ready.wait()
        await pilot.pause()
        assert app.query_one("#tabs").active == "setup"
        assert len(app.query("ProgramPane")) == 1 and len(app.query(SetupPane)) == 1
        assert app.focused is app.query_one(SetupPane).query_one("#method")


@pytest.mark.asyncio
async def test_the_run_key_pressed_before_the_tabs_are_wired_is_kept(tmp_path):
    """CI once lost a ctrl+r sent while the other tabs were still being built (a busy
    machine): the key is remembered and the fit starts once everything is wired."""
    import asyncio

    class Gated(QvrDash):
        gate = asyncio.Event()

        async def _mount_rest(self):
            await self.gate.wait()
            await super()._mount_rest()

    app = Gated(program=str(EXAMPLES / "regression_plates.qvr"), runs_dir=tmp_path / "runs",
                python=stand_in_worker(tmp_path), watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+r")
        assert not app.ready.is_set() and app.runner is None
        Gated.gate.set()
        await app.ready.wait()
        await wait_until(pilot, lambda: app.runner is not None, "the fit to start")
        assert app.runner.proc.poll() is None
        await wait_until(pilot, (tmp_path / "started").exists, "the stand-in worker to start")
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: app.runner is None, "the stand-in worker to end")


@pytest.mark.asyncio
async def test_options_shipped_with_the_program_are_the_forms_defaults(tmp_path):
    """`data/NAME.fit.json` beside the program fills the form (and `qvr run`'s defaults)."""
    import shutil
    prog = tmp_path / "decoder_lm.qvr"
    shutil.copy(EXAMPLES / "decoder_lm.qvr", prog)
    (tmp_path / "data").mkdir()
    shutil.copy(EXAMPLES / "data" / "decoder_lm.json", tmp_path / "data")
    (tmp_path / "data" / "decoder_lm.fit.json").write_text('{"steps": 150, "draws": 8}')
    app = QvrDash(program=str(prog), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.ready.wait()
        setup = app.query_one(SetupPane)
        setup.preset("svi")
        await pilot.pause()
        assert setup.query_one("#opt-steps").value == "150"
        assert setup.query_one("#opt-draws").value == "8"
        cfg, errors = setup.build_config()
        assert errors == {} and (cfg.steps, cfg.draws) == (150, 8)
        setup.set_value("steps", "")  # an emptied field is the shipped default, as in qvr run
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.steps == 150
        assert "defaults from data/decoder_lm.fit.json" in str(
            setup.query_one("#setup-status").render())


@pytest.mark.asyncio
async def test_a_tick_after_the_app_closed_does_nothing(tmp_path):
    """The poll timer can fire once more while the app closes, after its screens are
    gone: that tick must not raise (it did: ScreenStackError from refresh_bindings)."""
    app = QvrDash(program=str(EXAMPLES / "regression_plates.qvr"),
                  runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(100, 24)) as pilot:
        await app.ready.wait()
        await pilot.pause()
    assert app.screen_stack == []
    app._bindings_for = None  # force the branch that refreshes the bindings
    app.tick()  # no ScreenStackError
