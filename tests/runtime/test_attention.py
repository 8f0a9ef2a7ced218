"""`Attention` (design E2): the map against a direct loop over batch, heads and positions,
circuits, the family's draws and densities, compiled declarations, and the layer API
(`qvr.runtime.attention_layers`, `circuits`, design E7)."""
import math

import pytest
import torch

import qvr.runtime as R
from qvr.runtime.errors import DeterministicError, QvrRuntimeError
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.objects import Euclidean

TOL = dict(atol=1e-5, rtol=1e-5)


def make(d_a=8, d_b=6, **kw):
    return Attention(Euclidean("A", d_a), Euclidean("B", d_b), label="attn", **kw)


def reference(a: Attention, x: torch.Tensor, causal: bool):
    """The definition of E2, one scalar loop at a time: `(m (B, T, dB), w (B, H, T, T))`."""
    B, T, _ = x.shape
    H, k = a.heads, a.head_dim
    m = torch.zeros(B, T, a.d_out, dtype=torch.float64)
    w = torch.zeros(B, H, T, T, dtype=torch.float64)
    wq, wk, wv, wo = (p.detach().double() for p in (a.w_q, a.w_k, a.w_v, a.w_o))
    x = x.double()
    for b in range(B):
        for i in range(T):
            heads = []
            for h in range(H):
                q = wq[h] @ x[b, i]
                scores = []
                for j in range(T):
                    if causal and j > i:
                        scores.append(-math.inf)
                    else:
                        scores.append(float(q @ (wk[h] @ x[b, j])) / math.sqrt(k))
                s = torch.tensor(scores, dtype=torch.float64)
                p = torch.exp(s - s.max())
                p = p / p.sum()
                w[b, h, i] = p
                heads.append(sum(p[j] * (wv[h] @ x[b, j]) for j in range(T)))
            m[b, i] = wo @ torch.cat(heads)
    return m, w


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads,head_dim", [(1, None), (2, None), (3, 5)])
def test_mean_and_pattern_match_the_loop(causal, heads, head_dim):
    a = make(heads=heads, head_dim=head_dim, causal=causal)
    assert a.head_dim == (head_dim or 8 // heads)
    assert tuple(a.w_q.shape) == (heads, a.head_dim, 8)
    assert tuple(a.w_o.shape) == (6, heads * a.head_dim)
    x = torch.randn(3, 5, 8)
    m_ref, w_ref = reference(a, x, causal)
    with torch.no_grad():
        assert torch.allclose(a.mean(x).double(), m_ref, **TOL)
        assert torch.allclose(a.pattern(x).double(), w_ref, **TOL)
        q, k, v = a.project(x)
        assert q.shape == k.shape == v.shape == (3, heads, 5, a.head_dim)
        o, w = a.attend(q, k, v, causal=causal)
        assert o.shape == (3, heads, 5, a.head_dim) and w.shape == (3, heads, 5, 5)
        assert torch.allclose(a.mix(o).double(), m_ref, **TOL)


def test_pattern_rows_sum_to_one_and_causal_upper_triangle_is_zero():
    a = make(heads=4, head_dim=2, causal=True)
    w = a.pattern(torch.randn(2, 7, 8))
    assert w.shape == (2, 4, 7, 7)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 7), atol=1e-6)
    upper = torch.ones(7, 7, dtype=torch.bool).triu(1)
    assert bool((w[..., upper] == 0).all())
    assert bool((w[..., ~upper] > 0).all())
    # position 0 sees only itself
    assert torch.equal(w[..., 0, 0], torch.ones(2, 4))


def test_non_causal_pattern_is_dense():
    w = make(heads=2, causal=False).pattern(torch.randn(2, 4, 8))
    assert bool((w > 0).all())


