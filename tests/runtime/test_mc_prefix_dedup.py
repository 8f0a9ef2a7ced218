"""Monte-Carlo composite densities with the prefix drawn per distinct finite input
(`qvr.runtime.combinators.chain_log_prob`, decision recorded there; runtime spec 4.1, 9.3)."""
import math

import pytest
import torch

import qvr
from qvr.runtime.combinators import _distinct_inputs, chain_log_prob
from qvr.runtime.morphisms.base import ContinuousMorphism

SRC = """object T : FinSet 5
object Y : Real 2
object H : Real 3
object S : FinSet 3
morphism e : T -> Y [role=embed]
morphism k : Y -> H [role=kernel] ~ Normal
morphism m : H -> Y [role=kernel] ~ Normal
morphism c : Y -> S [role=kernel] ~ Categorical
morphism b : S -> Y [role=kernel] ~ Normal
morphism st : T -> S [role=kernel]
let ekm = e >> k >> m
let ecb = e >> c >> b
let sb = st >> b
export ekm
"""


@pytest.fixture
def prog():
    return qvr.loads(SRC)


def tokens():
    # 12 rows, 4 distinct values, every value repeated
    return torch.tensor([[0, 3, 3, 1], [4, 0, 1, 1], [3, 4, 0, 0]])


