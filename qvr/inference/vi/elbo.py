"""`ELBO`: the negative evidence lower bound, estimated with reparameterised draws (spec 6.4).

    loss = -(1/K) sum_k [ model.log_joint(x, {z_k, observations}).sum() - guide.log_prob(x, z_k) ]

with `z_k ~ guide` drawn by reparameterisation, so gradients flow through the draws into
the guide and through `log_joint` into the model's parameters.

The `K` particles are *vectorised* when the model allows it: one guide draw with a leading
particle axis, and `log_joint` mapped over that axis with `torch.func.vmap` (Monte-Carlo
composites use common random numbers, so `randomness="same"` gives what a loop would).
A model that vmap cannot run (data-dependent Python control flow, `.item()`) falls back
once, for good, to the plain loop of the spec; the two give the same estimator.

Estimators: ``None``/``"reparam"`` (the spec's default) and ``"stl"`` (sticking the
landing: the guide's density is evaluated with gradient-free parameters, which removes the
score term's variance near the optimum; same expectation).

Finite latent sites are summed out of `log_joint` exactly (`qvr.inference.enumeration.enumerate`):
the guide covers the continuous latents only, as with Pyro's `TraceEnum_ELBO`.

References:
  Kingma & Welling (2014), Auto-Encoding Variational Bayes.
  Roeder, Wu & Duvenaud (2017), Sticking the Landing.
"""
from __future__ import annotations

import torch

from qvr.inference.enumeration.enumerate import enumerated_total

_ESTIMATORS = (None, "reparam", "stl")


class ELBO:
    """Negative ELBO with `num_particles` reparameterised particles.

    Args:
      num_particles: ``K >= 1``.
      estimator: ``None``/``"reparam"`` or ``"stl"``.
      vectorize: map the particles with vmap when the model allows (default True).
    """

    def __init__(self, num_particles: int = 1, estimator=None, vectorize: bool = True):
        if int(num_particles) < 1:
            raise ValueError(f"num_particles must be at least 1, got {num_particles}")
        if estimator not in _ESTIMATORS:
            raise ValueError(f"unknown ELBO estimator {estimator!r}; expected one of "
                             "None, 'reparam', 'stl'")
        self.num_particles = int(num_particles)
        self.estimator = estimator
        self.vectorize = vectorize
        self._vmap_failed = False

    def __call__(self, model, guide, x, observations=None) -> torch.Tensor:
        return self.forward(model, guide, x, observations)

    def forward(self, model, guide, x, observations=None) -> torch.Tensor:
        observations = dict(observations or {})
        model = getattr(model, "morphism", model) if not hasattr(model, "log_joint") else model
        K = self.num_particles
        from qvr.inference.enumeration.enumerate import prepare
        prepare(model, x, observations)  # finite latents: the structure, outside vmap
        if K > 1 and self.vectorize and not self._vmap_failed:
            try:
                return self._vectorized(model, guide, x, observations)
            except Exception:
                # the loop below raises the model's own error if there is one; if it
                # succeeds, vmap cannot run this model: use the loop from now on
                loss = self._loop(model, guide, x, observations)
                self._vmap_failed = True
                return loss
        return self._loop(model, guide, x, observations)

    def _loop(self, model, guide, x, observations) -> torch.Tensor:
        K = self.num_particles
        total = None
        for _ in range(K):
            z = guide.rsample(x, observations)
            lp = enumerated_total(model, x, {**z, **observations})
            lq = guide.log_prob(x, z, detach_params=self.estimator == "stl")
            if K == 1:
                return lq - lp  # -(lp - lq) / 1, in one operation (the same value)
            total = lp - lq if total is None else total + (lp - lq)
        return -total / K

    def _vectorized(self, model, guide, x, observations) -> torch.Tensor:
        from torch.func import vmap
        K = self.num_particles
        z = guide.rsample(x, observations, sample_shape=(K,))
        lq = guide.log_prob(x, z, batch_ndims=1, detach_params=self.estimator == "stl")

        def one(values):
            return enumerated_total(model, x, {**values, **observations})

        lp = vmap(one, randomness="same")(z)
        return -(lp - lq).mean()
