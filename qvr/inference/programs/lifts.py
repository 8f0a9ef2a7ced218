"""Lifts: Bayesian programs over a model's learnable parameters (runtime spec 6.7).

A lift turns a model with `nn.Parameter`s (and no priors on them) into a `MonadicProgram`
on the one-point domain `Unit` whose latent sites are those parameters (flattened, with a
zero-mean isotropic Normal prior: L2 weight decay at MAP), suitable for guides, SVI and
MCMC.  Every lift returns `(lifted_model, torch.zeros(1, 1), {})`: the data is captured
inside the lifted model.

* `bayesian_lift_parameters(inner, x, observations, ...)` — sites
  `theta__<path>` per parameter, optional extra sites `latent__<name>` for values the
  inner model needs (with placeholder priors that cancel exactly), and a score step
  `log_lik` = `inner.log_joint(x, {...}).sum()` evaluated with every parameter replaced by
  its site value (`torch.func.functional_call`: the original parameters are untouched and
  receive no gradient);
* `lift_to_bayesian_program(module, location_fn=..., observation_family=...)` — a likelihood
  `family(location_fn(x), **kwargs).log_prob(obs[target_key])`;
* `lift_from_log_prob(module, log_prob_fn=...)` — a likelihood `log_prob_fn(x, obs[key])`.

The lifted program holds the inner model by reference only (`parameters()` is empty).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn
from torch.func import functional_call

from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.monadic import MonadicProgram
from qvr.runtime.objects import Euclidean, Unit


class FlatNormal(ContinuousMorphism):
    """`Unit -> Real n`: `Normal(0, scale)` on a flat vector of `n` values (a global site)."""

    def __init__(self, n: int, scale: float, label: str = "prior"):
        super().__init__(Unit, Euclidean(label, int(n)), label)
        self.n = int(n)
        self.scale = float(scale)

    def rsample(self, x, sample_shape=torch.Size()):
        return self.scale * torch.randn(*torch.Size(sample_shape), self.n,
                                        device=getattr(x, "device", None))

    def log_prob(self, x, y):
        return _normal_log_prob(y, self.scale).sum(-1)


def _normal_log_prob(v: torch.Tensor, scale: float) -> torch.Tensor:
    return -0.5 * (v / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


class _LogJointCall(nn.Module):
    """Holds the inner model so that `functional_call` can substitute its parameters."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, values):
        return self.inner.log_joint(x, values)


