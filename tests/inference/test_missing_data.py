"""Fits with partially observed data (design E5): a program whose observed vector has 30%
missing entries is fitted as the same program on the observed rows only (SVI: the same
losses on a fixed seed; NUTS: the same log densities and gradients at fixed points), data
files with `null`, and the data checks (incomplete inputs and host data are errors)."""
import json
import math

import pytest
import torch

from qvr import loads
from qvr.inference import FitConfig, fit
from qvr.inference.data.fit_data import DataError, check_data, split_data
from qvr.inference.mcmc.potential import make_target

NAN = math.nan

ROWS = """object One : FinSet 1
program reg : One -> One
    sample mu <- Normal(1.0, 2.0)
    sample s <- HalfNormal(2.0)
    observe y <- Normal(mu, s)
    return mu
export reg
"""


def plate(n):
    return f"""object Obs : FinSet {n}
program pl : Obs -> Obs
    sample mu <- Normal(1.0, 2.0)
    observe y : Obs <- Normal(mu, 1.5)
    return mu
export pl
"""


def partial_data(n=30, frac=0.3, seed=0):
    """`(y with NaN, y on the observed rows)`: `round(frac * n)` rows missing."""
    g = torch.Generator().manual_seed(seed)
    y = 1.7 + 0.8 * torch.randn(n, generator=g)
    missing = torch.randperm(n, generator=g)[:round(frac * n)]
    y_nan = y.clone()
    y_nan[missing] = NAN
    return y_nan, y_nan[~torch.isnan(y_nan)]


def test_svi_losses_equal_the_fit_on_the_observed_rows():
    y_nan, y_obs = partial_data()
    assert int(torch.isnan(y_nan).sum()) == 9
    cfg = FitConfig(method="svi", steps=60, lr=0.05, elbo_particles=4, seed=3,
                    progress_interval=0.0)
    full = fit(loads(ROWS), {"y": y_nan}, cfg)
    sub = fit(loads(ROWS), {"y": y_obs}, cfg)
    assert full.status == "finished" and sub.status == "finished"
    assert all(math.isfinite(v) for v in full.losses)
    assert full.losses == pytest.approx(sub.losses, rel=1e-5, abs=1e-4)
    for name in ("loc_mu", "loc_s"):
        assert full.params[name] == pytest.approx(sub.params[name], rel=1e-4, abs=1e-5)


def _points(dim, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, dim, generator=g)


def test_nuts_log_densities_equal_at_fixed_points():
    y_nan, y_obs = partial_data()
    model = loads(ROWS).morphism
    targets = []
    for y in (y_nan, y_obs):
        x, obs = split_data(model, {"y": y})
        check_data(model, x, obs)
        targets.append(make_target(model, x, obs))
    full, sub = targets
    assert full.dim == sub.dim == 2
    z = _points(full.dim)
    v_full, g_full = full.log_density_and_grad(z)
    v_sub, g_sub = sub.log_density_and_grad(z)
    assert torch.isfinite(v_full).all() and torch.isfinite(g_full).all()
    assert torch.allclose(v_full, v_sub, rtol=1e-5, atol=1e-4)
    assert torch.allclose(g_full, g_sub, rtol=1e-5, atol=1e-4)
    # the density with missing data still compiles (the mask is a constant of the graph)
    assert not full.compile_notes, full.compile_notes


def test_plate_site_with_missing_entries_is_the_smaller_plate():
    y_nan, y_obs = partial_data(n=20)
    a, b = loads(plate(20)).morphism, loads(plate(14)).morphism
    ta = make_target(a, torch.zeros(20, 1), {"y": y_nan})
    tb = make_target(b, torch.zeros(14, 1), {"y": y_obs})
    z = _points(1)
    va, ga = ta.log_density_and_grad(z)
    vb, gb = tb.log_density_and_grad(z)
    assert torch.allclose(va, vb, rtol=1e-5, atol=1e-4)
    assert torch.allclose(ga, gb, rtol=1e-5, atol=1e-4)


def test_nuts_fit_with_missing_entries_runs():
    y_nan, _ = partial_data()
    res = fit(loads(ROWS), {"y": y_nan},
              FitConfig(method="nuts", num_warmup=30, num_samples=30, num_chains=2, seed=0,
                        progress_interval=0.0))
    assert res.status == "finished"
    mu = res.samples["mu"]
    assert mu.shape[:2] == (2, 30) and bool((abs(mu.mean() - 1.7) < 1.0))


