"""Warmup adaptation: dual-averaging step sizes, Welford covariance, the window schedule.

* `DualAveraging` — Nesterov dual averaging of `log eps` toward a target acceptance
  statistic, one state per chain (runtime spec 6.6.3: `mu = log(10 eps0)`, `gamma = 0.05`,
  `t0 = 10`, `kappa = 0.75`; a non-finite statistic counts as 0).
* `Welford` — streaming mean and (co)variance of positions, per chain, diagonal or dense;
  `regularized()` gives the spec's shrunk estimate
  `(n/(n+5)) Sigma + 1e-3 (5/(n+5)) I`.
* `warmup_schedule(num_warmup)` — Stan's windows: a fast initial buffer (75), slow windows
  doubling from 25 that end with a mass-matrix update, and a fast terminal buffer (50);
  shrunk to 15% / 75% / 10% for short warmups, step size only below 20 iterations.

Pure tensor numerics: nothing here evaluates a model or knows about kernels.

References:
  Hoffman & Gelman (2014), The No-U-Turn Sampler, JMLR 15, section 3.2.
  Stan Reference Manual, "HMC algorithm parameters: automatic parameter tuning".
  Welford (1962), Technometrics 4(3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class DualAveragingState:
    """Per-chain dual-averaging state (all `(C,)` tensors but `t`).

    Attributes:
      log_step: `log eps` used during warmup (the iterate).
      log_step_avg: `log eps-bar`, the averaged iterate used after warmup.
      h_bar: running average of `target - statistic`.
      mu: the shrinkage point `log(10 eps0)`.
      t: number of updates since the last restart.
    """

    log_step: torch.Tensor
    log_step_avg: torch.Tensor
    h_bar: torch.Tensor
    mu: torch.Tensor
    t: int


class DualAveraging:
    """Nesterov dual averaging (Hoffman & Gelman 2014, Algorithm 5), batched over chains.

    Example:
      >>> da = DualAveraging(target=0.8)
      >>> s = da.init(torch.tensor([0.1]))
      >>> s = da.update(s, torch.tensor([0.9]))
    """

    def __init__(self, target: float, gamma: float = 0.05, t0: float = 10.0,
                 kappa: float = 0.75):
        self.target = float(target)
        self.gamma = gamma
        self.t0 = t0
        self.kappa = kappa

    def init(self, step_size: torch.Tensor) -> DualAveragingState:
        log_step = torch.log(step_size)
        return DualAveragingState(log_step, torch.zeros_like(log_step),
                                  torch.zeros_like(log_step), math.log(10.0) + log_step, 0)

    def update(self, s: DualAveragingState, stat: torch.Tensor,
               mask=None) -> DualAveragingState:
        """Fold one acceptance statistic per chain (chains outside `mask` unchanged)."""
        stat = torch.where(torch.isfinite(stat), stat, torch.zeros_like(stat)).clamp(0.0, 1.0)
        t = s.t + 1
        w = 1.0 / (t + self.t0)
        h_bar = (1 - w) * s.h_bar + w * (self.target - stat)
        log_step = s.mu - math.sqrt(t) / self.gamma * h_bar
        eta = t ** (-self.kappa)
        log_step_avg = eta * log_step + (1 - eta) * s.log_step_avg
        if mask is not None:
            h_bar = torch.where(mask, h_bar, s.h_bar)
            log_step = torch.where(mask, log_step, s.log_step)
            log_step_avg = torch.where(mask, log_step_avg, s.log_step_avg)
        return DualAveragingState(log_step, log_step_avg, h_bar, s.mu, t)


class Welford:
    """Streaming mean and covariance of `(C, D)` samples, one accumulator per chain.

    `dense=False` keeps only variances.  Example:
      >>> w = Welford(1, 2, dense=False)
      >>> for x in torch.randn(100, 1, 2): w.update(x)
      >>> w.variance().shape
      torch.Size([1, 2])
    """

    def __init__(self, C: int, D: int, dense: bool = False, dtype=None, device=None):
        self.dense = dense
        self.n = 0
        self.mean = torch.zeros(C, D, dtype=dtype, device=device)
        self.m2 = (torch.zeros(C, D, D, dtype=dtype, device=device) if dense
                   else torch.zeros(C, D, dtype=dtype, device=device))

    def update(self, x: torch.Tensor) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean = self.mean + delta / self.n
        delta2 = x - self.mean
        if self.dense:
            self.m2 = self.m2 + delta.unsqueeze(-1) * delta2.unsqueeze(-2)
        else:
            self.m2 = self.m2 + delta * delta2

    def variance(self) -> torch.Tensor:
        """Sample (co)variance with `ddof = 1` (needs `n >= 2`)."""
        return self.m2 / max(self.n - 1, 1)

    def regularized(self) -> torch.Tensor:
        """`(n/(n+5)) Sigma + 1e-3 (5/(n+5)) I` (spec 6.6.3; Stan's shrinkage)."""
        n = self.n
        cov = self.variance()
        shrunk = (n / (n + 5.0)) * cov
        if self.dense:
            D = cov.shape[-1]
            eye = torch.eye(D, dtype=cov.dtype, device=cov.device)
            out = shrunk + 1e-3 * (5.0 / (n + 5.0)) * eye
            return 0.5 * (out + out.transpose(-1, -2)) + 1e-8 * eye
        return shrunk + 1e-3 * (5.0 / (n + 5.0))


def warmup_schedule(num_warmup: int, init_buffer: int = 75, term_buffer: int = 50,
                    base_window: int = 25) -> list[tuple[int, int]]:
    """Stan's adaptation windows as inclusive `(start, end)` iteration ranges.

    The first and last windows are fast (step size only); the ones between are slow
    (mass matrix, updated at their end).  Below 20 iterations one fast window.

      >>> warmup_schedule(1000)[:3]
      [(0, 74), (75, 99), (100, 149)]
    """
    n = int(num_warmup)
    if n <= 0:
        return []
    if n < 20:
        return [(0, n - 1)]
    if init_buffer + base_window + term_buffer > n:
        init_buffer = int(0.15 * n)
        term_buffer = int(0.1 * n)
        base_window = n - init_buffer - term_buffer
    out = [(0, init_buffer - 1)]
    end_start = n - term_buffer
    size, start = base_window, init_buffer
    while start < end_start:
        cur_start, cur_size = start, size
        if 3 * cur_size <= end_start - cur_start:
            size = 2 * cur_size
        else:
            cur_size = end_start - cur_start
        start = cur_start + cur_size
        out.append((cur_start, start - 1))
    out.append((end_start, n - 1))
    return out


def mass_update_points(num_warmup: int) -> set[int]:
    """Warmup iterations (0-based) after which the windowed schedule updates the mass
    matrix: the last iteration of every slow window."""
    sched = warmup_schedule(num_warmup)
    if len(sched) < 3:
        return set()
    return {end for _, end in sched[1:-1]}
