"""The L-BFGS climb of one Pathfinder path (`pathfinder.py`): minimise `f(x) = -log p~(x)`
on the unconstrained space, keeping every iterate and its gradient.

A plain L-BFGS (two-loop recursion, history `history`, initial matrix `s'y / y'y`) with a
strong-Wolfe line search (Nocedal & Wright 2006, algorithms 3.5 and 3.6: bracketing then
zoom by safeguarded cubic interpolation; c1 = 1e-4, c2 = 0.9, at most 20 evaluations a
search, the first step 1e-3 as Stan's BFGS, 1 afterwards).  A search that fails restarts
from the steepest descent with the optimiser's history cleared (at most 10 restarts, as
Stan); a failure from the steepest descent ends the climb.  Stan's stopping rules
(`Tolerances`): change of objective, relative change of objective, gradient norm,
relative gradient `g'Hg / max(|f|, 1)`, step size, iterations.

Everything here is float64 on the CPU whatever the target's dtype: a point is evaluated
by `target.log_density_and_grad(x[None].to(dtype))` (one chain), and a non-finite value
is `f = +inf` (the line search steps back from it).  Torch only; no sampler is imported
(the target is duck-typed: `dim`, `log_density_and_grad`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

C1, C2 = 1e-4, 0.9
MAX_SEARCH = 20
MAX_RESTARTS = 10
FIRST_STEP = 1e-3
_EPS = 2.220446049250313e-16


@dataclass(frozen=True)
class Tolerances:
    """Stan's defaults (CmdStan `pathfinder`)."""

    obj: float = 1e-12
    rel_obj: float = 1e4 * _EPS
    grad: float = 1e-8
    rel_grad: float = 1e7 * _EPS
    param: float = 1e-8


@dataclass
class Climb:
    """What one climb did: iterates `xs[l]`, objective `fs[l]` and gradient `gs[l]` of
    `f = -log p~` (float64, `l = 0` the start), the number of target evaluations, and
    why it stopped."""

    xs: list = field(default_factory=list)
    fs: list = field(default_factory=list)
    gs: list = field(default_factory=list)
    evaluations: int = 0
    reason: str = ""


class Objective:
    """`f(x) = -log p~(x)` and its gradient at one float64 point, counted."""

    def __init__(self, target, dtype, device):
        self.target, self.dtype, self.device = target, dtype, device
        self.count = 0

    def __call__(self, x: torch.Tensor) -> tuple:
        self.count += 1
        lp, g = self.target.log_density_and_grad(
            x.to(dtype=self.dtype, device=self.device).unsqueeze(0))
        f = -float(lp.reshape(-1)[0])
        grad = -g.reshape(-1).detach().to(device="cpu", dtype=torch.float64)
        if not math.isfinite(f) or not bool(torch.isfinite(grad).all()):
            return math.inf, torch.zeros_like(x)
        return f, grad


def _direction(g: torch.Tensor, S: list, Y: list) -> torch.Tensor:
    """`-H g` by the two-loop recursion over the pairs `(s, y)` (oldest first)."""
    q = g.clone()
    alphas = []
    for s, y in reversed(list(zip(S, Y))):
        a = float(s @ q) / float(s @ y)
        alphas.append(a)
        q -= a * y
    if S:
        s, y = S[-1], Y[-1]
        q *= float(s @ y) / float(y @ y)
    for (s, y), a in zip(zip(S, Y), reversed(alphas)):
        b = float(y @ q) / float(s @ y)
        q += (a - b) * s
    return -q


def _cubic_min(a, fa, ga, b, fb, gb) -> Optional[float]:
    """The minimiser of the cubic through `(a, fa, ga)` and `(b, fb, gb)`, or None."""
    d1 = ga + gb - 3 * (fa - fb) / (a - b)
    disc = d1 * d1 - ga * gb
    if disc < 0 or not math.isfinite(disc):
        return None
    d2 = math.copysign(math.sqrt(disc), b - a)
    denom = gb - ga + 2 * d2
    if denom == 0:
        return None
    return b - (b - a) * (gb + d2 - d1) / denom


