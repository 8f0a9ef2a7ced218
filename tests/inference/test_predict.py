"""Prediction for new data (`qvr.inference.front.predict`, `qvr.runs.Run.predict`): the
posterior predictive of a conjugate Normal-Normal regression with known noise at new
covariates against its closed form (exact posterior draws in a fake record; an SVI fit
of the same model), recorded quantities per draw, thinning, the record, and the errors
(a run without draws, a missing covariate, wrong shapes, fixed sizes)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predict_records import PROGRAM, SIGMA, SIZED, X, X_NEW, Y, posterior, predictive, write_fit, write_program  # noqa: E402,E501

from qvr.inference.front.predict import PredictError, predict  # noqa: E402
from qvr.runs import open_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def fitted(tmp_path):
    program = write_program(tmp_path / "prog")
    return write_fit(tmp_path / "runs" / "fit", program), program


def test_predictive_mean_and_variance_match_the_closed_form(fitted, tmp_path):
    run, _ = fitted
    p = predict(run, {"xc": X_NEW}, seed=1)
    y = p.draws["y"]
    assert y.shape == (2, 2000, 4)
    n = y.shape[0] * y.shape[1]
    mean, var = predictive()
    flat = y.reshape(n, -1)
    # Monte Carlo tolerances: 4 standard errors of a mean and of a normal variance
    assert np.all(np.abs(flat.mean(0) - mean) < 4 * np.sqrt(var / n))
    assert np.all(np.abs(flat.var(0, ddof=1) - var) < 4 * var * np.sqrt(2.0 / (n - 1)))
    # the third new row (x* = 3) is outside the data: its variance is mostly the slope's
    m, v = posterior()
    assert var[2] == pytest.approx(SIGMA ** 2 + 9 * v)


def test_recorded_quantities_are_computed_per_draw_on_the_new_data(fitted):
    run, _ = fitted
    p = predict(run, {"xc": X_NEW}, seed=2)
    b = open_run(run).samples()["b"]  # (2, 2000, 1)
    assert p.recorded["mean_y"].shape == (2, 2000, 4)
    np.testing.assert_allclose(p.recorded["mean_y"], b * X_NEW, rtol=1e-12, atol=1e-12)
    assert p.summary.recorded == ["mean_y"]


def test_run_predict_thins_and_writes_a_predict_record(fitted, tmp_path):
    run, _ = fitted
    out = tmp_path / "runs" / "pred"
    p = open_run(run).predict({"xc": [0.5, 1.5]}, draws=100, seed=3, run_dir=out)
    assert (p.chains, p.per_chain, p.stride, p.rows) == (2, 50, 40, 2)
    assert p.draws["y"].shape == (2, 50, 2) and p.recorded["mean_y"].shape == (2, 50, 2)
    rec = open_run(out)
    assert (rec.method, rec.status) == ("predict", "finished")
    assert rec.meta["predicted_from"]["path"] == str(Path(run).resolve())
    assert rec.meta["predicted_from"]["method"] == "nuts"
    assert rec.meta["seed"] == 3 and rec.program["path"] == open_run(run).program["path"]
    samples = rec.samples()
    np.testing.assert_array_equal(samples["y"], p.draws["y"])
    np.testing.assert_array_equal(samples["recorded.mean_y"], p.recorded["mean_y"])
    summary = rec.summary
    assert summary["predicted"] == ["y"] and summary["recorded"] == ["mean_y"]
    row = summary["parameters"]["y[1]"]
    assert row["mean"] == pytest.approx(float(p.draws["y"][..., 1].mean()))
    assert row["sd"] == pytest.approx(float(p.draws["y"][..., 1].std(ddof=1)), rel=1e-6)
    assert set(row) == {"mean", "sd", "q5", "q50", "q95"}
    assert row["q5"] < row["q50"] < row["q95"]


def test_the_same_seed_gives_the_same_draws(fitted):
    run, _ = fitted
    a = predict(run, {"xc": X_NEW}, seed=7, draws=10).draws["y"]
    b = predict(run, {"xc": X_NEW}, seed=7, draws=10).draws["y"]
    np.testing.assert_array_equal(a, b)


def test_a_data_file_with_unused_and_observed_keys_gives_notes(fitted, tmp_path):
    run, _ = fitted
    f = tmp_path / "new.json"
    f.write_text('{"xc": [1.0, 2.0, 3.0], "y": [0, 0, 0], "N": 3}')
    p = predict(run, f, seed=1, draws=4)
    assert p.draws["y"].shape == (2, 2, 3)
    assert p.notes == [f"{f}: the observed `y` is not used: the prediction draws it",
                       f"{f}: `N` is not read by the program: left out"]


def test_a_missing_covariate_is_named_with_the_file(fitted, tmp_path):
    run, _ = fitted
    f = tmp_path / "new.json"
    f.write_text('{"x_c": [1.0, 2.0]}')
    with pytest.raises(PredictError) as err:
        predict(run, f, seed=1)
    assert str(err.value) == f"{f}: the program reads `xc` (host data), which the data does " \
                             f"not give"


def test_a_wrong_shape_says_the_data_does_not_fit(fitted, tmp_path):
    run, _ = fitted
    with pytest.raises(PredictError) as err:
        predict(run, {"xc": np.ones((3, 2))}, seed=1, data_path="new.json")
    text = str(err.value)
    assert text.startswith("new.json: the data does not fit the program: ")
    assert "host data `xc` does not have the shape its `data` step declares" in text
    assert "got shape (3, 2)" in text


def test_a_run_without_draws_is_refused(tmp_path):
    program = write_program(tmp_path / "prog")
    run = write_fit(tmp_path / "runs" / "cancelled", program, samples={},
                    status="cancelled")
    with pytest.raises(PredictError) as err:
        predict(run, {"xc": X_NEW})
    assert str(err.value) == (f"{run}: the run has no draws to predict from: it recorded "
                              f"none (status cancelled, stopped before its first draw)")
    smc = write_fit(tmp_path / "runs" / "smc", program, method="smc")
    with pytest.raises(PredictError, match="a --method smc run has no posterior draws"):
        predict(smc, {"xc": X_NEW})


def test_fixed_sizes_are_an_error_that_says_so(tmp_path):
    """Eight schools with its size written in the program (`School : FinSet 8`; the
    example reads `J` from the data): `theta_trans : School` is a plate of 8 elements,
    bound from the fit's draws; three new schools cannot use it."""
    from qvr.runs import RunWriter
    from qvr.events import FitFinished, FitStarted
    import hashlib
    source = (ROOT / "examples" / "eight_schools.qvr").read_text(encoding="utf-8")
    assert "object School : FinSet J\n" in source
    prog = tmp_path / "eight_schools.qvr"
    prog.write_text(source.replace("object School : FinSet J\n", "object School : FinSet 8\n"),
                    encoding="utf-8")
    folder = tmp_path / "es"
    rng = np.random.default_rng(0)
    with RunWriter(folder, {"program": {"path": str(prog), "export": None, "sha256":
                                        hashlib.sha256(prog.read_bytes()).hexdigest()},
                            "method": "nuts", "config": {}, "data": None}) as w:
        w.write(FitStarted(method="nuts", total_steps=5, num_chains=1))
        w.save_arrays("samples.npz", {"mu": rng.normal(size=(1, 5, 1)),
                                      "tau": np.abs(rng.normal(size=(1, 5, 1))),
                                      "theta_trans": rng.normal(size=(1, 5, 8))})
        w.save_arrays("observed.npz", {"y": np.zeros(8)})
        w.write(FitFinished())
    p = predict(folder, {"sigma": np.full(8, 10.0)}, seed=0)  # the same 8 schools: fine
    assert p.draws["y"].shape == (1, 5, 8) and p.recorded["theta"].shape == (1, 5, 8)
    with pytest.raises(PredictError) as err:
        predict(folder, {"sigma": [10.0, 12.0, 9.0]}, seed=0, data_path="three.json")
    assert str(err.value).startswith("three.json: the program's sizes are fixed: it was "
                                     "fitted on 8 rows and cannot run on the 3 rows of the "
                                     "new data (")


