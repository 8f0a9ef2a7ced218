"""The program-step Bernoulli density (`families.ClampedBernoulli`): the same law as
`torch.distributions.Bernoulli` with a quarter of the operations, keeping the spec's
`EPS` clamp."""
import math

import torch
import torch.distributions as D

from qvr import loads
from qvr.runtime.families import EPS, ClampedBernoulli, inline_distribution


def test_log_prob_and_gradient_agree_with_torch_bernoulli():
    torch.manual_seed(0)
    eta = (4 * torch.randn(500)).requires_grad_()
    y = (torch.rand(500) < 0.5).float()
    ours = inline_distribution("Bernoulli", [torch.sigmoid(eta)])
    assert isinstance(ours, ClampedBernoulli)
    a = ours.log_prob(y)
    (ga,) = torch.autograd.grad(a.sum(), eta)
    b = D.Bernoulli(probs=torch.sigmoid(eta).clamp(EPS, 1 - EPS)).log_prob(y)
    (gb,) = torch.autograd.grad(b.sum(), eta)
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    assert torch.allclose(ga, gb, atol=1e-5, rtol=1e-4)


def test_saturated_probabilities_use_the_spec_clamp():
    d = inline_distribution("Bernoulli", [torch.tensor([0.0, 1.0])])
    lp = d.log_prob(torch.tensor([1.0, 0.0]))
    # p = 0 -> EPS; p = 1 -> 1 - EPS, which float32 rounds to 1 - 1.19e-7
    hi = torch.tensor(1 - EPS)
    assert torch.allclose(lp, torch.stack([torch.tensor(math.log(EPS)), torch.log1p(-hi)]),
                          rtol=1e-5)
    assert bool(torch.isfinite(lp).all())
    # the other outcome costs (almost) nothing
    assert torch.allclose(d.log_prob(torch.tensor([0.0, 1.0])), torch.zeros(2), atol=1e-6)


def test_values_broadcast_against_probabilities_and_draws_are_unchanged():
    d = inline_distribution("Bernoulli", [torch.tensor([0.2, 0.9])])
    lp = d.log_prob(torch.tensor([[1.0], [0.0]]))
    want = torch.tensor([[math.log(0.2), math.log(0.9)], [math.log(0.8), math.log(0.1)]])
    assert lp.shape == (2, 2) and torch.allclose(lp, want, atol=1e-6)
    torch.manual_seed(1)
    draws = d.sample((20000,))
    assert torch.allclose(draws.mean(0), torch.tensor([0.2, 0.9]), atol=0.015)


def test_an_observed_bernoulli_program_has_the_closed_form_log_joint():
    prog = loads("""
object Row : FinSet 3
program coin : Row -> Row
    sample a <- Normal(0.0, 1.0)
    let p = sigmoid(a)
    observe y : Row <- Bernoulli(p)
    return p
export coin
""")
    a = torch.tensor(0.3)
    y = torch.tensor([1, 0, 1])
    lj = prog.morphism.log_joint(torch.zeros(3, 1), {"a": a, "y": y}).sum()
    p = torch.sigmoid(a)
    want = D.Normal(0.0, 1.0).log_prob(a) + 2 * torch.log(p) + torch.log1p(-p)
    assert torch.allclose(lj, want, atol=1e-5)
