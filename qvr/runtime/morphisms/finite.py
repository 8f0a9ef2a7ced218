"""Finite morphisms: tensors between finite sets, composed in an algebra (spec 3.4-3.6, 4.6).

A `FiniteMorphism` *is* a tensor of shape `(*domain.shape, *codomain.shape)` (`.tensor`;
`.matrix` is the same entries as an `(|A|, |B|)` matrix) carrying an `Algebra`.  Concrete
kinds: `LatentMorphism` (`role=latent`, `sigmoid(raw)`), `StochasticMatrix` (lookup-table
kernel, `softmax(logits)`, algebra `markov`), `ObservedMorphism` (a fixed buffer),
`IdentityMorphism`, and the structural `FiniteCompose`, `FiniteTensor`, `Dagger` and
`RepeatRuntime` (`repeat(f)` with a run-time step count).

Inside continuous pipelines a finite morphism acts as a stochastic map (spec 3.8):
`rsample(x)` draws a codomain index from row `x` of the matrix and `log_prob(x, y)` is
`log(t[x, y].clamp(min=EPS))`.  A value of a finite set is one index, or one index
column per atom for a product of finite sets.  Decision: under the `log_prob` algebra
the entries already are log-weights, so rows are drawn from `softmax(t[x])` and `log_prob`
returns `t[x, y]` itself (the spec's `log(t)` would take the log twice).
"""
from __future__ import annotations

import torch
from torch import nn

from qvr.runtime.algebras import EPS, Algebra, LogProbAlgebra, get_algebra
from qvr.runtime.errors import IncompatibleMorphismsError
from qvr.runtime.families import _categorical_sample
from qvr.runtime.morphisms.base import Morphism
from qvr.runtime.objects import QvrObject, product
from qvr.runtime.values import finite_index, unravel


class FiniteMorphism(Morphism):
    is_finite = True

    def __init__(self, domain: QvrObject, codomain: QvrObject, algebra: Algebra,
                 label: str = None):
        super().__init__(domain, codomain, label)
        self.algebra = algebra

    # -- the tensor
    def _matrix(self) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def matrix(self) -> torch.Tensor:
        return self._matrix()

    @property
    def tensor(self) -> torch.Tensor:
        return self._matrix().reshape(*self.domain.shape, *self.codomain.shape)

    def forward(self):
        return self.tensor

    @property
    def dagger(self) -> "Dagger":
        return Dagger(self)

    # -- as a stochastic map (spec 3.8)
    @property
    def output_discrete(self) -> bool:
        return True

    @property
    def output_width(self) -> int:
        return self.codomain.width

    def _logits(self, x):
        m = self._matrix()
        idx = finite_index(self.domain, x, who=self.label)
        rows = m[idx]
        if isinstance(self.algebra, LogProbAlgebra):
            return rows
        return torch.log(rows.clamp(min=0))

    def rsample(self, x, sample_shape=torch.Size()):
        return unravel(self.codomain, _categorical_sample(self._logits(x), sample_shape))

    def log_prob(self, x, y):
        m = self._matrix()
        idx = finite_index(self.domain, x, who=self.label)
        y = finite_index(self.codomain, y, who=self.label, what="value")
        idx, y = torch.broadcast_tensors(idx, y)
        t = m[idx, y]
        if isinstance(self.algebra, LogProbAlgebra):
            return t
        return torch.log(t.clamp(min=EPS))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()} [{self.algebra.name}]"


class LatentMorphism(FiniteMorphism):
    """`role=latent`: `tensor = sigmoid(raw)`, `raw ~ scale * N(0, 1)` (every algebra)."""

    def __init__(self, domain, codomain, algebra, scale: float = 0.5, label=None):
        super().__init__(domain, codomain, algebra, label)
        self.raw = nn.Parameter(scale * torch.randn(*domain.shape, *codomain.shape))

    def _matrix(self):
        return torch.sigmoid(self.raw).reshape(self.domain.size, self.codomain.size)


class StochasticMatrix(FiniteMorphism):
    """`role=kernel` without a family: a learnable row-stochastic matrix (algebra markov)."""

    def __init__(self, domain, codomain, label=None):
        super().__init__(domain, codomain, get_algebra("markov"), label)
        self.logits = nn.Parameter(0.1 * torch.randn(*domain.shape, *codomain.shape))

    def _matrix(self):
        return torch.softmax(self.logits.reshape(self.domain.size, self.codomain.size), dim=-1)


