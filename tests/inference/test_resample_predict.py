"""Prediction from a ``--resample psis`` run (`qvr.inference.front.predict`,
`qvr.inference.criticism.khat.was_resampled`): a run whose draws were resampled
predicts from those saved draws (``samples.npz``), as an MCMC run does; a run that was
not resampled predicts from fresh draws of its fitted guide.

The model: a regression with an intercept and a slope, ``a, b ~ Normal(0, 2)``, ``y_i ~
Normal(a + b x_i, 0.5)`` at six uncentred covariates, whose exact posterior has the
correlation -0.60 and sds 0.254 (a), 0.192 (b).  A mean-field guide misses the
correlation: its sds are about the conditional ones, 0.203 and 0.154.  The recorded
``mean_y = a + b x`` at the new covariates ``x = 0`` and ``x = 1`` gives back each
draw's ``a`` (exactly) and ``b`` (up to float32 rounding), so a prediction shows which
draws it bound.

Monte Carlo tolerances (4 standard errors).  The resampled run's 1000 draws are worth
``n = 1 / (1/ESS + 1/1000)`` independent posterior draws (ESS recorded): the standard
error of an sd is ``sd / sqrt(2 n)``, of a correlation ``(1 - rho²) / sqrt(n)``; a guide's
1000 draws are independent (n = 1000).
"""
import contextlib
import io
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_records import SIZED, X, X_NEW, Y, write_program  # noqa: E402

import qvr  # noqa: E402
from qvr.cli import main  # noqa: E402
from qvr.inference import fit  # noqa: E402
from qvr.inference.front.predict import PredictError, predict  # noqa: E402
from qvr.runs import open_run  # noqa: E402

TWO = """\
object Row : FinSet 6

program reg : Row -> Row
    data xc : Row
    sample a <- Normal(0.0, 2.0)
    sample b <- Normal(0.0, 2.0)
    let mu = a + b * xc
    record mean_y = mu
    observe y : Row <- Normal(mu, 0.5)
    return y

export reg
"""
XC = X + 0.3  # uncentred: the posterior correlation of a and b is -0.60


def exact() -> tuple:
    """``(sd_a, sd_b, rho)`` of the exact posterior."""
    design = np.stack([np.ones_like(XC), XC], 1)
    cov = np.linalg.inv(np.eye(2) / 4.0 + design.T @ design / 0.25)
    sd = np.sqrt(np.diag(cov))
    return sd[0], sd[1], cov[0, 1] / (sd[0] * sd[1])


