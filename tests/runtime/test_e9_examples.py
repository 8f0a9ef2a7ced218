"""The statistics examples (extension E9) compute the density their Stan programs define.

For each of the six posteriordb examples, the program's log joint (`log_joint_total`) at
random parameter values, on its shipped data, equals the same density written by hand
in torch (Stan's model block, with the constants Stan drops kept: normalised families),
and its recorded quantities equal their hand-written values.  Both sides run in float64
in this process.  Site values are on the constrained scale (what `log_joint` takes).
"""
from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Cauchy, Gamma, HalfCauchy, HalfNormal, Normal, Poisson

from qvr.datafiles import find_data, load_data
from runtime_support import EXAMPLES, load_example

#: the examples this file covers: (stem, export)
E9_EXAMPLES = {
    ("kid_scores", "kid_score_regression"), ("eight_schools", "eight_schools"),
    ("ar_series", "ar5"), ("garch_volatility", "garch11"), ("hmm_forward", "hmm_forward"),
    ("gp_counts", "gp_counts"), ("lotka_volterra", "lotka_volterra"),
}


#: entries of posteriordb's data files that the program does not read (a fit leaves them
#: out with a note): hmm's `K` (its two states are written in the program), gp's `y`
UNREAD = {"hmm_forward": {"K"}, "gp_counts": {"y"}}


def shipped(stem: str) -> dict:
    """The shipped data less the sizes the program read from it (a Stan data file's `J`,
    `T`, `N`: bound when the example was loaded, not a value of a site) and the entries
    it does not read."""
    raw = load_data(find_data(EXAMPLES / f"{stem}.qvr"))
    drop = set(getattr(load_example(stem), "sizes", None) or {}) | UNREAD.get(stem, set())
    return {k: torch.as_tensor(v, dtype=torch.float64) for k, v in raw.items()
            if k not in drop}


def program(stem: str, export: str):
    return load_example(stem).exports[export].to(torch.float64)


def log_joint(stem, export, values, data):
    p = program(stem, export)
    n = next(iter(data.values())).shape[0]
    x = torch.zeros(n, 1, dtype=torch.float64)
    with torch.no_grad():
        ex = p.execute(x, {**data, **values}, score=True)
        return p.log_joint_total(x, {**data, **values}), ex


def half_cauchy_lp(x, scale):  # Cauchy(0, scale) truncated to x > 0
    return Cauchy(0.0, scale).log_prob(x) + math.log(2.0)


