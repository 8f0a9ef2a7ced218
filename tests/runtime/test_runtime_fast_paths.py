"""The lean evaluation paths of the runtime give exactly the values of the plain ones:
functional MLPs, 2-D draws through chains of row-wise Normal kernels, the lazily started
log joint, the shift of `_log_mean_exp` (runtime spec 4.1, 5.5, 9.3)."""
import math

import torch

import qvr
from qvr.runtime.combinators import _log_mean_exp, chain_rsample, common_random_numbers

SRC = """object T : FinSet 5
object Y : Real 2
object H : Real 4
morphism e : T -> Y [role=embed]
morphism head : Y -> H [role=kernel, replicate=3] ~ Normal
morphism k : Real 12 -> Y [role=kernel] ~ LogitNormal
morphism m : Y -> H [role=kernel] ~ Normal
let chain = e >> fan(head) >> k >> m
export chain
"""


def _prog():
    torch.manual_seed(0)
    return qvr.loads(SRC)


def test_mlp_source_equals_its_sequential_network():
    m = _prog()["m"]
    for shape in [(7, 2), (3, 5, 2), (2, 3, 4, 2)]:
        x = torch.randn(shape)
        assert torch.equal(m.param_source(x), m.param_source.net(x))
    x = torch.randn(4, 2, 6)[..., ::3]  # non-contiguous: the per-layer path
    assert torch.equal(m.param_source(x), m.param_source.net(x))


def test_normal_params_equal_slices():
    m = _prog()["m"]
    raw = torch.randn(5, 8)
    loc, scale = m.fam.params(raw)
    assert torch.equal(loc, raw[..., :4])
    assert torch.equal(scale, torch.exp(raw[..., 4:]).clamp(min=1e-7))


def _draw_per_link(links, x, shape):
    y = links[0].rsample(x, shape)
    for link in links[1:]:
        y = link.rsample(y)
    return y


def test_chain_draws_on_rows_equal_link_by_link_draws():
    links = _prog()["chain"].links()
    x = torch.tensor([[0, 3], [4, 4], [1, 2]])
    for shape in [torch.Size([]), torch.Size([6])]:
        with common_random_numbers(5):
            flat = chain_rsample(links, x, shape)
        with common_random_numbers(5):
            plain = _draw_per_link(links, x, shape)
        assert flat.shape == (*shape, 3, 2, 4)
        assert torch.equal(flat, plain)


def test_chain_log_prob_gradients_match_link_by_link():
    prog = _prog()
    chain = prog["chain"]
    x, z = torch.tensor([[0], [3]]), torch.randn(2, 1, 4)
    lp = chain.log_prob(x, z).sum()
    g = torch.autograd.grad(lp, list(chain.parameters()))
    links = chain.links()
    with common_random_numbers(chain.mc_seed):
        ys = _draw_per_link(links[:-1], x, torch.Size([chain.n_intermediate]))
    ref = _log_mean_exp(links[-1].log_prob(ys, z)).sum()
    g_ref = torch.autograd.grad(ref, list(chain.parameters()))
    assert torch.equal(lp, ref)
    assert all(torch.equal(a, b) for a, b in zip(g, g_ref))


def test_log_mean_exp_shift_handles_non_finite_rows():
    lp = torch.tensor([[0., -math.inf, math.nan, 1e30, -1e30],
                       [1., -math.inf, 0., 0., -1e30],
                       [2., -math.inf, 1., 1., 5.]])
    out = _log_mean_exp(lp)
    ref = torch.logsumexp(lp, 0) - math.log(3)
    assert torch.allclose(out[[0, 4]], ref[[0, 4]])
    assert out[1] == -math.inf and math.isnan(out[2])
    assert torch.isclose(out[3], torch.tensor(1e30))


def test_log_joint_with_a_spread_share_is_a_tensor_of_its_own():
    prog = qvr.loads("""object O : FinSet 3
program p : O -> O
    sample mu <- Normal(0.0, 1.0)
    observe y : O <- Normal(mu, 1.0)
    return y
export p
""").morphism
    x = torch.zeros(4, 1)
    ex = prog.execute(x, {"mu": torch.tensor(0.5), "y": torch.zeros(4)}, score=True)
    lj = ex.log_joint
    assert lj.shape == (4,) and lj.stride(0) == 1  # not an expanded view
    ref = torch.distributions.Normal(0., 1.).log_prob(torch.tensor(0.5)) / 4 + \
        torch.distributions.Normal(0.5, 1.).log_prob(torch.zeros(4))
    assert torch.allclose(lj, ref)
    assert prog.execute(x, {}, score=False).log_joint is None


def test_frame_total_starts_at_zeros():
    from qvr.runtime.frame import Frame
    prog = qvr.loads("""object O : FinSet 3
program p : O -> O
    observe y : O <- Normal(0.0, 1.0)
    return y
export p
""").morphism
    for reduce, shape in ((False, (3,)), (True, ())):
        f = Frame(prog, torch.zeros(3, 1, dtype=torch.long), {}, score=True,
                  require_all=False, record=False, reduce=reduce)
        assert torch.equal(f.total, torch.zeros(shape))
        f.add(torch.ones(3))
        f.add(torch.ones(3))
        assert torch.equal(f.total, torch.full(shape, 2.0 if not reduce else 6.0))


def test_the_chain_facts_memo_does_not_keep_models_alive():
    import gc
    import weakref

    from qvr.runtime.combinators import _chain_facts
    prog = _prog()
    links = prog["chain"].links()
    assert _chain_facts(links) == (True, True)
    assert _chain_facts(links) == (True, True)  # from the memo
    alive = weakref.ref(links[-1])
    del prog, links
    gc.collect()
    assert alive() is None
