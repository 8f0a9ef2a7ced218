"""E9.1 end to end: a linear regression written with a design matrix (`data X : Row *
Coef`, `X @ beta`), fitted with NUTS, against its closed-form conjugate posterior (known
noise): posterior means and standard deviations within 5 Monte Carlo standard errors."""
import numpy as np

from qvr import loads
from qvr.inference import FitConfig, fit

from helpers import check_moments

N, K, NOISE, PRIOR = 40, 3, 0.5, 10.0

REGRESSION = f"""
object Row : FinSet {N}
object Coef : FinSet {K}

program regression : Row -> Row
    data X : Row * Coef
    sample beta : Coef <- Normal(0.0, {PRIOR})
    let mu = X @ beta
    observe y : Row <- Normal(mu, {NOISE})
    return beta

export regression
"""


def test_nuts_on_a_design_matrix_regression_matches_the_conjugate_posterior():
    g = np.random.default_rng(7)
    X = np.column_stack([np.ones(N), g.normal(size=(N, K - 1))])
    y = X @ np.array([1.5, -2.0, 0.7]) + NOISE * g.normal(size=N)
    prec = X.T @ X / NOISE ** 2 + np.eye(K) / PRIOR ** 2
    cov = np.linalg.inv(prec)
    mean = cov @ X.T @ y / NOISE ** 2
    res = fit(loads(REGRESSION), {"X": X.tolist(), "y": y.tolist()},
              FitConfig(method="nuts", num_warmup=300, num_samples=400, num_chains=2, seed=3))
    assert res.status == "finished"
    rhats = check_moments(res.samples, {"beta": (mean.tolist(), np.sqrt(np.diag(cov)).tolist())},
                          n_mcse=5.0)
    assert max(rhats.values()) < 1.05
