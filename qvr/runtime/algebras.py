"""The algebras (composition rules) of finite morphisms (runtime spec 3.6).

An `Algebra` composes two matrices `(m, n) ; (n, p) -> (m, p)` as
`(f ; g)[a, c] = OR_b f[a, b] (x) g[b, c]`, builds the outer (x)-product used by the
tensor product `@`, and the identity matrix.  The four algebras every runtime must have
are implemented: `product_fuzzy`, `real`, `log_prob` and `markov`.  The other rules the
language accepts are optional for a runtime; `get_algebra` returns None for them and the
compiler reports QVR950.

This module works on plain tensors; it knows nothing of morphisms or shapes of objects.
"""
from __future__ import annotations

import torch

EPS = 1e-7


class Algebra:
    name = "?"

    def compose(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def outer(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """`(m, n)` and `(p, q)` -> `(m, p, n, q)`: entry-wise (x) of every pair."""
        raise NotImplementedError

    def identity(self, n: int, *, dtype=None, device=None) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<algebra {self.name}>"


class ProductFuzzy(Algebra):
    """(x) = product, OR = noisy-OR `1 - prod_b (1 - t_b)`, computed in log space."""

    name = "product_fuzzy"

    def compose(self, a, b):
        t = (a.unsqueeze(-1) * b.unsqueeze(0)).clamp(EPS, 1 - EPS)  # (m, n, p)
        return -torch.expm1(torch.log1p(-t).sum(dim=1))

    def outer(self, a, b):
        return torch.einsum("mn,pq->mpnq", a, b)

    def identity(self, n, *, dtype=None, device=None):
        return torch.eye(n, dtype=dtype or torch.get_default_dtype(), device=device)


class RealAlgebra(Algebra):
    """(x) = product, OR = sum: the ordinary matrix product."""

    name = "real"

    def compose(self, a, b):
        return a @ b

    def outer(self, a, b):
        return torch.einsum("mn,pq->mpnq", a, b)

    def identity(self, n, *, dtype=None, device=None):
        return torch.eye(n, dtype=dtype or torch.get_default_dtype(), device=device)


class MarkovAlgebra(RealAlgebra):
    """Row-stochastic matrices under the matrix product (lookup-table kernels)."""

    name = "markov"


class LogProbAlgebra(Algebra):
    """(x) = +, OR = logsumexp; the identity is 0 on the diagonal and -inf elsewhere."""

    name = "log_prob"

    def compose(self, a, b):
        return torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(0), dim=1)

    def outer(self, a, b):
        return a[:, None, :, None] + b[None, :, None, :]

    def identity(self, n, *, dtype=None, device=None):
        dtype = dtype or torch.get_default_dtype()
        out = torch.full((n, n), float("-inf"), dtype=dtype, device=device)
        out.fill_diagonal_(0.0)
        return out


ALGEBRAS = {a.name: a for a in (ProductFuzzy(), RealAlgebra(), MarkovAlgebra(), LogProbAlgebra())}


def get_algebra(name: str):
    """The algebra called `name` (case-insensitive), or None if this runtime lacks it."""
    return ALGEBRAS.get(name.lower())
