"""Programs as users write them (issue 22): a covariate named `x`, a plate longer than the
rows, an exported `scan`.  (Parametric exports: `test_template_export.py`.)"""
import json
import math

import numpy as np
import pytest
import torch

from qvr import loads
from qvr.inference import FitConfig, fit
from qvr.inference.data.fit_data import INPUT_KEY, DataError, split_data, synthesize
from qvr.inference.front.fitting import model_of

from helpers import check_moments

# --------------------------------------------------------------- 1. a covariate named `x`

REG = """
object Resp : FinSet 50
program reg : Resp -> Resp
    sample b <- Normal(0.0, 1.0)
    sample s <- HalfNormal(1.0)
    let mu = b * x
    observe y : Resp <- Normal(mu, s)
    return b
export reg
"""

#: the same regression with a known noise scale: b's posterior is Normal in closed form
REG_KNOWN = """
object Resp : FinSet 50
program reg : Resp -> Resp
    sample b <- Normal(0.0, 1.0)
    let mu = b * x
    observe y : Resp <- Normal(mu, 0.3)
    return b
export reg
"""

#: reads no host `x`: the key `x` stays the program input (old files keep their meaning)
INPUT_PROGRAM = """
object Obs : Real 2
object Out : Real 1
morphism f : Obs -> Out [role=kernel, scale=0.1] ~ Normal
export f
"""


def _reg_data(n=50, seed=0):
    g = np.random.default_rng(seed)
    x = g.normal(size=n)
    return x, 0.7 * x + 0.3 * g.normal(size=n)


def test_a_host_covariate_named_x_reaches_the_program():
    x, y = _reg_data()
    model = loads(REG_KNOWN).morphism
    inp, obs = split_data(model, {"x": x.tolist(), "y": y.tolist()})
    assert set(obs) == {"x", "y"} and tuple(inp.shape) == (50, 1)
    assert torch.allclose(obs["x"], torch.tensor(x, dtype=torch.float32))


def test_nuts_with_a_covariate_x_matches_the_closed_form():
    x, y = _reg_data()
    prec = 1.0 + float((x * x).sum()) / 0.09
    mean = float((x * y).sum()) / 0.09 / prec
    res = fit(loads(REG_KNOWN), {"x": x.tolist(), "y": y.tolist()},
              FitConfig(method="nuts", num_warmup=200, num_samples=300, num_chains=2, seed=1))
    assert res.status == "finished"
    check_moments(res.samples, {"b": ([mean], [prec ** -0.5])})


def test_the_input_key_is_kept_for_programs_that_read_no_host_x():
    model = model_of(loads(INPUT_PROGRAM))
    inp, obs = split_data(model, {"x": [[1.0, 2.0], [3.0, 4.0]], "y": [[0.5], [0.1]]})
    assert inp.tolist() == [[1.0, 2.0], [3.0, 4.0]] and set(obs) == {"y"}
    inp, obs = split_data(model, {INPUT_KEY: [[1.0, 2.0]], "y": [[0.5]]})
    assert inp.tolist() == [[1.0, 2.0]] and set(obs) == {"y"}
    with pytest.raises(DataError) as e:
        split_data(model, {INPUT_KEY: [[1.0, 2.0]], "x": [[1.0, 2.0]], "y": [[0.5]]})
    assert str(e.value) == ("the data gives the program input twice, as `@input` and as `x` "
                            "(the program reads no host data `x`): keep one of them")


def test_input_given_as_at_input_beside_a_host_x():
    model = loads(REG).morphism
    inp, obs = split_data(model, {INPUT_KEY: [[0.0]] * 3, "x": [1.0, 2.0, 3.0],
                                  "y": [1.0, 2.0, 3.0]})
    assert tuple(inp.shape) == (3, 1) and obs["x"].tolist() == [1.0, 2.0, 3.0]


def test_synthetic_rows_draw_the_covariate_x_as_host_data():
    model = loads(REG).morphism
    torch.manual_seed(0)
    data, truth = synthesize(model, 12)
    assert set(data) == {INPUT_KEY, "x", "y"} and set(truth) == {"b", "s"}
    assert tuple(data["x"].shape) == (12,) and tuple(data["y"].shape) == (12,)
    inp, obs = split_data(model, data)
    assert torch.equal(obs["x"], data["x"])


