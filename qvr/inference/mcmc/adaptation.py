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
      t_avg: number of updates folded into `log_step_avg` since it last started
        (`DualAveraging.restart_average`; equal to `t` otherwise).
    """

    log_step: torch.Tensor
    log_step_avg: torch.Tensor
    h_bar: torch.Tensor
    mu: torch.Tensor
    t: int
    t_avg: int = None

    def __post_init__(self):
        if self.t_avg is None:
            self.t_avg = self.t


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
                                  torch.zeros_like(log_step), math.log(10.0) + log_step, 0, 0)

    @staticmethod
    def restart_average(s: DualAveragingState) -> DualAveragingState:
        """The same iterate, with its average started afresh: the step size after warmup
        then averages the updates from here only, while `log eps` goes on from where it
        is with the small gain of a long run (`sqrt(t) / (gamma (t + t0))`).  A full
        restart (`init`) would instead re-explore from `mu = log(10 eps)` at the largest
        gain (near `t = t0`): on kid_scores its step sizes spanned 0.05-5.5 for the first
        50 iterations, and their average ended at 0.30 against the 0.36 the iterate had
        held, so sampling ran at acceptance 0.90 instead of the target 0.8."""
        return DualAveragingState(s.log_step, s.log_step.clone(), s.h_bar, s.mu, s.t, 0)

    def update(self, s: DualAveragingState, stat: torch.Tensor,
               mask=None) -> DualAveragingState:
        """Fold one acceptance statistic per chain (chains outside `mask` unchanged)."""
        stat = torch.where(torch.isfinite(stat), stat, torch.zeros_like(stat)).clamp(0.0, 1.0)
        t = s.t + 1
        w = 1.0 / (t + self.t0)
        h_bar = (1 - w) * s.h_bar + w * (self.target - stat)
        log_step = s.mu - math.sqrt(t) / self.gamma * h_bar
        eta = (s.t_avg + 1) ** (-self.kappa)
        log_step_avg = eta * log_step + (1 - eta) * s.log_step_avg
        if mask is not None:
            h_bar = torch.where(mask, h_bar, s.h_bar)
            log_step = torch.where(mask, log_step, s.log_step)
            log_step_avg = torch.where(mask, log_step_avg, s.log_step_avg)
        return DualAveragingState(log_step, log_step_avg, h_bar, s.mu, t, s.t_avg + 1)


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


class Moments:
    """Per-chain count, mean and sum of squared deviations (M2) of `(C, D)` vectors, fed a
    block of draws at a time with a per-draw mask (Chan et al.'s pairwise merge, so a
    block adds exactly what the same draws one by one would, up to rounding).

      >>> m = Moments(1, 2, torch.float64, None)
      >>> m.add(torch.randn(5, 1, 2, dtype=torch.float64), torch.ones(5, 1, dtype=torch.bool))
      >>> m.n.tolist()
      [5.0]
    """

    def __init__(self, C: int, D: int, dtype, device):
        self.n = torch.zeros(C, dtype=dtype, device=device)
        self.mean = torch.zeros(C, D, dtype=dtype, device=device)
        self.m2 = torch.zeros(C, D, dtype=dtype, device=device)

    def add(self, X: torch.Tensor, keep: torch.Tensor) -> None:
        """Fold the draws `X` `(k, C, D)` where `keep` `(k, C)` is true."""
        keep = keep & torch.isfinite(X).all(-1)
        w = keep.to(self.mean.dtype).unsqueeze(-1)
        X = torch.where(keep.unsqueeze(-1), X.to(self.mean.dtype), torch.zeros_like(w))
        nb = w.sum(0).squeeze(-1)  # (C,)
        mb = X.sum(0) / nb.clamp_min(1.0).unsqueeze(-1)
        m2b = (w * (X - mb) ** 2).sum(0)
        n = self.n + nb
        frac = (nb / n.clamp_min(1.0)).unsqueeze(-1)
        delta = mb - self.mean
        self.mean = self.mean + delta * frac
        self.m2 = self.m2 + m2b + delta ** 2 * (self.n.unsqueeze(-1) * frac)
        self.n = n

    def copy(self) -> "Moments":
        out = Moments.__new__(Moments)
        out.n, out.mean, out.m2 = self.n.clone(), self.mean.clone(), self.m2.clone()
        return out


def fisher_schedule(num_warmup: int, early: float = 0.3, final: float = 0.15,
                    early_window: int = 10, window: int = 80,
                    growth: float = 1.5) -> tuple[list[int], int]:
    """nutpie's (nuts-rs 0.18) warmup windows: `(switches, final_start)`.

    The first `early` share of warmup swaps the foreground estimator for the background
    one every `early_window` draws; then windows of `window` draws growing by `growth`,
    while a whole next window still fits before `final_start = num_warmup -
    floor(final * num_warmup)`, from where the metric stays fixed and only the step size
    adapts.  `switches` are the 0-based iterations after which a swap happens (the initial
    point counts as the first draw of the first window).

      >>> fisher_schedule(400)[0][:3], fisher_schedule(400)[0][-2:], fisher_schedule(400)[1]
      ([8, 18, 28], [118, 198], 340)
    """
    T = int(num_warmup)
    E = int(math.floor(early * T))
    S = T - int(math.floor(final * T))
    w, count, out = window, 1, []
    for t in range(S):
        is_early = t < E
        if t == E:
            w = max(w, count)
        sw = early_window if is_early else w
        nxt = early_window if is_early else max(w + 1, int(round(growth * w)))
        late = t + nxt > S
        count += 1
        if count >= sw and not late:
            out.append(t)
            count = 0
            if not is_early:
                w = nxt
    return out, S


def initial_inverse_metric(grad: torch.Tensor) -> torch.Tensor:
    """nutpie's metric before any draw: `M^-1 = diag(1 / |g0|)` from the gradient at the
    initial point, clamped to `[1e-10, 1e10]`; a zero or non-finite gradient entry gives
    1 (nuts-rs gives 1e20 for an exact zero, which the research note flags as unsafe)."""
    a = grad.abs()
    ok = torch.isfinite(a) & (a > 0)
    return torch.where(ok, 1.0 / torch.where(ok, a, torch.ones_like(a)),
                       torch.ones_like(a)).clamp(1e-10, 1e10)


class FisherDiag:
    """The diagonal metric that minimises the sample Fisher divergence (Seyboldt, Carlson &
    Carpenter 2026; nutpie's default): from the accepted draws `x` and their gradients
    `g = grad log p(x)`, `M^-1 = diag(sqrt(var x / var g))`, one per chain.

    Two estimators run at once, as in nuts-rs: every draw that moved goes into the
    foreground and the background; at each of `fisher_schedule`'s switches the background
    becomes the foreground and a fresh background starts, so the metric in use rests on the
    draws since the switch before last.  The metric is recomputed after each iteration in
    `update_points` (each of the first 20, then every tenth and at every switch; nuts-rs
    recomputes after every draw: ours is cut to those points so that a compiled block of
    transitions runs between them with a fixed metric, the same on every path), never from
    `final_start` on.  A coordinate whose ratio is zero or not finite, or a chain with
    fewer than 3 draws in its foreground, keeps its previous value.  `restart_at`
    (`final_start - 1`): the kernel restarts dual averaging's *average* there
    (`DualAveraging.restart_average`), so that the step size after warmup averages the
    fixed-metric window only (nuts-rs never restarts after the first update, and its final
    step size carries about half its weight from earlier metrics: on Lotka-Volterra,
    4 x (500 + 500), one chain then sampled at acceptance 0.2 with 63 divergences in 145
    draws).  Until 2026-12 the whole of dual averaging restarted there; its re-exploration
    cost leapfrogs and left a step size below the target's (kid_scores: acceptance 0.90
    while sampling, 0.80 asked).

      >>> f = FisherDiag(1, 2, 100, torch.float64, None)
      >>> f.final_start, min(f.update_points), f.first_update
      (85, 2, 2)
    """

    def __init__(self, C: int, D: int, num_warmup: int, dtype, device):
        self.switches, self.final_start = fisher_schedule(num_warmup)
        S = self.final_start
        self.first_update = 2
        self.restart_at = S - 1
        points = set(range(2, min(20, S))) | set(range(9, S, 10)) | set(self.switches)
        points.add(S - 1)  # the last: dual averaging restarts after it (`HMCBase`)
        self.update_points = frozenset(t for t in points if t < S)
        self._switch_set = frozenset(self.switches)
        self.C, self.D, self.dtype, self.device = C, D, dtype, device
        self.fore = self._fresh()
        self.back = self._fresh()

    def _fresh(self) -> tuple:
        return (Moments(self.C, self.D, self.dtype, self.device),
                Moments(self.C, self.D, self.dtype, self.device))

    def add(self, z: torch.Tensor, grad: torch.Tensor, keep: torch.Tensor) -> None:
        """Fold draws `z` `(k, C, D)` with their gradients where `keep` `(k, C)` holds."""
        keep = keep & torch.isfinite(grad).all(-1)
        for x, g in (self.fore, self.back):
            x.add(z, keep)
            g.add(grad, keep)

    def after(self, i: int, inv: torch.Tensor) -> torch.Tensor:
        """What warmup iteration `i` ends with, after its draws were added: the swap at a
        switch, then the metric (`inv` `(C, D)` itself when `i` is no update point)."""
        if i in self._switch_set:
            self.fore, self.back = self.back, self._fresh()
        if i not in self.update_points:
            return inv
        return self._estimate(inv)

    def _estimate(self, inv: torch.Tensor) -> torch.Tensor:
        """The metric from the foreground's moments, `inv` where it cannot be formed."""
        x, g = self.fore
        ratio = x.m2 / g.m2
        new = torch.sqrt(ratio).clamp(1e-10, 1e10)
        ok = torch.isfinite(ratio) & (ratio > 0) & (x.n >= 3).unsqueeze(-1)
        return torch.where(ok, new.to(inv.dtype), inv)


