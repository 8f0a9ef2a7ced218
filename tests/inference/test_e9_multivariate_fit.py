"""E9.9 multivariate families under inference: NUTS recovers a correlation under an LKJ prior
(against the exact posterior by 1-D quadrature), and the non-centred correlated-effects
program (a product-plate `z : Group * Coef`, `z @ transpose(diag(tau) @ L)`) fits with NUTS
and SVI.  Fixed seeds; tolerances from Monte Carlo standard errors."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

import qvr
from qvr.inference import fit
from qvr.inference.criticism.diagnostics import ess_bulk

RHO, N, ETA = 0.6, 120, 2.0
Y = np.random.default_rng(4).multivariate_normal([0.0, 0.0], [[1.0, RHO], [RHO, 1.0]], N)

CORR = f"""object Obs : FinSet {N}
object L : CorrCholesky 2

program corr : Obs -> Obs
    sample l <- LKJCholesky({ETA}) [over=L]
    observe y : Obs <- MultivariateNormal(0.0, l)
    return l
export corr
"""


def exact_posterior() -> tuple[float, float]:
    """r ~ LKJ(eta) on 2×2: p(r) ∝ (1 - r²)^(eta-1); y_i ~ N(0, [[1, r], [r, 1]])."""
    s11, s22, s12 = (Y[:, 0] ** 2).sum(), (Y[:, 1] ** 2).sum(), (Y[:, 0] * Y[:, 1]).sum()

    def log_post(r):
        det = 1 - r * r
        return (ETA - 1) * math.log(det) - N / 2 * math.log(det) \
            - (s11 + s22 - 2 * r * s12) / (2 * det)
    top = max(log_post(r) for r in np.linspace(-0.99, 0.99, 199))
    w = lambda r, k: r ** k * math.exp(log_post(r) - top)  # noqa: E731
    z = integrate.quad(w, -1, 1, args=(0,), points=[RHO])[0]
    m = integrate.quad(w, -1, 1, args=(1,), points=[RHO])[0] / z
    m2 = integrate.quad(w, -1, 1, args=(2,), points=[RHO])[0] / z
    return m, math.sqrt(m2 - m * m)


def test_nuts_recovers_the_correlation_of_the_exact_posterior():
    r = fit(qvr.loads(CORR), data={"y": Y},
            config={"method": "nuts", "num_warmup": 200, "num_samples": 300, "num_chains": 2,
                    "seed": 3})
    assert r.status == "finished", r.message
    L = np.asarray(r.samples["l"], dtype=float)
    assert L.shape == (2, 300, 2, 2)
    assert np.allclose(L[..., 0, 0], 1.0) and np.allclose(L[..., 0, 1], 0.0)
    assert np.allclose(L[..., 1, 0] ** 2 + L[..., 1, 1] ** 2, 1.0, atol=1e-5)
    rho = L[..., 1, 0]
    mean, sd = exact_posterior()
    mcse = rho.std() / math.sqrt(float(ess_bulk(rho)))
    assert abs(rho.mean() - mean) < 5 * mcse, (rho.mean(), mean, mcse)
    assert abs(rho.std() / sd - 1) < 0.2, (rho.std(), sd)


HIER = """object Group : FinSet 8
object Obs : FinSet 64
object Coef : FinSet 2
object L : CorrCholesky 2

program hier : Obs -> Obs
    data g : Obs
    data X : Obs * Coef
    sample l <- LKJCholesky(2.0) [over=L]
    sample tau : Coef <- HalfNormal(1.0)
    sample z : Group * Coef <- Normal(0.0, 1.0)
    let effects = z @ transpose(diag(tau) @ l)
    let mu = sum(X * effects[g], Coef)
    observe y : Obs <- Normal(mu, 0.3)
    return l
export hier
"""


def hier_data():
    rng = np.random.default_rng(8)
    b = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.5], [0.5, 1.0]], 8)
    g = np.repeat(np.arange(8), 8)
    X = np.stack([np.ones(64), rng.normal(size=64)], 1)
    return {"y": (X * b[g]).sum(1) + rng.normal(0, 0.3, 64), "g": g, "X": X}


@pytest.mark.parametrize("method", ["svi", "nuts"])
def test_the_non_centred_correlated_effects_program_fits(method):
    config = {"method": "svi", "num_steps": 300, "seed": 2} if method == "svi" else \
        {"method": "nuts", "num_warmup": 60, "num_samples": 40, "num_chains": 1, "seed": 2}
    r = fit(qvr.loads(HIER), data=hier_data(), config=config)
    assert r.status == "finished", r.message
    if method == "nuts":
        z = np.asarray(r.samples["z"], dtype=float)
        assert z.shape == (1, 40, 8, 2)  # the product plate's axes, not |Group·Coef|
        L = np.asarray(r.samples["l"], dtype=float)
        assert np.all(np.abs(L[..., 1, 0]) < 1) and np.all(np.isfinite(z))
