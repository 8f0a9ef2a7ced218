"""`HMCKernel`: Hamiltonian Monte Carlo with a fixed number of leapfrog steps (spec 6.6.4).

One iteration per chain: draw `p ~ N(0, M)`, run `num_steps` leapfrog steps from the
current `(z, grad)`, `dH = H(z', p') - H(z, p)`, accept with probability
`a = min(1, exp(-dH))` (non-finite `dH` gives `a = 0`) using the global RNG.  Divergent iff
`|dH| > divergence_threshold` or `dH` is not finite.  The adaptation statistic is `a`;
the acceptance rate is accepted proposals / iterations.  All chains move in lockstep.

`HMCKernel(step_size=0.001, num_steps=1)` is a one-leapfrog-step (MALA-like) sampler.

References:
  Duane et al. (1987), Hybrid Monte Carlo; Neal (2011), MCMC using Hamiltonian dynamics.
"""
from __future__ import annotations

import torch

from qvr.inference.mcmc.integrator import leapfrog
from qvr.inference.mcmc.kernel import HMCBase, HMCState, Transition


class HMCKernel(HMCBase):
    """Fixed-length HMC.

    Args:
      step_size: initial leapfrog step size (> 0).
      num_steps: leapfrog steps per iteration (>= 1).
      mass_matrix: ``"identity"`` (default), ``"diagonal"`` or ``"dense"``.
      target_accept: dual-averaging target in (0, 1).
      divergence_threshold: energy error above which an iteration is divergent.
      adapt_step_size, adapt_mass_matrix: warmup adaptation switches.
      warmup_schedule: ``"fisher"`` (nutpie's, the default), ``"windowed"`` (Stan) or
        ``"end"`` (one update at the end); see `kernel`.
      step_size_jitter: each iteration uses `eps * (1 + jitter * U(-1, 1))` (Stan's
        ``stepsize_jitter``; default 0, the spec's fixed step).  A little jitter breaks the
        periodic trajectories fixed-length HMC falls into on near-Gaussian targets.
    """

    method = "hmc"

    def __init__(self, step_size: float = 0.1, num_steps: int = 10,
                 mass_matrix: str = "identity", target_accept: float = 0.65,
                 divergence_threshold: float = 1000.0, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, warmup_schedule: str = "fisher",
                 find_step_size: bool = True, step_size_jitter: float = 0.0):
        super().__init__(step_size, mass_matrix, target_accept, divergence_threshold,
                         adapt_step_size, adapt_mass_matrix, warmup_schedule, find_step_size,
                         step_size_jitter)
        if not (isinstance(num_steps, int) and num_steps >= 1):
            raise ValueError(f"num_steps must be an integer >= 1, got {num_steps}")
        self.num_steps = num_steps

    def config(self) -> dict:
        return {**super().config(), "num_steps": self.num_steps}

    def expected_evaluations(self, num_warmup: int, num_samples: int) -> int:
        return (num_warmup + num_samples) * self.num_steps + self.EXTRA_EVALUATIONS

    def _transition(self, state: HMCState, target) -> Transition:
        z0, logp0, grad0, mass = state.z, state.log_density, state.grad, state.mass
        p0 = mass.sample_momentum(z0)
        h0 = -logp0 + mass.kinetic(p0)
        z, p, logp, grad = z0, p0, logp0, grad0
        eps = self._jittered(state.step_size)
        for _ in range(self.num_steps):
            z, p, logp, grad = leapfrog(z, p, grad, eps, mass,
                                        target.log_density_and_grad)
        h1 = -logp + mass.kinetic(p)
        dh = h1 - h0
        finite = torch.isfinite(dh)
        a = torch.where(finite, torch.exp(-dh).clamp(max=1.0), torch.zeros_like(dh))
        diverging = ~finite | (dh.abs() > self.divergence_threshold)
        accept = torch.rand_like(a) < a
        keep = accept.unsqueeze(-1)
        C = z0.shape[0]
        steps = torch.full((C,), self.num_steps, dtype=torch.long, device=z0.device)
        return Transition(torch.where(keep, z, z0), torch.where(accept, logp, logp0),
                          torch.where(keep, grad, grad0), a, accept, diverging, steps,
                          torch.zeros_like(steps), torch.where(accept, h1, h0))