def test_an_svi_fit_predicts_from_its_guide(tmp_path):
    """SVI's mean-field Normal guide is exact for this posterior: after 600 Adam steps its
    draws give the closed-form predictive within a few standard errors (1,000 draws)."""
    from qvr.inference import fit
    program = write_program(tmp_path / "prog")
    import qvr
    res = fit(qvr.load(program), config={"method": "svi", "steps": 600, "lr": 0.05,
                                         "seed": 0, "pointwise": False},
              run_dir=tmp_path / "runs" / "svi", program_path=str(program))
    assert res.status == "finished"
    p = predict(res.run_dir, {"xc": X_NEW}, seed=4)
    y = p.draws["y"].reshape(-1, 4)
    assert p.draws["y"].shape == (1, 1000, 4)
    mean, var = predictive()
    n = y.shape[0]
    assert np.all(np.abs(y.mean(0) - mean) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 5 * var * np.sqrt(2.0 / (n - 1)) + 0.02)


@pytest.mark.parametrize("rows", [4, 9])
def test_sizes_read_from_the_data_take_the_new_row_count(tmp_path, rows):
    """`object Row : FinSet N` (fitted on 6 rows): the new data's 4 or 9 rows bind N;
    the row effect `u` (one value per fitted row in the draws) is drawn afresh from its
    prior for the new rows, so the predictive variance gains its variance 1."""
    program = write_program(tmp_path / "prog", SIZED)
    m, v = posterior()
    rng = np.random.default_rng(0)
    b = m + np.sqrt(v) * rng.standard_normal((2, 2000, 1))
    u = 50.0 + rng.standard_normal((2, 2000, 6))  # the fitted rows' effects: not used
    run = write_fit(tmp_path / "runs" / "fit", program, samples={"b": b, "u": u})
    x_new = np.linspace(-2.0, 3.0, rows)
    p = predict(run, {"xc": x_new}, seed=5)
    y = p.draws["y"].reshape(-1, rows)
    assert p.draws["y"].shape == (2, 2000, rows) and p.rows == rows
    assert p.notes == ["the fit's row latents `u` (one value per fitted row) are drawn "
                       "afresh for the new rows"]
    mean, var = m * x_new, SIGMA ** 2 + 1.0 + x_new ** 2 * v
    n = y.shape[0]
    assert np.all(np.abs(y.mean(0) - mean) < 4 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 4 * var * np.sqrt(2.0 / (n - 1)))


