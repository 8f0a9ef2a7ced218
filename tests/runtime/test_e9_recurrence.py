"""E9.3: `fold`/`scan` recurrences and `ode` solutions at run time (docs/e9/recurrence.md).

Values are compared with numpy loops and closed forms computed in the same process."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import qvr
from qvr.runtime.errors import IndexRangeError, InputShapeError


def _run(src: str, values: dict, x=None):
    model = qvr.loads(src).morphism
    x = torch.zeros(1, 1) if x is None else x
    return model.execute(x, values).output


GARCH = """
object Time : FinSet {T}
program garch : Time -> Time
    sample mu <- Normal(0.0, 1.0)
    sample alpha0 <- HalfNormal(1.0)
    sample alpha1 <- Beta(2.0, 2.0)
    sample beta1 <- Beta(2.0, 2.0)
    let sigma = scan(Time, sigma1, (s, t) -> sqrt(alpha0 + alpha1 * (r[t - 1] - mu) * (r[t - 1] - mu) + beta1 * s * s))
    let last = fold(Time, sigma1, (s, t) -> sqrt(alpha0 + alpha1 * (r[t - 1] - mu) * (r[t - 1] - mu) + beta1 * s * s))
    observe y : Time <- Normal(mu, sigma)
    return {ret}
export garch
"""
GARCH_PARAMS = {"mu": 0.1, "alpha0": 0.2, "alpha1": 0.3, "beta1": 0.5}


def garch_numpy(r, sigma1, mu, alpha0, alpha1, beta1):
    s = [sigma1]
    for t in range(1, len(r)):
        s.append(math.sqrt(alpha0 + alpha1 * (r[t - 1] - mu) ** 2 + beta1 * s[-1] ** 2))
    return np.array(s)


def _garch_values(T, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(T, generator=g, dtype=torch.float64)
    vals = {k: torch.tensor(v, dtype=dtype) for k, v in GARCH_PARAMS.items()}
    vals.update(r=r.to(dtype), y=r.to(dtype), sigma1=torch.tensor(0.8, dtype=dtype))
    return r.numpy(), vals


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_garch_sigma_series_matches_a_numpy_loop(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        r, vals = _garch_values(30, dtype)
        sigma = _run(GARCH.format(T=30, ret="sigma"), vals)
        last = _run(GARCH.format(T=30, ret="last"), vals)
    finally:
        torch.set_default_dtype(old)
    ref = garch_numpy(r, 0.8, **GARCH_PARAMS)
    assert sigma.dtype == dtype and tuple(sigma.shape) == (30,)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(sigma.double().numpy(), ref, rtol=tol, atol=tol)
    assert tuple(last.shape) == ()
    np.testing.assert_allclose(float(last), ref[-1], rtol=tol)


def test_garch_log_joint_matches_numpy(f64):
    r, vals = _garch_values(25, torch.float64, seed=3)
    model = qvr.loads(GARCH.format(T=25, ret="sigma")).morphism
    lj = float(model.log_joint(torch.zeros(1, 1), vals).sum())
    sig = garch_numpy(r, 0.8, **GARCH_PARAMS)
    p = GARCH_PARAMS
    ref = (-0.5 * p["mu"] ** 2 - 0.5 * math.log(2 * math.pi)
           + math.log(2) - 0.5 * p["alpha0"] ** 2 - 0.5 * math.log(2 * math.pi)
           + math.log(6 * p["alpha1"] * (1 - p["alpha1"])) + math.log(6 * p["beta1"] * (1 - p["beta1"]))
           + float(np.sum(-0.5 * ((r - p["mu"]) / sig) ** 2 - np.log(sig) - 0.5 * math.log(2 * math.pi))))
    assert lj == pytest.approx(ref, rel=1e-12)


AR1 = """
object Time : FinSet 40
program ar : Time -> Time
    sample rho <- Normal(0.0, 1.0)
    let x = scan(Time, x0, (s, t) -> rho * s + w[t] + 0.01 * t)
    observe y : Time <- Normal(x, 1.0)
    return x