def _main(argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A mean-field SVI fit of the regression with ``--resample psis`` (resampled: k-hat
    0.63 at seed 0) and one without, same seed and steps."""
    tmp = tmp_path_factory.mktemp("resample_predict")
    program = write_program(tmp / "prog", TWO)
    (program.parent / "data" / "reg.json").write_text(
        json.dumps({"xc": XC.tolist(), "y": Y.tolist()}))
    out = {"tmp": tmp}
    for resample in ("psis", "none"):
        res = fit(qvr.load(program), config={"method": "svi", "steps": 1500, "lr": 0.05,
                                             "seed": 0, "pointwise": False,
                                             "resample": resample},
                  run_dir=tmp / "runs" / resample, program_path=str(program))
        assert res.status == "finished", res.message
        out[resample] = Path(res.run_dir)
    st = open_run(out["psis"]).summary["stats"]
    assert st["resampled"] is True and st["khat"] < 0.7, st
    (tmp / "new.json").write_text(json.dumps({"xc": X_NEW.tolist()}))
    return out


def _ab(mean_y: np.ndarray) -> tuple:
    """Each draw's ``(a, b)`` from the recorded mean at ``x = 0, 1`` (X_NEW's first two)."""
    assert X_NEW[0] == 0.0 and X_NEW[1] == 1.0
    return mean_y[..., 0], mean_y[..., 1] - mean_y[..., 0]


def test_a_resampled_run_predicts_from_its_saved_draws(runs):
    run = open_run(runs["psis"])
    saved = run.samples()
    a_saved, b_saved = (saved[s].reshape(1, -1) for s in "ab")
    p = run.predict({"xc": X_NEW}, seed=3)  # `Run.predict`, the Python API
    assert p.draws_from == "samples" and p.notes == []
    assert (p.chains, p.per_chain, p.stride) == (1, 1000, 1)
    assert p.draws["y"].shape == (1, 1000, 4)
    a, b = _ab(p.recorded["mean_y"])
    np.testing.assert_array_equal(a, a_saved)  # the saved draws, bound in their order
    np.testing.assert_allclose(b, b_saved, atol=1e-5)
    np.testing.assert_allclose(p.recorded["mean_y"], a_saved[..., None]
                               + b_saved[..., None] * X_NEW, atol=1e-5)
    # the prediction agrees with the run's own summary (made of the same draws)
    row = run.summary["parameters"]["a"]
    assert float(a.mean()) == pytest.approx(row["mean"], abs=1e-6)
    assert float(a.std(ddof=1)) == pytest.approx(row["sd"], rel=1e-4)
    # and carries the correlation the mean-field guide misses
    sd_a, sd_b, rho = exact()
    assert rho == pytest.approx(-0.599, abs=1e-3)
    n = 1.0 / (1.0 / run.summary["stats"]["resample_ess"] + 1.0 / 1000)
    corr = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    assert abs(corr - rho) < 4 * (1 - rho ** 2) / math.sqrt(n), corr
    assert abs(a.std() - sd_a) < 4 * sd_a / math.sqrt(2 * n), a.std()


def test_thinning_takes_every_kth_saved_draw(runs):
    saved = open_run(runs["psis"]).samples()["a"].reshape(-1)
    p = qvr.predict(runs["psis"], {"xc": X_NEW}, draws=100, seed=4)
    assert (p.per_chain, p.stride) == (100, 10)
    np.testing.assert_array_equal(p.recorded["mean_y"][0, :, 0], saved[::10])


def test_a_run_not_resampled_predicts_from_its_guide(runs):
    run = open_run(runs["none"])
    assert "resampled" not in run.summary["stats"]
    assert not (run.path / "samples.npz").exists()
    p = predict(run, {"xc": X_NEW}, seed=3)
    assert p.draws_from == "guide"
    a, b = _ab(p.recorded["mean_y"])
    assert a.shape == (1, 1000)
    # mean-field draws: no correlation, a's sd the guide's, below the posterior's 0.254
    corr = float(np.corrcoef(a.ravel(), b.ravel())[0, 1])
    assert abs(corr) < 4 / math.sqrt(1000), corr
    guide_sd = float(np.exp(run.params()["log_scale_a"]).reshape(-1)[0])
    assert abs(a.std() - guide_sd) < 4 * guide_sd / math.sqrt(2 * 1000)
    assert a.std() < 0.23 < exact()[0]


def test_resampled_false_predicts_from_the_guide_even_with_draws_saved(runs, tmp_path):
    """A record whose stats say ``resampled: false`` (k-hat at or above 0.7) is read from
    its guide: here the resampled run's record with the flag turned off, its
    ``samples.npz`` still there and not used."""
    folder = tmp_path / "off"
    shutil.copytree(runs["psis"], folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary["stats"]["resampled"] = False
    (folder / "summary.json").write_text(json.dumps(summary))
    saved = open_run(folder).samples()["a"].reshape(1, -1)
    p = predict(folder, {"xc": X_NEW}, seed=3)
    assert p.draws_from == "guide"
    a, b = _ab(p.recorded["mean_y"])
    assert not np.isin(a, saved).any()  # fresh guide draws, none of the saved ones
    assert abs(float(np.corrcoef(a.ravel(), b.ravel())[0, 1])) < 4 / math.sqrt(1000)


def test_a_resampled_run_without_its_draws_is_refused(runs, tmp_path):
    folder = tmp_path / "lost"
    shutil.copytree(runs["psis"], folder)
    (folder / "samples.npz").unlink()
    with pytest.raises(PredictError) as err:
        predict(folder, {"xc": X_NEW}, seed=0)
    assert str(err.value) == (f"{folder}: the run has no draws to predict from: its draws "
                              f"were resampled by --resample psis, and its samples.npz, "
                              f"which holds them, is missing or empty (they cannot be drawn "
                              f"again)")


def test_qvr_predict_on_a_resampled_run(runs):
    out_dir = runs["tmp"] / "pred-psis"
    rc, out, err = _main(["predict", str(runs["psis"]), "--data",
                          str(runs["tmp"] / "new.json"), "--seed", "5",
                          "--run-dir", str(out_dir)])
    assert rc == 0, err
    assert "note:" not in err
    assert out.splitlines()[1].startswith("predict: y, mean_y at 4 new rows, 1 chains x "
                                          "1000 draws of ")
    rec = open_run(out_dir)
    assert (rec.method, rec.status) == ("predict", "finished")
    assert rec.summary["stats"]["draws_from"] == "samples"
    saved = open_run(runs["psis"]).samples()
    got = rec.samples()["recorded.mean_y"]
    np.testing.assert_array_equal(got[..., 0], saved["a"].reshape(1, -1))
    np.testing.assert_allclose(got[..., 2], (saved["a"] + 3.0 * saved["b"]).reshape(1, -1),
                               atol=1e-5)
    # the table's mean of mean_y[0] is the run's posterior mean of a
    assert rec.summary["parameters"]["mean_y[0]"]["mean"] == pytest.approx(
        open_run(runs["psis"]).summary["parameters"]["a"]["mean"], abs=1e-6)


def test_qvr_predict_on_a_run_not_resampled(runs):
    out_dir = runs["tmp"] / "pred-none"
    rc, out, err = _main(["predict", str(runs["none"]), "--data",
                          str(runs["tmp"] / "new.json"), "--seed", "5",
                          "--run-dir", str(out_dir)])
    assert rc == 0, err
    rec = open_run(out_dir)
    assert rec.summary["stats"]["draws_from"] == "guide"
    a = rec.samples()["recorded.mean_y"][..., 0].ravel()
    guide_sd = float(np.exp(open_run(runs["none"]).params()["log_scale_a"]).reshape(-1)[0])
    assert abs(a.std() - guide_sd) < 4 * guide_sd / math.sqrt(2 * 1000)


def test_a_resampled_fullrank_run_predicts_new_rows(tmp_path):
    """The `FinSet N` regression with a row effect `u`: a fullrank guide covers `u` jointly
    with `b` and cannot draw it for new rows (refused from the guide); resampled, its
    saved `b` is bound and `u` drawn afresh for the 3 new rows, said in one note."""
    program = write_program(tmp_path / "prog", SIZED)
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"xc": X.tolist(), "y": Y.tolist()}))
    res = fit(qvr.load(program), config={"method": "svi", "guide": "fullrank", "steps": 800,
                                         "lr": 0.05, "seed": 0, "pointwise": False,
                                         "resample": "psis", "data": str(data)},
              run_dir=tmp_path / "runs" / "fr", program_path=str(program))
    assert res.status == "finished", res.message
    assert res.stats["resampled"] is True, res.stats
    saved = open_run(res.run_dir).samples()
    assert saved["u"].shape == (1, 1000, 6)
    x_new = [0.0, 1.0e4, 2.0]
    p = predict(res.run_dir, {"xc": x_new}, seed=6)
    assert p.draws_from == "samples" and p.rows == 3
    assert p.notes == ["the fit's row latents `u` (one value per fitted row) are drawn "
                       "afresh for the new rows"]
    mean_y = p.recorded["mean_y"]
    assert mean_y.shape == (1, 1000, 3)
    # x = 1e4: mean_y / 1e4 = b + u / 1e4, the saved b within 6e-4 (|u| < 6)
    np.testing.assert_allclose(mean_y[..., 1] / 1.0e4, saved["b"].reshape(1, -1),
                               atol=6e-4, rtol=0)
    # x = 0: the new row's own effect u, drawn afresh from its prior N(0, 1)
    u_new = mean_y[..., 0].ravel()
    assert abs(u_new.std() - 1.0) < 4 / math.sqrt(2 * 1000), u_new.std()
    assert abs(u_new.mean()) < 4 / math.sqrt(1000)
    # the same record read from its guide (flag off) is refused, as before
    folder = tmp_path / "off"
    shutil.copytree(res.run_dir, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary["stats"]["resampled"] = False
    (folder / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(PredictError, match="the fullrank guide covers the fitted rows of `u`"):
        predict(folder, {"xc": x_new}, seed=6)
