"""Numerical building blocks by their invariants: leapfrog energy conservation and time
reversibility, dual averaging convergence, Welford against numpy, the warmup schedule,
NUTS checkpoint indices, and the diagnostics against textbook cases."""
import math

import numpy as np
import pytest
import torch

from qvr.inference.criticism import diagnostics as dg
from qvr.inference.mcmc.adaptation import (DualAveraging, Welford, mass_update_points,
                                           warmup_schedule)
from qvr.inference.mcmc.integrator import MassMatrix, leapfrog
from qvr.inference.mcmc.nuts import NUTSKernel
from qvr.inference.mcmc.ops import turning_rho
from qvr.inference.mcmc.tick import checkpoint_range

PREC = torch.tensor([[2.0, 0.6], [0.6, 1.0]])


def gaussian_grad(z):
    """log N(z; 0, PREC^-1) up to a constant, and its gradient, for (C, 2) positions."""
    lp = -0.5 * torch.einsum("ci,ij,cj->c", z, PREC, z)
    return lp, -z @ PREC


@pytest.mark.parametrize("kind", ["identity", "diagonal", "dense"])
def test_leapfrog_conserves_energy_and_is_reversible(kind):
    torch.manual_seed(0)
    C = 3
    mass = MassMatrix.identity(kind, C, 2)
    if kind == "diagonal":
        mass = MassMatrix("diagonal", torch.tensor([[0.5, 2.0]]).expand(C, 2).clone())
    elif kind == "dense":
        inv = torch.tensor([[0.7, 0.2], [0.2, 1.3]]).expand(C, 2, 2).clone()
        mass = MassMatrix("dense", inv, torch.linalg.cholesky(inv))
    z0 = torch.randn(C, 2)
    p0 = mass.sample_momentum(z0)
    lp0, g0 = gaussian_grad(z0)
    h0 = -lp0 + mass.kinetic(p0)
    eps = torch.full((C,), 0.05)
    z, p, lp, g = z0, p0, lp0, g0
    for _ in range(200):
        z, p, lp, g = leapfrog(z, p, g, eps, mass, gaussian_grad)
    h1 = -lp + mass.kinetic(p)
    assert torch.allclose(h0, h1, atol=5e-3)  # bounded energy error, O(eps^2)
    for _ in range(200):  # negate the momentum and integrate back
        z, p, lp, g = leapfrog(z, p, g, -eps, mass, gaussian_grad)
    assert torch.allclose(z, z0, atol=1e-4) and torch.allclose(p, p0, atol=1e-4)


def test_energy_error_shrinks_quadratically_with_the_step():
    torch.manual_seed(1)
    mass = MassMatrix.identity("identity", 1, 2)
    z0, p0 = torch.randn(1, 2), torch.randn(1, 2)
    errs = []
    for eps in (0.2, 0.1):
        lp, g = gaussian_grad(z0)
        h0 = -lp + mass.kinetic(p0)
        z, p = z0, p0
        n = int(round(1.0 / eps))
        for _ in range(n):
            z, p, lp, g = leapfrog(z, p, g, torch.tensor([eps]), mass, gaussian_grad)
        errs.append(float((-lp + mass.kinetic(p) - h0).abs()))
    assert errs[1] < errs[0] / 2.5


def test_momentum_has_covariance_m():
    torch.manual_seed(2)
    inv = torch.tensor([[0.7, 0.2], [0.2, 1.3]])
    mass = MassMatrix("dense", inv[None], torch.linalg.cholesky(inv)[None])
    p = torch.cat([mass.sample_momentum(torch.zeros(1, 2)) for _ in range(20000)])
    cov = torch.cov(p.T)
    assert torch.allclose(cov, torch.linalg.inv(inv), atol=0.05)


def test_dual_averaging_finds_the_target_acceptance():
    # acceptance falls smoothly with the step size: a(eps) = exp(-eps)
    da = DualAveraging(target=0.8)
    s = da.init(torch.tensor([1.0, 0.01]))
    for _ in range(2000):
        s = da.update(s, torch.exp(-torch.exp(s.log_step)))
    assert torch.allclose(torch.exp(-torch.exp(s.log_step_avg)), torch.tensor(0.8), atol=0.01)


def test_dual_averaging_treats_nan_as_zero():
    da = DualAveraging(target=0.8)
    s0 = da.init(torch.tensor([0.5]))
    a = da.update(s0, torch.tensor([float("nan")]))
    b = da.update(s0, torch.tensor([0.0]))
    assert torch.equal(a.log_step, b.log_step)


