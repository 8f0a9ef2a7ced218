"""Adaptive multiple importance sampling from a Normal approximation (``--resample amis``).

A Normal approximation of a posterior in its unconstrained space (Laplace's ``N(ẑ,
(-H)^-1)``, Pathfinder's draws) has the right centre and roughly the right spread, but not
the posterior's skew, curvature or tails; reweighting its own draws (``--resample psis``)
corrects it only where its k-hat is already below 0.7.  `amis` moves the proposal to the
posterior, round after round (Cornuet, Marin, Mira & Robert 2012, "Adaptive multiple
importance sampling"; the weights Pareto-smoothed, Vehtari et al. 2024):

1. round ``t`` draws `per_round` points from ``q_t``, a Student-t of `DF` (4) degrees of
   freedom with covariance ``s² C_t`` (``C_0`` the given approximation's; ``s²`` the
   inflation, `inflation`: 3 up to 13 coordinates, less above) and evaluates the
   target's log density at them, `chunk` at a time;
2. every draw so far, of every round, is weighted against the *mixture* of all proposals
   so far, each in proportion to its draws (the deterministic-mixture weight
   ``p~(z) / Σ_j (n_j / N) q_j(z)``, which keeps a proposal that missed a region from
   giving its few draws there huge weights);
3. ``m_{t+1}``, ``C_{t+1}`` are the Pareto-smoothed weighted mean and covariance of all the
   draws (`psis_weights`).

The result is every draw with its log ratio ``log p~ - log q_mix``: the caller computes
k-hat of those ratios and resamples the run's draws by their smoothed weights (as
``--resample psis`` does).  A round whose weighted covariance is not positive definite
keeps the previous proposal.  A draw where the density is not finite has ratio -inf (a
zero weight).

Decisions, measured (seeds as given; "sd" means the reference posterior's sd):

* *Student-t, not Normal, proposals.*  A Normal proposal's tails are lighter than a
  posterior with exponential tails (a variance's, a banana's arm), so the weights there
  are unbounded; k-hat does not always see it.  On the banana ``a ~ N(0, 1), b ~ N(a²,
  1)`` (8 rounds of 8,000, seeds 0-7), Normal proposals put b's mean at 0.89-1.22 and its
  sd at 0.87-1.14 of the exact ones with k-hat 0.51-2.31; Student-t (4 degrees) at
  0.99-1.04 and 0.99-1.03 with k-hat 0.19-0.36.
* *Inflation 3 where the dimension allows it* (`inflation`).  On gp_pois_regr (D = 13,
  Laplace start, seeds 1-12), inflation 1.5 left k-hat at 0.56-0.74 (some seeds above
  0.7: not resampled) and sds at 0.79-0.85 of the reference's; 3 gave k-hat 0.51-0.69,
  every mean within 0.15 sds and sds 0.82-1.07.
* *Draws per round.*  Rounds of 4,000 left gp's sds lower (0.76-0.80, Normal
  proposals); 48,000 made k-hat's estimate cross 0.7 more often, not less.  16,000 it
  is, where the time allows.
* *Weights by each proposal's share of the draws.*  The first round has fewer draws
  than the others (its cost sets their number); weighting the proposals equally biased
  a correlated Normal's mean by five standard errors (the test catches it).

The work is bounded by time (`budget_s`): the first chunk's cost sets the draws per round
(at least `MIN_PER_ROUND`), and rounds stop when the budget is spent; each round after the
first costs one log q of every draw under the new proposal (``O(N D²)``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from qvr.inference.vi.pathfinder import psis_weights

#: rounds of proposals (the first is the given approximation)
ROUNDS = 8
#: draws per round where the time budget allows
PER_ROUND = 16000
#: draws per round however slow the density (fewer rounds instead)
MIN_PER_ROUND = 250
#: each proposal's covariance is the weighted one times an inflation (`inflation`): at
#: most this, and no more than leaves `MIN_EFFICIENCY` of the draws effective were the
#: posterior the Normal of that covariance
MAX_INFLATE = 3.0
MIN_EFFICIENCY = 0.02
#: the proposals' degrees of freedom (Student-t, a whole number: 0 for Normal proposals)
DF = 4
#: at most this many numbers in all the draws together (``N x D``: 160 MB of float64);
#: fewer draws per round for a large D
MAX_NUMBERS = 20_000_000


@dataclass
class AmisResult:
    """Every draw ``(N, D)`` (float64, unconstrained), its log ratio against the mixture of
    proposals (``(N,)`` numpy; -inf where the density is not finite), the rounds run, the
    draws per round, and per round the ESS of the smoothed weights of all draws so far."""

    draws: torch.Tensor
    log_ratios: np.ndarray
    rounds: int
    per_round: int
    ess: list = field(default_factory=list)
    stopped: str = ""


def _log_normal(z: torch.Tensor, m: torch.Tensor, L: torch.Tensor, df: float = 0.0) \
        -> torch.Tensor:
    """``log N(z; m, L Lᵀ)`` of rows `z` (n, D); with `df` > 0 the Student-t of `df`
    degrees of freedom and scale matrix ``L Lᵀ``."""
    eps = torch.linalg.solve_triangular(L, (z - m).T, upper=False).T
    D = m.shape[0]
    maha = (eps ** 2).sum(-1)
    logdet = torch.log(torch.diagonal(L)).sum()
    if not df:
        return -0.5 * maha - logdet - 0.5 * D * math.log(2 * math.pi)
    return (math.lgamma((df + D) / 2) - math.lgamma(df / 2) - 0.5 * D * math.log(df * math.pi)
            - logdet - 0.5 * (df + D) * torch.log1p(maha / df))


def cholesky_or_none(C: torch.Tensor) -> Optional[torch.Tensor]:
    """A Cholesky factor of symmetric `C`, with a jitter relative to its diagonal where
    needed; None when it is not positive definite even so."""
    C = 0.5 * (C + C.T)
    scale = float(torch.diagonal(C).abs().mean()) or 1.0
    for jitter in (0.0, 1e-10, 1e-8, 1e-6):
        L, info = torch.linalg.cholesky_ex(C + jitter * scale * torch.eye(
            C.shape[0], dtype=C.dtype, device=C.device))
        if int(info) == 0 and bool(torch.isfinite(L).all()):
            return L
    return None


def inflation(D: int) -> float:
    """The widest inflation ``s² <= MAX_INFLATE`` of a proposal's covariance whose
    importance efficiency on a Normal posterior of dimension `D` with the uninflated
    covariance, ``1 / E_q[w²] = (s^D (2 - 1/s²)^(-D/2))^-1``, is at least
    `MIN_EFFICIENCY`: 3 up to 13 coordinates, 1.5 at 60, 1.06 at 2,000.  A wider
    proposal covers a skewed or curved posterior's tails (gp_pois_regr: the module
    docstring's figures), but costs its efficiency to the power D."""
    if D <= 0:
        return MAX_INFLATE
    # the cost is (D/2) log(s⁴ / (2s² - 1)); at the limit s⁴ - 2c s² + c = 0, with
    # c = MIN_EFFICIENCY^(-2/D): the larger root
    c = MIN_EFFICIENCY ** (-2.0 / D)
    return min(MAX_INFLATE, c + math.sqrt(c * c - c))


