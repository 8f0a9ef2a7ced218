"""Adaptive multiple importance sampling from a Normal approximation (``--resample amis``).

A Normal approximation of a posterior in its unconstrained space (Laplace's ``N(ẑ,
(-H)^-1)``, Pathfinder's draws) has the right centre and roughly the right spread, but not
the posterior's skew, curvature or tails; reweighting its own draws (``--resample psis``)
corrects it only where its k-hat is already below 0.7.  `amis` moves the proposal to the
posterior, round after round (Cornuet, Marin, Mira & Robert 2012, "Adaptive multiple
importance sampling"; the weights Pareto-smoothed, Vehtari et al. 2024):

1. round ``t`` draws `per_round` points from ``q_t = N(m_t, C_t)`` (``q_0`` the given
   approximation, its covariance times `inflate`) and evaluates the target's log density
   at them, `chunk` at a time;
2. every draw so far, of every round, is weighted against the *mixture* of all proposals
   so far, each in proportion to its draws (the deterministic-mixture weight
   ``p~(z) / Σ_j (n_j / N) q_j(z)``, which keeps a proposal that missed a region from
   giving its few draws there huge weights);
3. ``m_{t+1}``, ``C_{t+1}`` are the Pareto-smoothed weighted mean and covariance of all the
   draws (`psis_log_weights`), the covariance times `inflate` (a proposal wider than its
   target is safe, a narrower one is not).

The result is every draw with its log ratio ``log p~ - log q_mix``: the caller computes
k-hat of those ratios and resamples the run's draws by their smoothed weights (as
``--resample psis`` does).  A round whose weighted covariance is not positive definite
keeps the previous proposal.  A draw where the density is not finite has ratio -inf (a
zero weight).

Measured (Laplace start, 8 rounds of 16,000 draws, float64, seeds 1-4, against
posteriordb's reference draws): gp_pois_regr, whose Laplace draws have k-hat 0.69-1.11 and
are too far off to be reweighted, comes within 0.02-0.08 reference sds of every mean with
sds 0.84-0.91 of the reference's (k-hat 0.49-0.65), in 0.6-3 s on top of the mode search;
eight schools, kid_scores and arK come within 0.01-0.05 sds, sds 0.96-1.02.  Rounds of
4,000 draws left gp's sds at 0.76-0.80: the curved ridge between the GP's amplitude and its
latent values is reached only by many draws, which are cheap here (one batched density
evaluation per chunk), hence 16,000 per round where the time allows.

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

from qvr.inference.vi.pathfinder import psis_log_weights

#: rounds of proposals (the first is the given approximation)
ROUNDS = 8
#: draws per round where the time budget allows
PER_ROUND = 16000
#: draws per round however slow the density (fewer rounds instead)
MIN_PER_ROUND = 250
#: each proposal's covariance is the weighted one times this
INFLATE = 1.5
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


def weighted_moments(z: torch.Tensor, log_ratios: np.ndarray) -> tuple:
    """``(mean, covariance, ess)`` of rows `z` under the Pareto-smoothed weights of
    `log_ratios`."""
    lw = psis_log_weights(log_ratios)
    w = np.exp(lw - lw[np.isfinite(lw)].max())
    w = w / w.sum()
    wt = torch.as_tensor(w, dtype=z.dtype, device=z.device)
    m = (wt[:, None] * z).sum(0)
    d = z - m
    return m, (d * wt[:, None]).T @ d, float(1.0 / np.sum(w ** 2))


def amis(log_density: Callable[[torch.Tensor], torch.Tensor], loc: torch.Tensor,
         scale_tril: torch.Tensor, *, rounds: int = ROUNDS, per_round: int = PER_ROUND,
         inflate: float = INFLATE, df: int = DF, budget_s: float = 10.0,
         chunk: int = 2000,
         generator: Optional[torch.Generator] = None,
         should_stop: Optional[Callable[[], bool]] = None,
         on_round: Optional[Callable[[int, int, float], None]] = None) -> AmisResult:
    """Adaptive multiple importance sampling (module docstring) from ``N(loc, scale_tril
    scale_trilᵀ)`` on the target `log_density` (rows ``(n, D)`` float64 -> ``(n,)``; it may
    raise on a chunk: those draws get -inf).  `on_round(round, rounds, ess)` after each
    round (1-based)."""
    m = loc.detach().to(torch.float64).reshape(-1)
    D = m.shape[0]
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
                    lp = log_density(part).detach().to(torch.float64).reshape(-1)
            except (ValueError, RuntimeError):
                lp = torch.full((part.shape[0],), -math.inf, dtype=torch.float64)
            out.append(torch.where(torch.isnan(lp), torch.full_like(lp, -math.inf), lp))
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
            n_next = max(MIN_PER_ROUND, min(per_round, n_fit))
            n = n_next
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
