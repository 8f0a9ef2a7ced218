"""Prediction from a ``--guide laplace`` run (`qvr.inference.front.predict` through
`qvr.inference.vi.guide_choice.rebuild_guide` and `qvr.inference.vi.laplace.rebuild`):
Laplace is exact for the conjugate regressions of `predict_records`, so the predictive
draws match the closed form within Monte Carlo error, also at new rows whose row effects
are drawn afresh."""
import json
import sys
from pathlib import Path

import numpy as np

import qvr
from qvr.inference import fit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_records import SIGMA, SIZED, X, X_NEW, Y, predictive, write_program  # noqa: E402


def test_predict_from_a_laplace_run_matches_the_closed_form(tmp_path):
    """Laplace is exact for the conjugate regression: the predictive at new covariates
    within a few standard errors of the closed form (1,000 draws)."""
    from qvr.inference.front.predict import predict
    program = write_program(tmp_path / "prog")
    res = fit(qvr.load(program), config={"method": "svi", "guide": "laplace", "seed": 0,
                                         "pointwise": False},
              run_dir=tmp_path / "runs" / "lap", program_path=str(program))
    assert res.status == "finished", res.message
    p = predict(res.run_dir, {"xc": X_NEW}, seed=4)
    y = p.draws["y"].reshape(-1, 4)
    mean, var = predictive()
    n = y.shape[0]
    assert np.all(np.abs(y.mean(0) - mean) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 5 * var * np.sqrt(2.0 / (n - 1)))


def test_predict_at_new_rows_redraws_the_row_latents(tmp_path):
    """The sized regression with a row effect u ~ N(0, 1): y_i ~ N(b x_i, 1 + SIGMA^2)
    marginally, so b's exact posterior has variance 1 / (1/4 + sum x^2 / (1 + SIGMA^2));
    at 4 new rows u is drawn afresh and the predictive variance gains its 1."""
    from qvr.inference.front.predict import predict
    program = write_program(tmp_path / "prog", SIZED)
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"xc": X.tolist(), "y": Y.tolist()}))
    res = fit(qvr.load(program), config={"method": "svi", "guide": "laplace", "seed": 0,
                                         "pointwise": False, "data": str(data)},
              run_dir=tmp_path / "runs" / "lap", program_path=str(program))
    assert res.status == "finished", res.message
    v = 1 / (1 / 4 + (X ** 2).sum() / (1 + SIGMA ** 2))
    m = v * (X * Y).sum() / (1 + SIGMA ** 2)
    p = predict(res.run_dir, {"xc": X_NEW}, seed=5)
    y = p.draws["y"].reshape(-1, 4)
    mean, var = m * X_NEW, SIGMA ** 2 + 1.0 + X_NEW ** 2 * v
    n = y.shape[0]
    assert np.all(np.abs(y.mean(0) - mean) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 5 * var * np.sqrt(2.0 / (n - 1)))
