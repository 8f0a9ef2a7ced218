"""Decoder-only transformer programs written in QVR (design E2-E4): token + position
embedding, pre-norm residual attention and feed-forward blocks, a final norm and a
Categorical head.  Shapes, densities, parameters, and causality through the compiled
program's hidden values.

The backbone ends in a norm (deterministic), so the program observes through the whole
chain (`observe next_token : Token <- backbone >> lm_head`): `sample h <- backbone` is
QVR316 (docs/extensions.md E4: a sampled value needs a density)."""
import pytest
import torch

import qvr.runtime as R
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.morphisms.kernels import Embed
from qvr.runtime.morphisms.norms import LayerNorm, Residual

TEMPLATE = """
object Token : FinSet 12
object Latent : Real 8
object FFHidden : Real 16

morphism tok : Token -> Latent [role=embed, positions=10]
morphism attn : Latent -> Latent [role=attention, heads=2, head_dim=4{causal}]
morphism ff_up : Latent -> FFHidden [role=kernel, scale=0.1] ~ Normal
morphism ff_down : FFHidden -> Latent [role=kernel, scale=0.1] ~ Normal
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical

let block = residual(layer_norm(Latent) >> attn) >> residual(layer_norm(Latent) >> ff_up >> ff_down)
let backbone = tok >> stack(block, 2) >> layer_norm(Latent)
let model = backbone >> lm_head

program lm : Token -> Token
    observe next_token : Token <- model
    return next_token

export lm
export model
"""


def load(causal: bool):
    torch.manual_seed(0)
    return R.loads(TEMPLATE.format(causal=", causal" if causal else ""))


@pytest.fixture(scope="module")
def causal():
    return load(True)


@pytest.fixture(scope="module")
def bidirectional():
    return load(False)


def test_structure(causal):
    backbone = causal["backbone"]
    links = backbone.links()
    assert isinstance(links[0], Embed) and links[0].positions == 10
    assert isinstance(links[-1], LayerNorm)
    assert len(links) == 1 + 2 * 2 + 1  # embed, 2 x (two residuals), final norm
    assert all(isinstance(lk, Residual) for lk in links[1:5])
    assert [lk.mixes_positions for lk in links[1:5]] == [True, False, True, False]
    layers = R.attention_layers(causal)
    assert [n for n, _ in layers] == ["attn#0", "attn#1"]
    assert all(a.causal and a.deterministic for _, a in layers)
    # the two stacked copies own their parameters
    params = dict(backbone.named_parameters())
    assert len({p.data_ptr() for p in params.values()}) == len(params)


@pytest.mark.parametrize("shape", [(3, 7), (2, 1), (4,)])
def test_rsample_shapes(causal, shape):
    lm = causal.morphism
    x = torch.randint(0, 12, shape)
    y = lm.rsample(x)
    assert y.shape == shape and y.dtype == torch.int64
    assert int(y.min()) >= 0 and int(y.max()) < 12
    assert lm.rsample(x, torch.Size([2])).shape == (2, *shape)
    assert causal["backbone"].rsample(x).shape == (*shape, 8)


def test_model_log_prob_is_finite_and_differentiable(causal):
    model = causal["model"]
    assert causal.morphism._step_next_token is model
    x = torch.randint(0, 12, (3, 6))
    y = torch.randint(0, 12, (3, 6))
    lp = model.log_prob(x, y)
    assert lp.shape == (3, 6) and torch.isfinite(lp).all()
    lj = causal.morphism.log_joint(x, {"next_token": y})
    assert lj.shape == (3,) and torch.allclose(lj, lp.sum(-1), atol=1e-5)
    assert float(lp.detach().max()) <= 0.0  # a probability of a class
    lp.sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    attn_grads = [g for n, g in grads.items() if n.endswith("w_q")]
    assert len(attn_grads) == 2
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
               for g in attn_grads)


def test_position_limit_of_the_program(causal):
    from qvr.runtime.errors import PositionLimitError
    with pytest.raises(PositionLimitError) as ei:
        causal.morphism.rsample(torch.zeros(1, 11, dtype=torch.long))
    assert str(ei.value).startswith("program `lm`, step `next_token`, morphism `tok`: a sequence of 11 "
                                    "positions is longer than the 10 positions")


def _hidden(prog, x, seed=7):
    torch.manual_seed(seed)  # common random numbers: the same noise for both inputs
    with torch.no_grad():
        return prog["backbone"].rsample(x)


def test_a_later_token_changes_only_later_positions_when_causal(causal):
    x = torch.randint(0, 12, (2, 6))
    x2 = x.clone()
    x2[:, 4] = (x[:, 4] + 1) % 12
    h, h2 = _hidden(causal, x), _hidden(causal, x2)
    assert torch.allclose(h[:, :4], h2[:, :4], atol=1e-6)
    diff = (h - h2).abs().amax(-1)  # (B, T)
    assert bool((diff[:, 4:] > 1e-3).all())


def test_a_later_token_changes_earlier_positions_without_causal(bidirectional):
    x = torch.randint(0, 12, (2, 6))
    x2 = x.clone()
    x2[:, 4] = (x[:, 4] + 1) % 12
    h, h2 = _hidden(bidirectional, x), _hidden(bidirectional, x2)
    diff = (h - h2).abs().amax(-1)
    assert bool((diff[:, :4] > 1e-4).all())
    assert bool((diff[:, 4] > 1e-3).all())


def test_sequences_of_a_batch_do_not_mix(bidirectional):
    """Attention mixes positions of one sequence, never rows of the batch."""
    x = torch.randint(0, 12, (3, 5))
    x2 = x.clone()
    x2[1] = (x[1] + 3) % 12
    h, h2 = _hidden(bidirectional, x), _hidden(bidirectional, x2)
    assert torch.allclose(h[0], h2[0], atol=1e-6) and torch.allclose(h[2], h2[2], atol=1e-6)
    assert not torch.allclose(h[1], h2[1], atol=1e-3)


def test_attention_with_a_family_in_a_program():
    src = """
object Latent : Real 4
object Obs : Real 2

morphism attn : Latent -> Obs [role=attention, heads=2, causal, scale=0.5] ~ Normal

program p : Latent -> Obs
    observe y <- attn
    return y

export p
"""
    prog = R.loads(src)
    a = prog["attn"]
    assert isinstance(a, Attention) and a.family_name == "Normal"
    x = torch.randn(3, 5, 4)
    y = prog.morphism.rsample(x)
    assert y.shape == (3, 5, 2)
    lj = prog.morphism.log_joint(x, {"y": y})
    assert lj.shape == (3,)
    assert torch.allclose(lj, a.log_prob(x, y).sum(-1), atol=1e-5)