def weighted_moments(z: torch.Tensor, log_ratios: np.ndarray) -> tuple:
    """``(mean, covariance, ess)`` of rows `z` under the Pareto-smoothed weights of
    `log_ratios`."""
    w, ess = psis_weights(log_ratios)
    return (*moments(z, w), ess)


def moments(z: torch.Tensor, w: np.ndarray) -> tuple:
    """``(mean, covariance)`` of rows `z` under normalised weights `w`."""
    wt = torch.as_tensor(w, dtype=z.dtype, device=z.device)
    m = (wt[:, None] * z).sum(0)
    d = z - m
    return m, (d * wt[:, None]).T @ d


def amis(log_density: Callable[[torch.Tensor], torch.Tensor], loc: torch.Tensor,
         scale_tril: torch.Tensor, *, rounds: int = ROUNDS, per_round: int = PER_ROUND,
         inflate: Optional[float] = None, df: int = DF, budget_s: float = 10.0,
         chunk: int = 2000,
         generator: Optional[torch.Generator] = None,
         should_stop: Optional[Callable[[], bool]] = None,
         on_round: Optional[Callable[[int, int, float], None]] = None) -> AmisResult:
    """Adaptive multiple importance sampling (module docstring) from ``N(loc, scale_tril
    scale_trilᵀ)`` on the target `log_density` (rows ``(n, D)`` float64 -> ``(n,)``; it may
    raise on a chunk: those draws get -inf, as do NaN and +inf values).  `inflate` None: `inflation(D)`.
    `on_round(round, rounds, ess)` after each round (1-based)."""
    m = loc.detach().to(torch.float64).reshape(-1)
    D = m.shape[0]
    if inflate is None:
        inflate = inflation(D)
    # a Student-t's scale matrix for the covariance asked (df / (df - 2) times it)
    tscale = math.sqrt((df - 2) / df) if df > 2 else 1.0
    L = scale_tril.detach().to(torch.float64) * math.sqrt(inflate) * tscale
    if generator is None:
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))
    t0 = time.perf_counter()

    def density(z: torch.Tensor) -> torch.Tensor:
        out = []
        for a in range(0, z.shape[0], chunk):
            part = z[a:a + chunk]
            try:
                with torch.no_grad():
                    lp = log_density(part).detach().to(device="cpu",
                                                       dtype=torch.float64).reshape(-1)
            except (ValueError, RuntimeError):
                lp = torch.full((part.shape[0],), -math.inf, dtype=torch.float64)
            # NaN or +inf: not a point of the posterior (a zero weight)
            out.append(torch.where(torch.isfinite(lp), lp, torch.full_like(lp, -math.inf)))
        return torch.cat(out)

    props: list = []        # (m, L) of each round's proposal
    Z, LP = [], []          # draws and log p~ per round
    LQ: list = []           # LQ[j]: log q_j at every draw so far, (N,)
    ess: list = []
    per_round = max(MIN_PER_ROUND, min(per_round, MAX_NUMBERS // max(rounds * D, 1)))
    n = min(per_round, max(MIN_PER_ROUND, chunk))
    stopped = ""
    ratios = np.zeros(0)
    for t in range(rounds):
        eps = torch.randn(n, D, dtype=torch.float64, generator=generator)
        if df:  # a chi-square of `df` degrees of freedom per draw, from the generator
            chi2 = (torch.randn(n, int(df), dtype=torch.float64, generator=generator) ** 2
                    ).sum(-1)
            eps = eps / torch.sqrt(chi2 / df)[:, None]
        z = m + eps @ L.T
        t_round = time.perf_counter()
        lp = density(z)
        if t == 0:  # the draws per round from the first round's cost
            cost = (time.perf_counter() - t_round) / n
            n_fit = int((budget_s - (time.perf_counter() - t0)) / max(rounds - 1, 1)
                        / max(cost, 1e-9))
            n = max(MIN_PER_ROUND, min(per_round, n_fit))
        # the mixture: earlier proposals at the new draws, the new one at every draw
        LQ = [torch.cat([lq, _log_normal(z, pm, pL, df)]) for lq, (pm, pL) in zip(LQ, props)]
        props.append((m, L))
        Z.append(z)
        LP.append(lp)
        allz = torch.cat(Z)
        LQ.append(_log_normal(allz, m, L, df))
        # each proposal in proportion to its draws (the first round has fewer)
        share = torch.tensor([math.log(zj.shape[0]) for zj in Z], dtype=torch.float64) \
            - math.log(allz.shape[0])
        log_mix = torch.logsumexp(torch.stack(LQ) + share[:, None], 0)
        ratios = (torch.cat(LP) - log_mix).numpy()
        if np.isfinite(ratios).sum() < 2:
            stopped = "the density is not finite at the proposal's draws"
            ess.append(0.0)
            break
        mean, cov, e = weighted_moments(allz, ratios)
        ess.append(e)
        if on_round is not None:
            on_round(t + 1, rounds, e)
        if t + 1 == rounds:
            break
        if should_stop is not None and should_stop():
            stopped = "stopped"
            break
        if time.perf_counter() - t0 > budget_s:
            stopped = f"the time budget ({budget_s:.3g} s) was spent"
            break
        L_new = cholesky_or_none(cov * inflate * tscale ** 2)
        if L_new is not None and bool(torch.isfinite(mean).all()):
            m, L = mean, L_new
    return AmisResult(torch.cat(Z) if Z else torch.zeros(0, D, dtype=torch.float64),
                      ratios, len(props), n, ess, stopped)