export ar
"""


def test_ar1_latent_series_and_the_index_as_a_number(f64):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(40, generator=g)
    x = _run(AR1, {"rho": torch.tensor(0.7), "w": w, "x0": torch.tensor(2.0), "y": w})
    ref = [2.0]
    for t in range(1, 40):
        ref.append(0.7 * ref[-1] + float(w[t]) + 0.01 * t)
    np.testing.assert_allclose(x.numpy(), np.array(ref), rtol=1e-12, atol=1e-12)


HMM = """
object Time : FinSet 12
object State : FinSet 2
program hmm : Time -> Time
    sample m0 <- Normal(0.0, 1.0)
    sample m1 <- Normal(3.0, 1.0)
    let emit = factor t : Time in (factor k : State in { 0 -> -0.5 * (obs[t] - m0) * (obs[t] - m0), 1 -> -0.5 * (obs[t] - m1) * (obs[t] - m1) })
    let alpha = fold(Time, emit[0] + log_init, (a, t) -> (factor k : State in { 0 -> log(exp(a[0] + lt[0, 0]) + exp(a[1] + lt[1, 0])) + emit[t, 0], 1 -> log(exp(a[0] + lt[0, 1]) + exp(a[1] + lt[1, 1])) + emit[t, 1] }))
    let path = scan(Time, emit[0] + log_init, (a, t) -> (factor k : State in { 0 -> log(exp(a[0] + lt[0, 0]) + exp(a[1] + lt[1, 0])) + emit[t, 0], 1 -> log(exp(a[0] + lt[0, 1]) + exp(a[1] + lt[1, 1])) + emit[t, 1] }))
    score lik = log(exp(alpha[0]) + exp(alpha[1]))
    return {ret}
export hmm
"""


def _hmm_inputs():
    g = torch.Generator().manual_seed(2)
    obs = torch.cat([torch.randn(6, generator=g), 3 + torch.randn(6, generator=g)])
    lt = torch.log(torch.tensor([[0.9, 0.1], [0.2, 0.8]]))
    log_init = torch.log(torch.tensor([0.5, 0.5]))
    return {"m0": torch.tensor(0.2), "m1": torch.tensor(2.8), "obs": obs, "lt": lt,
            "log_init": log_init}


def _hmm_numpy(v):
    obs, lt = v["obs"].numpy(), v["lt"].numpy()
    means = np.array([float(v["m0"]), float(v["m1"])])
    emit = -0.5 * (obs[:, None] - means[None, :]) ** 2
    a = emit[0] + v["log_init"].numpy()
    path = [a]
    for t in range(1, len(obs)):
        a = np.array([np.log(np.sum(np.exp(a + lt[:, k]))) for k in range(2)]) + emit[t]
        path.append(a)
    return np.array(path)


def test_hmm_log_forward_pass_with_a_vector_state(f64):
    v = _hmm_inputs()
    ref = _hmm_numpy(v)
    alpha = _run(HMM.replace("{ret}", "alpha"), v)
    path = _run(HMM.replace("{ret}", "path"), v)
    assert tuple(alpha.shape) == (2,) and tuple(path.shape) == (12, 2)
    np.testing.assert_allclose(alpha.numpy(), ref[-1], rtol=1e-12)
    np.testing.assert_allclose(path.numpy(), ref, rtol=1e-12)
    model = qvr.loads(HMM.replace("{ret}", "alpha")).morphism
    total = float(model.log_joint(torch.zeros(1, 1), v).sum())
    prior = -0.5 * 0.2 ** 2 - 0.5 * (2.8 - 3.0) ** 2 - math.log(2 * math.pi)
    assert total == pytest.approx(prior + float(np.log(np.exp(ref[-1]).sum())), rel=1e-12)


ROWS = """
object Time : FinSet 7
object Row : FinSet 3
object K : FinSet 2
program rows(i) : Row -> Row
    sample rho <- Normal(0.0, 1.0)
    let x0 = 0.5 * i
    let path = scan(Time, x0, (s, t) -> rho * s + w[t])
    let last = fold(Time, x0, (s, t) -> rho * s + w[t])
    let vec = scan(Time, v0, (s, t) -> rho * s + w[t])
    return {ret}
