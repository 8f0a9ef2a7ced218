"""Supports of the statistics extension (docs/extensions.md E9.2) at run time.

* improper flat priors `Flat` / `HalfFlat` on truncated and constrained supports (from
  `qvr.runtime.improper.Improper`: log-density 0 on its support, no forward draws except
  under `improper_init()`);
* truncation `[lower=a, upper=b]` of a continuous family (`Truncated`: p(x) / (F(b) - F(a))
  on [a, b]; the normaliser from torch's `cdf` when it depends on run-time values, or a
  number computed once, `constant_log_normaliser`, when the family's arguments and the
  bounds are all numbers);
* constrained spaces named by objects, `over=Mu` (`Ordered K`, `PositiveOrdered K`,
  `Simplex K`, `CholeskyFactor K`): the ordered constraints and their bijectors
  (`OrderedTransform`, `PositiveOrderedTransform`, registered with `biject_to`), the sorted
  iid draws of a scalar family (`OrderedIID`: K! prod p(x_i));
* `SupportStep`, the `_step_<name>` module of a sample/observe step that uses one of these
  (or whose support bounds are run-time values): it builds the step's distribution from
  the family's arguments followed by the truncation bounds;
* dependent supports: a latent site whose bounds depend on other values gets its bijector
  from the bounds of the current evaluation.  `pinned(values)` is how the MCMC registry
  (`qvr.inference.programs.sites.Registry`) does it: while pinned, the site's draw is `T(z)` for
  the given unconstrained `z`, with `T` the bijector of the support just computed, and the
  log-Jacobian is collected.

Torch only; no knowledge of programs beyond the step module.
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from typing import Optional

import numpy as np
import torch
import torch.distributions as D
from torch.distributions import biject_to, constraints
from torch.distributions import transforms as T

from qvr.runtime.errors import QvrRuntimeError
from qvr.runtime.improper import Improper
from qvr.runtime.steps import FamilyStep
from qvr.sema.families import FAMILIES


# ------------------------------------------------------------------ run-time state

_state = threading.local()


def _get(name, default=None):
    return getattr(_state, name, default)


class _Pins:
    def __init__(self, values: dict):
        self.values = values  # site key -> unconstrained value (constrained value's shape)
        self.logdet = None  # summed log|det J| of the pinned draws

    def add(self, t: torch.Tensor) -> None:
        t = t.sum()
        self.logdet = t if self.logdet is None else self.logdet + t


@contextmanager
def pinned(values: dict):
    """While active, the draw of each site named in `values` (a `SupportStep` site) is
    `T(z)`, `z = values[site]`, with `T = biject_to(support)` of the distribution the
    step has just built; yields the record whose `logdet` sums the log-Jacobians."""
    old = _get("pins")
    pins = _Pins(dict(values))
    _state.pins = pins
    try:
        yield pins
    finally:
        _state.pins = old


# ------------------------------------------------------------------ ordered vectors

class _Ordered(constraints.Constraint):
    """Strictly increasing vectors (`Ordered K`)."""

    is_discrete = False
    event_dim = 1

    def check(self, value):
        return (value[..., 1:] > value[..., :-1]).all(-1)

    def __repr__(self):
        return "OrderedVector()"


class _PositiveOrdered(_Ordered):
    """Strictly increasing vectors of positive numbers (`PositiveOrdered K`)."""

    def check(self, value):
        return super().check(value) & (value[..., 0] > 0)

    def __repr__(self):
        return "PositiveOrderedVector()"


ordered_vector = _Ordered()
positive_ordered_vector = _PositiveOrdered()


class OrderedTransform(T.Transform):
    """R^K -> ordered vectors: y_1 = x_1, y_k = y_{k-1} + exp(x_k) (Stan's transform);
    log|det J| = sum_{k >= 2} x_k."""

    domain = constraints.real_vector
    codomain = ordered_vector
    bijective = True
    sign = +1

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def _call(self, x):
        return torch.cumsum(torch.cat([x[..., :1], torch.exp(x[..., 1:])], -1), -1)

    def _inverse(self, y):
        return torch.cat([y[..., :1], torch.log(y[..., 1:] - y[..., :-1])], -1)

    def log_abs_det_jacobian(self, x, y):
        return x[..., 1:].sum(-1)


class PositiveOrderedTransform(OrderedTransform):
    """R^K -> positive ordered vectors: y_k = sum_{j <= k} exp(x_j); log|det J| = sum x."""

    codomain = positive_ordered_vector

    def _call(self, x):
        return torch.cumsum(torch.exp(x), -1)

    def _inverse(self, y):
        prev = torch.cat([torch.zeros_like(y[..., :1]), y[..., :-1]], -1)
        return torch.log(y - prev)

    def log_abs_det_jacobian(self, x, y):
        return x.sum(-1)


@biject_to.register(_Ordered)
def _bij_ordered(c):
    return OrderedTransform()


@biject_to.register(_PositiveOrdered)
def _bij_positive_ordered(c):
    return PositiveOrderedTransform()


# ------------------------------------------------------------------ sorted iid draws

class OrderedIID(D.Distribution):
    """K iid draws of a scalar `base`, sorted: density K! prod p(x_i) on increasing
    vectors (every order of the iid draws is equally likely, so this is exact)."""

    arg_constraints = {}

    def __init__(self, base: D.Distribution, k: int, positive: bool):
        self.base = base
        self.k = int(k)
        self.positive = positive
        self._log_kfact = math.lgamma(self.k + 1)
        super().__init__(base.batch_shape, torch.Size([self.k]), validate_args=False)

    @property
    def has_rsample(self):
        return self.base.has_rsample

    @constraints.dependent_property(is_discrete=False, event_dim=1)
    def support(self):
        return positive_ordered_vector if self.positive else ordered_vector

    def log_prob(self, value):
        b = self.base
        v = value.movedim(-1, 0)  # (K, *batch): the base broadcasts over the batch axes
        return b.log_prob(v).sum(0) + self._log_kfact

    def _draws(self, sample_shape):
        shape = torch.Size(sample_shape) + torch.Size([self.k])
        x = self.base.rsample(shape) if self.base.has_rsample else self.base.sample(shape)
        x = x.movedim(len(sample_shape), -1)  # (*sample, *batch, K)
        return torch.sort(x, dim=-1).values

    def rsample(self, sample_shape=torch.Size()):
        return self._draws(sample_shape)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            return self._draws(sample_shape)


# ------------------------------------------------------------------ truncation

#: families whose torch `cdf` is differentiable in every argument: truncation with
#: run-time arguments or bounds works for these (`SupportStep` reports the others)
from qvr.sema.runnable import CDF_FAMILIES  # noqa: E402  (the checker reads it too, E9.9)
#: families symmetric about their `loc` argument (index): a bound at the location cuts
#: off half the mass
_SYMMETRIC = {"Normal": 0, "Cauchy": 0, "Laplace": 0, "StudentT": 1}


def _bounds_of(support):
    lo = getattr(support, "lower_bound", None)
    hi = getattr(support, "upper_bound", None)
    return lo, hi


def _max(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))


def _min(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))


def interval_support(lo, hi):
    """The constraint of [lo, hi] with either end possibly None (unbounded)."""
    if lo is None and hi is None:
        return constraints.real
    if hi is None:
        return constraints.greater_than(lo)
    if lo is None:
        return constraints.less_than(hi)
    return constraints.interval(lo, hi)


class Truncated(D.Distribution):
    """`base` restricted to [low, high] (either may be None) and renormalised:
    log p(x) - log(F(high) - F(low)), -inf outside.  `log_norm`: the log normaliser when
    it is a known number (else computed from `base.cdf`)."""

    arg_constraints = {}

    def __init__(self, base: D.Distribution, low=None, high=None, log_norm=None):
        self.base = base
        self.low, self.high = low, high
        if log_norm is None:
            cdf_lo = base.cdf(low) if low is not None else 0.0
            cdf_hi = base.cdf(high) if high is not None else 1.0
            log_norm = torch.log(torch.as_tensor(cdf_hi - cdf_lo).clamp(min=1e-300))
        self.log_norm = log_norm
        blo, bhi = _bounds_of(base.support)
        self._lo, self._hi = _max(low, blo), _min(high, bhi)
        shape = base.batch_shape
        for b in (low, high, log_norm):
            if isinstance(b, torch.Tensor):
                shape = torch.broadcast_shapes(shape, b.shape)
        super().__init__(shape, validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return interval_support(self._lo, self._hi)

    @property
    def has_rsample(self):
        return self._icdf_ok()

    def _icdf_ok(self) -> bool:
        try:
            x = torch.full((), 0.5, dtype=torch.get_default_dtype())
            self.base.icdf(x)
            self.base.cdf(x)
            return True
        except (NotImplementedError, ValueError, RuntimeError, TypeError):
            return False

    def log_prob(self, value):
        lp = self.base.log_prob(value) - self.log_norm
        inside = torch.ones_like(lp, dtype=torch.bool)
        if self.low is not None:
            inside = inside & (value >= self.low)
        if self.high is not None:
            inside = inside & (value <= self.high)
        return torch.where(inside, lp, torch.full_like(lp, -math.inf))

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        if self._icdf_ok():
            b = self.base
            f_lo = b.cdf(self.low) if self.low is not None else None
            f_hi = b.cdf(self.high) if self.high is not None else None
            ref = next((t for t in (f_lo, f_hi) if isinstance(t, torch.Tensor)), None)
            dtype = ref.dtype if ref is not None else torch.get_default_dtype()
            u = torch.rand(shape, dtype=dtype, device=ref.device if ref is not None else None)
            a = f_lo if f_lo is not None else torch.zeros((), dtype=dtype)
            c = f_hi if f_hi is not None else torch.ones((), dtype=dtype)
            p = (a + u * (c - a)).clamp(1e-12, 1 - 1e-12)
            x = b.icdf(p)
            if self._lo is not None:
                x = torch.maximum(x, torch.as_tensor(self._lo, dtype=x.dtype))
            if self._hi is not None:
                x = torch.minimum(x, torch.as_tensor(self._hi, dtype=x.dtype))
            return x
        return self.sample(sample_shape)

    def sample(self, sample_shape=torch.Size()):
        """Rejection sampling from the base (families without an inverse cdf)."""
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            out = None
            done = None
            for _ in range(200):
                x = self.base.sample(torch.Size(sample_shape)).expand(shape)
                ok = torch.ones(shape, dtype=torch.bool, device=x.device)
                if self.low is not None:
                    ok = ok & (x >= self.low)
                if self.high is not None:
                    ok = ok & (x <= self.high)
                if out is None:
                    out, done = x.clone(), ok
                else:
                    out = torch.where(~done & ok, x, out)
                    done = done | ok
                if bool(done.all()):
                    return out
        raise QvrRuntimeError("could not draw from the truncated family: the interval holds "
                              "almost none of its mass", expected="an interval with mass",
                              actual="200 rejected draws")


def _gauss_legendre(f, a: float, b: float, panels: int = 200, order: int = 20) -> float:
    """∫_a^b f (vectorised numpy f), composite Gauss-Legendre."""
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, b, panels + 1)
    lo, hi = edges[:-1, None], edges[1:, None]
    pts = 0.5 * (hi - lo) * x[None, :] + 0.5 * (hi + lo)
    return float((0.5 * (hi - lo) * w[None, :] * f(pts)).sum())


def constant_log_normaliser(family: str, args: list, low: Optional[float],
                            high: Optional[float]) -> float:
    """log(F(high) - F(low)) for a family whose arguments are numbers, in float64: from
    torch's cdf when the family has one, the symmetry of a location family when one bound
    is its location and the other is absent, else numerical quadrature of the density
    (the half-line mapped to [0, 1) by x = a ± t / (1 - t))."""
    from qvr.runtime.families import inline_distribution
    targs = [torch.tensor(float(a), dtype=torch.float64) for a in args]
    dist = inline_distribution(family, targs)
    try:
        f_lo = float(dist.cdf(torch.tensor(low, dtype=torch.float64))) if low is not None else 0.0
        f_hi = float(dist.cdf(torch.tensor(high, dtype=torch.float64))) if high is not None else 1.0
        if math.isfinite(f_lo) and math.isfinite(f_hi):
            return math.log(max(f_hi - f_lo, 1e-300))
    except (NotImplementedError, ValueError, RuntimeError, TypeError):
        pass
    if family in _SYMMETRIC:
        loc = float(args[_SYMMETRIC[family]])
        if (low == loc and high is None) or (high == loc and low is None):
            return math.log(0.5)
    blo, bhi = _bounds_of(dist.support)
    a = low if low is not None else (float(blo) if blo is not None else None)
    b = high if high is not None else (float(bhi) if bhi is not None else None)

    def dens(x):
        with torch.no_grad():
            t = torch.as_tensor(x, dtype=torch.float64)
            return torch.exp(dist.log_prob(t)).nan_to_num(0.0).numpy()

    if a is not None and b is not None:
        mass = _gauss_legendre(dens, a, b)
    elif a is not None:  # [a, inf)
        mass = _gauss_legendre(lambda t: dens(a + t / (1 - t)) / (1 - t) ** 2, 0.0, 1.0)
    elif b is not None:  # (-inf, b]
        mass = _gauss_legendre(lambda t: dens(b - t / (1 - t)) / (1 - t) ** 2, 0.0, 1.0)
    else:
        mass = 1.0
    return math.log(max(mass, 1e-300))


# ------------------------------------------------------------------ the step module

class _Pinned(D.Distribution):
    """A distribution whose draw is `T(z)` for a given unconstrained `z` (see `pinned`)."""

    arg_constraints = {}
    has_rsample = True

    def __init__(self, dist, z, pins: _Pins):
        self.dist, self.z, self.pins = dist, z, pins
        super().__init__(dist.batch_shape, dist.event_shape, validate_args=False)

    @property
    def support(self):
        return self.dist.support

    def log_prob(self, value):
        return self.dist.log_prob(value)

    def rsample(self, sample_shape=torch.Size()):
        t = biject_to(self.dist.support)
        v = t(self.z)
        self.pins.add(t.log_abs_det_jacobian(self.z, v))
        return v

    sample = rsample


class SupportStep(FamilyStep):
    """The `_step_<name>` module of an inline family step that uses E9.2: an improper
    prior, truncation (`has_lower`/`has_upper`: the bounds follow the family's arguments),
    a constrained space (`space`, `space_size`) or a support whose bounds are run-time
    values (`dependent`: the MCMC registry then builds its bijector per evaluation)."""

    def __init__(self, family: str, event_size=None, default_event_size=None, label=None, *,
                 site: str = "", has_lower: bool = False, has_upper: bool = False,
                 log_norm: Optional[float] = None, space: Optional[str] = None,
                 space_size: int = 0, dependent: bool = False):
        super().__init__(family, event_size, default_event_size, label)
        self.site = site
        self.has_lower, self.has_upper = has_lower, has_upper
        self.log_norm = log_norm
        self.space, self.space_size = space, space_size
        self.dependent = dependent

    @property
    def n_params(self) -> int:
        return len(FAMILIES[self.family].params)

    def distribution(self, args):
        dist = self._distribution(list(args))
        pins = _get("pins")
        if pins is not None and self.site in pins.values:
            return _Pinned(dist, pins.values[self.site], pins)
        return dist

    def _distribution(self, args):
        from qvr.runtime.families import _float_args, inline_distribution
        fam = FAMILIES[self.family]
        n = self.n_params
        params, bounds = args[:n], _float_args(args[n:]) if args[n:] else []
        lo = bounds.pop(0) if self.has_lower else None
        hi = bounds.pop(0) if self.has_upper else None
        if self.space is not None:
            return self._space(params)
        if fam.improper:
            if self.family == "HalfFlat":
                lo = torch.zeros(()) if lo is None else lo.clamp(min=0.0)
            if lo is not None and hi is not None:
                lo, hi = torch.broadcast_tensors(lo, hi)
            ref = lo if lo is not None else hi
            batch = ref.shape if ref is not None else torch.Size()
            return Improper(interval_support(lo, hi), batch, family=self.family,
                            dtype=ref.dtype if ref is not None else None,
                            device=ref.device if ref is not None else None)
        base = inline_distribution(self.family, params, self.event_size, self.default_event_size)
        if not (self.has_lower or self.has_upper):
            return base
        log_norm = None
        if self.log_norm is not None:
            ref = next((t for t in (lo, hi) if t is not None), None)
            log_norm = torch.tensor(self.log_norm, dtype=ref.dtype if ref is not None else
                                    torch.get_default_dtype(),
                                    device=ref.device if ref is not None else None)
        return Truncated(base, lo, hi, log_norm)

    def _space(self, params):
        from qvr.runtime.families import inline_distribution
        k = self.space_size
        fam = FAMILIES[self.family]
        dtype = torch.get_default_dtype()
        if self.space in ("Ordered", "PositiveOrdered"):
            positive = self.space == "PositiveOrdered"
            if fam.improper:
                return Improper(positive_ordered_vector if positive else ordered_vector,
                                event_shape=(k,), family=self.family)
            base = inline_distribution(self.family, params)
            return OrderedIID(base, k, positive)
        if self.space == "Simplex":
            if fam.improper:  # uniform on the simplex: Dirichlet(1, …, 1)
                return D.Dirichlet(torch.ones(k, dtype=dtype), validate_args=False)
            return inline_distribution("Dirichlet", params, k, k)
        # CholeskyFactor K: LKJ; Flat = LKJ(1), the uniform density on correlation matrices
        eta = params[0] if params else torch.ones((), dtype=dtype)
        eta = torch.as_tensor(eta, dtype=dtype).clamp(min=1e-7)
        return D.LKJCholesky(k, concentration=eta, validate_args=False)

    def static_distribution(self, args, dummy):
        """A distribution of the right shape and support kind for guides built without an
        input (`args`: the step's `Arg`s; `dummy(kind)`: a valid value of a parameter)."""
        fam = FAMILIES[self.family]
        vals = []
        for a, (_, kind) in zip(args, fam.params):
            vals.append(torch.tensor(float(a.value)) if a.kind == "lit" else dummy(kind))
        bounds = []
        extra = list(args[len(fam.params):])
        if self.has_lower:
            a = extra.pop(0)
            bounds.append(torch.tensor(float(a.value)) if a.kind == "lit" else torch.tensor(-1.0))
        if self.has_upper:
            a = extra.pop(0)
            bounds.append(torch.tensor(float(a.value)) if a.kind == "lit" else torch.tensor(
                (float(bounds[0]) if bounds else 0.0) + 2.0))
        return self._distribution(vals + bounds)

    def extra_repr(self) -> str:
        parts = [self.family]
        if self.has_lower or self.has_upper:
            parts.append("truncated")
        if self.space:
            parts.append(f"over {self.space} {self.space_size}")
        if self.dependent:
            parts.append("dependent support")
        return ", ".join(parts)