def line_search(obj: Objective, x, f0, g0, p, step0: float) -> Optional[tuple]:
    """A strong-Wolfe step along `p` from `x`: `(step, x_new, f_new, g_new)`, or None when
    none is found in `MAX_SEARCH` evaluations."""
    d0 = float(g0 @ p)
    if not d0 < 0:
        return None
    lo, f_lo, d_lo = 0.0, f0, d0
    a, prev, f_prev, d_prev = step0, 0.0, f0, d0
    hi = None
    f_hi = d_hi = None
    for _ in range(MAX_SEARCH):
        xa = x + a * p
        fa, ga = obj(xa)
        da = float(ga @ p) if math.isfinite(fa) else math.nan
        if hi is None:  # bracketing (algorithm 3.5)
            if not math.isfinite(fa) or fa > f0 + C1 * a * d0 or (prev > 0 and fa >= f_prev):
                lo, f_lo, d_lo = prev, f_prev, d_prev
                hi, f_hi, d_hi = a, fa, da
            elif abs(da) <= -C2 * d0:
                return a, xa, fa, ga
            elif da >= 0:
                lo, f_lo, d_lo = a, fa, da
                hi, f_hi, d_hi = prev, f_prev, d_prev
            else:
                prev, f_prev, d_prev = a, fa, da
                a = 4.0 * a
                continue
        else:  # zoom (algorithm 3.6)
            if not math.isfinite(fa) or fa > f0 + C1 * a * d0 or fa >= f_lo:
                hi, f_hi, d_hi = a, fa, da
            else:
                if abs(da) <= -C2 * d0:
                    return a, xa, fa, ga
                if da * (hi - lo) >= 0:
                    hi, f_hi, d_hi = lo, f_lo, d_lo
                lo, f_lo, d_lo = a, fa, da
        # the next trial inside the bracket: a cubic when both ends are finite
        width = hi - lo
        trial = None
        if math.isfinite(f_hi) and d_hi is not None and math.isfinite(d_hi):
            trial = _cubic_min(lo, f_lo, d_lo, hi, f_hi, d_hi)
        low, high = sorted((lo + 0.1 * width, hi - 0.1 * width))
        if trial is None or not math.isfinite(trial) or not low <= trial <= high:
            trial = lo + 0.5 * width if math.isfinite(f_hi) else lo + 0.2 * width
        a = trial
        if abs(width) < 1e-16 * max(1.0, abs(lo)):
            return None
    return None


def climb(target, x0: torch.Tensor, *, history: int = 5, max_iters: int = 1000,
          tol: Tolerances = Tolerances(), dtype=None, device=None,
          on_iteration: Optional[Callable[[int, float], None]] = None,
          should_stop: Optional[Callable[[], bool]] = None) -> Climb:
    """L-BFGS from `x0` (float64 `(D,)`); see the module docstring.  `on_iteration(l, f)`
    after each accepted step; `should_stop()` ends the climb (reason ``"cancelled"``)."""
    dtype = dtype or torch.get_default_dtype()
    obj = Objective(target, dtype, device or "cpu")
    x = x0.to(torch.float64).clone()
    f, g = obj(x)
    out = Climb()
    out.xs.append(x)
    out.fs.append(f)
    out.gs.append(g)
    if not math.isfinite(f):
        out.reason = "the log density is not finite at the start"
        out.evaluations = obj.count
        return out
    S, Y = [], []
    restarts = 0
    for it in range(1, max_iters + 1):
        if should_stop is not None and should_stop():
            out.reason = "cancelled"
            break
        p = _direction(g, S, Y) if S else -g
        step0 = 1.0 if S else (FIRST_STEP if it == 1 else
                               min(1.0, 1.0 / max(float(g.norm()), 1e-300)))
        found = line_search(obj, x, f, g, p, step0)
        if found is None:
            if S and restarts < MAX_RESTARTS:  # from the steepest descent, history cleared
                restarts += 1
                S, Y = [], []
                found = line_search(obj, x, f, g, -g,
                                    min(1.0, 1.0 / max(float(g.norm()), 1e-300)))
            if found is None:
                out.reason = "the line search found no acceptable step"
                break
        _, x_new, f_new, g_new = found
        s, y = x_new - x, g_new - g
        if float(s @ y) > 0:
            S.append(s)
            Y.append(y)
            if len(S) > history:
                S.pop(0)
                Y.pop(0)
        df = abs(f - f_new)
        x, f_prev, f, g = x_new, f, f_new, g_new
        out.xs.append(x)
        out.fs.append(f)
        out.gs.append(g)
        if on_iteration is not None:
            on_iteration(it, f)
        if df < tol.obj:
            out.reason = "the objective changed less than 1e-12"
            break
        if df / max(abs(f_prev), abs(f), 1.0) < tol.rel_obj:
            out.reason = "the objective's relative change is below tolerance"
            break
        if float(g.norm()) < tol.grad:
            out.reason = "the gradient's norm is below 1e-8"
            break
        if S and float(-(g @ _direction(g, S, Y))) / max(abs(f), 1.0) < tol.rel_grad:
            out.reason = "the relative gradient is below tolerance"
            break
        if float(s.norm()) < tol.param:
            out.reason = "the step is below 1e-8"
            break
    else:
        out.reason = f"{max_iters} iterations"
    out.evaluations = obj.count
    return out