def bayesian_lift_parameters(inner_model, x, observations, *, prior_scale: float = 1.0,
                             site_prefix: str = "theta", additional_latents=None,
                             latent_placeholder_scale: float = 10.0, _strip: str = ""):
    """Lift every parameter of `inner_model` to a global latent site (spec 6.7).

    Args:
      inner_model: anything with `log_joint(x, observations)` and `named_parameters()`.
      x, observations: the data, captured by the lifted model.
      prior_scale: standard deviation of the Normal prior on every parameter value.
      site_prefix: sites are named `f"{site_prefix}__{path with '.' -> '_'}"`.
      additional_latents: `{name: shape}` of values the inner model needs that are not
        observed (e.g. the seed's `{"h": (B, 1, 16)}`); each becomes a flat site
        `latent__<name>` whose placeholder prior cancels in `log_lik`.
      latent_placeholder_scale: the placeholder prior's standard deviation.

    Returns:
      `(lifted_program, torch.zeros(1, 1), {})`.

    Example:
      >>> lifted, lx, lobs = bayesian_lift_parameters(model, x, obs)   # doctest: +SKIP
      >>> MCMC(NUTSKernel(), 200, 200).run(lifted, lx, lobs)           # doctest: +SKIP
    """
    if not hasattr(inner_model, "log_joint"):
        raise ValueError(f"bayesian_lift_parameters needs a model with log_joint(x, values); "
                         f"{type(inner_model).__name__} has none")
    observations = dict(observations or {})
    extra = {k: tuple(int(d) for d in v) for k, v in (additional_latents or {}).items()}
    both = sorted(set(observations) & set(extra))
    if both:
        raise ValueError(f"{', '.join(map(repr, both))} given both as observations and as "
                         "additional latents")
    params = list(inner_model.named_parameters())
    if not params and not extra:
        raise ValueError("nothing to lift: the model has no parameters and no additional "
                         "latents were given")
    if not prior_scale > 0 or not latent_placeholder_scale > 0:
        raise ValueError("prior_scale and latent_placeholder_scale must be positive")
    caller = _LogJointCall(inner_model)
    site_of = {}
    steps = []
    for path, p in params:
        short = path[len(_strip):] if _strip and path.startswith(_strip) else path
        name = f"{site_prefix}__{short.replace('.', '_')}"
        site_of[path] = (name, tuple(p.shape))
        steps.append(((name,), FlatNormal(p.numel(), prior_scale, name), None))
    latent_sites = {}
    for key, shape in extra.items():
        name = f"latent__{key}"
        latent_sites[key] = (name, shape)
        steps.append(((name,), FlatNormal(math.prod(shape), latent_placeholder_scale, name),
                      None))
    captured_x = x

    def log_lik(env):
        substituted = {f"inner.{path}": env[name].reshape(shape)
                       for path, (name, shape) in site_of.items()}
        values = dict(observations)
        placeholder = 0.0
        for key, (name, shape) in latent_sites.items():
            v = env[name]
            values[key] = v.reshape(shape)
            placeholder = placeholder + _normal_log_prob(v, latent_placeholder_scale).sum()
        lj = functional_call(caller, substituted, (captured_x, values), strict=False)
        return lj.sum() - placeholder

    steps.append((("log_lik",), None, log_lik, True))
    lifted = MonadicProgram(Unit, Unit, steps, ("log_lik",), label="lifted")
    lifted.lifted_sites = {path: name for path, (name, _) in site_of.items()}
    lifted.lifted_latents = {k: name for k, (name, _) in latent_sites.items()}
    return lifted, torch.zeros(1, 1), {}


class _FamilyLikelihood(nn.Module):
    def __init__(self, parameter_module, fn: Callable, target_key: str):
        super().__init__()
        self.parameter_module = parameter_module
        self.fn = fn
        self.target_key = target_key

    def log_joint(self, x, observations):
        if self.target_key not in observations:
            raise KeyError(f"no observation `{self.target_key}` for the lifted likelihood")
        lp = self.fn(x, observations[self.target_key])
        lp = torch.as_tensor(lp)
        return lp.reshape(lp.shape[0], -1).sum(-1) if lp.dim() >= 1 else lp


def lift_to_bayesian_program(parameter_module, *, location_fn: Callable,
                             parameter_prior_scale: float = 1.0, observation_family,
                             observation_kwargs: Optional[dict] = None,
                             target_key: str = "Y", x=None, observations=None):
    """Lift with the likelihood `observation_family(location_fn(x), **kwargs)` of
    `observations[target_key]` (spec 6.7).  Sites are named after `parameter_module`'s own
    parameter paths (`theta__weight`, ...).  `location_fn` is called inside the parameter
    substitution, so it sees the proposed values."""
    kwargs = dict(observation_kwargs or {})

    def fn(xx, y):
        return observation_family(location_fn(xx), **kwargs).log_prob(y)

    wrapper = _FamilyLikelihood(parameter_module, fn, target_key)
    return bayesian_lift_parameters(wrapper, x if x is not None else torch.zeros(1, 1),
                                    observations or {}, prior_scale=parameter_prior_scale,
                                    _strip="parameter_module.")


def lift_from_log_prob(parameter_module, *, log_prob_fn: Callable,
                       parameter_prior_scale: float = 1.0, target_key: str = "Y", x=None,
                       observations=None):
    """Lift with the likelihood `log_prob_fn(x, observations[target_key])` (spec 6.7);
    `log_prob_fn` may be a bound method such as `prog.morphism.log_prob`."""
    wrapper = _FamilyLikelihood(parameter_module, log_prob_fn, target_key)
    return bayesian_lift_parameters(wrapper, x if x is not None else torch.zeros(1, 1),
                                    observations or {}, prior_scale=parameter_prior_scale,
                                    _strip="parameter_module.")