def test_a_size_the_new_data_does_not_give_is_named(tmp_path):
    program = write_program(tmp_path / "prog", SIZED)
    run = write_fit(tmp_path / "runs" / "fit", program)
    with pytest.raises(PredictError) as err:
        predict(run, {"N": 3}, seed=0, data_path="new.json")
    assert str(err.value) == "new.json: the program reads `xc` (host data), which the " \
                             "data does not give"
    with pytest.raises(PredictError) as err:
        predict(run, {"N": 3, "xc": [1.0, 2.0]}, seed=0, data_path="new.json")
    assert str(err.value) == ("new.json: the size `N` of `Row` disagrees in the data: the "
                              "data's `N` entry is 3; `xc` (typed by `Row`) has 2 rows")


def test_the_shipped_new_mothers_of_kid_scores(tmp_path):
    """examples/data/kid_scores.new.json against examples/kid_scores.qvr (`Child : FinSet
    N`): 5 rows bind N; with the coefficients fixed and sigma tiny the draws are the
    design times beta (the first row is posteriordb's mom_hs_new = 1, mom_iq_new = 100)."""
    import hashlib
    import json
    from qvr.events import FitFinished, FitStarted
    from qvr.runs import RunWriter
    prog = ROOT / "examples" / "kid_scores.qvr"
    new = ROOT / "examples" / "data" / "kid_scores.new.json"
    beta = np.array([26.0, 6.0, 0.56])
    with RunWriter(tmp_path / "fit", {
            "program": {"path": str(prog), "export": None,
                        "sha256": hashlib.sha256(prog.read_bytes()).hexdigest()},
            "method": "nuts", "config": {"dtype": "float64"}, "data": None}) as w:
        w.write(FitStarted(method="nuts", total_steps=3, num_chains=1))
        w.save_arrays("samples.npz", {"beta": np.tile(beta, (1, 3, 1)),
                                      "sigma": np.full((1, 3, 1), 1e-9)})
        w.write(FitFinished())
    p = predict(tmp_path / "fit", new, seed=0)
    design = np.asarray(json.loads(new.read_text())["design"])
    assert design.shape == (5, 3) and design[0].tolist() == [1.0, 1.0, 100.0]
    assert p.draws["kid_score"].shape == (1, 3, 5)
    np.testing.assert_allclose(p.draws["kid_score"], np.broadcast_to(design @ beta, (1, 3, 5)),
                               atol=1e-6)


