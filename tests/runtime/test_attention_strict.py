"""Strictly causal attention (`causal=strict`, docs/extensions.md E2): query i sees keys
j < i, and a query that sees none (position 0) attends to nothing (value 0, gradient 0).
Values and gradients against a direct loop, the paths of `Attention.mean` (SDPA with an
explicit mask, leading axes merged, `vmap`), patterns and recorded circuits, the compiled
declaration, and the bare `causal` left exactly as it was."""
import math

import pytest
import torch
import torch.nn.functional as F

import qvr.runtime as R
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.objects import Euclidean

TOL = dict(atol=1e-5, rtol=1e-5)


def make(d_a=8, d_b=6, **kw):
    return Attention(Euclidean("A", d_a), Euclidean("B", d_b), label="attn", **kw)


def loop(a: Attention, x: torch.Tensor):
    """E2 with `causal=strict`, one position at a time, differentiable in the parameters
    and `x` (float64 copies): `(m (B, T, dB), w (B, H, T, T))`.  Position i attends over
    j < i; position 0 has no key, so its heads' outputs are 0 and its weights all 0."""
    B, T, _ = x.shape
    H, k = a.heads, a.head_dim
    wq, wk, wv, wo = a.w_q.double(), a.w_k.double(), a.w_v.double(), a.w_o.double()
    x = x.double()
    ms, ws = [], []
    for b in range(B):
        rows_m, rows_w = [], []
        for i in range(T):
            heads, wrow = [], []
            for h in range(H):
                if i == 0:
                    heads.append(torch.zeros(k, dtype=torch.float64))
                    wrow.append(torch.zeros(T, dtype=torch.float64))
                    continue
                q = wq[h] @ x[b, i]
                s = torch.stack([q @ (wk[h] @ x[b, j]) / math.sqrt(k) for j in range(i)])
                p = torch.softmax(s, 0)
                heads.append(sum(p[j] * (wv[h] @ x[b, j]) for j in range(i)))
                wrow.append(torch.cat([p, torch.zeros(T - i, dtype=torch.float64)]))
            rows_m.append(wo @ torch.cat(heads))
            rows_w.append(torch.stack(wrow))
        ms.append(torch.stack(rows_m))
        ws.append(torch.stack(rows_w, 1))
    return torch.stack(ms), torch.stack(ws)


@pytest.mark.parametrize("heads,head_dim", [(1, None), (2, None), (3, 5)])
def test_values_and_pattern_match_the_loop(heads, head_dim):
    torch.manual_seed(1)
    a = make(heads=heads, head_dim=head_dim, causal="strict")
    assert (a.causal, a.strict, a.causal_mode) == (True, True, "strict")
    x = torch.randn(3, 6, 8)
    with torch.no_grad():
        m_ref, w_ref = loop(a, x)
        m, w = a.mean(x), a.pattern(x)
        assert torch.allclose(m.double(), m_ref, **TOL)
        assert torch.allclose(w.double(), w_ref, **TOL)
        q, k, v = a.project(x)
        o, w2 = a.attend(q, k, v, causal="strict")
        assert torch.allclose(a.mix(o).double(), m_ref, **TOL)
        assert torch.equal(w, w2)
    # position 0 sees no key: exactly 0, not NaN
    assert torch.equal(m[:, 0], torch.zeros(3, 6))
    assert torch.isfinite(m).all()


def test_gradients_match_the_loop_and_position_zero_has_none():
    torch.manual_seed(2)
    a = make(heads=2, head_dim=3, causal="strict")
    x = torch.randn(2, 5, 8, requires_grad=True)
    r = torch.randn(2, 5, 6, dtype=torch.float64)
    params = [a.w_q, a.w_k, a.w_v, a.w_o]
    got = torch.autograd.grad((a.mean(x).double() * r).sum(), params + [x])
    m_ref, _ = loop(a, x)
    want = torch.autograd.grad((m_ref * r).sum(), params + [x])
    for g, w in zip(got, want):
        assert torch.isfinite(g).all()
        assert torch.allclose(g.double(), w.double(), atol=1e-5, rtol=1e-4)
    # the value at position 0 depends on nothing: its gradient is exactly 0, not NaN
    g0 = torch.autograd.grad(a.mean(x)[:, 0].sum(), params + [x], allow_unused=True)
    assert all(g is None or (torch.isfinite(g).all() and not g.any()) for g in g0)
    # ... and every weight matters to the other positions
    g1 = torch.autograd.grad(a.mean(x)[:, 1:].square().sum(), params)
    assert all(bool(g.abs().sum() > 0) for g in g1)


