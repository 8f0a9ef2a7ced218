"""Pathfinder (Zhang, Carpenter, Gelman & Vehtari 2022): a normal approximation of the
posterior from the L-BFGS path towards its mode, single- and multi-path.

On a target `log p~(z)` of the unconstrained space (a duck-typed `Target`: `dim`,
`log_density_and_grad(z (C, D)) -> ((C,), (C, D))`; the MCMC target of a program):

1. one *path*: L-BFGS on `f = -log p~` from `x0 ~ U(-2, 2)^D` (`lbfgs.climb`), keeping
   every iterate `x_l` and gradient `g_l = grad f(x_l)`;
2. along it, the *local normal* `q_l = N(x_l - H_l g_l, H_l)` at each iterate, with `H_l`
   the L-BFGS inverse-Hessian estimate in compact form (`local_normal`): the last
   `history` pairs `(s, y)` whose curvature passes (`s'y > 0`, `|y|^2 / s'y <= 1e12`;
   failing pairs are left out of the history, as the paper's code does) over a diagonal
   initial matrix `alpha` updated on those pairs by Gilbert & Lemaréchal's rule (1989,
   eq. 4.9).  Draws: dense Cholesky when `2m >= D`, otherwise the low-rank form of the
   paper (thin QR, `O(D m^2)`; the reference's factor `B`, not Stan's `B'`, which samples
   a different covariance);
3. the ELBO of each `q_l` from `elbo_draws` draws (one batched density evaluation);
   the path keeps the best `q_l` and returns `draws` draws of it with their log ratios
   `log p~ - log q` (the ELBO draws reused);
4. *multi-path*: `paths` independent paths, their draws pooled with their ratios (each
   against its own path's normal), Pareto-smoothed importance weights (arviz-stats'
   `psislw`) and `psis_draws` draws resampled with replacement.  One path (`paths=1`)
   returns its draws as they are (Stan's single-path Pathfinder).

A draw whose log density is not finite has log p = -inf (a zero weight).  A path whose
start has a non-finite density draws another start (at most `INIT_TRIES`, as Stan), or
fails when the start was given; a path with no step, or whose approximations all fail,
fails; a multi-path run drops failed paths and fails only when every path did
(`PathfinderError`).  Deterministic under the given `torch.Generator`; all the linear
algebra is float64 whatever the target's dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from qvr.inference.vi.lbfgs import Tolerances, climb

INIT_TRIES = 100
#: a pair enters the history when s'y > 0 and |y|^2 / s'y <= this (Stan's check)
CURVATURE_MAX = 1e12


class PathfinderError(RuntimeError):
    """No path gave an approximation (the message says why each failed)."""


@dataclass(frozen=True)
class Settings:
    """Stan's defaults (CmdStan `pathfinder`)."""

    paths: int = 4
    draws: int = 1000  # per path
    psis_draws: int = 1000
    history: int = 5
    max_iters: int = 1000
    elbo_draws: int = 25
    init_radius: float = 2.0
    tol: Tolerances = Tolerances()


def settings_of(config) -> Settings:
    """The `Settings` of a `qvr.inference.config.FitConfig` (its Pathfinder options)."""
    return Settings(paths=config.paths, draws=config.path_draws,
                    psis_draws=config.psis_draws, history=config.history,
                    max_iters=config.lbfgs_iters, elbo_draws=config.elbo_draws)


# ---------------------------------------------------------------- the local normal


