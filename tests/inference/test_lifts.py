"""Lifts (runtime spec 6.7; checklist 8)."""
import math

import pytest
import torch

from qvr import load, loads
from qvr.inference import (MCMC, NUTSKernel, bayesian_lift_parameters,
                           lift_from_log_prob, lift_to_bayesian_program)
from qvr.inference.programs.sites import build_registry


def normal_logpdf(v, s):
    return (-0.5 * (v / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)).sum()


KERNEL_PROGRAM = """
object In : Real 2
object Out : Real 1
morphism f : In -> Out [role=kernel, hidden_dim=3] ~ Normal
program reg : In -> Out
    observe y <- f
    return y
export reg
"""


def small_model():
    torch.manual_seed(0)
    model = loads(KERNEL_PROGRAM).morphism
    x = torch.randn(6, 2)
    y = torch.randn(6, 1)
    return model, x, {"y": y}


def test_lifted_density_is_prior_plus_inner_log_joint():
    model, x, obs = small_model()
    lifted, lx, lobs = bayesian_lift_parameters(model, x, obs, prior_scale=0.7)
    assert lx.shape == (1, 1) and lobs == {}
    assert list(lifted.parameters()) == []
    params = dict(model.named_parameters())
    reg = build_registry(lifted, lx, lobs)
    assert [s.name for s in reg] == [f"theta__{k.replace('.', '_')}" for k in params]
    for _ in range(3):
        values = {s.name: torch.randn(s.shape) for s in reg}
        got = lifted.log_joint(lx, values).sum()
        prior = sum(normal_logpdf(v, 0.7) for v in values.values())
        with torch.no_grad():
            for (path, p), v in zip(params.items(), values.values()):
                p.copy_(v.reshape(p.shape))
            inner = model.log_joint(x, obs).sum()
        assert torch.allclose(got, prior + inner, atol=1e-3)


def test_original_parameters_untouched_and_gradient_free_after_a_run():
    model, x, obs = small_model()
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    lifted, lx, lobs = bayesian_lift_parameters(model, x, obs)
    r = MCMC(NUTSKernel(max_tree_depth=3), num_warmup=10, num_samples=5, num_chains=2).run(
        lifted, lx, lobs)
    assert torch.isfinite(r.log_densities).all()
    for k, p in model.named_parameters():
        assert torch.equal(p, before[k]) and p.grad is None


def test_placeholder_priors_of_additional_latents_cancel():
    torch.manual_seed(0)
    model = load("examples/transformer_lm.qvr").morphism
    ctx = torch.randint(0, 32, (2, 1))
    obs = {"next_token": model.sample(ctx)}
    h_shape = tuple(model._step_h.rsample(ctx).shape)
    lifted, lx, lobs = bayesian_lift_parameters(model, ctx, obs, additional_latents={"h": h_shape},
                                                latent_placeholder_scale=10.0)
    reg = build_registry(lifted, lx, lobs)
    assert reg.names[-1] == "latent__h" and reg.by_name["latent__h"].shape == (32,)
    values = {s.name: 0.1 * torch.randn(s.shape) for s in reg}
    thetas = {k: v for k, v in values.items() if k.startswith("theta__")}
    got = lifted.log_joint(lx, values).sum()
    h = values["latent__h"].reshape(h_shape)
    with torch.no_grad():
        for (path, p), v in zip(model.named_parameters(), thetas.values()):
            p.copy_(v.reshape(p.shape))
        inner = model.log_joint(ctx, {**obs, "h": h}).sum()
    prior = sum(normal_logpdf(v, 1.0) for v in thetas.values())
    assert torch.allclose(got, prior + inner, rtol=1e-4, atol=1e-2)
    # deterministic given the full state (common random numbers)
    assert torch.equal(got, lifted.log_joint(lx, values).sum())


def test_lift_argument_errors():
    model, x, obs = small_model()
    with pytest.raises(ValueError):
        bayesian_lift_parameters(object(), x, obs)
    with pytest.raises(ValueError):
        bayesian_lift_parameters(model, x, obs, additional_latents={"y": (6, 1)})
    empty = loads("""
object Obs : FinSet 3
program p : Obs -> Obs
    observe y : Obs <- Normal(0.0, 1.0)
    return y
export p
""").morphism
    with pytest.raises(ValueError):
        bayesian_lift_parameters(empty, torch.zeros(3, 1), {"y": torch.zeros(3)})


def test_lift_from_log_prob_and_to_bayesian_program():
    torch.manual_seed(0)
    w = torch.nn.Linear(1, 1)
    xs = torch.linspace(-1, 1, 8).unsqueeze(-1)
    ys = 2.0 * xs + 0.5

    def log_prob(x, y):
        return torch.distributions.Normal(w(x), 0.1).log_prob(y)

    lifted, lx, lobs = lift_from_log_prob(w, log_prob_fn=log_prob, x=xs,
                                          observations={"Y": ys}, parameter_prior_scale=5.0)
    r = MCMC(NUTSKernel(), num_warmup=150, num_samples=150, num_chains=2).run(lifted, lx, lobs)
    assert abs(float(r.samples["theta__weight"].mean()) - 2.0) < 0.15
    assert abs(float(r.samples["theta__bias"].mean()) - 0.5) < 0.1

    lifted2, _, _ = lift_to_bayesian_program(
        w, location_fn=lambda x: w(x), observation_family=torch.distributions.Normal,
        observation_kwargs={"scale": 0.1}, x=xs, observations={"Y": ys})
    values = {"theta__weight": torch.tensor([2.0]), "theta__bias": torch.tensor([0.5])}
    lp = lifted2.log_joint(torch.zeros(1, 1), values).sum()
    expect = normal_logpdf(torch.tensor([2.0, 0.5]), 1.0) + \
        torch.distributions.Normal(2.0 * xs + 0.5, 0.1).log_prob(ys).sum()
    assert torch.allclose(lp, expect, atol=1e-3)
