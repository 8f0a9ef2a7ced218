"""E9.2 supports under inference: NUTS with a flat prior (closed-form posterior), a
half-Student-t prior by truncation (1-D quadrature), a GARCH-style dependent bound, and SVI
with a flat site.  Tolerances from Monte Carlo standard errors; fixed seeds."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import qvr
from qvr.inference import fit
from qvr.inference.criticism.diagnostics import ess_bulk

NUTS = {"method": "nuts", "num_warmup": 300, "num_samples": 500, "num_chains": 4, "seed": 1}


def load(body: str, rows: int):
    return qvr.loads(f"object Row : FinSet {rows}\nprogram p : Row -> Row\n"
                     + "".join(f"    {line}\n" for line in body.strip().splitlines())
                     + "export p\n")


def scalar_draws(samples, name) -> np.ndarray:
    """`(chains, draws)` of a scalar site (a trailing axis of size 1 dropped)."""
    a = np.asarray(samples[name], dtype=float)
    return a.reshape(a.shape[0], a.shape[1])


def mean_within_mcse(draws: np.ndarray, want: float, k: float = 5.0) -> None:
    ess = float(ess_bulk(draws))
    mcse = draws.std() / math.sqrt(ess)
    assert abs(draws.mean() - want) < k * mcse, (draws.mean(), want, mcse)


Y = np.random.default_rng(7).normal(3.0, 2.0, 40)


@pytest.fixture(scope="module")
def flat_nuts():
    prog = load("sample mu <- Flat\nobserve y : Row <- Normal(mu, sd_known)\nreturn mu", 40)
    r = fit(prog, data={"y": Y, "sd_known": 2.0}, config=NUTS)
    assert r.status == "finished", r.message
    return scalar_draws(r.samples, "mu")


def test_nuts_flat_prior_posterior_is_normal_ybar(flat_nuts):
    """mu ~ Flat, y_i ~ N(mu, 2): the posterior is N(ybar, 4 / n)."""
    mean_within_mcse(flat_nuts, float(Y.mean()))
    assert abs(flat_nuts.std() / (2.0 / math.sqrt(len(Y))) - 1) < 0.2


def test_nuts_half_student_t_scale_matches_quadrature():
    """tau ~ StudentT(3, 0, 2.5) [lower=0], y_i ~ N(0, tau): the posterior of tau by 1-D
    quadrature on a fine grid."""
    y = np.random.default_rng(3).normal(0.0, 1.5, 12)
    prog = load("sample tau <- StudentT(3.0, 0.0, 2.5) [lower=0.0]\n"
                "observe y : Row <- Normal(0.0, tau)\nreturn tau", 12)
    r = fit(prog, data={"y": y}, config=NUTS)
    assert r.status == "finished", r.message
    tau = scalar_draws(r.samples, "tau")
    grid = np.linspace(1e-4, 30.0, 300_001)
    nu, s = 3.0, 2.5
    log_prior = -(nu + 1) / 2 * np.log1p((grid / s) ** 2 / nu)
    log_lik = -len(y) * np.log(grid) - (y ** 2).sum() / (2 * grid ** 2)
    w = np.exp(log_prior + log_lik - (log_prior + log_lik).max())
    w /= np.trapezoid(w, grid)
    mean = np.trapezoid(grid * w, grid)
    sd = math.sqrt(np.trapezoid((grid - mean) ** 2 * w, grid))
    mean_within_mcse(tau, mean)
    assert abs(tau.std() / sd - 1) < 0.2
    assert tau.min() > 0


def test_nuts_garch_style_dependent_bound_keeps_draws_inside():
    """alpha1 ~ Flat [0, 1], beta1 ~ Flat [0, 1 - alpha1] (GARCH's stationarity bound)."""
    g = np.random.default_rng(5)
    n = 60
    r_t, sig2 = np.zeros(n), 1.0
    for t in range(n):
        r_t[t] = g.normal(0.0, math.sqrt(sig2))
        sig2 = 0.2 + 0.3 * r_t[t] ** 2 + 0.5 * sig2
    prog = load("""
sample alpha0 <- HalfFlat
sample alpha1 <- Flat [lower=0.0, upper=1.0]
let room = 1.0 - alpha1
sample beta1 <- Flat [lower=0.0, upper=room]
let s = sqrt(alpha0 + alpha1 * prev_sq + beta1 * prev_var)
observe r : Row <- Normal(0.0, s)
return alpha0""", n)
    prev_sq = np.concatenate([[0.0], r_t[:-1] ** 2])
    r = fit(prog, data={"r": r_t, "prev_sq": prev_sq, "prev_var": np.full(n, 1.0)},
            config={**NUTS, "num_samples": 300})
    assert r.status == "finished", r.message
    a1 = scalar_draws(r.samples, "alpha1")
    b1 = scalar_draws(r.samples, "beta1")
    assert a1.shape == b1.shape == (4, 300)
    assert (a1 > 0).all() and (b1 > 0).all() and (a1 + b1 < 1).all()
    assert np.isfinite(np.asarray(r.samples["alpha0"])).all()


def test_svi_with_a_flat_site_converges_near_the_nuts_mean(flat_nuts):
    prog = load("sample mu <- Flat\nobserve y : Row <- Normal(mu, sd_known)\nreturn mu", 40)
    r = fit(prog, data={"y": Y, "sd_known": 2.0},
            config={"method": "svi", "num_steps": 1500, "seed": 1})
    assert r.status == "finished", r.message
    loc = float(np.asarray(r.params["loc_mu"]).reshape(()))
    post_sd = 2.0 / math.sqrt(len(Y))
    ess = float(ess_bulk(flat_nuts))
    tol = 0.25 * post_sd + 5 * flat_nuts.std() / math.sqrt(ess)
    assert abs(loc - flat_nuts.mean()) < tol
    scale = math.exp(float(np.asarray(r.params["log_scale_mu"]).reshape(())))
    assert abs(scale / post_sd - 1) < 0.3


def test_svi_with_a_dependent_bound_runs_and_respects_it():
    prog = load("""
sample a <- Uniform(0.0, 1.0)
let room = 1.0 - a
sample b <- Flat [lower=0.0, upper=room]
let s = 0.5 + a + b
observe y : Row <- Normal(0.0, s)
return a""", 40)
    y = np.random.default_rng(0).normal(0.0, 1.3, 40)
    r = fit(prog, data={"y": y}, config={"method": "svi", "num_steps": 500, "seed": 1})
    assert r.status == "finished", r.message
    from qvr.inference.vi.guides import AutoNormalGuide
    guide = r.guide
    assert isinstance(guide, AutoNormalGuide)
    x = torch.zeros(40, 1)
    draws = guide.sample(x, {"y": torch.as_tensor(y, dtype=torch.get_default_dtype())},
                         sample_shape=(200,))
    assert bool(((draws["b"] > 0) & (draws["a"] + draws["b"] < 1)).all())