class ObservedMorphism(FiniteMorphism):
    """`role=observed`: a fixed tensor (a buffer), never learned."""

    def __init__(self, domain, codomain, algebra, value: torch.Tensor, label=None):
        super().__init__(domain, codomain, algebra, label)
        self.register_buffer("value", value.detach().clone().reshape(*domain.shape,
                                                                     *codomain.shape))

    def _matrix(self):
        return self.value.reshape(self.domain.size, self.codomain.size)


class IdentityMorphism(FiniteMorphism):
    """`identity(A)`: the identity tensor of the algebra in effect."""

    def __init__(self, obj, algebra, label=None):
        super().__init__(obj, obj, algebra, label or f"identity({obj.name})")
        self.register_buffer("eye", algebra.identity(obj.size), persistent=False)

    def _matrix(self):
        return self.eye


class FiniteCompose(FiniteMorphism):
    """`f >> g` of two finite morphisms: the algebra's composition (submodules left/right)."""

    def __init__(self, left: FiniteMorphism, right: FiniteMorphism, label=None):
        check_same_algebra(left, right, ">>")
        super().__init__(left.domain, right.codomain, left.algebra,
                         label or f"{left.label} >> {right.label}")
        self.left = left
        self.right = right

    def _matrix(self):
        return self.algebra.compose(self.left._matrix(), self.right._matrix())


class FiniteTensor(FiniteMorphism):
    """`f @ g`: domain `A * C`, codomain `B * D`, tensor axes `(A, C, B, D)`."""

    def __init__(self, left: FiniteMorphism, right: FiniteMorphism, label=None):
        check_same_algebra(left, right, "@")
        super().__init__(product((left.domain, right.domain)),
                         product((left.codomain, right.codomain)), left.algebra,
                         label or f"{left.label} @ {right.label}")
        self.left = left
        self.right = right

    def _matrix(self):
        a, b = self.left._matrix(), self.right._matrix()
        out = self.algebra.outer(a, b)  # (|A|, |C|, |B|, |D|)
        return out.reshape(a.shape[0] * b.shape[0], a.shape[1] * b.shape[1])


class Dagger(FiniteMorphism):
    """`f.dagger`: the transpose (domain and codomain swapped)."""

    def __init__(self, base: FiniteMorphism, label=None):
        super().__init__(base.codomain, base.domain, base.algebra, label or f"{base.label}.dagger")
        self.base = base

    def _matrix(self):
        return self.base._matrix().transpose(0, 1)


class RepeatRuntime(FiniteMorphism):
    """`repeat(f)`: `f^n_steps` by binary exponentiation in the spec's association order."""

    def __init__(self, base: FiniteMorphism, label=None):
        super().__init__(base.domain, base.codomain, base.algebra, label or f"repeat({base.label})")
        self.base = base
        self.n_steps = 1

    def _matrix(self):
        n = int(self.n_steps)
        if n < 1:
            raise ValueError(f"repeat({self.base.label}): n_steps must be >= 1, got {n}")
        return power(self.algebra, self.base._matrix(), n)


def power(algebra: Algebra, base: torch.Tensor, k: int) -> torch.Tensor:
    """`base^k` with exactly the association order of runtime spec 4.6."""
    result = None
    while k > 0:
        if k % 2 == 1:
            result = base if result is None else algebra.compose(result, base)
        k //= 2
        if k > 0:  # the spec squares once more after the last bit; the result is the same
            base = algebra.compose(base, base)
    return result


def check_same_algebra(f: FiniteMorphism, g: FiniteMorphism, op: str) -> None:
    if f.algebra.name != g.algebra.name:
        raise IncompatibleMorphismsError(
            f"incompatible algebras for `{op}`", morphism=f"{f.label} {op} {g.label}",
            expected=f"both operands in algebra `{f.algebra.name}`",
            actual=f"`{g.label}` in algebra `{g.algebra.name}`")


def set_n_steps(module: nn.Module, n: int) -> int:
    """Set the step count of every `repeat(f)` node under `module`; returns how many."""
    if n < 1:
        raise ValueError(f"n_steps must be >= 1, got {n}")
    count = 0
    for m in module.modules():
        if isinstance(m, RepeatRuntime):
            m.n_steps = int(n)
            count += 1
    return count
