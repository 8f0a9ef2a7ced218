"""`qvr dash` on the command line: without a terminal it runs `--start` fits headless
through `qvr run` (same record, same summary) or says it needs a terminal; bad paths are
usage errors; registering the command imports neither torch nor Textual."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from qvr.commands.dash import HEADLESS_SYNTHETIC, headless_argv
from qvr.runs import list_runs, open_run

from conftest import EXAMPLES, ROOT

QVR = [sys.executable, "-m", "qvr.cli"]
LIMIT = 600  # seconds: safety limits on waiting, not timing assertions


def env():
    e = dict(os.environ, QVR_MCMC_COMPILER="torchscript")
    e.pop("COLUMNS", None)
    return e


def run(args, cwd, timeout=LIMIT):
    # stdin and stdout are pipes: no terminal
    return subprocess.run(QVR + args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env(), stdin=subprocess.DEVNULL)


def test_without_a_terminal_and_without_start_it_says_so(tmp_path):
    out = run(["dash", str(EXAMPLES / "hmm.qvr")], tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("qvr dash: the dashboard needs a terminal (stdout and stdin "
                                 "are not a TTY)")
    assert not (tmp_path / "runs").exists()


def test_bad_paths_are_usage_errors(tmp_path):
    out = run(["dash", "nowhere.qvr"], tmp_path)
    assert (out.returncode, out.stderr.strip()) == (2, "qvr dash: nowhere.qvr: no such file")
    out = run(["dash", "--run", "runs/none"], tmp_path)
    assert (out.returncode, out.stderr.strip()) == (2, "qvr dash: --run runs/none: no such "
                                                       "run folder")
    out = run(["dash", "--start", "svi"], tmp_path)
    assert (out.returncode, out.stderr.strip()) == (2, "qvr dash: --start needs a program file")


def test_headless_data_choice(tmp_path):
    args = SimpleNamespace(file=str(EXAMPLES / "transformer_lm.qvr"), start="svi",
                           runs_dir="runs")
    assert headless_argv(args) == ["run", args.file, "--method", "svi", "--runs-dir", "runs"]
    lonely = tmp_path / "regression_plates.qvr"  # no data/ beside it
    lonely.write_text((EXAMPLES / "regression_plates.qvr").read_text())
    args.file = str(lonely)
    assert headless_argv(args)[-2:] == ["--synthetic", str(HEADLESS_SYNTHETIC)]
    args.start = "smc"
    assert "--synthetic" not in headless_argv(args)


def test_headless_start_writes_the_same_record_and_prints_the_summary(tmp_path, monkeypatch):
    out = run(["dash", str(EXAMPLES / "regression_plates.qvr"), "--start", "svi"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = list_runs(tmp_path / "runs")
    assert len(runs) == 1
    rec = runs[0]
    assert rec.status == "finished" and rec.method == "svi"
    assert rec.config["steps"] == 1000 and len(rec.losses()) == 1000
    assert rec.meta["data"] is not None
    assert "qvr dash: no terminal: running `qvr run " in out.stderr
    from qvr.commands.report import render_run
    monkeypatch.chdir(tmp_path)  # the summary names the record as the command saw it
    assert out.stdout.strip() == render_run(open_run(rec.path.relative_to(tmp_path))).strip()


def test_headless_transformer_lm_start_svi_runs_and_cancels_cleanly(tmp_path):
    """The README's main command without a terminal: the seed transformer with its shipped
    data (1000 steps at about a second each here, so it is interrupted once it runs)."""
    proc = subprocess.Popen(QVR + ["dash", str(EXAMPLES / "transformer_lm.qvr"), "--start",
                                   "svi"], cwd=tmp_path, env=env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + LIMIT
        events = None
        while time.monotonic() < deadline:
            found = list((tmp_path / "runs").glob("*/events.jsonl"))
            if found and '"type":"progress"' in found[0].read_text():
                events = found[0]
                break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.2)
        assert events is not None, "no progress within the limit"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=LIMIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    rec = open_run(events.parent)
    assert rec.status == "cancelled" and rec.method == "svi"
    assert rec.meta["data"] is not None  # the shipped data, not synthetic rows
    assert rec.config["synthetic"] is None


def test_registering_dash_imports_neither_torch_nor_textual():
    code = ("import sys, qvr.cli, argparse\n"
            "p = argparse.ArgumentParser(); s = p.add_subparsers()\n"
            "import qvr.commands.dash as d; d.register(s)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_export_is_passed_to_the_headless_fit_and_preselected_in_the_app(tmp_path):
    import asyncio

    from qvr_tui.app import QvrDash
    args = SimpleNamespace(file=str(EXAMPLES / "count_regression.qvr"), start="svi",
                           runs_dir="runs", export="rentals_poisson")
    assert headless_argv(args) == ["run", args.file, "--method", "svi", "--runs-dir", "runs",
                                   "--export", "rentals_poisson"]

    async def chosen():
        from textual.widgets import Select
        app = QvrDash(program=args.file, runs_dir=tmp_path / "runs", watch=False,
                      export="rentals_poisson")
        async with app.run_test(size=(80, 24)):
            await app.ready.wait()
            return app.setup_pane.query_one("#export", Select).value
    assert asyncio.run(chosen()) == "rentals_poisson"