@pytest.fixture
def gen():
    """A seeded generator; the test runs in float64 (as a fit with `dtype=float64`)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield torch.Generator().manual_seed(7)
    finally:
        torch.set_default_dtype(old)


def test_kid_scores_is_a_flat_prior_regression(gen):
    d = shipped("kid_scores")
    beta = torch.tensor([26.0, 6.0, 0.56], dtype=torch.float64) \
        + 0.1 * torch.randn(3, generator=gen, dtype=torch.float64)
    sigma = torch.tensor(18.0, dtype=torch.float64)
    total, _ = log_joint("kid_scores", "kid_score_regression",
                         {"beta": beta, "sigma": sigma}, d)
    mu = d["design"] @ beta
    expected = half_cauchy_lp(sigma, 2.5) + Normal(mu, sigma).log_prob(d["kid_score"]).sum()
    assert torch.allclose(total, expected, rtol=1e-10), (float(total), float(expected))


def test_eight_schools_records_theta(gen):
    d = shipped("eight_schools")
    mu, tau = torch.tensor(4.0, dtype=torch.float64), torch.tensor(3.0, dtype=torch.float64)
    tt = torch.randn(8, generator=gen, dtype=torch.float64)
    total, ex = log_joint("eight_schools", "eight_schools",
                          {"mu": mu, "tau": tau, "theta_trans": tt}, d)
    theta = mu + tau * tt
    expected = (Normal(0.0, 5.0).log_prob(mu) + HalfCauchy(5.0).log_prob(tau)
                + Normal(0.0, 1.0).log_prob(tt).sum()
                + Normal(theta, d["sigma"]).log_prob(d["y"]).sum())
    assert torch.allclose(total, expected, rtol=1e-10)
    assert torch.allclose(ex.sites["theta"].value, theta, rtol=1e-12)


def test_ar_series_conditions_on_the_first_five_values(gen):
    d = shipped("ar_series")
    y = d["y"]
    alpha = torch.tensor(0.01, dtype=torch.float64)
    beta = torch.tensor([0.7, 0.44, 0.1, -0.03, -0.3], dtype=torch.float64) \
        + 0.01 * torch.randn(5, generator=gen, dtype=torch.float64)
    sigma = torch.tensor(0.15, dtype=torch.float64)
    total, _ = log_joint("ar_series", "ar5", {"alpha": alpha, "beta": beta, "sigma": sigma}, d)
    lp = Normal(0.0, 10.0).log_prob(alpha) + Normal(0.0, 10.0).log_prob(beta).sum() \
        + half_cauchy_lp(sigma, 2.5)
    for t in range(5, 200):  # Stan: for (t in (K + 1):T) mu = alpha + sum_k beta[k] y[t - k]
        mu = alpha + sum(beta[k] * y[t - 1 - k] for k in range(5))
        lp = lp + Normal(mu, sigma).log_prob(y[t])
    assert torch.allclose(total, lp, rtol=1e-10), (float(total), float(lp))


def test_garch_volatility_recurrence(gen):
    d = shipped("garch_volatility")
    y, s1 = d["y"], d["sigma1"]
    v = {"mu": torch.tensor(5.05, dtype=torch.float64),
         "alpha0": torch.tensor(1.4, dtype=torch.float64),
         "alpha1": torch.tensor(0.55, dtype=torch.float64),
         "beta1": torch.tensor(0.3, dtype=torch.float64)}
    total, _ = log_joint("garch_volatility", "garch11", v, d)
    sig = [s1.reshape(())]
    for t in range(1, 200):
        sig.append(torch.sqrt(v["alpha0"] + v["alpha1"] * (y[t - 1] - v["mu"]) ** 2
                              + v["beta1"] * sig[-1] ** 2))
    # flat priors and bounded flat priors: density 1 (Stan adds nothing for them)
    expected = Normal(v["mu"], torch.stack(sig)).log_prob(y).sum()
    assert torch.allclose(total, expected, rtol=1e-10), (float(total), float(expected))


def test_hmm_forward_algorithm(gen):
    d = shipped("hmm_forward")
    y = d["y"]
    t1 = torch.tensor([0.65, 0.35], dtype=torch.float64)
    t2 = torch.tensor([0.08, 0.92], dtype=torch.float64)
    mu = torch.tensor([3.0, 8.8], dtype=torch.float64)
    total, _ = log_joint("hmm_forward", "hmm_forward", {"theta1": t1, "theta2": t2, "mu": mu}, d)
    theta = torch.stack([t1, t2])
    # Stan's loops verbatim: gamma[t, k] = log_sum_exp_j(gamma[t-1, j] + log theta[j, k]
    # + normal_lpdf(y[t] | mu[k], 1))
    gamma = [Normal(mu, 1.0).log_prob(y[0])]
    for t in range(1, 100):
        acc = torch.stack([torch.logsumexp(torch.stack(
            [gamma[-1][j] + torch.log(theta[j, k]) + Normal(mu[k], 1.0).log_prob(y[t])
             for j in range(2)]), 0) for k in range(2)])
        gamma.append(acc)
    expected = Normal(3.0, 1.0).log_prob(mu[0]) + Normal(10.0, 1.0).log_prob(mu[1]) \
        + torch.logsumexp(gamma[-1], 0)
    # Flat on a simplex and HalfFlat on positive-ordered vectors add constants only:
    # compare up to the constant by a second point
    total2, _ = log_joint("hmm_forward", "hmm_forward",
                          {"theta1": t2.flip(0), "theta2": t1.flip(0), "mu": mu + 0.5}, d)
    theta_b = torch.stack([t2.flip(0), t1.flip(0)])
    mu_b = mu + 0.5
    gamma = [Normal(mu_b, 1.0).log_prob(y[0])]
    for t in range(1, 100):
        gamma.append(torch.logsumexp(gamma[-1][:, None] + torch.log(theta_b)
                                     + Normal(mu_b, 1.0).log_prob(y[t])[None, :], 0))
    expected2 = Normal(3.0, 1.0).log_prob(mu_b[0]) + Normal(10.0, 1.0).log_prob(mu_b[1]) \
        + torch.logsumexp(gamma[-1], 0)
    assert torch.allclose(total - total2, expected - expected2, rtol=1e-9, atol=1e-9), \
        (float(total - total2), float(expected - expected2))


def test_gp_counts_latent_function(gen):
    d = shipped("gp_counts")
    x, k = d["x"], d["k"]
    rho, alpha = torch.tensor(5.6, dtype=torch.float64), torch.tensor(2.9, dtype=torch.float64)
    ft = torch.randn(11, generator=gen, dtype=torch.float64)
    total, ex = log_joint("gp_counts", "gp_counts", {"rho": rho, "alpha": alpha, "f_tilde": ft}, d)
    cov = alpha ** 2 * torch.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho ** 2)
    f = torch.linalg.cholesky(cov + 1e-10 * torch.eye(11, dtype=torch.float64)) @ ft
    expected = (Gamma(25.0, 4.0).log_prob(rho) + HalfNormal(2.0).log_prob(alpha)
                + Normal(0.0, 1.0).log_prob(ft).sum() + Poisson(torch.exp(f)).log_prob(k).sum())
    assert torch.allclose(total, expected, rtol=1e-10), (float(total), float(expected))
    assert torch.allclose(ex.sites["f"].value, f, rtol=1e-10)


def test_lotka_volterra_ode_model_against_scipy(gen):
    """The log joint of the Lotka-Volterra example (posteriordb hudson_lynx_hare; its year
    count `N` read from the data) at a fixed point against the ODE solved by scipy at
    tight tolerances and lognormal densities: equal within the example's own solver
    tolerances (rtol 1e-5, atol 1e-3 on populations of 1-80)."""
    import numpy as np
    from scipy.integrate import solve_ivp
    from scipy.stats import lognorm, norm
    d = shipped("lotka_volterra")
    theta = [0.55, 0.028, 0.80, 0.024]
    z0, sigma = [33.0, 6.0], [0.25, 0.25]
    values = {"alpha": torch.tensor(theta[0]), "beta": torch.tensor(theta[1]),
              "gamma": torch.tensor(theta[2]), "delta": torch.tensor(theta[3]),
              "z_init": torch.tensor(z0), "sigma": torch.tensor(sigma)}
    data = {"ts": d["ts"], "y": d["y"], "y_init": d["y_init"]}
    p = program("lotka_volterra", "lotka_volterra")  # N = 20, from the shipped data
    x = torch.zeros(20, 1, dtype=torch.float64)
    with torch.no_grad():
        total = p.log_joint_total(x, {**data, **values})
    a, b, c, dl = theta
    sol = solve_ivp(lambda t, u: [u[0] * (a - b * u[1]), u[1] * (dl * u[0] - c)],
                    (0.0, 20.0), z0, t_eval=d["ts"].numpy(), rtol=1e-11, atol=1e-11)
    z = sol.y.T  # (20, 2)
    prior = (sum(norm(m, s).logpdf(v) - norm(m, s).logsf(0.0)
                 for v, (m, s) in zip(theta, [(1.0, 0.5), (0.05, 0.05), (1.0, 0.5), (0.05, 0.05)]))
             + lognorm(1.0, scale=10.0).logpdf(z0).sum()
             + lognorm(1.0, scale=np.exp(-1.0)).logpdf(sigma).sum())
    lik = (lognorm(sigma, scale=z0).logpdf(d["y_init"].numpy()).sum()
           + lognorm(np.asarray(sigma), scale=z).logpdf(d["y"].numpy()).sum())
    assert float(total) == pytest.approx(prior + lik, abs=0.02), (float(total), prior + lik)