def test_a_family_gives_a_finite_density_at_position_zero():
    torch.manual_seed(3)
    a = make(heads=2, causal="strict", family="Normal", scale=0.5)
    x, y = torch.randn(2, 4, 8), torch.randn(2, 4, 6)
    lp = a.log_prob(x, y)
    lp.sum().backward()
    assert lp.shape == (2, 4) and torch.isfinite(lp).all()
    assert all(torch.isfinite(p.grad).all() for p in a.parameters())
    # position 0 is Normal(0, 0.5) per coordinate
    ref = torch.distributions.Normal(0.0, 0.5).log_prob(y[:, 0]).sum(-1)
    assert torch.allclose(lp[:, 0], ref, atol=1e-5)


def test_the_paths_of_mean_agree():
    """SDPA on 4-D input, leading axes merged (5-D), `vmap` (the explicit form)."""
    import warnings
    torch.manual_seed(4)
    a = make(heads=2, head_dim=3, causal="strict")
    x = torch.randn(4, 3, 5, 8)  # (n, B, T, dA)
    with torch.no_grad():
        m = a.mean(x)
        assert m.shape == (4, 3, 5, 6)
        for s in range(4):
            assert torch.allclose(m[s], a.mean(x[s]), atol=1e-6)
            assert torch.allclose(m[s].double(), loop(a, x[s])[0], **TOL)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mv = torch.func.vmap(a.mean)(x)
        assert torch.allclose(mv, m, atol=1e-6)
        assert torch.equal(mv[:, :, 0], torch.zeros(4, 3, 6))


def test_attend_with_offset_is_the_tail_of_the_full_pattern():
    """KV caches: queries at absolute positions 3..5 against keys 0..5, and one query at
    position 2 against keys 0..2 (it sees 0 and 1)."""
    torch.manual_seed(5)
    a = make(heads=2, head_dim=3, causal="strict")
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        q, k, v = a.project(x)
        o_full, w_full = a.attend(q, k, v, causal="strict")
        o_tail, w_tail = a.attend(q[..., 3:, :], k, v, causal="strict", offset=3)
        assert torch.allclose(w_tail, w_full[..., 3:, :], atol=1e-6)
        assert torch.allclose(o_tail, o_full[..., 3:, :], atol=1e-6)
        o1, w1 = a.attend(q[..., 2:3, :], k[..., :3, :], v[..., :3, :], causal="strict", offset=2)
        assert torch.allclose(w1, w_full[..., 2:3, :3], atol=1e-6)
        assert bool((w1[..., 2] == 0).all())
        # the first position alone: nothing to see, o = 0
        o0, w0 = a.attend(q[..., :1, :], k[..., :1, :], v[..., :1, :], causal="strict")
        assert not o0.any() and not w0.any()


def test_pattern_is_zero_on_and_above_the_diagonal():
    torch.manual_seed(6)
    a = make(heads=4, head_dim=2, causal="strict")
    w = a.pattern(torch.randn(2, 7, 8))
    assert w.shape == (2, 4, 7, 7)
    upper = torch.ones(7, 7, dtype=torch.bool).triu(0)
    assert bool((w[..., upper] == 0).all())
    assert bool((w[..., ~upper] > 0).all())
    # rows 1.. sum to 1, row 0 (no key) to 0; position 1 sees position 0 alone
    sums = w.sum(-1)
    assert torch.allclose(sums[..., 1:], torch.ones(2, 4, 6), atol=1e-6)
    assert torch.equal(sums[..., 0], torch.zeros(2, 4))
    assert torch.equal(w[..., 1, 0], torch.ones(2, 4))


def test_length_one_sequences_see_nothing():
    """A rank-2 input is sequences of length 1: under strict causality every position is
    a first position, so the map is 0."""
    a = make(heads=2, causal="strict")
    with torch.no_grad():
        assert torch.equal(a.mean(torch.randn(5, 8)), torch.zeros(5, 6))


