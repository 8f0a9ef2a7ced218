"""`SVI`: stochastic variational inference, one optimiser step at a time (runtime spec 6.5).

`step(x, observations)`: `optim.zero_grad()`; `loss = objective(model, guide, x,
observations)`; `loss.backward()`; `optim.step()`; return `loss.item()`.  The optimiser
holds whatever parameters the caller gave it.  No NaN guarding here, as the spec says: a
non-finite loss is returned to the caller (the `fit` driver turns it into a clear
`FitFailed` naming the step).  Progress reporting, cancellation and run folders are the
driver's job (`qvr.inference.fit`), not this class's.
"""
from __future__ import annotations

import torch


class SVI:
    """Stochastic variational inference.

    Args:
      model: the program whose `log_joint` is the target.
      guide: e.g. an `AutoNormalGuide`.
      optim: a `torch.optim.Optimizer` over the parameters to fit.
      objective: a callable `(model, guide, x, observations) -> scalar loss`, e.g. `ELBO()`.

    Example:
      >>> svi = SVI(model, guide, torch.optim.Adam(params, lr=5e-2), ELBO())  # doctest: +SKIP
      >>> loss = svi.step(x, observations)                                    # doctest: +SKIP
    """

    def __init__(self, model, guide, optim: torch.optim.Optimizer, objective=None, loss=None):
        if objective is None:
            objective = loss
        if objective is None:
            from qvr.inference.elbo import ELBO
            objective = ELBO()
        self.model = model
        self.guide = guide
        self.optim = optim
        self.objective = objective

    def loss(self, x, observations=None) -> torch.Tensor:
        """The objective at the current parameters (differentiable; nothing is updated)."""
        return self.objective(self.model, self.guide, x, observations or {})

    def evaluate_loss(self, x, observations=None) -> float:
        with torch.no_grad():
            return float(self.loss(x, observations))

    def step(self, x, observations=None) -> float:
        self.optim.zero_grad()
        loss = self.loss(x, observations)
        loss.backward()
        self.optim.step()
        return loss.item()