def test_a_short_nuts_fit_predicts_its_own_posterior(tmp_path):
    """End to end: NUTS (2 x (150 + 150), seed 0) on the conjugate regression, then
    `Run.predict`: the prediction's mean at each new x is the posterior mean of b times x
    (within 4 MC SEs of the forward noise), its variance SIGMA^2 + x^2 var(b), and the
    fit's b matches the closed-form posterior within 4 MCSEs of its ESS."""
    import qvr
    from qvr.inference import fit
    program = write_program(tmp_path / "prog")
    res = fit(qvr.load(program), config={"method": "nuts", "num_warmup": 150,
                                         "num_samples": 150, "num_chains": 2, "seed": 0,
                                         "pointwise": False},
              run_dir=tmp_path / "runs" / "nuts", program_path=str(program))
    assert res.status == "finished"
    run = open_run(res.run_dir)
    b = run.samples()["b"].reshape(-1)
    m, v = posterior()
    ess = float(run.summary["parameters"]["b"]["ess_bulk"])
    assert abs(b.mean() - m) < 4 * np.sqrt(v / ess)
    p = run.predict({"xc": X_NEW}, seed=0)
    y = p.draws["y"].reshape(-1, 4)
    n = y.shape[0]
    var = SIGMA ** 2 + X_NEW ** 2 * b.var()
    assert np.all(np.abs(y.mean(0) - b.mean() * X_NEW) < 4 * np.sqrt(var / n))
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 4 * var * np.sqrt(2.0 / (n - 1)))


def test_an_svi_fit_with_row_effects_predicts_new_rows(tmp_path):
    """SVI on the `FinSet N` regression with a row effect `u` (6 rows), predicting 3 new
    rows: `u`'s guide (6 x 1) is not used, the new rows draw their own (variance + 1)."""
    import qvr
    from qvr.inference import fit
    program = write_program(tmp_path / "prog", SIZED)
    res = fit(qvr.load(program), config={"method": "svi", "steps": 300, "lr": 0.05,
                                         "seed": 0, "pointwise": False},
              run_dir=tmp_path / "runs" / "svi", program_path=str(program))
    assert res.status == "finished"
    assert open_run(res.run_dir).params()["loc_u"].shape[0] == 6
    p = predict(res.run_dir, {"xc": [0.0, 0.0, 0.0]}, seed=1)
    y = p.draws["y"].reshape(-1, 3)
    n = y.shape[0]
    var = SIGMA ** 2 + 1.0  # x = 0: b does not enter
    assert p.draws["y"].shape == (1, 1000, 3)
    assert np.all(np.abs(y.var(0, ddof=1) - var) < 4 * var * np.sqrt(2.0 / (n - 1)))
    assert np.all(np.abs(y.mean(0)) < 4 * np.sqrt(var / n))


#: the regression observed through a value computed from data (E9.7): `logy = log(w)`
COMPUTED = PROGRAM.replace("FinSet 6", "FinSet N").replace("    data xc : Row\n", "    data xc : Row\n    data w : Row\n").replace(
    "    observe y : Row <- Normal(mu, 0.5)\n    return y\n",
    "    observe logy : Row = log(w) <- Normal(mu, 0.5)\n    return logy\n")


def test_a_computed_observe_is_drawn_from_its_family_not_computed_from_the_new_data(tmp_path):
    import json
    program = write_program(tmp_path / "prog", COMPUTED)
    (program.parent / "data" / "reg.json").write_text(
        json.dumps({"xc": X.tolist(), "w": np.exp(Y).tolist()}))
    run = write_fit(tmp_path / "runs" / "fit", program)
    # the new data's w would give logy = 0 everywhere if logy were computed, not drawn
    p = predict(run, {"xc": X_NEW, "w": np.ones(4)}, seed=4)
    logy = p.draws["logy"]
    n = logy.shape[0] * logy.shape[1]
    mean, var = predictive()
    flat = logy.reshape(n, -1)
    assert np.all(np.abs(flat.mean(0) - mean) < 4 * np.sqrt(var / n))
    assert np.all(np.abs(flat.var(0, ddof=1) - var) < 4 * var * np.sqrt(2.0 / (n - 1)))


def test_a_size_entry_of_the_new_data_binds_the_size_and_is_not_left_out(tmp_path):
    program = write_program(tmp_path / "prog", SIZED)
    run = write_fit(tmp_path / "runs" / "fit", program)
    p = predict(run, {"N": 3, "xc": [0.0, 1.0, 2.0], "extra": [1.0]}, seed=0,
                data_path="new.json")
    assert p.rows == 3 and p.draws["y"].shape[-1] == 3
    assert "new.json: `extra` is not read by the program: left out" in p.notes
    assert not any("`N`" in n for n in p.notes), p.notes
