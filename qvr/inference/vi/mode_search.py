"""The mode of a log density on the flat unconstrained vector and the exact Hessian there:
what MAP and the Laplace approximation (`qvr.inference.vi.laplace`) are made of.

`find_mode`: L-BFGS (`torch.optim.LBFGS`, strong-Wolfe line search) over `z` and the
program's learnable parameters, from Stan's start (every coordinate uniform on (-2, 2),
seeded), restarted when a start is not finite or a search fails; `newton_polish`: Newton
steps with the exact Hessian (`hessian`, autograd); `precision_factor`: ``-H = L Lᵀ`` or
a `ModeError` naming the coordinates of a flat or rising direction; `rising`: whether the
search stopped short of a mode (a supremum at infinity or at the edge of a support).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch


#: the largest latent dimension whose Hessian is computed (a dense D x D matrix)
MAX_DIM = 2000
#: Stan's initial values: uniform on (-INIT_RADIUS, INIT_RADIUS), unconstrained
INIT_RADIUS = 2.0
#: random starts tried for a finite log density (Stan tries 100)
INIT_TRIES = 20
#: searches started afresh when one fails (non-finite values, no negative definite mode)
RESTARTS = 3
#: L-BFGS stops when every gradient entry is below this (times max(1, |log density|))
GRAD_TOL = 1e-9
#: ... or when the log density changed by less than this (relative) twice in a row
REL_CHANGE_TOL = 1e-13
#: ... a stall (no decrease twice) with every gradient entry below this (relative) is
#: convergence to rounding; above it the search restarts its history with shorter steps,
#: at most STALL_RESETS times (then it stops there, not converged)
LOOSE_GRAD_TOL = 1e-5
STALL_RESETS = 6
#: a coordinate beyond this (unconstrained) means the search runs off to infinity
RUNAWAY = 1e7
#: Newton steps with the exact Hessian after L-BFGS
NEWTON_STEPS = 3
#: a Newton step longer than this times (1 + max |z|) means no mode was reached
STEP_TOL = 1e-4
#: -H counts as singular when its smallest eigenvalue is below this times its largest
SINGULAR_RATIO = 1e-12


class ModeError(ValueError):
    """No usable mode: `error_type` says why (``NonFiniteDensity``, ``NoMode``,
    ``NotNegativeDefinite``)."""

    def __init__(self, message: str, error_type: str):
        super().__init__(message)
        self.error_type = error_type


# ---------------------------------------------------------------- the mode

class Mode(NamedTuple):
    z: torch.Tensor  # (D,)
    log_density: float
    iterations: int
    max_grad: float
    converged: bool
    restarts: int
    #: stopped where no decrease could be found (not at the iteration limit)
    stalled: bool = False


class Stopped(Exception):
    """The search was cancelled (`should_stop()`)."""


def find_mode(fn: Callable, dim: int, params: list, *, seed: Optional[int], max_iter: int,
              dtype=torch.float64, device=None, z0: Optional[torch.Tensor] = None,
              on_iteration: Optional[Callable] = None, should_stop=lambda: False,
              names: Optional[list] = None, on_restart: Optional[Callable] = None) -> Mode:
    """Maximise `fn` over `z (dim,)` and `params` (learnable model parameters, updated in
    place).  `z0`: the first start (else Stan's uniform(-2, 2), seeded by `seed`);
    `on_iteration(i, log_density)` after each L-BFGS iteration; `on_restart(why)` before a
    new start.  Raises `ModeError` (no finite start, or every search ran off), `Stopped`."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) if seed is not None else int(torch.randint(0, 2 ** 62, ())))
    initial = [p.detach().clone() for p in params]
    last_error = None
    for attempt in range(RESTARTS + 1):
        with torch.no_grad():
            for p, v in zip(params, initial):
                p.copy_(v)
        start = z0 if (attempt == 0 and z0 is not None) else None
        start = _finite_start(fn, dim, gen, dtype, device, start)
        try:
            mode = _lbfgs(fn, start, params, max_iter, on_iteration, should_stop, names)
        except ModeError as exc:
            last_error = exc
            if on_restart is not None and attempt < RESTARTS:
                on_restart(str(exc))
            continue
        return mode._replace(restarts=attempt)
    raise last_error


def _finite_start(fn, dim, gen, dtype, device, start) -> torch.Tensor:
    tried = []
    for _ in range(INIT_TRIES):
        z = start if start is not None else \
            (torch.rand(dim, generator=gen, dtype=torch.float64) * 2 - 1) * INIT_RADIUS
        z = z.to(dtype=dtype, device=device)
        start = None
        with torch.no_grad():
            try:
                v = fn(z)
            except (ValueError, RuntimeError) as exc:
                tried.append(f"{type(exc).__name__}: {exc}")
                continue
        if bool(torch.isfinite(v)):
            return z
        tried.append(f"log density {float(v)}")
    raise ModeError(f"the log density is not finite at any of {INIT_TRIES} random starts "
                    f"(uniform(-{INIT_RADIUS:g}, {INIT_RADIUS:g}) on the unconstrained scale; "
                    f"last: {tried[-1][:160] if tried else '?'}): check the data and the "
                    f"priors", "NonFiniteDensity")


def _lbfgs(fn, z0, params, max_iter, on_iteration, should_stop, names) -> Mode:
    z = z0.detach().clone().requires_grad_(True)
    variables = [z, *params]

    def optimiser(lr: float):
        return torch.optim.LBFGS(variables, lr=lr, max_iter=1, max_eval=25, history_size=20,
                                 line_search_fn="strong_wolfe", tolerance_grad=0.0,
                                 tolerance_change=0.0)
    lr = 1.0
    opt = optimiser(lr)
    seen = {}

    def closure():
        opt.zero_grad()
        try:
            lp = fn(z)
        except (ValueError, RuntimeError):
            lp = None
        if lp is not None and bool(torch.isposinf(lp)):
            raise ModeError(_runaway(z.detach(), names, infinite=True), "NoMode")
        if lp is None or not bool(torch.isfinite(lp)):
            # outside the support: a very poor value the line search backs away from
            for v in variables:
                v.grad = torch.zeros_like(v)
            seen["bad"] = True
            return torch.tensor(1e300, dtype=z.dtype, device=z.device)
        loss = -lp
        loss.backward()
        for v in variables:
            if v.grad is None:
                v.grad = torch.zeros_like(v)
        return loss.detach()

    def measure():
        loss = closure()
        g = max((float(v.grad.abs().max()) for v in variables if v.numel()), default=0.0)
        return float(loss), g

    f, g = measure()
    small = resets = 0
    it = 0
    converged = False
    while it < max_iter:
        if g <= GRAD_TOL * max(1.0, abs(f)):
            converged = True
            break
        if should_stop():
            raise Stopped()
        opt.step(closure)
        it += 1
        f_new, g = measure()
        if not math.isfinite(f_new) or f_new >= 1e299 or not bool(torch.isfinite(z).all()):
            raise ModeError("the search reached a point where the log density is not "
                            "finite", "NonFiniteDensity")
        far = float(z.detach().abs().max()) if z.numel() else 0.0
        if far > RUNAWAY:
            raise ModeError(_runaway(z.detach(), names), "NoMode")
        if on_iteration is not None:
            on_iteration(it, -f_new)
        small = small + 1 if abs(f - f_new) <= REL_CHANGE_TOL * max(1.0, abs(f)) else 0
        f = f_new
        if not small and lr < 1.0:  # a decrease again: back towards full steps
            lr = min(1.0, lr * 10)
            opt.param_groups[0]["lr"] = lr
        if small >= 2:
            if g <= LOOSE_GRAD_TOL * max(1.0, abs(f)):
                converged = True  # rounding level: the Newton steps finish the job
                break
            # the line search found no decrease (non-finite points along the direction,
            # a poor curvature history): start the history afresh with shorter steps
            resets += 1
            if resets > STALL_RESETS:  # stuck (a kink, a flat edge): the checks of the
                return Mode(z.detach(), -f, it, g, False, 0, True)  # point say what it is
            lr *= 0.1
            opt = optimiser(lr)
            small = 0
    return Mode(z.detach(), -f, it, g, converged, 0)


def _runaway(z: torch.Tensor, names: Optional[list], infinite: bool = False) -> str:
    i = int(z.abs().argmax()) if z.numel() else 0
    where = f" (`{names[i]}` reached {float(z[i]):.3g})" if names and i < len(names) else ""
    how = "reaches +inf" if infinite else \
        "keeps increasing as a coordinate runs off to infinity on the unconstrained scale"
    return (f"the log density has no mode: it {how}{where} (an improper posterior, or a "
            f"density unbounded at the edge of a support); try SVI or NUTS")


def rising(fn: Callable, z: torch.Tensor, H: torch.Tensor, names: Optional[list]) \
        -> Optional[str]:
    """Where the search stopped short of a mode: `None` when the Newton step at `z`
    (eigen-decomposed `-H`) is negligible, else the coordinates along which the log
    density still rises — its gradient pointing where the curvature is flat or convex,
    or a step too long to be rounding (a supremum at infinity or at the edge of a
    support, e.g. a perfectly separated logistic regression)."""
    from torch.func import grad
    if z.shape[0] == 0:
        return None
    g = grad(fn)(z.detach()).detach()
    with torch.no_grad():
        f = float(fn(z))
    evals, evecs = torch.linalg.eigh(-H)
    c = evecs.T @ g
    top = max(float(evals[-1]), 0.0)
    flat = evals <= SINGULAR_RATIO * top
    tol_g = 10 * GRAD_TOL * max(1.0, abs(f))
    step = torch.where(flat, torch.where(c.abs() > tol_g, torch.full_like(c, math.inf),
                                         torch.zeros_like(c)), c / evals.clamp(min=1e-300))
    limit = STEP_TOL * (1.0 + float(z.abs().max()))
    bad = step.abs() > limit
    if not bool(bad.any()):
        return None
    direction = evecs[:, int(torch.where(bad, step.abs(), -1.0).argmax())]
    big = (direction.abs() >= 0.3 * direction.abs().max()).nonzero().reshape(-1).tolist()[:4]
    return ", ".join(f"`{names[i]}`" for i in big) if names else "a direction"


# ---------------------------------------------------------------- the Hessian

def hessian(fn: Callable, z: torch.Tensor) -> torch.Tensor:
    """The exact Hessian of `fn` at `z` (autograd, symmetrised): `torch.func` (reverse over
    reverse, vectorised), else one double-backward pass per coordinate."""
    D = z.shape[0]
    if D == 0:
        return z.new_zeros((0, 0))
    try:
        from torch.func import grad, jacrev
        H = jacrev(grad(fn), chunk_size=64 if D > 64 else None)(z.detach()).detach()
    except Exception:  # something vmap cannot run: one row at a time
        with torch.enable_grad():
            zz = z.detach().clone().requires_grad_(True)
            g, = torch.autograd.grad(fn(zz), zz, create_graph=True)
            rows = []
            for i in range(D):
                r, = torch.autograd.grad(g[i], zz, retain_graph=True, allow_unused=True)
                rows.append(torch.zeros_like(zz) if r is None else r)
            H = torch.stack(rows).detach()
    return 0.5 * (H + H.T)


def precision_factor(H: torch.Tensor, names: Optional[list] = None) -> tuple:
    """``(L, (smallest, largest eigenvalue of -H))`` with `-H = L Lᵀ`; `ModeError` when
    `-H` is not positive definite (or singular to working precision), naming the
    coordinates along its worst direction."""
    if H.shape[0] == 0:
        return H.clone(), (math.nan, math.nan)
    if not bool(torch.isfinite(H).all()):
        raise ModeError("the Hessian at the mode is not finite; try SVI or NUTS",
                        "NotNegativeDefinite")
    evals, evecs = torch.linalg.eigh(-H)
    lo, hi = float(evals[0]), float(evals[-1])
    if not (lo > SINGULAR_RATIO * max(hi, 0.0) and lo > 0):
        v = evecs[:, 0]
        big = (v.abs() >= 0.3 * v.abs().max()).nonzero().reshape(-1).tolist()[:4]
        along = ", ".join(f"`{names[i]}`" for i in big) if names else ""
        raise ModeError(f"the Hessian at the mode is not negative definite: its largest "
                        f"eigenvalue is {-lo + 0.0:.3g}" + (f" along {along}" if along else "")
                        + " (a saddle point or a ridge); try SVI or NUTS",
                        "NotNegativeDefinite")
    return torch.linalg.cholesky(-H), (lo, hi)


def newton_polish(fn: Callable, z: torch.Tensor, steps: int = NEWTON_STEPS) -> torch.Tensor:
    """Up to `steps` Newton steps from `z` (each halved until the log density does not
    drop); stops where `-H` is not positive definite or nothing improves."""
    from torch.func import grad
    for _ in range(steps):
        try:
            H = hessian(fn, z)
            L = torch.linalg.cholesky(-H)
            g = grad(fn)(z.detach()).detach()
        except Exception:
            return z
        delta = torch.cholesky_solve(g.unsqueeze(-1), L).squeeze(-1)
        with torch.no_grad():
            f0 = float(fn(z))
            t = 1.0
            for _ in range(10):
                cand = z + t * delta
                try:
                    f1 = float(fn(cand))
                except (ValueError, RuntimeError):
                    f1 = -math.inf
                if f1 >= f0 - 1e-12 * max(1.0, abs(f0)):
                    break
                t *= 0.5
            else:
                return z
        if float((t * delta).abs().max()) <= 1e-14 * max(1.0, float(z.abs().max())):
            return cand
        z = cand
    return z


__all__ = ["MAX_DIM", "ModeError", "Mode", "Stopped", "find_mode", "rising", "hessian",
           "precision_factor", "newton_polish"]
