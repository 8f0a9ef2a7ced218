"""`layer_norm(A)`, `rms_norm(A)` and `residual(f)` (design E4): values, densities,
deterministic errors and compiled expressions."""
import math

import pytest
import torch
import torch.nn.functional as F

import qvr.runtime as R
from qvr.runtime.errors import DeterministicError
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.morphisms.kernels import FamilyKernel
from qvr.runtime.morphisms.norms import LayerNorm, Residual, RMSNorm
from qvr.runtime.objects import Euclidean

L = Euclidean("Latent", 6)


def _random_affine(norm):
    with torch.no_grad():
        norm.gain.copy_(torch.randn(6))
        norm.bias.copy_(torch.randn(6))
    return norm


def test_layer_norm_matches_torch():
    ln = LayerNorm(L, label="ln")
    assert torch.equal(ln.gain, torch.ones(6)) and torch.equal(ln.bias, torch.zeros(6))
    x = 3 * torch.randn(4, 5, 6) + 1
    assert torch.allclose(ln.rsample(x), F.layer_norm(x, (6,), eps=1e-5), atol=1e-6)
    _random_affine(ln)
    want = F.layer_norm(x, (6,), ln.gain, ln.bias, eps=1e-5)
    assert torch.allclose(ln.rsample(x), want, atol=1e-6)
    # the formula of E4 (biased variance)
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    assert torch.allclose(ln.mean(x), (x - mu) / torch.sqrt(var + 1e-5) * ln.gain + ln.bias,
                          atol=1e-5)


def test_rms_norm_formula():
    rn = _random_affine(RMSNorm(L, label="rn"))
    x = torch.randn(4, 6)
    want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * rn.gain + rn.bias
    assert torch.allclose(rn.rsample(x), want, atol=1e-6)
    # unit gain, zero bias: the root mean square of the output is ~1
    rn2 = RMSNorm(L)
    y = rn2.rsample(10 * torch.randn(100, 6))
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(100), atol=1e-4)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_norms_are_deterministic_and_row_wise(cls):
    n = cls(L, label="ln")
    assert n.deterministic and not n.mixes_positions
    x = torch.randn(2, 3, 6)
    y = n.rsample(x, torch.Size([4]))
    assert y.shape == (4, 2, 3, 6)
    assert torch.equal(y[2], n.rsample(x))
    # row-wise: a row's value depends on that row only
    x2 = x.clone()
    x2[0, 1] += 5
    d = (n.rsample(x2) - n.rsample(x)).abs().sum(-1)
    assert d.nonzero().tolist() == [[0, 1]]
    with pytest.raises(DeterministicError) as ei:
        n.log_prob(x, y[0])
    assert str(ei.value) == ("`ln` is deterministic: it has no density; end the chain with a "
                             "kernel or give the attention a family (`~ Normal`)")
    assert ei.value.morphism == "ln"


def test_norm_input_checks_name_the_morphism():
    from qvr.runtime.errors import InputShapeError
    with pytest.raises(InputShapeError) as ei:
        LayerNorm(L, label="ln").rsample(torch.randn(3, 5))
    assert ei.value.morphism == "ln"


def test_residual_of_a_normal_kernel():
    k = FamilyKernel(L, L, "Normal", scale=0.2, hidden_dim=8, label="k")
    r = Residual(k, label="res")
    assert (r.domain, r.codomain) == (L, L)
    assert not r.deterministic and not r.mixes_positions
    x = torch.randn(5, 6)
    torch.manual_seed(3)
    z = r.rsample(x, torch.Size([2]))
    torch.manual_seed(3)
    assert torch.allclose(z, x + k.rsample(x, torch.Size([2])), atol=1e-6)
    # density of z given x: the inner density at z - x, i.e. Normal(x + loc, scale)
    z = r.rsample(x)
    lp = r.log_prob(x, z)
    assert lp.shape == (5,)
    assert torch.allclose(lp, k.log_prob(x, z - x), atol=1e-6)
    loc, scale = k.params(x)
    want = torch.distributions.Normal(x + loc, scale).log_prob(z).sum(-1)
    assert torch.allclose(lp, want, atol=1e-5)


def test_residual_of_attention_mixes_positions():
    a = Attention(L, L, heads=2, causal=True, family="Normal", label="attn")
    r = Residual(a)
    assert r.mixes_positions and not r.deterministic and r.label == "residual(attn)"
    x = torch.randn(2, 4, 6)
    z = r.rsample(x)
    assert torch.allclose(r.log_prob(x, z), a.log_prob(x, z - x), atol=1e-6)


def test_residual_of_a_deterministic_morphism():
    a = Attention(L, L, heads=3, label="attn")
    r = Residual(a, label="block")
    assert r.deterministic and r.mixes_positions
    x = torch.randn(2, 4, 6)
    assert torch.allclose(r.rsample(x), x + a.mean(x), atol=1e-6)
    assert r.rsample(x, torch.Size([3])).shape == (3, 2, 4, 6)
    with pytest.raises(DeterministicError) as ei:
        r.log_prob(x, x)
    assert str(ei.value).startswith("`block` is deterministic: it has no density")


# ---------------------------------------------------------------- compiled expressions

SRC = """
object Latent : Real 6
object Hidden : Real 4

morphism up : Latent -> Hidden [role=kernel, scale=0.1] ~ Normal
morphism down : Hidden -> Latent [role=kernel, scale=0.1] ~ Normal

let ln = layer_norm(Latent)
let rn = rms_norm(Latent)
let two = layer_norm(Latent) >> layer_norm(Latent)
let ff = residual(layer_norm(Latent) >> up >> down)
let deep = stack(ff, 2)
"""


@pytest.fixture(scope="module")
def prog():
    return R.loads(SRC)


def test_compiled_norms(prog):
    assert isinstance(prog["ln"], LayerNorm) and prog["ln"].label == "ln"
    assert isinstance(prog["rn"], RMSNorm) and prog["rn"].label == "rn"
    a, b = prog["two"].links()
    assert isinstance(a, LayerNorm) and isinstance(b, LayerNorm)
    assert a is not b and a.gain is not b.gain  # every occurrence its own parameters
    assert a.label == "layer_norm(Latent)"


def test_compiled_residual(prog):
    ff = prog["ff"]
    assert isinstance(ff, Residual) and ff.label == "ff"
    assert [type(lk).__name__ for lk in ff.inner.links()] == ["LayerNorm", "FamilyKernel",
                                                              "FamilyKernel"]
    x = torch.randn(3, 6)
    z = ff.rsample(x)
    assert z.shape == (3, 6)
    lp = ff.log_prob(x, z)
    assert lp.shape == (3,) and torch.isfinite(lp).all()
    # stack deep-copies the residual: distinct norms with equal initial values
    c1, c2 = prog["deep"].links()
    assert c1.inner.links()[0] is not c2.inner.links()[0]
    assert torch.equal(c1.inner.links()[0].gain, c2.inner.links()[0].gain)
    assert prog["deep"].rsample(x).shape == (3, 6)


def test_compiled_norm_values(prog):
    x = torch.randn(4, 6)
    assert torch.allclose(prog["ln"].rsample(x), F.layer_norm(x, (6,), eps=1e-5), atol=1e-6)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(prog["rn"].rsample(x), want, atol=1e-6)
    assert math.isclose(prog["ln"].eps, 1e-5)
