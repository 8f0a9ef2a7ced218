"""MAP and the Laplace approximation (``--guide map``, ``--guide laplace``).

Both work on the flat unconstrained vector `z` of every continuous latent site, local
ones included (`qvr.inference.programs.sites.Registry`; finite latents are summed out,
`qvr.inference.enumeration.enumerate`), as Stan's ``optimize`` and ``laplace`` do:

* **MAP** (`MapGuide`): the mode of ``log p(T(z), y)`` with the Jacobian of `T` left out
  (Stan's ``optimize``, ``jacobian=false``: the mode of the constrained density, a
  penalised maximum likelihood).  A point estimate: its "draws" all equal the mode and it
  has no density;
* **Laplace** (`LaplaceGuide`): the mode `ẑ` of the Jacobian-adjusted density
  ``log p~(z) = log p(T(z), y) + log|det J_T(z)|`` (Stan's ``laplace``, ``jacobian=true``)
  and the Normal ``N(ẑ, (-H)^-1)`` with `H` the exact (autograd) Hessian of ``log p~`` at
  ``ẑ``: a draw is ``T(ẑ + L^-T ε)`` with ``-H = L Lᵀ``, and its log density is the
  Gaussian's at ``z = T^-1(v)`` minus ``log|det J_T(z)|``.  Exact for a Gaussian posterior
  in `z`.

The mode: L-BFGS (`torch.optim.LBFGS`, strong-Wolfe line search) from Stan's start, every
coordinate uniform on (-2, 2) (seeded), a few restarts when a start is not finite or the
search fails, then up to `NEWTON_STEPS` Newton steps with the exact Hessian (the mode to
machine precision where `-H` is positive definite).  The program's learnable parameters
(``param``) are optimised jointly with `z` (MAP: the joint mode; Laplace: the parameters
are then held at their optimum and the Hessian is over the latents only).

Parameters of a guide (saved by the run record like an SVI guide's): ``mode_<site>`` (the
site's unconstrained values, shape ``(*rows, u)``) and, for Laplace, ``scale_tril`` (the
Cholesky factor of the covariance ``(-H)^-1`` over the whole `z`, in site order).  At
other data (``qvr predict``) the layout of the row sites changes: a guide then draws its
global sites (and plates of the fit's size) only, from their marginal, and leaves the
rows to the caller (predict redraws them from the program, as for the mean-field guide).

References: Stan Reference Manual, "Laplace sampling" and "Optimization" (CmdStan 2.33+);
Pyro's `AutoLaplaceApproximation`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import nn

from qvr.inference.programs.sites import build_registry

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


# ---------------------------------------------------------------- the density

def density(model, x, observations: dict, registry, jacobian: bool) -> Callable:
    """`z (D,) -> log p(T(z), y) [+ log|det J_T(z)|]`, a scalar; finite latents summed
    out.  Call `qvr.inference.enumeration.enumerate.prepare` first (outside transforms)."""
    from qvr.inference.enumeration.enumerate import enumerated_total

    def fn(z: torch.Tensor) -> torch.Tensor:
        values, logdet = registry.unpack(z)
        total = enumerated_total(model, x, {**values, **observations})
        return total + logdet if jacobian else total
    return fn


def is_stochastic(fn: Callable, z: torch.Tensor) -> bool:
    """True when two evaluations of `fn` at `z` under different random states differ (a
    Monte-Carlo composite: its density is an estimate)."""
    out = []
    with torch.no_grad(), torch.random.fork_rng(devices=[z.device] if z.is_cuda else []):
        for seed in (1, 2):
            torch.manual_seed(seed)
            try:
                out.append(fn(z))
            except (ValueError, RuntimeError):
                return False
    return not bool(torch.equal(out[0], out[1])) and bool(torch.isfinite(out[0]))


def coordinate_names(registry) -> list:
    """`name` or `name[i]` (flat index within the site) for every coordinate of `z`."""
    out = []
    for s in registry.sites:
        out.extend([s.name] if s.size == 1 else [f"{s.name}[{i}]" for i in range(s.size)])
    return out


# ---------------------------------------------------------------- the mode

class Mode(NamedTuple):
    z: torch.Tensor  # (D,)
    log_density: float
    iterations: int
    max_grad: float
    converged: bool
    restarts: int


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
    opt = torch.optim.LBFGS(variables, lr=1.0, max_iter=1, max_eval=25, history_size=20,
                            line_search_fn="strong_wolfe", tolerance_grad=0.0,
                            tolerance_change=0.0)
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
    small = 0
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
        if small >= 2:
            converged = True
            break
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
    g = grad(fn)(z.detach())
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
        H = jacrev(grad(fn), chunk_size=64 if D > 64 else None)(z.detach())
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
            g = grad(fn)(z.detach())
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


# ---------------------------------------------------------------- the guides

def _model_of(model):
    if hasattr(model, "execute"):
        return model
    inner = getattr(model, "morphism", None)
    if inner is not None and hasattr(inner, "execute"):
        return inner
    raise TypeError(f"expected a program (MonadicProgram or Program); got {type(model).__name__}")


class LaplaceGuide(nn.Module):
    """The Laplace approximation ``N(ẑ, (-H)^-1)`` on the unconstrained `z`, with the
    interface of `AutoNormalGuide` (`rsample`, `sample`, `log_prob`, `median`,
    `latent_names`, ``model[0]``).

    Args:
      model: the program.
      observed_names: names excluded from the guide.
      sites: the latent sites of the fit's registry (its layout of `z`).
      mode: ``ẑ`` ``(D,)``.
      scale_tril: the Cholesky factor of the covariance ``(-H)^-1`` ``(D, D)``.
    """

    kind = "laplace"
    #: a point estimate has no spread and no density (MAP)
    point_estimate = False

    def __init__(self, model, observed_names, sites: list, mode: torch.Tensor,
                 scale_tril: Optional[torch.Tensor] = None):
        super().__init__()
        self.model = [_model_of(model)]  # a list: not registered as a submodule
        self.observed_names = set(observed_names or ())
        self.sites = list(sites)
        self._offsets, start = {}, 0
        for s in self.sites:
            self._offsets[s.name] = (start, start + s.size)
            self.register_parameter(f"mode_{s.name}", nn.Parameter(
                mode[start:start + s.size].detach().clone().reshape(s.unconstrained_shape),
                requires_grad=False))
            start += s.size
        self.dim = start
        if not self.point_estimate:
            if scale_tril is None or tuple(scale_tril.shape) != (start, start):
                raise ValueError(f"the Laplace guide needs a ({start}, {start}) scale_tril")
            self.scale_tril = nn.Parameter(scale_tril.detach().clone(), requires_grad=False)

    @property
    def latent_names(self) -> list:
        return [s.name for s in self.sites]

    def flat_mode(self) -> torch.Tensor:
        parts = [getattr(self, f"mode_{s.name}").reshape(-1) for s in self.sites]
        return torch.cat(parts) if parts else torch.zeros(0)

    def covariance(self) -> torch.Tensor:
        S = self.scale_tril
        return S @ S.T

    # ---- layout at some data

    def _layout(self, x, observations) -> tuple:
        """``(registry, picked sites (the registry's), fit offsets, whole)``: at the fit's
        data every site (``whole``); elsewhere the global sites and the plate sites of
        the fit's size (a plate over rows of another count is left out, as local sites)."""
        obs = dict(observations or {})
        reg = build_registry(self.model[0], x, obs,
                             observed_names=self.observed_names | set(obs))
        mine = {s.name: s for s in self.sites}
        whole = [s.name for s in reg.sites] == [s.name for s in self.sites] and all(
            s.unconstrained_shape == mine[s.name].unconstrained_shape for s in reg.sites)
        picked = []
        for s in reg.sites:
            own = mine.get(s.name)
            if own is not None and own.unconstrained_shape == s.unconstrained_shape:
                if whole or s.kind in ("global", "plate"):
                    picked.append(s)
                continue
            if s.kind == "global" or own is None:
                what = "is not in the fitted guide" if own is None else \
                    (f"has unconstrained shape {tuple(s.unconstrained_shape)} here but "
                     f"{tuple(own.unconstrained_shape)} in the fit")
                raise ValueError(f"site `{s.name}` {what}: the {self.kind} guide cannot draw "
                                 f"it at this data")
        if not whole and any(s.dependent for s in picked):
            raise ValueError(f"the {self.kind} guide draws sites with value-dependent bounds "
                             f"only at the fit's data")
        self._last = (x, obs, reg)
        return reg, picked, [self._offsets[s.name] for s in picked], whole

    def _factor(self, offsets, whole) -> tuple:
        loc = self.flat_mode()
        if whole:
            return loc, (None if self.point_estimate else self.scale_tril)
        idx = torch.cat([torch.arange(a, b, device=loc.device) for a, b in offsets]) \
            if offsets else torch.zeros(0, dtype=torch.long, device=loc.device)
        if self.point_estimate:
            return loc[idx], None
        cov = self.covariance()[idx][:, idx]
        return loc[idx], torch.linalg.cholesky(cov)

    def rsample(self, x, observations: Optional[dict] = None,
                sample_shape=torch.Size()) -> dict:
        """Draw the latent sites: `{name: (*sample_shape, *shape)}` (at other data than the
        fit's, the global sites and plates of the fit's size only)."""
        sample_shape = torch.Size(sample_shape)
        reg, picked, offsets, whole = self._layout(x, observations)
        if not picked:
            return {}
        loc, S = self._factor(offsets, whole)
        n = loc.shape[0]
        if S is None:
            z = loc.expand(*sample_shape, n)
        else:
            eps = torch.randn((*sample_shape, n), dtype=loc.dtype, device=loc.device)
            z = loc + eps @ S.T
        if whole:
            return reg.constrain(z)
        out, at = {}, 0
        for s in picked:
            zs = z[..., at:at + s.size].reshape(*sample_shape, *s.unconstrained_shape)
            at += s.size
            out[s.name] = s.transform(zs).reshape(*sample_shape, *s.shape)
        return out

    def sample(self, x, observations: Optional[dict] = None, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(x, observations, sample_shape)

    def log_prob(self, x, values: dict, batch_ndims: int = 0, *,
                 detach_params: bool = False) -> torch.Tensor:
        """The Gaussian log density of ``z = T^-1(v)`` minus ``log|det J_T(z)|``, summed over
        the sites in `values` (the marginal of those present); `batch_ndims` leading axes
        kept.  (`detach_params` is accepted for the guides' interface: nothing here is
        trained.)"""
        if self.point_estimate:
            raise ValueError("a MAP fit is a point estimate: it has no density "
                             "(use --guide laplace)")
        picked = []
        for s in self.sites:
            v = values.get(s.name)
            if v is None:
                continue
            if tuple(v.shape[batch_ndims:]) != tuple(s.shape):
                if s.kind != "global":  # rows of other data: not the fit's row latents
                    continue
                raise ValueError(f"site `{s.name}`: a value of shape "
                                 f"{tuple(v.shape[batch_ndims:])}, the {self.kind} guide "
                                 f"has {tuple(s.shape)}")
            picked.append(s)
        if not picked:
            return self.flat_mode().new_zeros(())
        dependent = None
        if any(s.dependent for s in picked):  # E9.2: through the bounds of these values
            last = getattr(self, "_last", None)
            if last is not None and last[0] is x:
                reg = last[2]
            else:
                latent = set(self.latent_names)
                obs = {k: v for k, v in values.items() if k not in latent}
                reg = build_registry(self.model[0], x, obs,
                                     observed_names=self.observed_names | set(obs))
            latent = {s.name: values[s.name] for s in picked}
            dependent = reg.dependent_inverse(latent, batch_ndims=batch_ndims)
        zs, logdet = [], 0.0
        lead = None
        for s in picked:
            v = values[s.name]
            lead = tuple(v.shape[:batch_ndims])
            if dependent is not None and s.name in dependent:
                z, ld = dependent[s.name]
                zs.append(z.reshape(*lead, -1))
                logdet = logdet + ld
                continue
            vv = v.reshape(*lead, *s.batch_shape, *(s.event_shape or (1,)))
            z = s.transform.inv(vv)
            ld = s.transform.log_abs_det_jacobian(z, vv)
            zs.append(z.reshape(*lead, -1))
            logdet = logdet + ld.reshape(*lead, -1).sum(-1)
        z = torch.cat(zs, dim=-1)
        offsets = [self._offsets[s.name] for s in picked]
        loc, S = self._factor(offsets, len(picked) == len(self.sites))
        S = S.to(z.dtype)
        diff = (z - loc.to(z.dtype)).unsqueeze(-1)
        sol = torch.linalg.solve_triangular(S, diff.reshape(-1, *diff.shape[-2:]), upper=False)
        maha = (sol.squeeze(-1) ** 2).sum(-1).reshape(lead)
        n = z.shape[-1]
        log_q = (-0.5 * maha - torch.log(torch.diagonal(S)).sum()
                 - 0.5 * n * math.log(2 * math.pi))
        return log_q - logdet

    def median(self) -> dict:
        """The constrained image of the mode per global and plate site."""
        out = {}
        with torch.no_grad():
            for s in self.sites:
                if s.kind in ("global", "plate") and not s.dependent:
                    z = getattr(self, f"mode_{s.name}")
                    out[s.name] = s.transform(z).reshape(s.shape)
        return out

    def extra_repr(self) -> str:
        return f"sites={self.latent_names}, dim={self.dim}"


class MapGuide(LaplaceGuide):
    """The MAP point estimate: every draw is the mode (constrained); no density."""

    kind = "map"
    point_estimate = True

    def __init__(self, model, observed_names, sites: list, mode: torch.Tensor):
        super().__init__(model, observed_names, sites, mode, None)


def rebuild(kind: str, model, observed_names, params: dict, x, observations) -> LaplaceGuide:
    """The `MapGuide` (``kind="map"``) or `LaplaceGuide` of a run from its saved
    parameters (``mode_<site>``, ``scale_tril``; other entries ignored), laid out as at
    the fit; `x`/`observations` give the sites' descriptions (at other data than the
    fit's, its draws cover the global sites and plates of the fit's size)."""
    if kind not in ("map", "laplace"):
        raise ValueError(f"rebuild: not a map or laplace guide: {kind!r}")
    model = _model_of(model)
    obs = dict(observations or {})
    reg = build_registry(model, x, obs, observed_names=set(observed_names or ()) | set(obs))
    saved = {k[len("mode_"):]: v for k, v in params.items() if k.startswith("mode_")}
    names = [s.name for s in reg.sites]
    extra = [n for n in saved if n not in names]
    missing = [n for n in names if n not in saved]
    if extra or missing:
        what = (f"has no latent site `{extra[0]}`" if extra else
                f"has a latent site `{missing[0]}` that the run's guide lacks")
        raise ValueError(f"the {kind} guide does not fit the program: the program {what} "
                         f"(it has changed since the run?)")
    sites, parts = [], []
    dtype = torch.get_default_dtype()
    for s in reg.sites:
        value = torch.as_tensor(saved[s.name], dtype=dtype)
        shape = tuple(value.shape)
        if shape != tuple(s.unconstrained_shape):
            if s.kind == "global" or shape[-1:] != (s.u,):
                raise ValueError(f"the {kind} guide does not fit the program: site "
                                 f"`{s.name}` has shape {shape} in the run but "
                                 f"{tuple(s.unconstrained_shape)} here")
            batch = shape[:-1]  # rows at other data: the fit's layout (not drawn there)
            s = dataclasses.replace(s, shape=(*batch, *s.event_shape),
                                    num_events=math.prod(batch),
                                    plate=batch[0] if s.kind == "plate" else s.plate)
        sites.append(s)
        parts.append(value.reshape(-1))
    mode = torch.cat(parts) if parts else torch.zeros(0)
    if kind == "map":
        return MapGuide(model, observed_names, sites, mode)
    S = params.get("scale_tril")
    if S is None:
        raise ValueError("the laplace guide's `scale_tril` is missing from the run's "
                         "parameters")
    return LaplaceGuide(model, observed_names, sites, mode, torch.as_tensor(S, dtype=dtype))


__all__ = ["LaplaceGuide", "MapGuide", "ModeError", "Mode", "Stopped", "find_mode",
           "hessian", "precision_factor", "newton_polish", "density", "is_stochastic",
           "coordinate_names", "rebuild", "MAX_DIM"]