@dataclass
class LocalNormal:
    """`N(mu, H)` with `H = diag(alpha) + alpha Y N + N'Y' alpha + N'(dR + Y'alpha Y)N`
    (float64).  `sample(u)` maps standard normal rows `u (n, D)` to draws and their
    `log q`."""

    mu: torch.Tensor
    alpha: torch.Tensor
    Y: torch.Tensor  # (D, m)
    N: torch.Tensor  # (m, D)
    M: torch.Tensor  # (m, m): diag(dR) + Y' diag(alpha) Y
    chol: Optional[torch.Tensor] = None  # dense: lower Cholesky of H
    Q: Optional[torch.Tensor] = None  # low rank: (D, 2m)
    B: Optional[torch.Tensor] = None  # low rank: lower Cholesky of I + R M R'
    logdet: float = 0.0  # log |det L|, L L' = H

    def sample(self, u: torch.Tensor) -> tuple:
        D = self.mu.shape[0]
        if self.chol is not None:
            theta = self.mu + u @ self.chol.T
        elif self.Q is not None:
            v = u @ self.Q
            eye = torch.eye(self.B.shape[0], dtype=u.dtype)
            theta = self.mu + self.alpha.sqrt() * (u + (v @ (self.B - eye).T) @ self.Q.T)
        else:  # no history: diag(alpha)
            theta = self.mu + self.alpha.sqrt() * u
        log_q = -0.5 * (u * u).sum(-1) - 0.5 * D * math.log(2 * math.pi) - self.logdet
        return theta, log_q

    def diag(self) -> torch.Tensor:
        """The diagonal of `H` (the approximation's marginal variances)."""
        Nt = self.N.T
        return (self.alpha + 2 * self.alpha * (self.Y * Nt).sum(1)
                + ((Nt @ self.M) * Nt).sum(1))

    def apply(self, g: torch.Tensor) -> torch.Tensor:
        """`H g`."""
        a, Y, N, M = self.alpha, self.Y, self.N, self.M
        Ng = N @ g
        return a * g + a * (Y @ Ng) + N.T @ (Y.T @ (a * g)) + N.T @ (M @ Ng)


def local_normal(x: torch.Tensor, g: torch.Tensor, S: torch.Tensor, Y: torch.Tensor,
                 alpha: torch.Tensor) -> Optional[LocalNormal]:
    """The local normal at iterate `x` with gradient `g = grad f` (f = -log p~), history
    `S`, `Y` `(D, m)` (oldest first) and diagonal `alpha`; None when `H` is not positive
    definite in floating point."""
    D, m = S.shape
    if m == 0:
        q = LocalNormal(x, alpha, Y, torch.zeros(0, D, dtype=x.dtype),
                        torch.zeros(0, 0, dtype=x.dtype), logdet=0.5 * float(alpha.log().sum()))
        q.mu = x - alpha * g
        return q
    R = torch.triu(S.T @ Y)
    dR = torch.diagonal(R)
    try:
        N = -torch.linalg.solve_triangular(R, S.T, upper=True)
    except RuntimeError:
        return None
    M = torch.diag(dR) + Y.T @ (alpha[:, None] * Y)
    q = LocalNormal(x, alpha, Y, N, M)
    if 2 * m >= D:
        H = torch.diag(alpha) + (alpha[:, None] * Y) @ N + N.T @ (Y.T * alpha) + N.T @ M @ N
        H = 0.5 * (H + H.T)
        L, info = torch.linalg.cholesky_ex(H)
        if int(info) != 0 or not bool(torch.isfinite(L).all()):
            return None
        q.chol = L
        q.logdet = float(torch.log(torch.diagonal(L)).sum())
    else:
        sa = alpha.sqrt()
        W = torch.cat([sa[:, None] * Y, N.T / sa[:, None]], dim=1)
        Q, Rb = torch.linalg.qr(W, mode="reduced")
        Mb = torch.zeros(2 * m, 2 * m, dtype=x.dtype)
        eye = torch.eye(m, dtype=x.dtype)
        Mb[:m, m:] = eye
        Mb[m:, :m] = eye
        Mb[m:, m:] = M
        inner = torch.eye(2 * m, dtype=x.dtype) + Rb @ Mb @ Rb.T
        B, info = torch.linalg.cholesky_ex(0.5 * (inner + inner.T))
        if int(info) != 0 or not bool(torch.isfinite(B).all()):
            return None
        q.Q, q.B = Q, B
        q.logdet = float(torch.log(torch.diagonal(B)).sum() + 0.5 * alpha.log().sum())
    q.mu = x - q.apply(g)
    if not bool(torch.isfinite(q.mu).all()) or not math.isfinite(q.logdet):
        return None
    return q


