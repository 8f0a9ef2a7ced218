"""Hamiltonian dynamics for a batch of chains: mass matrices, kinetic energy, leapfrog.

Every function acts on `C` chains at once: positions and momenta are `(C, D)`, the
log-density `(C,)`.  A `MassMatrix` stores the *inverse* mass matrix `M^-1` (the momentum
covariance is `M`), per chain:

* ``"identity"``: nothing stored;
* ``"diagonal"``: `inv` is `(C, D)`;
* ``"dense"``: `inv` is `(C, D, D)` and `chol` its Cholesky factor `L` (`M^-1 = L L^T`).

Momentum `p ~ N(0, M)`; kinetic energy `K(p) = 1/2 p^T M^-1 p`; Hamiltonian
`H(z, p) = -log p(z) + K(p)`.  A leapfrog step of size `eps` (per chain, may be negative):
`p += eps/2 grad`, `z += eps M^-1 p`, `p += eps/2 grad(z)`.

This module knows nothing of trees, acceptance or adaptation.

References:
  Neal (2011), MCMC using Hamiltonian dynamics, Handbook of MCMC, ch. 5.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from qvr.inference.mcmc.ops import fused

#: `(z (C, D)) -> (log_density (C,), grad (C, D))`
GradFn = Callable[[torch.Tensor], tuple]


@dataclass
class MassMatrix:
    """The inverse mass matrix of every chain (see the module docstring).

    Attributes:
      kind: ``"identity"``, ``"diagonal"`` or ``"dense"``.
      inv: `(C, D)` for diagonal, `(C, D, D)` for dense, None for identity.
      chol: the Cholesky factor of a dense `inv` (None otherwise).
    """

    kind: str
    inv: Optional[torch.Tensor] = None
    chol: Optional[torch.Tensor] = None

    @staticmethod
    def identity(kind: str, C: int, D: int, dtype=None, device=None) -> "MassMatrix":
        if kind == "identity":
            return MassMatrix("identity")
        if kind == "diagonal":
            return MassMatrix("diagonal", torch.ones(C, D, dtype=dtype, device=device))
        if kind == "dense":
            eye = torch.eye(D, dtype=dtype, device=device).expand(C, D, D).clone()
            return MassMatrix("dense", eye, eye.clone())
        raise ValueError(f"unknown mass matrix kind {kind!r}; expected 'identity', "
                         "'diagonal' or 'dense'")

    def velocity(self, p: torch.Tensor) -> torch.Tensor:
        """`M^-1 p`."""
        if self.kind == "identity":
            return p
        if self.kind == "diagonal":
            return self.inv * p
        return torch.einsum("cij,cj->ci", self.inv, p)

    def kinetic(self, p: torch.Tensor) -> torch.Tensor:
        """`1/2 p^T M^-1 p`, shape `(C,)`."""
        return 0.5 * (p * self.velocity(p)).sum(-1)

    def sample_momentum(self, like: torch.Tensor) -> torch.Tensor:
        """`p ~ N(0, M)` for every chain (global torch RNG)."""
        eps = torch.randn_like(like)
        if self.kind == "identity":
            return eps
        if self.kind == "diagonal":
            return eps / torch.sqrt(self.inv)
        # M = L^-T L^-1: p = L^-T eps
        return torch.linalg.solve_triangular(self.chol.transpose(-1, -2), eps.unsqueeze(-1),
                                             upper=True).squeeze(-1)

    @property
    def dense(self) -> bool:
        return self.kind == "dense"

    def as_tensor(self, like: torch.Tensor) -> torch.Tensor:
        """`inv` for the fused kernels: ones `(C, D)` for the identity."""
        if self.inv is not None:
            return self.inv
        ones = getattr(self, "_ones", None)
        if ones is None or ones.shape != like.shape or ones.dtype != like.dtype:
            ones = torch.ones_like(like)
            self._ones = ones
        return ones

    def select(self, mask: torch.Tensor, other: "MassMatrix") -> "MassMatrix":
        """Per chain: this matrix where `mask`, else `other`'s."""
        if self.kind == "identity":
            return self
        m = mask.reshape(-1, *([1] * (self.inv.dim() - 1)))
        inv = torch.where(m, self.inv, other.inv)
        chol = torch.where(m, self.chol, other.chol) if self.kind == "dense" else None
        return MassMatrix(self.kind, inv, chol)


def leapfrog(z, p, grad, step_size, mass: MassMatrix, grad_fn: GradFn):
    """One leapfrog step for every chain; `step_size` is `(C,)` (sign = direction).

    Returns `(z, p, log_density, grad)` at the new point.
    """
    eps = step_size.unsqueeze(-1)
    z, p = fused.kick_drift(z, p, grad, eps, mass.as_tensor(z), mass.dense)
    logp, grad = grad_fn(z)
    p = fused.kick(p, grad, eps)
    return z, p, logp, grad