export rows
"""


def test_states_with_a_leading_batch_axis_keep_it(f64):
    """A state that carries the rows of the program input (init `0.5 * i`, typed as a
    scalar, of shape (B,) at run time): `fold` keeps the state's shape, `scan` puts the
    axis O after the batch axis (axes are trailing); a vector state of unknown axes (host
    data) gets O in front."""
    w = torch.linspace(-1.0, 1.0, 7)
    v0 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    vals = {"rho": torch.tensor(0.5), "w": w, "v0": v0}
    i = torch.tensor([0, 1, 2])
    path = _run(ROWS.format(ret="path"), vals, i)
    last = _run(ROWS.format(ret="last"), vals, i)
    vec = _run(ROWS.format(ret="vec"), vals, i)
    assert tuple(path.shape) == (3, 7) and tuple(last.shape) == (3,)
    assert tuple(vec.shape) == (7, 3, 2)
    ref = [0.5 * i.double().numpy()]
    ref2 = [v0.numpy()]
    for t in range(1, 7):
        ref.append(0.5 * ref[-1] + float(w[t]))
        ref2.append(0.5 * ref2[-1] + float(w[t]))
    np.testing.assert_allclose(path.numpy(), np.array(ref).T, rtol=1e-12)
    np.testing.assert_allclose(last.numpy(), ref[-1], rtol=1e-12)
    np.testing.assert_allclose(vec.numpy(), np.array(ref2), rtol=1e-12)


def test_a_scalar_init_broadcasts_up_to_the_state_shape_only(f64):
    src = """
object Time : FinSet 4
object K : FinSet 3
program p : Time -> Time
    sample a <- Normal(0.0, 1.0)
    let v = {rhs}
    observe y : Time <- Normal(a, 1.0)
    return v
export p
"""
    vals = {"a": torch.tensor(2.0), "v0": torch.tensor([1.0, 0.0, -1.0]), "u": torch.ones(3),
            "y": torch.zeros(4)}
    v = _run(src.format(rhs="scan(Time, v0, (s, t) -> a * s + 1.0)"), {k: vals[k] for k in ("a", "v0", "y")})
    np.testing.assert_allclose(v.numpy(), [[1, 0, -1], [3, 1, -1], [7, 3, -1], [15, 7, -1]])
    with pytest.raises(InputShapeError) as e:
        _run(src.format(rhs="scan(Time, 0.5, (s, t) -> s + u)"), {k: vals[k] for k in ("a", "u", "y")})
    assert str(e.value) == (
        "program `p`, step `v`: the lambda of `scan` gives a value of shape (3,) at step t = 1, "
        "which does not broadcast to the state's shape (the shape of its initial value) "
        "(expected shape (), got shape (3,))")


def test_an_index_before_the_start_is_a_range_error_naming_the_step(f64):
    src = """
object Time : FinSet 5
program p : Time -> Time
    sample a <- Normal(0.0, 1.0)
    let v = scan(Time, 0.0, (s, t) -> s + r[t - 2])
    observe y : Time <- Normal(v, 1.0)
    return v
export p
"""
    with pytest.raises(IndexRangeError) as e:
        _run(src, {"a": torch.tensor(0.0), "r": torch.zeros(5), "y": torch.zeros(5)})
    assert str(e.value) == ("program `p`, step `v`, morphism `r[...]`: index on axis 0 values out "
                            "of range (expected values in [0, 5), got values in [-1, -1])")


def test_a_sub_expression_of_t_that_is_not_rowwise_falls_back_to_steps(f64):
    """`w[t] * v` (w over Time, v over K) has shape (K,) at each step: evaluated for all
    steps at once it would not give one row per step, so it is evaluated step by step."""
    src = """
object Time : FinSet 6
object K : FinSet 4
program p : Time -> Time
    sample a <- Normal(0.0, 1.0)
    let v = scan(Time, v0, (s, t) -> a * s + w[t] * u + w[t - 1])
    observe y : Time <- Normal(a, 1.0)
    return v