def test_attend_with_offset_is_the_tail_of_the_full_pattern():
    """KV caches: queries at absolute positions 4, 5 against keys 0..5."""
    a = make(heads=2, head_dim=3, causal=True)
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        q, k, v = a.project(x)
        o_full, w_full = a.attend(q, k, v, causal=True)
        o_tail, w_tail = a.attend(q[..., 4:, :], k, v, causal=True, offset=4)
        assert torch.allclose(w_tail, w_full[..., 4:, :], atol=1e-6)
        assert torch.allclose(o_tail, o_full[..., 4:, :], atol=1e-6)
        # one query at offset 2 against keys 0..2 only
        o1, w1 = a.attend(q[..., 2:3, :], k[..., :3, :], v[..., :3, :], causal=True, offset=2)
        assert torch.allclose(w1, w_full[..., 2:3, :3], atol=1e-6)


def test_length_one_sequences_are_the_row_wise_linear_map():
    a = make(heads=2, head_dim=3, causal=True)
    x = torch.randn(5, 8)
    with torch.no_grad():
        m = a.mean(x)
        assert m.shape == (5, 6)
        v = torch.einsum("hkd,bd->bhk", a.w_v, x).reshape(5, 6)  # heads concatenated
        assert torch.allclose(m, v @ a.w_o.T, atol=1e-6)
        assert torch.allclose(m, a.mean(x.unsqueeze(1)).squeeze(1), atol=1e-6)
        assert a.pattern(x).shape == (5, 2, 1, 1)


def test_leading_sample_axes_are_carried_through():
    a = make(heads=2, causal=True)
    x = torch.randn(4, 3, 5, 8)  # (n, B, T, dA)
    with torch.no_grad():
        m = a.mean(x)
        assert m.shape == (4, 3, 5, 6)
        for s in range(4):
            assert torch.allclose(m[s], a.mean(x[s]), atol=1e-6)
        assert a.pattern(x).shape == (4, 3, 2, 5, 5)


def test_one_dimensional_input_of_a_width_one_object():
    a = Attention(Euclidean("R", 1), Euclidean("R", 1), label="a1")
    assert a.mean(torch.randn(4)).shape == (4, 1)