class DenseMoments(Moments):
    """`Moments` with the whole matrix of summed outer products of deviations: `m2` is
    `(C, D, D)` (the same pairwise merge, block by block).

      >>> m = DenseMoments(1, 2, torch.float64, None)
      >>> m.add(torch.randn(5, 1, 2, dtype=torch.float64), torch.ones(5, 1, dtype=torch.bool))
      >>> tuple(m.m2.shape)
      (1, 2, 2)
    """

    def __init__(self, C: int, D: int, dtype, device):
        super().__init__(C, D, dtype, device)
        self.m2 = torch.zeros(C, D, D, dtype=dtype, device=device)

    def add(self, X: torch.Tensor, keep: torch.Tensor) -> None:
        keep = keep & torch.isfinite(X).all(-1)
        w = keep.to(self.mean.dtype).unsqueeze(-1)
        X = torch.where(keep.unsqueeze(-1), X.to(self.mean.dtype), torch.zeros_like(w))
        nb = w.sum(0).squeeze(-1)
        mb = X.sum(0) / nb.clamp_min(1.0).unsqueeze(-1)
        dev = w * (X - mb)
        m2b = torch.einsum("kci,kcj->cij", dev, X - mb)
        n = self.n + nb
        delta = mb - self.mean
        scale = (self.n * nb / n.clamp_min(1.0)).reshape(-1, 1, 1)
        self.mean = self.mean + delta * (nb / n.clamp_min(1.0)).unsqueeze(-1)
        self.m2 = self.m2 + m2b + delta.unsqueeze(-1) * delta.unsqueeze(-2) * scale
        self.n = n


