"""`positions=N` on an embed (design E3): a learned vector per position index added to the
centre, the position limit, and draws that depend on the position (no sharing by token)."""
import pytest
import torch

import qvr.runtime as R
from qvr.runtime.errors import PositionLimitError, QvrRuntimeError
from qvr.runtime.morphisms.kernels import Embed
from qvr.runtime.objects import Euclidean, FinSet

TOKEN, LATENT = FinSet("Token", 10), Euclidean("Latent", 4)


def make(n=6):
    e = Embed(TOKEN, LATENT, label="tok", positions=n)
    with torch.no_grad():  # distinct, visible position vectors
        e.pos.copy_(torch.randn(n, 4))
    return e


def test_parameters():
    e = Embed(TOKEN, LATENT, label="tok", positions=6)
    assert e.positions == 6 and tuple(e.pos.shape) == (6, 4)
    assert float(e.pos.detach().abs().max()) < 0.2  # 0.02 * randn
    assert Embed(TOKEN, LATENT).positions is None
    assert not hasattr(Embed(TOKEN, LATENT), "pos")
    assert not e.mixes_positions


def test_position_vectors_are_added_per_position_index():
    e = make()
    x = torch.randint(0, 10, (3, 5))
    mu, sigma = e.params(x)
    for b in range(3):
        for t in range(5):
            assert torch.allclose(mu[b, t], e.centers[x[b, t]] + e.pos[t])
            assert torch.allclose(sigma[b, t], torch.exp(e.log_sigma[x[b, t]]))
    torch.manual_seed(2)
    y = e.rsample(x, torch.Size([2]))
    torch.manual_seed(2)
    assert torch.allclose(y, mu + sigma * torch.randn(2, 3, 5, 4))
    lp = e.log_prob(x, y[0])
    want = torch.distributions.Normal(mu, sigma).log_prob(y[0]).sum(-1)
    assert lp.shape == (3, 5) and torch.allclose(lp, want, atol=1e-5)


def test_one_batch_axis_is_position_zero():
    e = make()
    x = torch.tensor([1, 4, 4])
    mu, _ = e.params(x)
    assert torch.allclose(mu, e.centers[x] + e.pos[0])


def test_same_token_at_two_positions_gets_two_means():
    e = make()
    x = torch.tensor([[7, 7, 7]])
    mu, _ = e.params(x)
    assert not torch.allclose(mu[0, 0], mu[0, 1])
    assert torch.allclose(mu[0, 1] - mu[0, 0], e.pos[1] - e.pos[0])


def test_the_full_length_is_allowed_and_longer_is_an_error():
    e = make(4)
    assert e.rsample(torch.zeros(2, 4, dtype=torch.long)).shape == (2, 4, 4)
    with pytest.raises(PositionLimitError) as ei:
        e.rsample(torch.zeros(2, 5, dtype=torch.long))
    err = ei.value
    assert isinstance(err, QvrRuntimeError) and isinstance(err, ValueError)
    assert (err.morphism, err.limit, err.length) == ("tok", 4, 5)
    assert str(err) == ("morphism `tok`: a sequence of 5 positions is longer than the 4 "
                        "positions it learned (`positions=4`) (expected at most 4 positions, "
                        "got length 5)")


SRC = """
object Token : FinSet 10
object Latent : Real 4

morphism tok : Token -> Latent [role=embed, positions=3]
morphism head : Latent -> Latent [role=kernel, scale=0.1] ~ Normal
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical

let chain = tok >> head

program lm : Token -> Token
    sample h <- chain
    observe next_token : Token <- lm_head(h)
    return next_token

export lm
"""


@pytest.fixture(scope="module")
def prog():
    torch.manual_seed(0)
    p = R.loads(SRC)
    with torch.no_grad():
        p["tok"].pos.copy_(3 * torch.randn(3, 4))
    return p


def test_compiled_positions(prog):
    assert prog["tok"].positions == 3


def test_limit_error_in_a_program_names_program_step_and_morphism(prog):
    with pytest.raises(PositionLimitError) as ei:
        prog.rsample(torch.zeros(2, 7, dtype=torch.long))
    assert str(ei.value) == ("program `lm`, step `h`, morphism `tok`: a sequence of 7 positions "
                             "is longer than the 3 positions it learned (`positions=3`) "
                             "(expected at most 3 positions, got length 7)")


def test_chain_density_is_not_shared_between_positions_with_equal_tokens(prog):
    """Prefix draws of `tok >> head` must not be shared by token: the same token at two
    positions has two different laws.  The estimate with the default layout equals the
    per-row layout (`dedup=False`) for the same common random numbers."""
    from qvr.runtime.combinators import chain_log_prob
    links = prog["chain"].links()
    x = torch.tensor([[5, 5, 5], [5, 2, 5]])
    z = prog["chain"].rsample(x)
    lp = chain_log_prob(links, x, z, n=64, seed=1)
    per_row = chain_log_prob(links, x, z, n=64, seed=1, dedup=False)
    assert lp.shape == (2, 3)
    assert torch.allclose(lp, per_row, atol=1e-5)
    # and the value of position 1 is scored under position 1's law: moving pos[1] changes it
    tok = prog["tok"]
    with torch.no_grad():
        saved = tok.pos.clone()
        tok.pos[1] += 5.0
        lp2 = chain_log_prob(links, x, z, n=64, seed=1)
        tok.pos.copy_(saved)
    assert torch.allclose(lp2[:, 0], lp[:, 0], atol=1e-6)
    assert not torch.allclose(lp2[:, 1], lp[:, 1], atol=1e-2)


def test_an_embed_with_positions_before_a_finite_intermediate_reads_no_class_axis():
    """The exact sum over a finite intermediate puts a class axis in front of the input;
    an embed with `positions` must not read it as positions (it raised PositionLimitError
    for 8 rows of a 4-position embed, and used wrong vectors for fewer)."""
    import qvr
    text = """
object Tok : FinSet 5
object H : Real 2
object C : FinSet 3
object Y : Real 1
morphism e : Tok -> H [role=embed, positions=4]
morphism k : H -> C [role=kernel] ~ Categorical
morphism h : C -> Y [role=kernel] ~ Normal
let chain = e >> k >> h
export chain
"""
    torch.manual_seed(0)
    m = qvr.loads(text).morphism
    x, y = torch.arange(8) % 5, torch.randn(8, 1)
    rows = m.log_prob(x, y)  # eight sequences of length 1
    seqs = m.log_prob(x[:, None], y[:, None, :]).squeeze(-1)
    assert rows.shape == (8,)
    torch.testing.assert_close(rows, seqs)