export p
"""
    w = torch.arange(6.0) / 3
    u = torch.tensor([1.0, -2.0, 0.5, 3.0])
    v0 = torch.zeros(4)
    out = _run(src, {"a": torch.tensor(0.5), "w": w, "u": u, "v0": v0, "y": torch.zeros(6)})
    ref = [v0.numpy()]
    for t in range(1, 6):
        ref.append(0.5 * ref[-1] + float(w[t]) * u.numpy() + float(w[t - 1]))
    np.testing.assert_allclose(out.numpy(), np.array(ref), rtol=1e-12)


def test_gradcheck_through_a_scan_in_float64(f64):
    model = qvr.loads(GARCH.format(T=12, ret="sigma")).morphism
    r, vals = _garch_values(12, torch.float64, seed=5)

    def f(mu, a0, a1, b1):
        v = dict(vals, mu=mu, alpha0=a0, alpha1=a1, beta1=b1)
        return model.log_joint(torch.zeros(1, 1), v).sum()

    args = tuple(torch.tensor(GARCH_PARAMS[k], requires_grad=True)
                 for k in ("mu", "alpha0", "alpha1", "beta1"))
    assert torch.autograd.gradcheck(f, args)


def _target(T=40):
    from qvr.inference.mcmc.potential import make_target
    r, vals = _garch_values(T, torch.float64, seed=7)
    obs = {"y": vals["y"], "r": vals["r"], "sigma1": vals["sigma1"]}
    model = qvr.loads(GARCH.format(T=T, ret="sigma")).morphism
    return make_target(model, torch.zeros(1, 1), obs)


def test_vmap_over_chains_equals_a_loop_and_the_traced_density(f64):
    from qvr.inference.mcmc.potential import _per_chain
    target = _target()
    z = 0.4 * torch.randn(5, target.dim, generator=torch.Generator().manual_seed(0))
    lp_v, g_v = target._vmapped(z)
    lp_l, g_l = _per_chain(target.single, z)
    assert torch.allclose(lp_v, lp_l, rtol=1e-12, atol=1e-12)
    assert torch.allclose(g_v, g_l, rtol=1e-10, atol=1e-12)
    target.compile_below_s = 60.0  # trace it whatever this machine's load
    fn = target.compiled_for(z)
    assert fn is not None, target.compile_notes
    g_c, lp_c = fn(z)
    assert torch.allclose(lp_c, lp_l, rtol=1e-10) and torch.allclose(g_c, g_l, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------- ode

ODE = """
object Obs : FinSet {n}
program decay : Obs -> Obs
    sample k <- HalfNormal(1.0)
    let y = ode((u, t) -> {rhs}, y0, times{tol})
    observe z : Obs <- Normal(y, 0.1)
    return y
export decay
"""


def test_ode_exponential_decay_matches_the_closed_form(f64):
    times = torch.tensor([0.0, 0.5, 1.0, 2.0, 4.0])
    out = _run(ODE.format(n=5, rhs="-k * u", tol=""),
               {"k": torch.tensor(0.7), "y0": torch.tensor(3.0), "times": times, "z": torch.zeros(5)})
    assert tuple(out.shape) == (5,)
    np.testing.assert_allclose(out.numpy(), 3.0 * np.exp(-0.7 * times.numpy()), rtol=2e-5)


def test_ode_logistic_growth_with_tight_tolerances(f64):
    times = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0, 8.0])
    out = _run(ODE.format(n=6, rhs="k * u * (1.0 - u / 10.0)", tol=", 1e-10, 1e-10"),
               {"k": torch.tensor(0.9), "y0": torch.tensor(0.5), "times": times, "z": torch.zeros(6)})
    t = times.numpy()
    ref = 10.0 / (1.0 + (10.0 / 0.5 - 1.0) * np.exp(-0.9 * t))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-8)


def test_ode_vector_state_and_the_gradient_with_respect_to_the_rate(f64):
    """y(T) = y0 exp(-k T): d y(T) / d k = -T y0 exp(-k T), by backpropagation through
    the solver; a vector state (two initial values) keeps its shape."""
    model = qvr.loads(ODE.format(n=3, rhs="-k * u", tol=", 1e-9, 1e-9")).morphism
    times = torch.tensor([0.0, 1.0, 2.5])
    k = torch.tensor(0.6, requires_grad=True)
    y0 = torch.tensor([1.0, 2.0])
    out = model.execute(torch.zeros(1, 1), {"k": k, "y0": y0, "times": times,
                                            "z": torch.zeros(3, 2)}).output
    assert tuple(out.shape) == (3, 2)
    out[-1].sum().backward()
    analytic = -2.5 * 3.0 * math.exp(-0.6 * 2.5)
    assert float(k.grad) == pytest.approx(analytic, rel=1e-6)


def test_ode_times_must_be_monotone(f64):
    with pytest.raises(InputShapeError) as e:
        _run(ODE.format(n=3, rhs="-k * u", tol=""),
             {"k": torch.tensor(0.7), "y0": torch.tensor(3.0),
              "times": torch.tensor([0.0, 2.0, 1.0]), "z": torch.zeros(3)})
    assert "step `y`" in str(e.value) and "strictly increasing" in str(e.value)


# ---------------------------------------------------------------- NUTS fits

def _mcse_mean(x: np.ndarray) -> float:
    from qvr.inference.criticism.diagnostics import ess_mean
    return float(x.std() / math.sqrt(np.asarray(ess_mean(x[..., None])).item()))


@pytest.mark.slow
def test_nuts_fits_a_garch_written_with_scan_on_the_compiled_target():
    from qvr.inference import FitConfig, fit
    T = 100
    g = torch.Generator().manual_seed(11)
    p = GARCH_PARAMS
    y, s = [], 0.8
    for t in range(T):
        if t > 0:
            s = math.sqrt(p["alpha0"] + p["alpha1"] * (y[-1] - p["mu"]) ** 2 + p["beta1"] * s * s)
        y.append(p["mu"] + s * float(torch.randn((), generator=g, dtype=torch.float64)))
    data = {"y": y, "r": y, "sigma1": 0.8}
    res = fit(qvr.loads(GARCH.format(T=T, ret="sigma")), data,
              FitConfig(method="nuts", num_warmup=150, num_samples=150, num_chains=2, seed=0,
                        dtype="float64"))
    assert res.status == "finished", res.message
    assert res.stats["compiler"] in ("torchscript", "inductor"), res.stats.get("compiler_notes")
    for name, truth in p.items():
        draws = np.asarray(res.samples[name], dtype=float)
        assert abs(draws.mean() - truth) < 5 * draws.std(), (name, draws.mean(), draws.std())


ODE_FIT = """
object Obs : FinSet 4
program decay : Obs -> Obs
    sample k <- HalfNormal(1.0)
    let y = ode((u, t) -> -k * u, 2.0, times, 1e-4, 1e-4)
    observe z : Obs <- Normal(y, 0.1)
    return y