def test_qvr_run_with_a_data_file_holding_x(tmp_path, capsys):
    from qvr.cli import main
    from qvr.runs import open_run
    x, y = _reg_data()
    (tmp_path / "reg.qvr").write_text(REG)
    (tmp_path / "reg.json").write_text(json.dumps({"x": x.tolist(), "y": y.tolist()}))
    rc = main(["run", str(tmp_path / "reg.qvr"), "--method", "nuts", "--data",
               str(tmp_path / "reg.json"), "--warmup", "150", "--samples", "150",
               "--chains", "2", "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    run = open_run(next((tmp_path / "runs").iterdir()))
    b = np.asarray(run.samples()["b"], dtype=float)
    ols = float((x * y).sum() / (x * x).sum())
    # the prior N(0, 1) moves the slope by ~ sd^2 * ols ~ 0.002: within 4 posterior sds
    assert abs(b.mean() - ols) < 4 * b.std(), (b.mean(), ols, b.std())
    assert abs(b.std() - 0.3 / math.sqrt((x * x).sum())) < 0.5 * b.std()


# --------------------------------------------------------------- 3. a plate longer than the rows

VOL = """
object Step : FinSet 200
program vol : Step -> Step
    sample sigma_h <- HalfNormal(1.0)
    let m = h_mean * 1.0
    sample h : Step <- Normal(m, sigma_h)
    let v = exp(h)
    observe r : Step <- Normal(0.0, v)
    return h
export vol
"""


def test_synthetic_rows_follow_a_plate_whose_arguments_read_host_data():
    torch.manual_seed(0)
    res = fit(loads(VOL), None, FitConfig(method="svi", synthetic=20, steps=5))
    assert res.status == "finished"
    assert res.samples["h"].shape[-1] == 200


def test_the_record_keeps_the_rows_drawn_and_the_rows_asked(tmp_path):
    from qvr.events import FitWarning
    from qvr.runs import open_run
    events = []
    fit(loads(VOL), None, FitConfig(method="svi", synthetic=20, steps=3),
        on_event=events.append, run_dir=tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["data"] == {"kind": "synthetic", "rows": 200, "requested": 20}
    assert open_run(tmp_path / "run").status == "finished"
    warned = [e.message for e in events if isinstance(e, FitWarning)]
    # three SVI steps leave the guide far from the posterior: its k-hat warns too
    assert [m for m in warned if not m.startswith("Pareto k-hat ")] == [
        "drew 200 synthetic rows instead of 20: the plate `Step` of `h` reads row data, so "
        "it needs one row per element of `Step`"]


def test_nuts_fits_the_plate_program_on_synthetic_rows():
    res = fit(loads(VOL), None, FitConfig(method="nuts", synthetic=20, num_warmup=20,
                                          num_samples=10, num_chains=1, seed=0))
    assert res.status == "finished" and res.samples["h"].shape == (1, 10, 200)


def test_real_data_with_too_few_rows_for_the_plate_is_a_data_error():
    g = torch.Generator().manual_seed(0)
    data = {"h_mean": torch.zeros(20), "r": torch.randn(200, generator=g)}
    with pytest.raises(DataError) as e:
        fit(loads(VOL), data, FitConfig(method="svi", steps=2))
    assert str(e.value) == (
        "the data does not fit the program: program `vol`, step `h`: the plate `Step` has "
        "200 elements, but the arguments of `h` have 20 rows: host data read by a plate "
        "site needs one row per element of `Step` (or one value for all)")


def test_a_plate_with_global_arguments_still_takes_any_row_count():
    src = """
object Site : FinSet 12
object Plot : FinSet 240
program yields : Plot -> Plot
    sample base <- Normal(3.0, 1.0)
    sample effect : Site <- Normal(0.0, 0.5)
    let expected = base + effect[site_of]
    observe harvest : Plot <- Normal(expected, 0.4)
    return base
export yields
"""
    torch.manual_seed(0)
    data, _ = synthesize(model_of(loads(src)), 20)
    assert tuple(data["harvest"].shape) == (20,) and tuple(data["site_of"].shape) == (20,)


# --------------------------------------------------------------- 4. an exported scan

SCAN = """
object Obs : Real 2
object State : Real 3
morphism cell : Obs * State -> State [role=kernel, scale=0.1] ~ Normal
let filt = scan(cell)
export filt
"""


def test_an_exported_scan_is_scored_on_its_states():
    from qvr.inference.programs.morphism_fit import SYNTHETIC_STEPS
    torch.manual_seed(0)
    model = model_of(loads(SCAN))
    scan = model.wrapped_morphism
    data, _ = synthesize(model, 4)
    assert tuple(data["x"].shape) == (4, SYNTHETIC_STEPS, 2)
    assert tuple(data["y"].shape) == (4, SYNTHETIC_STEPS, 3)
    x, obs = split_data(model, data)
    lj = model.log_joint(x, obs)
    # the spec's log_joint of the scan over every state, summed over the rows
    assert torch.allclose(lj.sum(), scan.log_joint(x, obs["y"]).sum())
    (g,) = torch.autograd.grad(lj.sum(), [next(scan.parameters())])
    assert float(g.abs().sum()) > 0  # the cell's parameters are fitted


def test_svi_fits_an_exported_scan_and_lowers_its_loss():
    res = fit(loads(SCAN), None, FitConfig(method="svi", synthetic=8, steps=60, lr=0.02,
                                           seed=0))
    assert res.status == "finished"
    first, last = np.mean(res.losses[:5]), np.mean(res.losses[-5:])
    assert last < first


def test_nuts_on_an_exported_scan_says_there_is_nothing_to_sample():
    res = fit(loads(SCAN), None, FitConfig(method="nuts", synthetic=4, seed=0))
    assert res.status == "finished"
    assert res.stats["note"] == "an exported morphism: no latent site, nothing to sample"
    assert math.isfinite(res.stats["log_marginal_likelihood"])


def test_only_final_states_of_long_sequences_are_refused():
    torch.manual_seed(0)
    data = {"x": torch.randn(4, 5, 2), "y": torch.randn(4, 3)}
    with pytest.raises(DataError) as e:
        fit(loads(SCAN), data, FitConfig(method="svi", steps=2))
    assert "an exported scan is fitted on every state of its sequences" in str(e.value)
    assert "expected shape (4, 5, 3), got shape (4, 3)" in str(e.value)


def test_one_step_scan_takes_its_final_state():
    torch.manual_seed(0)
    data = {"x": torch.randn(6, 2), "y": torch.randn(6, 3)}
    res = fit(loads(SCAN), data, FitConfig(method="svi", steps=3))
    assert res.status == "finished"
