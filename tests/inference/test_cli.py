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

from helpers import mu_sigma

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = mu_sigma(20)


@pytest.fixture
def program(tmp_path):
    p = tmp_path / "nn.qvr"
    p.write_text(PROGRAM)
    return p




def folder_of(tmp_path) -> Path:
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1
    return folders[0]


def test_nuts_run_prints_a_summary_and_fills_the_run_folder(program, qvr_run, tmp_path):
    from qvr.runs import open_run
    out = qvr_run(program, "--method", "nuts", "--synthetic", "20", "--warmup", "40",
                  "--samples", "30", "--chains", "2", "--seed", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("nuts: 2 chains x 30 draws, acceptance")
    assert lines[1].split() == ["site", "shape", "mean", "sd", "5%", "95%", "ess_bulk",
                                "ess_tail", "r_hat"]
    assert {ln.split()[0] for ln in lines[2:4]} == {"mu", "sigma"}
    assert [ln.split()[1] for ln in lines[2:4]] == ["scalar", "scalar"]
    r_hats = [float(ln.split()[-1]) for ln in lines[2:4]]
    assert r_hats == sorted(r_hats, reverse=True)  # worst R-hat first
    assert lines[4].startswith("(every coordinate (2) in ") and "summary.txt" in lines[4]
    folder = folder_of(tmp_path)
    assert str(folder) in out.stderr
    run = open_run(folder)
    assert run.status == "finished" and run.method == "nuts"
    assert run.config["num_warmup"] == 40 and run.config["seed"] == 3
    assert run.meta["data"] == {"kind": "synthetic", "rows": 20}
    progress = [e for e in run.events() if type(e).__name__ == "FitProgress"]
    assert {e.phase for e in progress} == {"warmup", "sampling"}
    assert {"accept_prob", "step_size", "tree_depth", "divergences", "log_density"} <= \
        set(progress[-1].metrics)
    with np.load(folder / "samples.npz") as f:
        assert f["mu"].shape == (2, 30, 1) and f["sigma"].shape == (2, 30, 1)
        assert f["sample_stats.diverging"].shape == (2, 30)
    assert run.draws()["mu"].shape == (2, 30, 1)  # as in samples.npz
    summary = run.summary
    assert summary["status"] == "finished" and "mu" in summary["parameters"]
    assert (folder / "summary.txt").exists()
    assert set(run.truth()) >= {"mu", "sigma", "data.y", "data.x"}


def test_svi_run_saves_the_fitted_parameters(program, qvr_run, tmp_path):
    from qvr.runs import open_run
    out = qvr_run(program, "--method", "svi", "--synthetic", "20", "--steps", "25", "--lr",
                  "0.05")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("svi: 25 steps, final loss")
    run = open_run(folder_of(tmp_path))
    assert run.losses().shape == (25,)
    assert {"loc_mu", "log_scale_mu", "loc_sigma", "log_scale_sigma"} <= set(run.params())


def test_show_prints_a_saved_run_of_any_status(program, qvr_run, tmp_path, capsys):
    from qvr.cli import main
    out = qvr_run(program, "--method", "svi", "--synthetic", "5", "--steps", "5")
    folder = folder_of(tmp_path)
    assert main(["show", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert "svi: 5 steps, final loss" in shown and str(program.resolve()) in shown
    # what the run set beyond the method's defaults, then the run's own headline
    assert shown.splitlines()[1] == "options: synthetic 5, steps 5"
    assert shown.splitlines()[2] == out.stdout.splitlines()[0]
    assert main(["show", str(tmp_path)]) == 2
    assert "not a run record" in capsys.readouterr().err


def test_a_data_file_entry_the_program_does_not_read_is_left_out(program, qvr_run, tmp_path):
    """As CmdStan (issue 36): `z` is left out, said on stderr and kept in the record."""
    from qvr.runs import open_run
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"y": [0.1] * 20, "z": [1.0] * 20}))
    out = qvr_run(program, "--method", "svi", "--data", data, "--steps", "3")
    assert out.returncode == 0, out.stderr
    assert "warning: the data file's `z` is not read by " in out.stderr
    run = open_run(folder_of(tmp_path))
    assert run.status == "finished" and run.meta["data"]["left_out"] == ["z"]


def test_data_of_the_wrong_shape_is_a_clear_error(program, qvr_run, tmp_path):
    data = tmp_path / "d.npz"
    np.savez(data, y=np.zeros(20), mu=np.zeros(4))
    out = qvr_run(program, "--method", "nuts", "--data", data)
    assert out.returncode == 1 and "`mu`" in out.stderr and "Traceback" not in out.stderr


def test_a_nan_loss_stops_with_the_step(program, qvr_run, tmp_path):
    data = tmp_path / "d.npz"
    y = np.zeros(20)
    y[4] = np.inf  # (NaN would be a missing entry, design E5)
    np.savez(data, y=y)
    out = qvr_run(program, "--method", "svi", "--data", data, "--steps", "10")
    assert out.returncode == 1
    assert "at step 1" in out.stderr and "Traceback" not in out.stderr
    from qvr.runs import open_run
    run = open_run(folder_of(tmp_path))
    assert run.status == "failed" and "step 1" in run.summary["message"]


@pytest.mark.parametrize("args, words", [
    (["--method", "nuts", "--steps", "10"],
     "--steps is an option of --method svi, not of --method nuts"),
    (["--method", "svi", "--warmup", "10"], "--warmup is an option of --method hmc|nuts"),
    (["--method", "hmc", "--max-tree-depth", "3"], "--max-tree-depth is an option of"),
    (["--method", "hmc", "--uturn", "displacement"],
     "--uturn is an option of --method nuts, not of --method hmc"),
    (["--method", "nuts", "--uturn", "angle"], "invalid choice: 'angle'"),
    (["--method", "nuts", "--synthetic", "3", "--data", "x.npz"],
     "give either a data file or synthetic rows, not both"),
    (["--method", "nuts", "--chains", "0"], "--chains: must be an integer >= 1, got 0"),
    (["--method", "svi", "--lr", "abc"], "expected a number, got 'abc'"),
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
    from qvr.runs import open_run
    deadline = time.time() + 150
    folder = None
    while time.time() < deadline:  # wait for draws on disk (events, not a fixed sleep)
        found = list(runs.glob("*/draws/*.npz")) if runs.exists() else []
        if len(found) >= 4:
            folder = found[0].parent.parent
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    assert folder is not None, "timeout"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert str(folder) in stderr and "Traceback" not in stderr
    run = open_run(folder)
    assert run.status == "cancelled" and run.summary["status"] == "cancelled"
    per = run.draws_per_chain()
    with np.load(folder / "samples.npz") as f:
        assert f["mu"].shape[0] == 2 and f["mu"].shape[1] <= min(per.values()) + 1
    assert "[cancelled]" in stdout
    progress = [e for e in run.events() if type(e).__name__ == "FitProgress"]
    assert len([e for e in progress if e.phase == "warmup"]) >= 2