def test_the_bare_causal_flag_is_computed_exactly_as_before():
    """`causal` (j <= i) keeps SDPA's `is_causal` and the explicit mask `triu(1)`: the
    numbers are bit-identical to those formulas on a fixed seed (and were checked
    bit-identical to the implementation before `strict` existed: values, patterns,
    gradients, `vmap`)."""
    torch.manual_seed(7)
    a = make(heads=2, head_dim=3, causal=True)
    assert (a.causal, a.strict, a.causal_mode) == (True, False, True)
    x = torch.randn(3, 5, 8)
    q, k, v = a.project(x)
    assert torch.equal(a.mean(x), a.mix(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    mask = torch.full((5, 5), -math.inf).triu(1)
    w = torch.softmax(torch.matmul(q * (1.0 / math.sqrt(3)), k.transpose(-1, -2)) + mask, -1)
    assert torch.equal(a.pattern(x), w)
    assert torch.equal(torch.func.vmap(a.mean)(x.unsqueeze(0)), a.mix(torch.matmul(w, v)).unsqueeze(0))


def test_a_bad_causal_value_is_refused():
    with pytest.raises(ValueError, match='causal is False, True or "strict", got \'yes\''):
        make(causal="yes")


SRC = """
object Latent : Real 8
object Out : Real 6

morphism strict_attn : Latent -> Out [role=attention, heads=2, causal=strict] ~ Normal
morphism bare_attn : Latent -> Latent [role=attention, heads=2, causal]

let both = bare_attn >> strict_attn

program p : Latent -> Out
    observe y <- both
    return y

export p
"""


def test_the_compiled_declaration_is_strict_and_its_pattern_shows_it():
    torch.manual_seed(8)
    prog = R.loads(SRC)
    s, b = prog["strict_attn"], prog["bare_attn"]
    assert (s.causal, s.strict, b.causal, b.strict) == (True, True, True, False)
    assert "2 heads x 4, strictly causal ~ Normal" in repr(s)
    assert "2 heads x 4, causal)" in repr(b)
    x = torch.randn(2, 5, 8)
    ws, wb = s.pattern(x), b.pattern(x)
    assert bool((torch.diagonal(ws, dim1=-2, dim2=-1) == 0).all())
    assert bool((torch.diagonal(wb, dim1=-2, dim2=-1) > 0).all())
    assert sorted(R.circuits(prog)) == ["bare_attn", "strict_attn"]


def test_the_recorded_patterns_show_the_strict_mask():
    """The run record's patterns (`record_circuits`, design E7) are `Attention.pattern` of
    each layer's input: zero on the diagonal for the strict layer, and its first row 0."""
    from qvr.inference.methods.circuits import record_circuits
    torch.manual_seed(9)
    prog = R.loads(SRC)
    rec = record_circuits(prog.exports["p"], torch.randn(3, 5, 8))
    assert rec.note == ""
    w = torch.as_tensor(rec.patterns["pattern/strict_attn"])
    assert w.shape == (3, 2, 5, 5)
    assert bool((w.triu(0) == 0).all())
    assert torch.allclose(w.sum(-1)[..., 1:], torch.ones(3, 2, 4, dtype=w.dtype), atol=1e-5)
    wb = torch.as_tensor(rec.patterns["pattern/bare_attn"])
    assert bool((wb.triu(1) == 0).all()) and bool((torch.diagonal(wb, dim1=-2, dim2=-1) > 0).all())


def test_an_empty_sequence_and_an_unbatched_one():
    """Shapes the bare `causal` path takes: an empty sequence gives an empty output, a
    single unbatched sequence `(T, dA)` read as positions attends strictly too."""
    torch.manual_seed(7)
    a = make(heads=2, head_dim=3, causal="strict")
    with torch.no_grad():
        assert a.mean(torch.randn(2, 0, 8)).shape == (2, 0, 6)
        x = torch.randn(5, 8)
        m = a.mean(x, _seq=True)
        assert m.shape == (5, 6)
        assert torch.allclose(m.double(), loop(a, x.unsqueeze(0))[0][0], **TOL)
        assert float(m[0].abs().max()) == 0.0  # the first position sees no key