@pytest.mark.parametrize("dense", [False, True])
def test_welford_matches_numpy(dense):
    torch.manual_seed(3)
    xs = torch.randn(500, 2, 3) * torch.tensor([1.0, 2.0, 0.5])
    w = Welford(2, 3, dense=dense)
    for x in xs:
        w.update(x)
    for c in range(2):
        ref = np.cov(xs[:, c].numpy().T, ddof=1)
        got = w.variance()[c].numpy()
        np.testing.assert_allclose(got, ref if dense else np.diag(ref), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(w.mean[c].numpy(), xs[:, c].mean(0).numpy(), atol=1e-5)


def test_welford_regularisation_is_the_spec_shrinkage():
    w = Welford(1, 2)
    for x in torch.tensor([[[1.0, 2.0]], [[3.0, 6.0]], [[5.0, 4.0]]]):
        w.update(x)
    n = 3
    expect = (n / (n + 5)) * w.variance() + 1e-3 * 5 / (n + 5)
    assert torch.allclose(w.regularized(), expect)


def test_warmup_schedule_windows():
    sched = warmup_schedule(1000)
    assert sched[0] == (0, 74) and sched[-1] == (950, 999)
    sizes = [b - a + 1 for a, b in sched[1:-1]]
    assert sizes == [25, 50, 100, 200, 500]  # doubling, the last stretched to the buffer
    covered = [i for a, b in sched for i in range(a, b + 1)]
    assert covered == list(range(1000))
    assert mass_update_points(1000) == {99, 149, 249, 449, 949}
    assert warmup_schedule(10) == [(0, 9)] and mass_update_points(10) == set()
    short = warmup_schedule(100)
    assert short[0] == (0, 14) and short[-1] == (90, 99)


def test_checkpoint_ranges_cover_every_power_of_two_subtree():
    for depth in range(1, 7):
        stored = {}
        for n in range(2 ** depth):
            lo, hi = checkpoint_range(n)
            if n % 2 == 0:
                stored[hi] = n
            # subtrees ending at n: sizes 2^k with (n + 1) divisible by 2^k, k >= 1
            want = sorted(n + 1 - 2 ** k for k in range(1, depth + 1) if (n + 1) % 2 ** k == 0)
            got = sorted(stored[i] for i in range(lo, hi + 1))
            assert got == want, (n, got, want)


# ---------------------------------------------------------------- diagnostics


def ar1(rho, m, n, seed=0):
    rng = np.random.default_rng(seed)
    x = np.zeros((m, n))
    e = rng.standard_normal((m, n)) * math.sqrt(1 - rho ** 2)
    x[:, 0] = rng.standard_normal(m)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + e[:, t]
    return x


def test_ess_of_independent_draws_is_close_to_the_number_of_draws():
    x = np.random.default_rng(0).standard_normal((4, 1000))
    for f in (dg.ess_bulk, dg.ess_mean, dg.ess_basic):
        assert 3300 < float(f(x)) < 4800, f.__name__
    assert 2800 < float(dg.ess_tail(x)) < 5000


def test_ess_of_an_ar1_chain_matches_the_theory():
    rho = 0.8
    x = ar1(rho, 4, 5000, seed=1)
    expect = 4 * 5000 * (1 - rho) / (1 + rho)
    for f in (dg.ess_bulk, dg.ess_mean, dg.ess_basic):
        assert abs(float(f(x)) / expect - 1) < 0.15, (f.__name__, float(f(x)), expect)


def test_rhat_flags_chains_that_disagree():
    rng = np.random.default_rng(2)
    good = rng.standard_normal((4, 500))
    bad = good + np.array([0, 0, 0, 1.5])[:, None]
    assert float(dg.split_rhat(good)) < 1.01
    assert float(dg.split_rhat(bad)) > 1.1
    assert float(dg.split_rhat_basic(bad)) > 1.1
    # a scale difference is invisible to the bulk R-hat but caught by the folded one
    scaled = good * np.array([1, 1, 1, 4])[:, None]
    assert float(dg.split_rhat(scaled)) > 1.05


def test_split_rhat_basic_is_the_spec_formula():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10)) + np.array([[0.0], [0.5]])
    halves = np.concatenate([x[:, :5], x[:, 5:]])
    h = 5
    w = halves.var(axis=1, ddof=1).mean()
    b = h * halves.mean(axis=1).var(ddof=1)
    expect = math.sqrt(((h - 1) / h * w + b / h) / w)
    assert float(dg.split_rhat_basic(x)) == pytest.approx(expect)
    assert math.isnan(float(dg.split_rhat_basic(x[:, :3])))


def test_diagnostics_keep_the_parameter_shape():
    x = np.random.default_rng(4).standard_normal((3, 200, 2, 5))
    for f in (dg.ess_bulk, dg.ess_tail, dg.split_rhat, dg.ess_basic, dg.split_rhat_basic,
              dg.mcse_mean):
        assert np.asarray(f(x)).shape == (2, 5)


