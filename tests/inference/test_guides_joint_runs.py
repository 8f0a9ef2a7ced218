"""Joint guides and run records: predict from a fullrank SVI run (its guide rebuilt from
the run's config), and `--from` between guide families (`qvr.inference.front.start`)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_records import SIZED, X_NEW, predictive, write_program  # noqa: E402

import qvr  # noqa: E402
from qvr.inference import fit  # noqa: E402
from qvr.inference.front.predict import PredictError, predict  # noqa: E402
from qvr.runs import open_run  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A fullrank and a mean-field SVI fit of the conjugate regression (exact for both
    families: one latent), with their run records."""
    tmp = tmp_path_factory.mktemp("joint_runs")
    program = write_program(tmp / "prog")
    out = {"program": program}
    for guide in ("fullrank", "meanfield"):
        steps = 600 if guide == "fullrank" else 200  # the predictive test needs 600
        res = fit(qvr.load(program), config={"method": "svi", "steps": steps, "lr": 0.05,
                                             "seed": 0, "pointwise": False, "guide": guide},
                  run_dir=tmp / "runs" / guide, program_path=str(program))
        assert res.status == "finished"
        out[guide] = res
    return out


def test_a_fullrank_fit_predicts_from_its_guide(runs):
    run = open_run(runs["fullrank"].run_dir)
    assert run.config["guide"] == "fullrank"
    assert set(run.params()) >= {"joint_loc", "joint_scale_raw", "joint_tril", "loc_b",
                                 "log_scale_b"}
    p = predict(runs["fullrank"].run_dir, {"xc": X_NEW}, seed=4)
    y = p.draws["y"].reshape(-1, 4)
    assert p.draws["y"].shape == (1, 1000, 4)
    mean, var = predictive()
    n = y.shape[0]
    assert np.all(np.abs(y.mean(0) - mean) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 5 * var * np.sqrt(2.0 / (n - 1)) + 0.02)


def _start(runs, guide, start_from, **extra):
    return fit(qvr.load(runs["program"]), config={"method": "svi", "steps": 1, "lr": 1e-6,
                                                  "seed": 1, "pointwise": False,
                                                  "guide": guide, **extra},
               start_from=start_from)


def test_from_a_fullrank_run_into_the_same_family_and_into_others(runs):
    fr = runs["fullrank"].params
    again = _start(runs, "fullrank", runs["fullrank"].run_dir)  # continues: as it was
    for k in ("joint_loc", "joint_scale_raw", "joint_tril"):
        assert np.allclose(again.params[k], fr[k], atol=1e-4), k
    # into mean-field: the saved marginals of the joint site
    mf = _start(runs, "meanfield", runs["fullrank"].run_dir)
    assert np.allclose(mf.params["loc_b"], fr["loc_b"], atol=1e-4)
    assert np.allclose(mf.params["log_scale_b"], fr["log_scale_b"], atol=1e-4)
    # into lowrank and flow: their means (and the lowrank's marginal sds)
    lr = _start(runs, "lowrank", runs["fullrank"].run_dir)
    assert np.allclose(lr.params["joint_loc"], fr["joint_loc"], atol=1e-4)
    assert np.allclose(lr.params["log_scale_b"], fr["log_scale_b"], atol=1e-3)
    fl = _start(runs, "flow", runs["fullrank"].run_dir)
    assert np.allclose(fl.params["joint_loc"], fr["joint_loc"], atol=1e-4)


def test_from_a_mean_field_run_into_fullrank(runs):
    mf = runs["meanfield"].params
    fr = _start(runs, "fullrank", runs["meanfield"].run_dir)
    assert np.allclose(fr.params["joint_loc"], mf["loc_b"].reshape(-1), atol=1e-4)
    assert np.allclose(fr.params["log_scale_b"], mf["log_scale_b"], atol=1e-3)


def test_from_nuts_draws_a_fullrank_guide_takes_their_moments(tmp_path, runs):
    program = runs["program"]
    nuts = fit(qvr.load(program), config={"method": "nuts", "num_warmup": 60, "num_samples": 60,
                                          "num_chains": 1, "seed": 0, "pointwise": False},
               run_dir=tmp_path / "nuts", program_path=str(program))
    b = np.asarray(nuts.samples["b"]).reshape(-1)
    fr = _start(runs, "fullrank", tmp_path / "nuts", start_at="draws")
    assert fr.params["joint_loc"][0] == pytest.approx(b.mean(), abs=1e-4)
    assert float(np.exp(fr.params["log_scale_b"]).item()) == pytest.approx(b.std(), rel=1e-3)


def test_a_joint_guide_cannot_predict_new_rows_of_its_row_sites(tmp_path):
    """A row effect `u` (one per row, read from the data's size) is part of the fullrank
    guide's joint vector: new rows of another count are refused in one line."""
    program = write_program(tmp_path / "prog", SIZED)
    data = {"xc": np.array([-1.0, 0.5, 2.0]), "y": np.array([-1.0, 0.4, 2.1])}
    res = fit(qvr.load(program), data=data,
              config={"method": "svi", "steps": 5, "seed": 0, "pointwise": False,
                      "guide": "fullrank"},
              run_dir=tmp_path / "runs" / "fr", program_path=str(program))
    assert res.status == "finished"
    with pytest.raises(PredictError, match="the fullrank guide covers the fitted rows of "
                                           "`u` jointly with the other latents"):
        predict(res.run_dir, {"xc": X_NEW}, seed=0)
    same = predict(res.run_dir, {"xc": np.array([0.0, 1.0, 2.0])}, seed=0)
    assert same.draws["y"].shape == (1, 1000, 3)