def _sqrtm(S: torch.Tensor) -> tuple:
    """`(S^1/2, S^-1/2)` of symmetric positive definite `S` `(C, D, D)` (eigenvalues
    clamped at 1e-300 of the largest)."""
    w, V = torch.linalg.eigh(0.5 * (S + S.transpose(-1, -2)))
    w = w.clamp_min(w[..., -1:].abs() * 1e-300 + 1e-300)
    r = torch.sqrt(w)
    Vt = V.transpose(-1, -2)
    return (V * r.unsqueeze(-2)) @ Vt, (V / r.unsqueeze(-2)) @ Vt


def geometric_mean(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The matrix geometric mean `A # B = A^1/2 (A^-1/2 B A^-1/2)^1/2 A^1/2` of symmetric
    positive definite `(C, D, D)` matrices: the `M` with `M A^-1 M = B`."""
    a, ai = _sqrtm(A)
    mid, _ = _sqrtm(ai @ B @ ai)
    out = a @ mid @ a
    return 0.5 * (out + out.transpose(-1, -2))


class FisherDense(FisherDiag):
    """nutpie's Fisher-divergence metric without the diagonal restriction, on the same
    windows as `FisherDiag`: the inverse metric that minimises the sample Fisher divergence
    over all affine maps is `cov(x) # cov(g)^-1` (the matrix geometric mean; Seyboldt,
    Carlson & Carpenter's full-rank case, which nuts-rs does not ship), exact for a
    Gaussian from any `D + 1` draws in general position (`cov(g) = P cov(x) P` there, and
    `A # (S A^-1 S) = S`).  With `D` or fewer draws in the foreground both covariances are
    singular and the diagonal estimate is used, as a diagonal matrix; a result that is not
    finite or not positive definite keeps the previous metric. `after` takes and returns
    `(C, D, D)` inverse metrics; the windows and update points are `FisherDiag`'s
    (`--mass-matrix dense --adapt fisher`, the default adaptation: until 2026-12 a dense
    metric was adapted on Stan's windows only)."""

    def _fresh(self) -> tuple:
        return (DenseMoments(self.C, self.D, self.dtype, self.device),
                DenseMoments(self.C, self.D, self.dtype, self.device))

    def _estimate(self, inv: torch.Tensor) -> torch.Tensor:
        x, g = self.fore
        n = x.n
        dx = torch.diagonal(x.m2, dim1=-2, dim2=-1)
        dg = torch.diagonal(g.m2, dim1=-2, dim2=-1)
        diag = torch.diag_embed(torch.sqrt(dx / dg).clamp(1e-10, 1e10))
        denom = (n - 1).clamp_min(1.0).reshape(-1, 1, 1)
        full = n > self.D
        new = diag
        if bool(full.any()):
            # in float64: a float32 posterior's scales can span 1e4 (kid_scores), which
            # leaves float32 eigendecompositions without convergence
            Sx, Sg = (x.m2 / denom).double(), (g.m2 / denom).double()
            eye = torch.eye(self.D, dtype=Sg.dtype, device=Sg.device)
            L, info = torch.linalg.cholesky_ex(torch.where(full.reshape(-1, 1, 1), Sg, eye))
            use = full & (info == 0)  # else: a covariance not positive definite
            if bool(use.any()):
                B = torch.cholesky_inverse(torch.where(use.reshape(-1, 1, 1), L, eye))
                Sx = torch.where(use.reshape(-1, 1, 1), Sx, eye)
                try:
                    mean = geometric_mean(Sx, B).to(diag.dtype)
                    new = torch.where(use.reshape(-1, 1, 1), mean, diag)
                except RuntimeError:  # no eigendecomposition: the diagonal estimate
                    new = diag
        new = new.to(inv.dtype)
        ok = torch.isfinite(new).all(-1).all(-1) & (n >= 3)
        _, info = torch.linalg.cholesky_ex(torch.where(ok.reshape(-1, 1, 1), new, inv))
        ok = ok & (info == 0)
        return torch.where(ok.reshape(-1, 1, 1), new, inv)