def test_circuits_are_the_products():
    a = make(heads=3, head_dim=5)
    qk, ov = a.qk_circuits(), a.ov_circuits()
    assert qk.shape == (3, 8, 8) and ov.shape == (3, 6, 8)
    for h in range(3):
        assert torch.allclose(qk[h], a.w_q[h].T @ a.w_k[h], atol=1e-6)
        assert torch.allclose(ov[h], a.w_o[:, h * 5:(h + 1) * 5] @ a.w_v[h], atol=1e-6)
    # the score of head h is x_i^T QK[h] x_j / sqrt(k)
    x = torch.randn(1, 4, 8)
    with torch.no_grad():
        q, k, _ = a.project(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(5)
        s2 = torch.einsum("bid,hde,bje->bhij", x, qk, x) / math.sqrt(5)
        assert torch.allclose(s, s2, atol=1e-5)
        # the output is the sum over heads of ov[h] applied to the pattern-weighted inputs
        w = a.pattern(x)
        m = torch.einsum("bhij,hcd,bjd->bic", w, ov, x)
        assert torch.allclose(m, a.mean(x), atol=1e-5)


def test_deterministic_attention():
    a = make(heads=2, causal=True)
    assert a.deterministic and a.mixes_positions and a.log_scale is None
    x = torch.randn(2, 4, 8)
    y = a.rsample(x, torch.Size([3]))
    assert y.shape == (3, 2, 4, 6)
    assert torch.equal(y[1], a.mean(x))
    assert torch.equal(a.rsample(x), a.mean(x))
    with pytest.raises(DeterministicError) as ei:
        a.log_prob(x, a.mean(x))
    e = ei.value
    assert isinstance(e, QvrRuntimeError) and isinstance(e, ValueError)
    assert e.morphism == "attn"
    assert str(e) == ("`attn` is deterministic: it has no density; end the chain with a "
                      "kernel or give the attention a family (`~ Normal`)")
    e.add_context(program="lm", step="h")
    assert str(e) == ("program `lm`, step `h`: `attn` is deterministic: it has no density; "
                      "end the chain with a kernel or give the attention a family (`~ Normal`)")


def test_normal_draws_are_mean_plus_scale_times_noise():
    a = make(heads=2, causal=True, family="Normal", scale=0.3)
    assert not a.deterministic
    assert torch.allclose(a.log_scale, torch.full((6,), math.log(0.3)))
    x = torch.randn(2, 4, 8)
    torch.manual_seed(5)
    y = a.rsample(x, torch.Size([3]))
    torch.manual_seed(5)
    eps = torch.randn(3, 2, 4, 6)
    assert torch.allclose(y, a.mean(x) + 0.3 * eps, atol=1e-6)


@pytest.mark.parametrize("family,cls", [("Normal", torch.distributions.Normal),
                                        ("Laplace", torch.distributions.Laplace),
                                        ("Cauchy", torch.distributions.Cauchy)])
def test_log_prob_against_torch_distributions(family, cls):
    a = make(heads=2, head_dim=3, causal=True, family=family, scale=0.5)
    with torch.no_grad():
        a.log_scale.copy_(torch.linspace(-1, 0.5, 6))
    x = torch.randn(3, 5, 8)
    y = a.rsample(x)
    assert y.shape == (3, 5, 6)
    lp = a.log_prob(x, y)
    assert lp.shape == (3, 5)
    m_ref, _ = reference(a, x, True)
    want = cls(m_ref, torch.exp(a.log_scale.detach().double())).log_prob(y.double()).sum(-1)
    assert torch.allclose(lp.double(), want, atol=1e-4)
    # draws of that family: a sample of many draws has the family's median at the mean
    ys = a.rsample(x, torch.Size([4000]))
    med = ys.median(0).values
    # the sample median's standard error is about 1.25 s / sqrt(n) (Normal), larger for the
    # heavier tails; 6 standard errors of the widest scale
    assert torch.allclose(med, a.mean(x), atol=6 * 2.0 * math.exp(0.5) / math.sqrt(4000))


def test_log_prob_reads_the_batch_axes_from_the_value():
    """Draws `x (n, B, dA)` against values `y (B, dB)` are n x B sequences of length 1."""
    a = make(heads=2, family="Normal")
    x = torch.randn(4, 3, 8)
    y = torch.randn(3, 6)
    lp = a.log_prob(x, y)
    assert lp.shape == (4, 3)
    for s in range(4):
        assert torch.allclose(lp[s], a.log_prob(x[s], y), atol=1e-6)
    # a value with a position axis: x (n, B, T, dA) against y (B, T, dB)
    x = torch.randn(4, 3, 5, 8)
    y = torch.randn(3, 5, 6)
    lp = a.log_prob(x, y)
    assert lp.shape == (4, 3, 5)
    assert torch.allclose(lp[2], a.log_prob(x[2], y), atol=1e-6)


def test_gradients_reach_every_parameter():
    a = make(heads=2, head_dim=3, causal=True, family="Normal")
    x = torch.randn(2, 5, 8)
    a.log_prob(x, torch.randn(2, 5, 6)).sum().backward()
    for name, p in a.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_vmap_over_particles_matches_and_needs_no_fallback():
    """The ELBO maps log_joint over particles with `torch.func.vmap`: the batched result
    equals the unbatched one, without the fallback loop's warning."""
    import warnings
    a = make(heads=2, head_dim=3, causal=True, family="Normal")
    x = torch.randn(5, 3, 4, 8)
    y = torch.randn(5, 3, 4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = torch.func.vmap(a.mean)(x)
        lp = torch.func.vmap(a.log_prob)(x, y)
    assert torch.allclose(m, a.mean(x), atol=1e-6)
    assert torch.allclose(lp, a.log_prob(x, y), atol=1e-5)


def test_float64():
    a = make(heads=2, causal=True, family="Normal").double()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    assert a.rsample(x).dtype == torch.float64
    m_ref, _ = reference(a, x, True)
    assert torch.allclose(a.mean(x), m_ref, atol=1e-12)


def test_bad_family_and_heads():
    with pytest.raises(ValueError, match="location-scale family"):
        make(family="Gamma")
    with pytest.raises(ValueError, match="3 heads do not divide the width 8"):
        make(heads=3)


# ---------------------------------------------------------------- compiled declarations

SRC = """
object Token : FinSet 12
object Latent : Real 8
object Out : Real 6

morphism tok : Token -> Latent [role=embed]
morphism attn : Latent -> Latent [role=attention, heads=2, head_dim=3, causal]
morphism noisy : Latent -> Out [role=attention, heads=4, scale=0.25] ~ Laplace
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical

let block = residual(layer_norm(Latent) >> attn)
let deep = tok >> stack(block, 3) >> noisy
let tied = tok >> repeat(block, 2)
let tied_lm = tied >> lm_head

program lm : Token -> Token
    observe next_token : Token <- tied_lm
    return next_token

export deep
export lm
"""


@pytest.fixture(scope="module")
def prog():
    torch.manual_seed(0)
    return R.loads(SRC)


def test_compiled_options(prog):
    a, n = prog["attn"], prog["noisy"]
    assert isinstance(a, Attention) and isinstance(n, Attention)
    assert (a.heads, a.head_dim, a.causal, a.family_name, a.deterministic) == (2, 3, True, None, True)
    assert (n.heads, n.head_dim, n.causal, n.family_name, n.deterministic) == (4, 2, False, "Laplace", False)
    assert (a.label, n.label) == ("attn", "noisy")
    assert tuple(n.w_o.shape) == (6, 8)
    assert torch.allclose(n.log_scale, torch.full((6,), math.log(0.25)))


def test_attention_layers_names_stack_copies_in_order(prog):
    layers = R.attention_layers(prog["deep"])
    assert [n for n, _ in layers] == ["attn#0", "attn#1", "attn#2", "noisy"]
    links = prog["deep"].links()
    copies = [lk.inner.links()[1] for lk in links[1:4]]
    assert [a for _, a in layers[:3]] == copies
    assert len({id(a) for _, a in layers}) == 4
    assert all(a is not prog["attn"] for _, a in layers)  # stack made copies
    # a whole Program: its exports in order (deep, then lm: tied shares `attn` itself)
    names = [n for n, _ in R.attention_layers(prog)]
    assert names == ["attn#0", "attn#1", "attn#2", "noisy", "attn#3"]
    # repeat applies the same module twice: one layer
    tied = R.attention_layers(prog["tied"])
    assert [(n, a) for n, a in tied] == [("attn", prog["attn"])]


def test_circuits_of_a_program(prog):
    c = R.circuits(prog["deep"])
    assert list(c) == ["attn#0", "attn#1", "attn#2", "noisy"]
    assert c["attn#1"]["qk"].shape == (2, 8, 8) and c["attn#1"]["ov"].shape == (2, 8, 8)
    assert c["noisy"]["qk"].shape == (4, 8, 8) and c["noisy"]["ov"].shape == (4, 6, 8)
    layer = dict(R.attention_layers(prog["deep"]))["noisy"]
    assert torch.equal(c["noisy"]["qk"], layer.qk_circuits().detach())
    assert not c["noisy"]["ov"].requires_grad


def test_compiled_chain_draws_and_densities(prog):
    deep = prog["deep"]
    x = torch.randint(0, 12, (3, 5))
    y = deep.rsample(x)
    assert y.shape == (3, 5, 6)
    assert deep.rsample(x, torch.Size([2])).shape == (2, 3, 5, 6)
    lp = deep.log_prob(x, y)
    assert lp.shape == (3, 5) and torch.isfinite(lp).all()
