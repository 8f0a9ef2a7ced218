"""The builtin morphism expressions `layer_norm(A)`, `rms_norm(A)` and `residual(f)`
(design E4).

* `LayerNorm` — `(x - mean) / sqrt(var + eps) * gain + bias` over the whole width of A
  (biased variance, as `torch.nn.functional.layer_norm`, which computes it);
* `RMSNorm` — `x / sqrt(mean(x^2) + eps) * gain + bias`;
* `Residual` — `x -> x + y`, `y ~ inner(x)`; the density of `z` given `x` is the inner
  density at `z - x` (a translation: no Jacobian).

Both norms are deterministic (`rsample` returns the value, broadcast over the sample
axes; `log_prob` raises `DeterministicError`), act row by row (`mixes_positions` False),
and own a learned gain (init 1) and bias (init 0) of width(A), eps 1e-5.  Each textual
occurrence compiles to its own module, so its own parameters; `stack` deep-copies them as
it does every morphism.  A residual is deterministic and mixes positions when its inner
morphism does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import constraints

from qvr.runtime.errors import DeterministicError
from qvr.runtime.morphisms.base import ContinuousMorphism, Morphism
from qvr.runtime.values import as_features

NORM_EPS = 1e-5


class _Norm(ContinuousMorphism):
    """Deterministic elementwise-affine normalisation `A -> A` over the width of A."""

    deterministic = True

    def __init__(self, obj, label: str = None, eps: float = NORM_EPS):
        super().__init__(obj, obj, label)
        self.width = obj.width
        self.eps = float(eps)
        self.gain = nn.Parameter(torch.ones(self.width))
        self.bias = nn.Parameter(torch.zeros(self.width))

    @property
    def support(self):
        return constraints.real

    def _features(self, x):
        x = as_features(x, self.width, who=self.label, dtype=self.gain.dtype)
        return x if x.dtype == self.gain.dtype else x.to(self.gain.dtype)

    def mean(self, x):
        """The normalised value `(..., width)`."""
        return self.normalise(self._features(x))

    def normalise(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def rsample(self, x, sample_shape=torch.Size()):
        m = self.mean(x)
        return m.expand(tuple(sample_shape) + tuple(m.shape)) if len(sample_shape) else m

    def log_prob(self, x, y):
        raise DeterministicError(morphism=self.label)


class LayerNorm(_Norm):
    """`layer_norm(A)`: `(x - mean) / sqrt(var + eps) * gain + bias` (biased variance)."""

    def normalise(self, x):
        return F.layer_norm(x, (self.width,), self.gain, self.bias, self.eps)


class RMSNorm(_Norm):
    """`rms_norm(A)`: `x / sqrt(mean(x^2) + eps) * gain + bias`."""

    def normalise(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain + self.bias


class Residual(ContinuousMorphism):
    """`residual(f)` for `f : A -> A`: `x + y` with `y ~ f(x)`; density `f(z - x | x)`."""

    def __init__(self, inner: Morphism, label: str = None):
        super().__init__(inner.domain, inner.codomain, label or f"residual({inner.label})")
        self.inner = inner
        self.width = inner.domain.width

    @property
    def deterministic(self) -> bool:
        return bool(getattr(self.inner, "deterministic", False))

    @property
    def mixes_positions(self) -> bool:
        return bool(getattr(self.inner, "mixes_positions", False))

    @property
    def support(self):
        return constraints.real

    def _features(self, x):
        return as_features(x, self.width, who=self.label)

    def rsample(self, x, sample_shape=torch.Size()):
        x = self._features(x)
        y = self.inner.rsample(x, sample_shape)
        return x.to(y.dtype) + y

    def log_prob(self, x, z):
        if self.deterministic:
            raise DeterministicError(morphism=self.label)
        x = self._features(x)
        z = as_features(z, self.width, who=self.label)
        return self.inner.log_prob(x, z - x.to(z.dtype))