def test_json_null_is_a_missing_entry(tmp_path):
    y_nan, y_obs = partial_data()
    path = tmp_path / "reg.json"
    path.write_text(json.dumps({"y": [None if math.isnan(v) else v for v in y_nan.tolist()]}))
    cfg = dict(method="svi", steps=20, lr=0.05, seed=3, progress_interval=0.0)
    from_file = fit(loads(ROWS), None, FitConfig(data=str(path), **cfg))
    sub = fit(loads(ROWS), {"y": y_obs}, FitConfig(**cfg))
    assert from_file.status == "finished"
    assert from_file.losses == pytest.approx(sub.losses, rel=1e-5, abs=1e-4)


CLASSES = """object Obs : FinSet 12
object K : FinSet 3
morphism pick : Obs -> K [role=kernel]
program cls : Obs -> K
    sample t <- Normal(0.0, 1.0)
    observe k <- pick
    observe y <- Normal(t, 1.0)
    return k
export cls
"""


def test_index_sites_take_minus_one_or_null():
    model = loads(CLASSES).morphism
    x = torch.arange(12)
    k = torch.tensor([0, 1, -1, 2, 0, 1, 2, -1, 0, 0, 1, 2])
    y = torch.randn(12)
    check_data(model, x, {"k": k, "y": y})
    ex = model.execute(x, {"k": k, "y": y, "t": torch.tensor(0.1)}, score=True)
    c = ex.sites["k"].contribution
    assert c[2].item() == 0.0 and c[7].item() == 0.0 and (c[k >= 0] < 0).all()
    # the same as floats with NaN (a JSON list of integers with null)
    kf = k.float()
    kf[k < 0] = NAN
    ex2 = model.execute(x, {"k": kf, "y": y, "t": torch.tensor(0.1)}, score=True)
    assert torch.equal(ex2.sites["k"].contribution, c)


READER = """object One : FinSet 1
program chain2 : One -> One
    sample mu <- Normal(0.0, 1.0)
    observe a <- Normal(mu, 1.0)
    observe b <- Normal(a, 1.0)
    return mu
export chain2
"""

HOST = """object One : FinSet 1
program h : One -> One
    sample mu <- Normal(0.0, 1.0)
    let m = mu + w
    observe y <- Normal(m, 1.0)
    return mu
export h
"""


def test_incomplete_inputs_and_host_data_are_errors():
    model = loads(ROWS).morphism
    x = torch.zeros(5, 1)
    x[3, 0] = NAN
    with pytest.raises(DataError) as info:
        check_data(model, x, {"y": torch.zeros(5)})
    assert str(info.value) == ("the program input has missing entries (NaN) at row 3: "
                               "inputs must be complete")
    hm = loads(HOST).morphism
    w = torch.tensor([0.0, 1.0, NAN, 2.0])
    with pytest.raises(DataError) as info:
        check_data(hm, torch.zeros(4, 1), {"y": torch.zeros(4), "w": w})
    assert str(info.value) == ("host data `w` has missing entries (NaN) at row 2: inputs must "
                               "be complete")


def test_missing_entries_only_in_observe_values_nothing_reads():
    model = loads(ROWS).morphism
    with pytest.raises(DataError) as info:
        check_data(model, torch.zeros(3, 1), {"y": torch.zeros(3), "mu": torch.tensor(NAN)})
    assert str(info.value) == ("`mu` has missing entries: only the values of `observe` steps "
                               "can be partially observed (a `sample` site given in the data "
                               "must be complete)")
    reader = loads(READER).morphism
    with pytest.raises(DataError) as info:
        check_data(reader, torch.zeros(3, 1), {"a": torch.tensor([0.0, NAN, 1.0]),
                                               "b": torch.zeros(3)})
    assert str(info.value) == ("`a` has missing entries and step `b` reads it: only values "
                               "nothing else reads can be partially observed")
    # `b` partially observed is fine: nothing reads it
    check_data(reader, torch.zeros(3, 1), {"a": torch.zeros(3),
                                           "b": torch.tensor([0.0, NAN, 1.0])})


def test_an_observed_value_of_the_wrong_shape_is_named_with_both_shapes():
    """torch's broadcast error names no site: check_data says which value and both shapes."""
    import qvr
    from qvr.inference.data.fit_data import DataError, check_data
    from qvr.inference.front.fitting import model_of
    from pathlib import Path
    torch.manual_seed(0)
    path = Path(__file__).resolve().parents[2] / "examples" / "transformer_lm.qvr"
    model = model_of(qvr.load(str(path)))
    x = torch.randint(0, 32, (4, 12))
    with pytest.raises(DataError) as info:
        check_data(model, x, {"next_token": torch.randint(0, 32, (4, 10))})
    assert str(info.value) == ("the data does not fit the program: `next_token` has shape "
                               "(4, 10), but the program draws it with shape (4, 12) for the "
                               "input `x` of shape (4, 12)")
