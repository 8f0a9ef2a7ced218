"""`qvr run FILE --method svi|hmc|nuts`: output, run folder, errors, Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
object Obs : FinSet 20
program nn : Obs -> Obs
    sample mu <- Normal(0.0, 5.0)
    sample sigma <- HalfNormal(2.0)
    observe y : Obs <- Normal(mu, sigma)
    return mu
export nn
"""


class Out:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "nn.qvr"
    p.write_text(PROGRAM)
    return p


@pytest.fixture
def qvr_run(capsys, tmp_path):
    from qvr.cli import main

    def call(*args):
        try:
            rc = main(["run", *map(str, args), "--runs-dir", str(tmp_path / "runs")])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return Out(rc, out, err)
    return call


def folder_of(tmp_path) -> Path:
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1
    return folders[0]


def test_nuts_run_prints_a_summary_and_fills_the_run_folder(program, qvr_run, tmp_path):
    out = qvr_run(program, "--method", "nuts", "--synthetic", "20", "--warmup", "40",
                  "--samples", "30", "--chains", "2", "--seed", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("nuts: 2 chains x 30 draws, acceptance")
    assert "ess_bulk" in out.stdout and "r_hat" in out.stdout and "sigma" in out.stdout
    folder = folder_of(tmp_path)
    assert str(folder) in out.stderr
    config = json.loads((folder / "config.json").read_text())
    assert config["method"] == "nuts" and config["options"]["warmup"] == 40
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 * 70 and {m["phase"] for m in metrics} == {"warmup", "sampling"}
    assert {"accept_prob", "step_size", "tree_depth", "divergences"} <= set(metrics[-1])
    with np.load(folder / "samples.npz") as f:
        assert f["mu"].shape == (2, 30, 1) and f["sigma"].shape == (2, 30, 1)
        assert f["sample_stats.diverging"].shape == (2, 30)
    draws = (folder / "draws.jsonl").read_text().splitlines()
    assert len(draws) == 60
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "finished" and "mu" in summary["parameters"]
    assert (folder / "summary.txt").exists() and (folder / "synthetic_truth.npz").exists()


def test_svi_run_saves_the_fitted_parameters(program, qvr_run, tmp_path):
    out = qvr_run(program, "--method", "svi", "--synthetic", "20", "--steps", "25", "--lr",
                  "0.05")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("svi: 25 steps, final loss")
    folder = folder_of(tmp_path)
    losses = [json.loads(line)["loss"] for line in
              (folder / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 25
    with np.load(folder / "params.npz") as f:
        assert {"loc_mu", "log_scale_mu", "loc_sigma", "log_scale_sigma"} <= set(f.files)


def test_data_file_with_an_unknown_site_is_a_clear_error(program, qvr_run, tmp_path):
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"y": [0.1] * 20, "z": [1.0] * 20}))
    out = qvr_run(program, "--method", "hmc", "--data", data, "--warmup", "5", "--samples", "5")
    assert out.returncode == 1
    assert "`z`" in out.stderr and "Traceback" not in out.stderr
    assert "the data does not fit the program" in out.stderr
    folder = folder_of(tmp_path)
    assert not (folder / "metrics.jsonl").read_text()  # nothing was fitted


def test_data_of_the_wrong_shape_is_a_clear_error(program, qvr_run, tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, y=np.zeros(20), mu=np.zeros(4))
    out = qvr_run(program, "--method", "nuts", "--data", data)
    assert out.returncode == 1 and "`mu`" in out.stderr and "Traceback" not in out.stderr


def test_a_nan_loss_stops_with_the_step(program, qvr_run, tmp_path):
    data = tmp_path / "d.npz"
    y = np.zeros(20)
    y[4] = np.nan
    np.savez(data, y=y)
    out = qvr_run(program, "--method", "svi", "--data", data, "--steps", "10")
    assert out.returncode == 1
    assert "at step 1" in out.stderr and "Traceback" not in out.stderr
    folder = folder_of(tmp_path)
    assert "step 1" in (folder / "error.txt").read_text()


@pytest.mark.parametrize("args, words", [
    (["--method", "nuts", "--steps", "10"], "--steps is not an option of --method nuts"),
    (["--method", "svi", "--warmup", "10"], "--warmup is not an option of --method svi"),
    (["--method", "hmc", "--max-tree-depth", "3"], "--max-tree-depth is not an option"),
    (["--method", "nuts", "--synthetic", "3", "--data", "x.npz"], "either --data"),
])
def test_usage_errors(program, qvr_run, args, words):
    out = qvr_run(program, *args)
    assert out.returncode == 2 and words in out.stderr


def test_ctrl_c_keeps_what_was_reported(program, tmp_path):
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "qvr.cli", "run", str(program), "--method", "nuts",
         "--synthetic", "20", "--warmup", "100", "--samples", "100000", "--chains", "2",
         "--runs-dir", str(runs)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    draws = None
    while time.time() < deadline:
        found = list(runs.glob("*/draws.jsonl")) if runs.exists() else []
        if found and len(found[0].read_text().splitlines()) >= 10:
            draws = found[0]
            break
        time.sleep(0.2)
    assert draws is not None, proc.stderr.read() if proc.poll() is not None else "timeout"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    folder = draws.parent
    assert str(folder) in stderr and "Traceback" not in stderr
    n_draws = len(draws.read_text().splitlines())
    with np.load(folder / "samples.npz") as f:
        assert f["mu"].shape[0] == 2 and 2 * f["mu"].shape[1] <= n_draws + 2
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "cancelled"
    assert "cancelled" in stdout
    metrics = (folder / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) >= 2 * 100
