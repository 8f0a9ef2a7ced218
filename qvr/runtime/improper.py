"""Improper flat priors at run time (docs/extensions.md E9.2): `Flat` / `HalfFlat`.

`Improper` is a flat density (log-density 0) on a support; it is not a distribution:
drawing from it raises `ImproperPriorError`, except while a fit initialises its chains
(`improper_init()`: Stan's uniform(-2, 2) in the unconstrained space, mapped to the
support).  `improper(name)` is the distribution of a `Flat`/`HalfFlat` step
(`qvr.runtime.families.inline_distribution`); `qvr.runtime.constraints` builds the flat
densities on truncated and constrained supports from `Improper`.  Apart from
`constraints.py` so that `families.py` can use it without importing the constraints,
which build on the families.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Optional

import torch
import torch.distributions as D
from torch.distributions import biject_to, constraints

from qvr.runtime.errors import QvrRuntimeError


class ImproperPriorError(QvrRuntimeError, ValueError):
    """A value was to be drawn from an improper flat prior (prior predictive, synthetic
    data, `rsample` without a value for the site).  The message names the site (the step
    the executor adds as context)."""

    def __str__(self) -> str:
        name = self.site or self.step
        self.what = (f"`{name}` has an improper flat prior and cannot be drawn from the prior"
                     if name else "an improper flat prior cannot be drawn from") + \
            " (give it a proper family, e.g. `Uniform(a, b)`, to draw prior predictive or " \
            "synthetic data)"
        saved, self.step, self.site = (self.step, self.site), None, None
        try:
            return super().__str__()
        finally:
            self.step, self.site = saved


# ------------------------------------------------------------------ run-time state

_state = threading.local()


@contextmanager
def improper_init():
    """While active, improper priors draw Stan's initial values: uniform(-2, 2) in the
    unconstrained space, mapped to the support (a fit's shape pass and data check)."""
    old = getattr(_state, "init", False)
    _state.init = True
    try:
        yield
    finally:
        _state.init = old


def initialising() -> bool:
    return bool(getattr(_state, "init", False))


class Improper(D.Distribution):
    """A flat density (log-density 0) on `support`: `Flat`, `HalfFlat`, a truncated
    `Flat`, or a flat density on a constrained space.  Not a distribution: drawing from it
    raises `ImproperPriorError`, except under `improper_init()`."""

    arg_constraints = {}
    has_rsample = True

    def __init__(self, support, batch_shape=torch.Size(), event_shape=torch.Size(),
                 family: str = "Flat", dtype=None, device=None):
        self._support = support
        self.family = family
        self._dtype = dtype or torch.get_default_dtype()
        self._device = device
        super().__init__(torch.Size(batch_shape), torch.Size(event_shape), validate_args=False)

    @constraints.dependent_property(is_discrete=False)
    def support(self):
        return self._support

    def log_prob(self, value):
        n = len(self.event_shape)
        shape = value.shape[:value.dim() - n] if n else value.shape
        return torch.zeros(torch.broadcast_shapes(shape, self.batch_shape), dtype=value.dtype,
                           device=value.device)

    def rsample(self, sample_shape=torch.Size()):
        if not initialising():
            raise ImproperPriorError(
                f"`{self.family}` is an improper flat prior and cannot be drawn from the prior",
                family=self.family)
        shape = self._extended_shape(sample_shape)
        t = biject_to(self._support)
        u_shape = t.inverse_shape(shape) if shape else shape
        dtype = self._dtype
        device = self._device
        bound = _support_tensor(self._support)
        if bound is not None:
            dtype, device = bound.dtype, bound.device
        u = torch.rand(u_shape, dtype=dtype, device=device) * 4.0 - 2.0
        return t(u)


def _support_tensor(support):
    for attr in ("lower_bound", "upper_bound"):
        v = getattr(support, attr, None)
        if isinstance(v, torch.Tensor):
            return v
    return None


def improper(name: str, event_size: Optional[int] = None) -> Improper:
    """`Flat` / `HalfFlat` on the real line / positive reals (scalar events)."""
    sup = constraints.positive if name == "HalfFlat" else constraints.real
    return Improper(sup, family=name)