export decay
"""


@pytest.mark.slow
def test_nuts_fits_an_ode_model_against_quadrature_of_the_exact_posterior(monkeypatch):
    """Exponential decay with a latent rate: the compiled density (the solve one operation
    of its trace, `qvr.runtime.ode_op`) with both chains in one solve; the posterior of k
    is computed exactly by 1-D quadrature.  (Tolerances of 1e-4: the
    solver's error, ~1e-4 of values near 2, is nothing beside the noise sd 0.1, and the
    fit takes half the time it took at 1e-5.)"""
    import warnings
    from qvr.inference import FitConfig, fit
    from qvr.runtime import dopri5
    # the solve itself uncompiled (its compile is tests/runtime/test_ode_*.py's): 20 s
    # against 26 s here, most of it the cold compile
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", None)
    times = np.array([0.0, 0.5, 1.5, 3.0])
    k_true = 0.8
    rng = np.random.default_rng(3)
    z = 2.0 * np.exp(-k_true * times) + 0.1 * rng.standard_normal(4)
    grid = np.linspace(1e-6, 4.0, 200001)
    logp = -0.5 * grid ** 2 + np.sum(
        -0.5 * ((z[None, :] - 2.0 * np.exp(-grid[:, None] * times[None, :])) / 0.1) ** 2, axis=1)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = float((w * grid).sum())
    sd = float(np.sqrt((w * (grid - mean) ** 2).sum()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = fit(qvr.loads(ODE_FIT), {"z": z.tolist(), "times": times.tolist()},
                  FitConfig(method="nuts", num_warmup=60, num_samples=120, num_chains=2,
                            seed=0, dtype="float64"))
    assert res.status == "finished", res.message
    assert res.stats["compiler"] == "torchscript", res.stats.get("compiler_notes")
    k = np.asarray(res.samples["k"], dtype=float).reshape(2, -1)
    assert abs(k.mean() - mean) < 5 * _mcse_mean(k), (k.mean(), mean, _mcse_mean(k))
    from qvr.inference.criticism.diagnostics import ess_mean
    sq = (k - k.mean()) ** 2
    mcse_sd = math.sqrt(sq.var() / np.asarray(ess_mean(sq[..., None])).item()) / (2 * k.std())
    assert abs(k.std() - sd) < 5 * mcse_sd, (k.std(), sd, mcse_sd)


def test_an_ode_past_its_step_limit_fails_with_a_value_error(f64, monkeypatch):
    from qvr.runtime import ode as ode_mod
    monkeypatch.setattr(ode_mod, "MAX_STEPS", 5)
    with pytest.raises(ode_mod.OdeStepLimitError) as e:
        _run(ODE.format(n=3, rhs="-k * u", tol=", 1e-10, 1e-10"),
             {"k": torch.tensor(0.7), "y0": torch.tensor(3.0),
              "times": torch.tensor([0.0, 1.0, 2.0]), "z": torch.zeros(3)})
    assert isinstance(e.value, ValueError)
    assert str(e.value) == ("program `decay`, step `y`: `ode` needed more than 5 adaptive steps "
                            "(a stiff problem, or extreme parameter values) (expected at most 5 "
                            "steps, got more)")