def update_alpha(alpha: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gilbert & Lemaréchal's diagonal update on a pair that passed the curvature check
    (`alpha` unchanged when the update is not positive and finite)."""
    a = float((alpha * y * y).sum())
    b = float((s * s / alpha).sum())
    c = float(s @ y)
    new = c / (a / alpha + y * y - (a / b) * (s / alpha) ** 2)
    if bool(torch.isfinite(new).all()) and bool((new > 0).all()):
        return new
    return alpha


def good_pair(s: torch.Tensor, y: torch.Tensor) -> bool:
    sy = float(s @ y)
    return sy > 0 and float(y @ y) / sy <= CURVATURE_MAX


# ---------------------------------------------------------------- one path


@dataclass
class PathResult:
    """One path: `ok`, or the `message` saying why it failed; the climb's iterations
    and evaluations (gradient evaluations of one point), the ELBO per iteration (NaN
    where the approximation failed), the chosen iteration, its normal `q`, and the
    draws `(M, D)` (float64, unconstrained) with `log_p`, `log_q`."""

    ok: bool = False
    message: str = ""
    start: Optional[torch.Tensor] = None
    iterations: int = 0
    evaluations: int = 0
    density_evaluations: int = 0
    elbos: list = field(default_factory=list)
    best: int = -1
    q: Optional[LocalNormal] = None
    draws: Optional[torch.Tensor] = None
    log_p: Optional[torch.Tensor] = None
    log_q: Optional[torch.Tensor] = None
    reason: str = ""

    @property
    def elbo(self) -> float:
        return self.elbos[self.best] if self.ok else -math.inf


def log_densities(target, theta: torch.Tensor, chunk: int, dtype, device) -> torch.Tensor:
    """`log p~` of float64 points `(n, D)` in evaluations of exactly `chunk` points (the
    last padded by repeating its first row: the target compiles one chain count)."""
    out = []
    n = theta.shape[0]
    for start in range(0, n, chunk):
        part = theta[start:start + chunk]
        k = part.shape[0]
        if k < chunk:
            part = torch.cat([part, part[:1].expand(chunk - k, -1)])
        lp, _ = target.log_density_and_grad(part.to(dtype=dtype, device=device))
        lp = lp.detach().reshape(-1)[:k].to(device="cpu", dtype=torch.float64)
        out.append(torch.where(torch.isfinite(lp), lp, torch.full_like(lp, -math.inf)))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def single_path(target, x0: Optional[torch.Tensor], settings: Settings,
                generator: torch.Generator, *, dtype=None, device=None,
                on_iteration: Optional[Callable[[str, int, dict], None]] = None,
                should_stop: Optional[Callable[[], bool]] = None) -> PathResult:
    """One Pathfinder path (module docstring).  `x0` None: a random start, redrawn while
    its density is not finite.  `on_iteration(phase, l, metrics)`: ``"climb"`` after each
    L-BFGS step (``loss``), ``"elbo"`` after each ELBO estimate (``elbo``, ``best``)."""
    dtype = dtype or torch.get_default_dtype()
    device = device or "cpu"
    D = target.dim
    K = settings.elbo_draws
    out = PathResult()
    given = x0 is not None
    tries = 0
    while x0 is None:
        tries += 1
        cand = (torch.rand(D, generator=generator, dtype=torch.float64) * 2 - 1) \
            * settings.init_radius
        lp = log_densities(target, cand[None], 1, dtype, device)
        out.density_evaluations += 1
        if math.isfinite(float(lp[0])) or tries >= INIT_TRIES:
            x0 = cand
    out.start = x0.to(torch.float64)
    path = climb(target, out.start, history=settings.history, max_iters=settings.max_iters,
                 tol=settings.tol, dtype=dtype, device=device,
                 on_iteration=(lambda l, f: on_iteration("climb", l, {"loss": f}))
                 if on_iteration is not None else None,
                 should_stop=should_stop)
    out.evaluations = path.evaluations
    out.iterations = len(path.xs) - 1
    out.reason = path.reason
    if not math.isfinite(path.fs[0]):
        out.message = (f"the log density is not finite at the start"
                       + ("" if given else f" ({tries} random starts tried)"))
        return out
    if out.iterations < 1:
        out.message = f"L-BFGS made no step ({path.reason})"
        return out
    alpha = torch.ones(D, dtype=torch.float64)
    S, Y = [], []
    best_elbo, best = -math.inf, None
    elbos = [math.nan]  # no approximation at the start
    for l in range(1, len(path.xs)):
        if should_stop is not None and should_stop():
            break
        s, y = path.xs[l] - path.xs[l - 1], path.gs[l] - path.gs[l - 1]
        if good_pair(s, y):
            alpha = update_alpha(alpha, s, y)
            S.append(s)
            Y.append(y)
            if len(S) > settings.history:
                S.pop(0)
                Y.pop(0)
        Sm = torch.stack(S, 1) if S else torch.zeros(D, 0, dtype=torch.float64)
        Ym = torch.stack(Y, 1) if Y else torch.zeros(D, 0, dtype=torch.float64)
        q = local_normal(path.xs[l], path.gs[l], Sm, Ym, alpha)
        if q is None:
            elbos.append(math.nan)
            continue
        u = torch.randn(K, D, generator=generator, dtype=torch.float64)
        theta, log_q = q.sample(u)
        log_p = log_densities(target, theta, K, dtype, device)
        out.density_evaluations += K
        ratios = log_p - log_q
        elbo = float(ratios.mean()) if bool(torch.isfinite(ratios).all()) else -math.inf
        elbos.append(elbo if not math.isnan(elbo) else -math.inf)
        if elbo > best_elbo:
            best_elbo, best = elbo, (l, q, theta, log_p, log_q)
        if on_iteration is not None:
            on_iteration("elbo", l, {"elbo": elbo, "best_elbo": best_elbo})
    out.elbos = elbos
    if best is None:
        out.message = "no iteration gave an approximation with a finite ELBO"
        return out
    l, q, theta, log_p, log_q = best
    M = settings.draws
    if M > K:
        u = torch.randn(M - K, D, generator=generator, dtype=torch.float64)
        th2, lq2 = q.sample(u)
        lp2 = log_densities(target, th2, K, dtype, device)
        out.density_evaluations += M - K
        theta, log_p, log_q = (torch.cat([theta, th2]), torch.cat([log_p, lp2]),
                               torch.cat([log_q, lq2]))
    out.ok, out.best, out.q = True, l, q
    out.draws, out.log_p, out.log_q = theta[:M], log_p[:M], log_q[:M]
    return out


# ---------------------------------------------------------------- multi-path


@dataclass
class PathfinderResult:
    """The paths, and the run's draws `(R, D)` (float64, unconstrained): resampled from
    the pooled draws of the paths that worked (`paths > 1`), or the one path's draws;
    `log_ratios` of the pooled draws (k-hat's input), `psis_log_weights` their smoothed
    normalised log weights (None for one path), `inv_metric` the diagonal of the best
    path's inverse-Hessian estimate (its chosen normal's variances)."""

    paths: list
    draws: torch.Tensor
    log_ratios: np.ndarray
    psis_log_weights: Optional[np.ndarray]
    inv_metric: torch.Tensor
    pooled: torch.Tensor  # (S, D) the pooled draws the resampling chose from

    @property
    def ok_paths(self) -> list:
        return [p for p in self.paths if p.ok]

    @property
    def failed(self) -> int:
        return sum(not p.ok for p in self.paths)


def psis_log_weights(log_ratios: np.ndarray) -> np.ndarray:
    """Pareto-smoothed, normalised log importance weights of `log_ratios` (`-inf`: a
    zero weight)."""
    import warnings

    from arviz_stats.base import array_stats
    r = np.asarray(log_ratios, dtype=np.float64)
    finite = np.isfinite(r)
    if finite.sum() < 10:  # no tail to smooth: plain self-normalised weights
        lw = np.where(finite, r - r[finite].max(), -np.inf)
        return lw - np.log(np.exp(lw).sum())
    r2 = np.where(finite, r - r[finite].max(), r[finite].min() - r[finite].max() - 1e3)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        lw, _ = array_stats.psislw(-r2, r_eff=1.0, axis=-1)  # it takes -log ratios
    lw = np.where(finite, np.asarray(lw, dtype=np.float64), -np.inf)
    return lw - np.logaddexp.reduce(lw[finite])


def psis_weights(log_ratios: np.ndarray) -> tuple:
    """``(w, ess)``: the Pareto-smoothed weights of `log_ratios`, normalised (numpy), and
    their importance-sampling ESS ``1 / Σ w²``."""
    lw = psis_log_weights(log_ratios)
    w = np.exp(lw - lw[np.isfinite(lw)].max())
    w = w / w.sum()
    return w, float(1.0 / np.sum(w ** 2))


def pathfinder(target, settings: Settings = Settings(), generator: Optional[torch.Generator]
               = None, *, inits: Optional[list] = None, dtype=None, device=None,
               on_iteration: Optional[Callable[[int, str, int, dict], None]] = None,
               should_stop: Optional[Callable[[], bool]] = None) -> PathfinderResult:
    """Multi-path Pathfinder (module docstring).  `inits`: a start `(D,)` per path (None
    entries drawn); `on_iteration(path, phase, l, metrics)` as `single_path`'s with the
    path's index first.  Raises `PathfinderError` when no path worked."""
    if generator is None:
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))
    runs = []
    for i in range(settings.paths):
        if should_stop is not None and should_stop():
            break
        x0 = None if inits is None or i >= len(inits) or inits[i] is None else \
            torch.as_tensor(inits[i], dtype=torch.float64)
        cb = (lambda phase, l, m, i=i: on_iteration(i, phase, l, m)) \
            if on_iteration is not None else None
        runs.append(single_path(target, x0, settings, generator, dtype=dtype, device=device,
                                on_iteration=cb, should_stop=should_stop))
    ok = [p for p in runs if p.ok]
    if not ok:
        why = "; ".join(f"path {i + 1}: {p.message}" for i, p in enumerate(runs)) or \
            "cancelled before the first path"
        raise PathfinderError(f"Pathfinder found no approximation ({why})")
    pooled = torch.cat([p.draws for p in ok])
    ratios = torch.cat([p.log_p - p.log_q for p in ok]).numpy()
    best = max(ok, key=lambda p: p.elbo)
    if len(runs) == 1:
        return PathfinderResult(runs, pooled, ratios, None, best.q.diag(), pooled)
    lw = psis_log_weights(ratios)
    w = np.exp(lw)
    rng = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
    idx = rng.choice(len(w), size=settings.psis_draws, replace=True, p=w / w.sum())
    return PathfinderResult(runs, pooled[torch.as_tensor(idx)], ratios, lw, best.q.diag(),
                            pooled)


def distinct_starts(result: PathfinderResult, n: int, generator: torch.Generator) -> tuple:
    """`(z (n, D), note)`: `n` distinct draws of the pooled draws, chosen without
    replacement in proportion to their smoothed weights (one path: uniformly), as MCMC
    starts; with fewer than `n` draws of positive weight some repeat (said in the note)."""
    pool = result.pooled
    if result.psis_log_weights is None:
        w = np.ones(pool.shape[0])
    else:
        w = np.exp(result.psis_log_weights)
    rng = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
    positive = int((w > 0).sum())
    note = ""
    if positive >= n:
        idx = rng.choice(len(w), size=n, replace=False, p=w / w.sum())
    else:
        idx = rng.choice(len(w), size=n, replace=True, p=w / w.sum())
        note = f" ({positive} draws of positive weight for {n} chains: some chains share a start)"
    return pool[torch.as_tensor(idx)], note
