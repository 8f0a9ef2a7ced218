"""Shared models and checks of the inference tests.

Models with known posteriors are small QVR programs; `check_moments` compares posterior
draws with exact means and standard deviations within 4 Monte Carlo standard errors.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from qvr import loads
from qvr.inference.criticism.diagnostics import ess_mean, split_rhat

NORMAL_NORMAL = """
object Obs : FinSet 20
program normal_normal : Obs -> Obs
    sample mu <- Normal(1.0, 2.0)
    observe y : Obs <- Normal(mu, 1.5)
    return mu
export normal_normal
"""

def mu_sigma(n: int) -> str:
    """`n` observations with an unknown mean and a positive scale (HalfNormal)."""
    return f"""
object Obs : FinSet {n}
program nn : Obs -> Obs
    sample mu <- Normal(0.0, 5.0)
    sample sigma <- HalfNormal(2.0)
    observe y : Obs <- Normal(mu, sigma)
    return mu
export nn
"""


BETA_BERNOULLI = """
object Trial : FinSet 30
program coin : Trial -> Trial
    sample p <- Beta(2.0, 3.0)
    observe flip : Trial <- Bernoulli(p)
    return p
export coin
"""

def correlated(rho: float) -> str:
    """(a, b) jointly Normal, unit variances, correlation `rho` (precision diagonal
    1 / (1 - rho²))."""
    return f"""
object One : FinSet 1
program correlated : One -> One
    sample a <- Normal(0.0, 1.0)
    let m = {rho} * a
    sample b <- Normal(m, {math.sqrt(1 - rho ** 2)})
    return a
export correlated
"""


RHO = 0.9
CORRELATED = correlated(RHO)

#: a program with a discrete latent site `k` (neither guides nor MCMC accept it)
DISCRETE_LATENT = """
object Obs : FinSet 5
program disc : Obs -> Obs
    sample k <- Poisson(3.0)
    observe y : Obs <- Normal(k, 1.0)
    return k
export disc
"""

FUNNEL = """
object Dim : FinSet 9
object One : FinSet 1
program funnel : One -> One
    sample v <- Normal(0.0, 3.0)
    let s = exp(v / 2.0)
    sample xs : Dim <- Normal(0.0, s) [iid_over=Dim]
    return v
export funnel
"""


def normal_normal_case(seed: int = 0):
    """(model, x, observations, exact {site: (means, sds)})."""
    g = torch.Generator().manual_seed(seed)
    y = 1.0 + 1.5 * torch.randn(20, generator=g) + 0.7
    m0, s0, s = 1.0, 2.0, 1.5
    prec = 1 / s0 ** 2 + 20 / s ** 2
    mean = (m0 / s0 ** 2 + float(y.sum()) / s ** 2) / prec
    model = loads(NORMAL_NORMAL).morphism
    return model, torch.zeros(20, 1), {"y": y}, {"mu": ([mean], [prec ** -0.5])}


def normal_normal_rows(n: int, seed: int = 3):
    """`n` observations for `NORMAL_NORMAL`'s model (any row count: it observes the rows
    given) and their exact posterior ``(y, mean, sd)`` (prior Normal(1, 2), noise 1.5):
    the minibatch fits' conjugate case."""
    g = torch.Generator().manual_seed(seed)
    y = 1.7 + 1.5 * torch.randn(n, generator=g)
    m0, s0, s = 1.0, 2.0, 1.5
    prec = 1 / s0 ** 2 + n / s ** 2
    return y, (m0 / s0 ** 2 + float(y.sum()) / s ** 2) / prec, prec ** -0.5


#: global latents, a plate, a local latent (one per row), host covariates and an index:
#: what minibatches cut and scale (`tests/inference/test_minibatch.py`)
RANDOM_EFFECTS = """\
object Group : FinSet 4
object Row : FinSet 60

program effects : Row -> Row
    sample mu <- Normal(0.0, 3.0)
    sample tau <- HalfNormal(1.0)
    sample level : Group <- Normal(mu, tau) [iid_over=Group]
    sample slope <- Normal(0.0, 1.0)
    let centre = level[group_of] + slope * income
    sample u <- Normal(centre, 0.5)
    observe y : Row <- Normal(u, 0.8)
    return u

export effects
"""

#: `RANDOM_EFFECTS` without its local latent: a guide draw is the same for any rows
#: (data-parallel fits give the one-process parameters exactly)
GROUP_EFFECTS = RANDOM_EFFECTS.replace("    sample u <- Normal(centre, 0.5)\n", "") \
    .replace("observe y : Row <- Normal(u, 0.8)", "observe y : Row <- Normal(centre, 0.8)") \
    .replace("return u", "return y")


def effects_data(n: int = 60, seed: int = 0) -> dict:
    """Rows for `RANDOM_EFFECTS` / `GROUP_EFFECTS`: ``y``, ``income``, ``group_of``."""
    g = np.random.default_rng(seed)
    group_of = g.integers(0, 4, n)
    income = g.normal(size=n).astype(np.float32)
    y = (np.array([0.5, -1.0, 1.5, 0.0])[group_of] + 0.7 * income
         + g.normal(scale=1.0, size=n)).astype(np.float32)
    return {"y": torch.tensor(y), "income": torch.tensor(income),
            "group_of": torch.tensor(group_of)}


def beta_bernoulli_case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    flips = (torch.rand(30, generator=g) < 0.3).long()
    a, b = 2.0 + float(flips.sum()), 3.0 + float(30 - flips.sum())
    mean = a / (a + b)
    sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    model = loads(BETA_BERNOULLI).morphism
    return model, torch.zeros(30, 1), {"flip": flips}, {"p": ([mean], [sd])}


def correlated_case(seed: int = 0):
    model = loads(CORRELATED).morphism
    return model, torch.zeros(1, 1), {}, {"a": ([0.0], [1.0]), "b": ([0.0], [1.0])}


def mcse_sd(x: np.ndarray) -> float:
    """MCSE of the standard deviation of `(chains, draws)` draws (delta method on the ESS
    of the squared deviations)."""
    m = x.mean()
    sq = (x - m) ** 2
    sd = math.sqrt(sq.mean())
    ess = np.asarray(ess_mean(sq[..., None])).item()
    return math.sqrt(sq.var() / ess) / (2 * sd)


def check_moments(samples: dict, exact: dict, n_mcse: float = 4.0) -> dict:
    """Every coordinate's mean and sd within `n_mcse` MCSE of the exact values; returns the
    rank-normalised R-hat per coordinate."""
    rhats = {}
    for name, (means, sds) in exact.items():
        draws = samples[name]
        draws = draws.detach().cpu().double().numpy() if isinstance(draws, torch.Tensor) \
            else np.asarray(draws, dtype=float)
        draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
        for k, (m, s) in enumerate(zip(means, sds)):
            x = draws[..., k]
            se_mean = x.std() / math.sqrt(np.asarray(ess_mean(x[..., None])).item())
            assert abs(x.mean() - m) < n_mcse * se_mean, \
                f"{name}[{k}] mean {x.mean():.4f} vs exact {m:.4f} (mcse {se_mean:.4f})"
            assert abs(x.std() - s) < n_mcse * mcse_sd(x), \
                f"{name}[{k}] sd {x.std():.4f} vs exact {s:.4f} (mcse {mcse_sd(x):.4f})"
            rhats[f"{name}[{k}]"] = np.asarray(split_rhat(x[..., None])).item()
    return rhats