def hand_dedup(e, k, m, x, z, n=100, seed=0):
    """The estimator written out: n prefix draws per distinct input under `seed`, the last
    link's Normal density of every row under the draws of its input."""
    uniq, inv = torch.unique(x.reshape(-1), return_inverse=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        ys = k.rsample(e.rsample(uniq, torch.Size([n])))  # (n, U, 3)
    loc, scale = m.params(ys)  # (n, U, 2)
    loc = loc[:, inv].reshape(n, *x.shape, 2)
    scale = scale[:, inv].reshape(n, *x.shape, 2)
    lp = torch.distributions.Normal(loc, scale).log_prob(z).sum(-1)
    return torch.logsumexp(lp, 0) - math.log(n)


def test_dedup_equals_the_hand_computation_and_is_deterministic(prog):
    ekm, x = prog["ekm"], tokens()
    z = torch.randn(*x.shape, 2)
    state = torch.random.get_rng_state()
    l1 = ekm.log_prob(x, z)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG untouched
    assert l1.shape == x.shape
    assert torch.equal(ekm.log_prob(x, z), l1)  # a deterministic function
    ref = hand_dedup(prog["e"], prog["k"], prog["m"], x, z)
    assert torch.allclose(l1, ref, atol=1e-5)
    ekm.mc_seed = 3
    assert torch.allclose(ekm.log_prob(x, z), hand_dedup(prog["e"], prog["k"], prog["m"],
                                                         x, z, seed=3), atol=1e-5)
    assert not torch.allclose(ekm.log_prob(x, z), l1)


def test_rows_with_equal_inputs_and_values_get_equal_estimates(prog):
    ekm, x = prog["ekm"], tokens()
    z = torch.randn(2)[None, None].expand(*x.shape, 2)  # the same value on every row
    lp = ekm.log_prob(x, z).detach()
    for v in x.unique():
        rows = lp[x == v]
        assert torch.equal(rows, rows[:1].expand_as(rows))
    assert len({float(lp[x == v][0]) for v in x.unique()}) == len(x.unique())


def test_without_dedup_the_per_row_layout_of_the_spec(prog):
    ekm, x = prog["ekm"], tokens()
    z = torch.randn(*x.shape, 2)
    ekm.dedup_inputs = False
    with torch.random.fork_rng():
        torch.manual_seed(0)
        ys = prog["k"].rsample(prog["e"].rsample(x, torch.Size([100])))
    ref = torch.logsumexp(prog["m"].log_prob(ys, z), 0) - math.log(100)
    assert torch.allclose(ekm.log_prob(x, z), ref, atol=1e-5)
    assert torch.equal(chain_log_prob(ekm.links(), x, z, dedup=False), ekm.log_prob(x, z))


def test_dedup_is_used_only_where_it_saves_work(prog):
    prefix = prog["ekm"].links()[:-1]
    assert _distinct_inputs(prefix, tokens()) is not None
    assert _distinct_inputs(prefix, torch.tensor([0, 1, 2, 4])) is None  # all distinct
    assert _distinct_inputs(prefix, tokens().float()) is None  # float indices: per row

    class Shift(ContinuousMorphism):  # not known to act row by row
        def rsample(self, x, sample_shape=torch.Size()):
            return x.expand(*sample_shape, *x.shape) + 1.0

        def log_prob(self, x, y):
            return torch.zeros(y.shape[:-1])

    assert _distinct_inputs([prog["e"], Shift(prog["e"].codomain, prog["e"].codomain)], tokens()) is None


def test_gradients_reach_every_parameter(prog):
    ekm, x = prog["ekm"], tokens()
    z = torch.randn(*x.shape, 2)
    ekm.log_prob(x, z).sum().backward()
    for name, p in ekm.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_the_last_link_runs_on_distinct_draws_only(prog, monkeypatch):
    ekm, x = prog["ekm"], tokens()
    seen = []
    m = prog["m"]
    orig = m.params

    def spy(inp):
        seen.append(tuple(inp.shape))
        return orig(inp)

    monkeypatch.setattr(m, "params", spy)
    ekm.log_prob(x, torch.randn(*x.shape, 2))
    assert seen == [(100, 4, 3)]  # n x distinct inputs, not n x 12 rows


def test_vmapped_values_give_what_a_loop_gives(prog):
    ekm, x = prog["ekm"], tokens()
    zs = torch.randn(3, *x.shape, 2)
    mapped = torch.func.vmap(lambda z: ekm.log_prob(x, z), randomness="same")(zs)
    loop = torch.stack([ekm.log_prob(x, z) for z in zs])
    assert torch.allclose(mapped, loop, atol=1e-6)


def test_exact_branch_with_finite_inputs_is_the_enumeration(prog):
    st, b, sb = prog["st"], prog["b"], prog["sb"]
    x = tokens()
    z = torch.randn(*x.shape, 2)
    brute = torch.logsumexp(torch.stack([
        st.log_prob(x, torch.full(x.shape, s)) + b.log_prob(torch.full(x.shape, s), z)
        for s in range(3)]), 0)
    assert torch.allclose(sb.log_prob(x, z), brute, atol=1e-6)


def test_exact_branch_over_a_deduplicated_monte_carlo_prefix(prog):
    e, c, b, ecb = prog["e"], prog["c"], prog["b"], prog["ecb"]
    x = tokens()
    z = torch.randn(*x.shape, 2)
    # exact over S; for every class, the Monte-Carlo prefix `e` is drawn per distinct input
    # of the class-repeated input (the distinct values of x)
    uniq, inv = torch.unique(x.reshape(-1), return_inverse=True)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        ys = e.rsample(uniq, torch.Size([100]))  # (100, U, 2)
    logits = c.params(ys)[0][:, inv].reshape(100, *x.shape, 3)
    lc = torch.log_softmax(logits, -1)  # (100, *x.shape, 3)
    per_class = [torch.logsumexp(lc[..., s], 0) - math.log(100)
                 + b.log_prob(torch.full(x.shape, s), z) for s in range(3)]
    assert torch.allclose(ecb.log_prob(x, z), torch.logsumexp(torch.stack(per_class), 0),
                          atol=1e-5)


def linear_gaussian_kernel(prog, a, bias, s, eps=1e-4):
    """Set `m : H -> Y`'s network (hidden width 64) so that, to ~1e-12 in float64,
    loc = a * h[0] + bias and scale = s on both coordinates (tanh in its linear range)."""
    net = prog["k"].param_source.net  # k : Y -> H, made nearly deterministic: H = (Y, 0)
    m = prog["m"].param_source.net
    with torch.no_grad():
        for mod in (net, m):
            for lay in mod:
                if isinstance(lay, torch.nn.Linear):
                    lay.weight.zero_()
                    lay.bias.zero_()
        # k: loc(h) = y[0] (first coordinate), log-scale tiny: h ~ N((y0, 0, 0), 1e-6)
        net[0].weight[0, 0] = eps
        net[2].weight[0, 0] = 1.0
        net[4].weight[0, 0] = 1.0 / eps
        net[4].bias[3:] = math.log(1e-6)
        # m: loc = a * h0 + bias, log-scale log(s)
        m[0].weight[0, 0] = eps
        m[2].weight[0, 0] = 1.0
        m[4].weight[:2, 0] = a / eps
        m[4].bias[:2] = bias
        m[4].bias[2:] = math.log(s)


def test_estimate_agrees_with_the_gaussian_closed_form_within_monte_carlo_error():
    torch.set_default_dtype(torch.float64)  # restored by the conftest fixture
    prog = qvr.loads(SRC)
    a, bias, s = 0.8, 0.3, 0.6
    linear_gaussian_kernel(prog, a, bias, s)
    e, ekm = prog["e"], prog["ekm"]
    n = 4000
    ekm.n_intermediate = n
    x = torch.tensor([0, 1, 2, 3, 4] * 4).reshape(4, 5)
    z = torch.randn(*x.shape, 2)
    with torch.no_grad():
        c, sig = e.params(x)  # y ~ N(c, sig) per coordinate; h0 = y0 (up to 1e-6 noise)
        mean = a * c[..., 0:1] + bias  # both coordinates of z share h0 = y0
        # z_j = a*y0 + bias + s*eps_j: a 2-D Gaussian with covariance a^2 sig0^2 J + s^2 I
        var0 = (a * sig[..., 0]) ** 2 + 1e-12
        cov = var0[..., None, None] * torch.ones(2, 2) + s ** 2 * torch.eye(2)
        exact = torch.distributions.MultivariateNormal(mean.expand(*x.shape, 2), cov).log_prob(z)
        est = ekm.log_prob(x, z)
        # relative variance of one weight w = N(z; a*y0 + bias, s I): E[w^2]/E[w]^2 - 1, with
        # E[w^2] = (4 pi s^2)^-1 N(z; mean, cov with s^2 -> s^2/2)
        cov_half = var0[..., None, None] * torch.ones(2, 2) + s ** 2 / 2 * torch.eye(2)
        log_w2 = -math.log(4 * math.pi * s ** 2) + torch.distributions.MultivariateNormal(
            mean.expand(*x.shape, 2), cov_half).log_prob(z)
        rel_var = torch.exp(log_w2 - 2 * exact) - 1
        se = torch.sqrt(rel_var / n)  # standard error of the log-estimate (delta method)
    assert torch.all((est - exact).abs() < 5 * se + 1e-6), ((est - exact) / se)