def test_summary_table():
    rng = np.random.default_rng(5)
    s = dg.summary({"mu": rng.normal(2.0, 0.5, (4, 500, 1)),
                    "theta": rng.normal(size=(4, 500, 3))})
    assert list(s.rows) == ["mu", "theta[0]", "theta[1]", "theta[2]"]
    row = s.rows["mu"]
    assert row["mean"] == pytest.approx(2.0, abs=0.05)
    assert row["sd"] == pytest.approx(0.5, abs=0.05)
    assert row["q5"] < row["q50"] < row["q95"]
    assert row["r_hat"] < 1.01 and row["ess_bulk"] > 1000
    text = str(s)
    assert "ess_bulk" in text and "theta[2]" in text
    assert s.worst()["max_r_hat"] < 1.01


def test_matches_arviz_stats_when_installed():
    pytest.importorskip("arviz_stats")
    from arviz_stats.base import array_stats
    x = ar1(0.6, 4, 800, seed=6)
    for method, ours in (("bulk", dg.ess_bulk), ("tail", dg.ess_tail)):
        kw = {"prob": (0.05, 0.95)} if method == "tail" else {}
        ref = float(array_stats.ess(x, chain_axis=0, draw_axis=1, method=method, **kw))
        assert float(ours(x)) == pytest.approx(ref, rel=0.02)
    ref = float(array_stats.rhat(x, chain_axis=0, draw_axis=1, method="rank"))
    assert float(dg.split_rhat(x)) == pytest.approx(ref, rel=1e-3)


def test_to_arviz_hands_posterior_and_sample_stats_to_arviz(monkeypatch):
    import sys
    import types
    from qvr.inference import MCMC, NUTSKernel
    from helpers import correlated_case
    calls = {}
    fake = types.ModuleType("arviz")

    def from_dict(posterior=None, sample_stats=None):
        calls.update(posterior=posterior, sample_stats=sample_stats)
        return "idata"

    fake.from_dict = from_dict
    monkeypatch.setitem(sys.modules, "arviz", fake)
    model, x, obs, _ = correlated_case()
    r = MCMC(NUTSKernel(max_tree_depth=2), num_warmup=5, num_samples=6, num_chains=2).run(
        model, x, obs)
    assert r.to_arviz() == "idata"
    assert calls["posterior"]["a"].shape == (2, 6, 1)
    assert set(calls["sample_stats"]) >= {"lp", "diverging", "acceptance_rate", "tree_depth"}
    assert calls["sample_stats"]["diverging"].dtype == bool


def test_to_arviz_without_arviz_says_how_to_get_it(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "arviz", None)
    with pytest.raises(ImportError, match="pip install arviz"):
        dg.to_arviz(object())


def test_generalised_uturn_fires_after_half_a_period():
    """Harmonic oscillator (identity metric): z = cos t, p = -sin t.  The momenta summed
    along an arc from t = 0 point against an end velocity once the arc passes half a
    period, and not before."""
    def arc(t_end, n=50):
        t = torch.linspace(0.0, t_end, n)
        p = torch.stack([-torch.sin(t), -torch.cos(t)], -1)  # 2-D: a circle
        return p[:1], p[-1:], p.sum(0, keepdim=True)
    for t_end, expected in ((1.0, False), (2.5, False), (math.pi + 0.3, True), (5.0, True)):
        v0, v1, rho = arc(t_end)
        assert bool(turning_rho(v1, rho, v0)[0]) is expected, t_end


def test_nuts_defaults_are_stan_style_and_spec_variant_available():
    k = NUTSKernel()
    assert (k.transition, k.uturn) == ("biased", "momentum")
    nutpie_like = NUTSKernel(uturn="displacement")
    assert nutpie_like.config()["uturn"] == "displacement"
    spec = NUTSKernel(transition="uniform", uturn="position")
    assert spec.config()["transition"] == "uniform" and spec.config()["uturn"] == "position"
    with pytest.raises(ValueError, match="uturn"):
        NUTSKernel(uturn="angle")


def test_rank_normalisation_looks_up_the_exact_values_with_ties():
    """The table of `ndtri` over whole and half ranks gives exactly the normal scores of
    the average ranks, ties included."""
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((6, 4, 25)), 1)  # (coordinates, chains, draws): ties
    S = a.shape[1] * a.shape[2]
    direct = dg._ndtri((dg._ranks(a) - 3.0 / 8.0) / (S + 0.25))
    assert np.array_equal(dg._rank_normalize(a), direct)


def test_one_draw_per_chain_gives_nan_statistics_not_an_error():
    """A fit cancelled at its first sampling draw: split chains of length 0."""
    x = np.random.default_rng(0).standard_normal((2, 1, 3))
    for f in (dg.ess_bulk, dg.ess_tail, dg.split_rhat):
        assert np.isnan(f(x)).all()
    row = dg.summary({"a": x}).rows["a[0]"]
    assert row["mean"] == float(x[:, 0, 0].mean()) and np.isnan(row["ess_tail"])
