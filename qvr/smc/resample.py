"""The resampling step of SMC steering: threshold `c*`, deterministic / stratified split,
reweighting (qvr-runtime.md §8.2 steps 3–7, §8.3).

This module is pure tensor numerics on one vector of child log-weights: it knows nothing
of strings, language models or potentials (those live in `steering.py`).  Everything is
float64.  It does not expand particles and does not decide when the loop ends.

The scheme is the without-replacement resampling of the user's Algorithm 3 (design
document 001, "Sequential Monte Carlo Transformer Steering"), itself the resampling of
Lew et al. (2023), *Sequential Monte Carlo Steering of Large Language Models using
Probabilistic Programs*, arXiv:2306.03081, following Fearnhead & Clifford (2003),
*On-line inference for hidden Markov models via particle filters*, JRSS B 65(4).  With
`M` children of normalised weights `ŵ` and a budget of `N` survivors:

* the `L` heaviest children (those with `c*·ŵ ≥ 1`) are kept deterministically with their
  own weight;
* `N − L` of the others are chosen by stratified (systematic) sampling, child `j` with
  probability `c*·ŵ_j` and at most once, each survivor carrying weight `W / c*`;

so the expected total weight is preserved exactly (unbiasedness of `Ẑ`).  Two corrections
of the design pseudo-code (spec §8.2, last paragraph) are followed: the stratum width is
`S_L / (N − L)`, and stratified survivors carry the total of *all* unnormalised weights
divided by `c*`.

Arrays are numpy float64 / int64 (anything `numpy.asarray` accepts is taken as input):
on the small vectors of a step, numpy costs a fraction of torch's per-call overhead.
Weights here are *unscaled*: the caller passes `log u` with `w = u · N'/N` for a common
factor; since deterministic survivors get `w · N/N'` and stratified ones `W · N/(c*·N')`,
the factor cancels and the new weights are `u_j` and `U / c*` (with `U = Σ u`), so a
finished particle kept deterministically keeps its weight bit for bit.

Example::

    >>> import numpy as np, torch
    >>> log_u = np.log([0.5, 0.3, 0.1, 0.1])
    >>> r = resample(log_u, 2, torch.Generator().manual_seed(0))
    >>> r.num_det, len(r.indices)
    (1, 2)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

__all__ = ["Threshold", "Resampled", "logsumexp", "normalise", "threshold", "stratified_select",
           "resample"]


@dataclass(frozen=True)
class Threshold:
    """The outcome of spec §8.2 steps 4–5 on one weight vector.

    Fields:
      c_star: the threshold `c*` (``math.inf`` when at most `N` children have positive weight).
      num_det: `L`, the number of children kept deterministically (`m` when `c* = ∞`).
      det: int64 indices of the deterministic children (in sorted order, heaviest first,
        ties by index; for `c* = ∞` all positive children in index order).
      stoch: int64 indices of all other children, in index order (empty when `c* = ∞`).
      tail: `S_L`, the sum of the normalised weights outside `det` (0 when `c* = ∞`).
    """

    c_star: float
    num_det: int
    det: np.ndarray
    stoch: np.ndarray
    tail: float


@dataclass(frozen=True)
class Resampled:
    """A new population of exactly `N` particles drawn from the children.

    Fields:
      indices: int64 `(N,)`, the child each survivor copies (deterministic ones first).
      log_weights: float64 `(N,)`, the survivors' unscaled log-weights (`-inf` for dead ones).
      dead: bool `(N,)`, filler particles of weight 0 (never expanded again).
      c_star: the threshold used (``math.inf`` when no child was dropped).
      num_det: `L`, the number of deterministic survivors.
      log_total: `log U`, the log of the total unscaled weight of the children.
    """

    indices: np.ndarray
    log_weights: np.ndarray
    dead: np.ndarray
    c_star: float
    num_det: int
    log_total: float


def logsumexp(x: np.ndarray) -> float:
    """``log Σ exp(x)`` of a float64 vector (``-inf`` when empty or all ``-inf``)."""
    if x.size == 0:
        return -math.inf
    top = float(x.max())
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.exp(x - top).sum()))


def normalise(log_u) -> tuple[float, np.ndarray]:
    """``(log W, ŵ)``: the log total (log-sum-exp) and the normalised float64 weights.

    ``log W`` is ``-inf`` and ``ŵ`` all zeros when every weight is zero.
    """
    log_u = np.asarray(log_u, dtype=np.float64)
    log_total = logsumexp(log_u)
    if log_total == -math.inf:
        return -math.inf, np.zeros_like(log_u)
    return log_total, np.exp(log_u - log_total)


def threshold(w_hat, n: int) -> Threshold:
    """`c* = inf{c > 0 : Σ min(1, c·ŵ) > N}` by sorting (spec §8.2 steps 4–5).

    `w_hat` is a float64 vector of normalised weights (non-negative, summing to 1).  When
    more than `n` entries are positive, the normalised weights are sorted decreasingly
    (stable, so ties keep index order), `S_L` is the sum of all but the `L` largest and
    `c_L = (N − L)/S_L`; the smallest `L ∈ {0..N−1}` with `c_L·ŵ₍L+1₎ < 1` gives `c* = c_L`,
    and the `L` largest are deterministic.  The split is decided by sorted position, never
    by recomputing `c*·ŵ`.
    """
    if n < 1:
        raise ValueError(f"the number of particles must be at least 1, got {n}")
    w_hat = np.asarray(w_hat, dtype=np.float64)
    positive = w_hat > 0
    m = int(positive.sum())
    if m <= n:
        det = np.flatnonzero(positive)
        return Threshold(math.inf, m, det, np.empty(0, dtype=np.int64), 0.0)
    order = np.argsort(-w_hat, kind="stable")
    vals = w_hat[order]
    # tail[L] = Σ_{r ≥ L} vals[r] (0-based), summed from the smallest for accuracy.
    tail = np.cumsum(vals[::-1])[::-1]
    ls = np.arange(n, dtype=np.float64)
    # c_L · ŵ₍L+1₎ < 1  ⇔  (N − L) · vals[L] < tail[L]   (tail[L] > 0 since m > N ≥ L + 1)
    ok = np.flatnonzero((n - ls) * vals[:n] < tail[:n])
    # ok is non-empty in exact arithmetic; if rounding erased the tail beyond N − 1, the
    # last deterministic slot is drawn stochastically instead (it is then selected a.s.).
    num_det = int(ok[0]) if ok.size else n - 1
    s_l = float(tail[num_det])
    det = order[:num_det]
    keep = np.ones(w_hat.shape, dtype=bool)
    keep[det] = False
    return Threshold((n - num_det) / s_l, num_det, det, np.flatnonzero(keep), s_l)


def uniform(generator: Optional[torch.Generator] = None) -> float:
    """One Uniform[0, 1) draw from `generator` (the global torch RNG when None)."""
    return float(torch.rand((), dtype=torch.float64, generator=generator))


def stratified_select(weights, k: int, generator: Optional[torch.Generator] = None,
                      u0: Optional[float] = None) -> np.ndarray:
    """Choose `k` positions of `weights` (non-negative, at least one positive) by
    systematic sampling with stratum width `α = Σ weights / k` (spec §8.2 step 6).

    This is the walk "``U ← U − ŵ_j``; select `j` if ``U < 0`` and add ``α``" written as
    a search: with running sums `C_j`, the `r`-th point `U₀ + r·α` selects the unique `j`
    with `C_{j−1} ≤ U₀ + r·α < C_j`.  A point that rounding pushes to `C_last` or beyond
    selects the last positive entry, so exactly `k` positions come back, never a
    zero-weight one; an entry with weight below `α` is selected at most once, with
    probability `weight/α`.  `U₀ ~ Uniform[0, α)` comes from `generator` unless given.
    Returns int64 positions in increasing order.
    """
    weights = np.asarray(weights, dtype=np.float64)
    csum = np.cumsum(weights)
    alpha = float(csum[-1]) / k
    if u0 is None:
        u0 = uniform(generator) * alpha
    points = u0 + alpha * np.arange(k, dtype=np.float64)
    picks = np.searchsorted(csum, points, side="right")
    last_positive = int(np.flatnonzero(weights > 0)[-1])
    return np.minimum(picks, last_positive)


def resample(log_u, n: int, generator: Optional[torch.Generator] = None) -> Resampled:
    """One resampling step (spec §8.2 steps 3–7) from `M` children to exactly `n` survivors.

    `log_u` are the children's unscaled float64 log-weights in lexicographic `(i, k)` order
    (`-inf` for weight 0).  If every weight is zero, returns the first `n` children
    (padded with copies of the last one), all dead with weight 0 and ``log_total = -inf``:
    the caller stops there (step 3).  If at most `n` children have positive weight they
    are all kept (in index order) and the remaining slots are dead fillers copying the
    first kept child.  Otherwise the `L` heaviest are kept with their weights and `n − L`
    others are drawn by `stratified_select`, each with weight ``U / c*`` computed as
    ``Σ_{stoch} u / (n − L)``.

    This is `normalise`, `threshold` and `stratified_select` composed, inlined (the same
    indices, weights and draws; only ``c_star`` may differ in the last bits when no child
    is deterministic; tests/smc/test_smc_resample.py checks it against the composition):
    it runs once per SMC step on a few hundred weights, where numpy's per-call cost is
    most of the time.
    """
    log_u = np.asarray(log_u, dtype=np.float64)
    log_total = logsumexp(log_u)
    if log_total == -math.inf:
        idx = np.minimum(np.arange(n), log_u.size - 1)
        return Resampled(idx, np.full(n, -math.inf), np.ones(n, dtype=bool), math.inf, 0,
                         -math.inf)
    if n < 1:
        raise ValueError(f"the number of particles must be at least 1, got {n}")
    w_hat = np.exp(log_u - log_total)
    if np.count_nonzero(w_hat) <= n:  # c* = ∞: keep every positive child
        det = np.flatnonzero(w_hat)
        fill = n - det.size
        idx = np.concatenate([det, np.repeat(det[:1], fill)])
        logw = np.concatenate([log_u[det], np.full(fill, -math.inf)])
        dead = np.zeros(n, dtype=bool)
        dead[det.size:] = True
        return Resampled(idx, logw, dead, math.inf, det.size, log_total)
    if n * float(w_hat.max()) < float(w_hat.sum()) * (1 - 1e-9):
        # No child reaches c*·ŵ ≥ 1 even at c = N / Σŵ, so L = 0 (clear of rounding, which
        # the margin leaves to the general path): every child is stochastic, nothing to sort.
        csum = np.cumsum(w_hat)
        alpha = float(csum[-1]) / n
        points = uniform(generator) * alpha + alpha * _countup(n)
        picks = np.searchsorted(csum, points, side="right")
        if picks[-1] >= csum.size:  # rounding: clamp (see stratified_select)
            picks = np.minimum(picks, int(np.flatnonzero(w_hat)[-1]))
        return Resampled(picks, np.full(n, log_total - math.log(n)), np.zeros(n, dtype=bool),
                         n / float(csum[-1]), 0, log_total)
    # threshold(): the L heaviest are deterministic (see there)
    order = np.argsort(-w_hat, kind="stable")
    vals = w_hat[order]
    tail = np.cumsum(vals[::-1])[::-1]
    ok = np.flatnonzero(_countdown(n) * vals[:n] < tail[:n])
    num_det = int(ok[0]) if ok.size else n - 1
    det = order[:num_det]
    stoch = np.sort(order[num_det:])
    # stratified_select() on the others
    k = n - num_det
    w_stoch = w_hat[stoch]
    csum = np.cumsum(w_stoch)
    alpha = float(csum[-1]) / k
    points = uniform(generator) * alpha + alpha * _countup(k)
    picks = np.searchsorted(csum, points, side="right")
    if picks[-1] >= csum.size or w_stoch[picks[-1]] == 0:  # rounding: clamp (see there)
        picks = np.minimum(picks, int(np.flatnonzero(w_stoch)[-1]))
    log_strat = logsumexp(log_u[stoch]) - math.log(k)
    idx = np.concatenate([det, stoch[picks]])
    logw = np.concatenate([log_u[det], np.full(k, log_strat)])
    return Resampled(idx, logw, np.zeros(n, dtype=bool), k / float(tail[num_det]), num_det,
                     log_total)


_COUNTS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _counts(n: int) -> tuple[np.ndarray, np.ndarray]:
    got = _COUNTS.get(n)
    if got is None:
        got = _COUNTS[n] = (n - np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64))
    return got


def _countdown(n: int) -> np.ndarray:
    """``n − [0, 1, …, n−1]`` as float64 (cached)."""
    return _counts(n)[0]


def _countup(n: int) -> np.ndarray:
    """``[0, 1, …, n−1]`` as float64 (cached)."""
    return _counts(n)[1]
