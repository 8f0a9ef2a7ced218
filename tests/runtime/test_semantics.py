"""Semantics of compiled morphisms and combinators against closed forms (runtime spec 3-4)."""
import math

import pytest
import torch

import qvr
from qvr.runtime.combinators import Scan, chain_log_prob
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.morphisms.finite import power
from qvr.runtime.algebras import get_algebra
from qvr.runtime.objects import Euclidean, FinSet, product

HEADER = "object X : Real 3\nobject Y : Real 2\nobject T : FinSet 5\n"


def load(body):
    return qvr.loads(HEADER + body)


def test_normal_kernel_log_density_matches_the_closed_form():
    prog = load("morphism k : X -> Y [role=kernel, hidden_dim=7] ~ Normal\nexport k\n")
    k = prog.morphism
    net = k.param_source.net
    assert [tuple(net[i].weight.shape) for i in (0, 2, 4)] == [(7, 3), (7, 7), (4, 7)]
    with torch.no_grad():
        for i in (0, 2, 4):
            net[i].weight.copy_(torch.linspace(-1, 1, net[i].weight.numel()).reshape(
                net[i].weight.shape))
            net[i].bias.copy_(torch.linspace(-0.5, 0.5, net[i].bias.numel()))
    x = torch.tensor([[0.1, -0.2, 0.3], [1.0, 2.0, -1.0]])
    y = torch.tensor([[0.5, -0.5], [0.0, 1.0]])
    h = torch.tanh(x @ net[0].weight.T + net[0].bias)
    h = torch.tanh(h @ net[2].weight.T + net[2].bias)
    raw = h @ net[4].weight.T + net[4].bias
    loc, sigma = raw[:, :2], torch.exp(raw[:, 2:])
    expected = (-0.5 * ((y - loc) / sigma) ** 2 - torch.log(sigma)
                - 0.5 * math.log(2 * math.pi)).sum(-1)
    assert torch.allclose(k.log_prob(x, y), expected, atol=1e-6)
    torch.manual_seed(5)
    draw = k.rsample(x)
    torch.manual_seed(5)
    assert torch.allclose(draw, loc + sigma * torch.randn(2, 2), atol=1e-6)


def test_scale_option_sets_the_initial_output_scale():
    prog = load("morphism k : X -> Y [role=kernel, scale=0.25] ~ Normal\n"
                "morphism t : T -> Y [role=kernel, scale=0.5] ~ Normal\n"
                "morphism c : X -> Y [role=kernel, scale=2.0] ~ Cauchy\n"
                "morphism d : X -> Y [role=kernel] ~ Normal\nexport k\n")
    x = torch.randn(6, 3)
    _, sigma = prog["k"].params(x)
    assert torch.allclose(sigma, torch.full((6, 2), 0.25))
    _, sigma = prog["t"].params(torch.arange(5))
    assert torch.allclose(sigma, torch.full((5, 2), 0.5))
    _, scale = prog["c"].params(x)
    assert torch.allclose(scale, torch.full((6, 2), 2.0), atol=1e-6)
    # without the option the raw-scale bias is PyTorch's default, not a fixed value
    assert not torch.allclose(prog["d"].params(x)[1], torch.full((6, 2), 0.25))


def test_fan_output_is_the_concatenation_of_the_heads_in_order():
    prog = load("object H : Real 2\nmorphism q : X -> H [role=kernel, replicate=3] ~ Normal\n"
                "let f = fan(q)\nlet g = fan(q_2, q_0)\nexport f\n")
    f, g = prog["f"], prog["g"]
    assert [p.label for p in f.parts] == ["q_0", "q_1", "q_2"]
    assert f.batched  # replicated Normal heads are evaluated together
    x = torch.randn(4, 3)
    # batched: one draw of the noise for all heads, head i in columns 2i:2i+2
    torch.manual_seed(1)
    y = f.rsample(x)
    torch.manual_seed(1)
    eps = torch.randn(4, 3, 2)
    params = [prog[f"q_{i}"].params(x) for i in range(3)]
    expected = torch.cat([loc + sc * eps[:, i] for i, (loc, sc) in enumerate(params)], -1)
    assert y.shape == (4, 6)
    assert torch.allclose(y, expected, atol=1e-6)
    lp = f.log_prob(x, y)
    assert torch.allclose(lp, sum(prog[f"q_{i}"].log_prob(x, y[:, 2 * i:2 * i + 2])
                                  for i in range(3)), atol=1e-5)
    # part by part: each head draws in turn
    f.batched = False
    torch.manual_seed(1)
    y = f.rsample(x)
    torch.manual_seed(1)
    assert torch.equal(y, torch.cat([prog[f"q_{i}"].rsample(x) for i in range(3)], -1))
    assert torch.allclose(f.log_prob(x, y), sum(prog[f"q_{i}"].log_prob(x, y[:, 2 * i:2 * i + 2])
                                                for i in range(3)))
    f.batched = True
    torch.manual_seed(2)
    z = g.rsample(x)
    torch.manual_seed(2)
    eps = torch.randn(4, 2, 2)
    (l2, s2), (l0, s0) = prog["q_2"].params(x), prog["q_0"].params(x)
    assert torch.allclose(z, torch.cat([l2 + s2 * eps[:, 0], l0 + s0 * eps[:, 1]], -1), atol=1e-6)


def test_fan_of_a_discrete_and_a_continuous_head():
    prog = load("morphism c : X -> T [role=kernel] ~ Categorical\n"
                "morphism n : X -> Y [role=kernel] ~ Normal\nlet f = fan(c, n)\nexport f\n")
    f = prog["f"]
    x = torch.randn(5, 3)
    y = f.rsample(x)
    assert y.shape == (5, 3) and y.dtype == torch.float32
    assert torch.equal(y[:, 0], y[:, 0].round()) and (y[:, 0] >= 0).all() and (y[:, 0] < 5).all()
    expected = prog["c"].log_prob(x, y[:, 0].long()) + prog["n"].log_prob(x, y[:, 1:])
    assert torch.allclose(f.log_prob(x, y), expected)


def test_stack_has_n_times_the_parameters_and_repeat_ties_them():
    prog = load("morphism f : X -> X [role=kernel] ~ Normal\n"
                "let s = stack(f, 2)\nlet s1 = stack(f, 1)\nlet r = repeat(f, 3)\nexport s\n")
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    f, s, s1, r = prog["f"], prog["s"], prog["s1"], prog["r"]
    assert n(s) == 2 * n(f) and n(s1) == n(f) and n(r) == n(f)
    assert all(p is q for p, q in zip(r.parameters(), f.parameters()))
    assert not any(p is q for p in s.parameters() for q in f.parameters())
    assert s1 is not f and len(s.links()) == 2 and r.links() == [f, f, f]
    # copies start with the values f had at that moment
    for (_, p), (_, q) in zip(s.links()[0].named_parameters(), f.named_parameters()):
        assert torch.equal(p, q)


class _Adder(ContinuousMorphism):
    """A deterministic cell `(x, h) -> h + x` that counts its calls."""

    def __init__(self, w):
        super().__init__(product([Euclidean("I", w), Euclidean("H", w)]), Euclidean("H", w))
        self.calls = 0
        self.w = w

    def rsample(self, x, sample_shape=torch.Size()):
        self.calls += 1
        return x[..., :self.w] + x[..., self.w:]

    def log_prob(self, x, y):
        return torch.zeros(y.shape[:-1])


@pytest.mark.parametrize("T", [1, 3, 7])
def test_scan_applies_the_cell_once_per_position(T):
    cell = _Adder(2)
    scan = Scan(cell)
    x = torch.randn(4, T, 2)
    h = scan.rsample(x)
    assert cell.calls == T
    assert torch.allclose(h, x.sum(1), atol=1e-6)
    assert torch.equal(scan.log_prob(x, h), torch.zeros(4))


def test_scan_of_a_compiled_cell_runs_left_to_right():
    prog = load("object M : Real 2\nmorphism c : X * M -> M [role=kernel] ~ Normal\n"
                "let s = scan(c)\nexport s\n")
    s, c = prog["s"], prog["c"]
    x = torch.randn(3, 4, 3)
    torch.manual_seed(7)
    h = s.rsample(x)
    torch.manual_seed(7)
    ref = torch.zeros(3, 2)
    for t in range(4):
        ref = c.rsample(torch.cat([x[:, t], ref], -1))
    assert torch.equal(h, ref)
    assert s.rsample(torch.randn(3, 3)).shape == (3, 2)  # 2-D input: one step
    hs = torch.randn(3, 4, 2)
    lj = s.log_joint(x, {"h": hs})
    prev = torch.zeros(3, 2)
    ref = torch.zeros(3)
    for t in range(4):
        ref = ref + c.log_prob(torch.cat([x[:, t], prev], -1), hs[:, t])
        prev = hs[:, t]
    assert torch.allclose(lj, ref)


def test_categorical_head_probabilities_sum_to_one():
    prog = load("morphism c : X -> T [role=kernel] ~ Categorical\n"
                "morphism d : T -> T [role=kernel] ~ Categorical\nexport c\n")
    x = torch.randn(10, 3)
    logits = prog["c"].params(x)[0]
    lp = torch.stack([prog["c"].log_prob(x, torch.full((10,), k)) for k in range(5)], -1)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(10), atol=1e-6)
    assert torch.allclose(lp, torch.log_softmax(logits, -1))
    assert prog["c"].rsample(x).dtype == torch.int64
    lp = torch.stack([prog["d"].log_prob(torch.arange(5), torch.full((5,), k)) for k in range(5)], -1)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(5), atol=1e-6)


def test_exact_composite_density_equals_enumeration():
    prog = load("morphism a : X -> T [role=kernel] ~ Categorical\n"
                "morphism b : T -> Y [role=kernel] ~ Normal\nlet ab = a >> b\nexport ab\n")
    a, b, ab = prog["a"], prog["b"], prog["ab"]
    x, z = torch.randn(4, 3), torch.randn(4, 2)
    brute = torch.logsumexp(torch.stack([
        a.log_prob(x, torch.full((4,), k)) + b.log_prob(torch.full((4,), k), z)
        for k in range(5)]), 0)
    assert torch.allclose(ab.log_prob(x, z), brute, atol=1e-6)


def test_monte_carlo_composite_density_is_deterministic_and_leaves_the_rng_alone():
    prog = load("morphism a : X -> Y [role=kernel] ~ Normal\n"
                "morphism b : Y -> Y [role=kernel] ~ Normal\nlet ab = a >> b\nexport ab\n")
    ab = prog["ab"]
    x, z = torch.randn(4, 3), torch.randn(4, 2)
    state = torch.random.get_rng_state()
    l1 = ab.log_prob(x, z)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(ab.log_prob(x, z), l1)
    # the estimator: 100 draws of the prefix under seed 0
    with torch.random.fork_rng():
        torch.manual_seed(0)
        ys = prog["a"].rsample(x, torch.Size([100]))
    ref = torch.logsumexp(prog["b"].log_prob(ys, z), 0) - math.log(100)
    assert torch.allclose(l1, ref, atol=1e-6)
    ab.mc_seed = 1
    assert not torch.allclose(ab.log_prob(x, z), l1)


def test_composite_density_re_associates_the_chain():
    prog = load("morphism a : X -> Y [role=kernel] ~ Normal\n"
                "morphism b : Y -> Y [role=kernel] ~ Normal\n"
                "morphism c : Y -> Y [role=kernel] ~ Normal\n"
                "let left = (a >> b) >> c\nlet right = a >> (b >> c)\nexport left\n")
    x, z = torch.randn(3, 3), torch.randn(3, 2)
    assert torch.equal(prog["left"].log_prob(x, z), prog["right"].log_prob(x, z))
    assert torch.equal(prog["left"].log_prob(x, z),
                       chain_log_prob([prog["a"], prog["b"], prog["c"]], x, z))


def test_embed_parameters_and_density():
    prog = qvr.loads("object T : FinSet 4\nobject E : Real 3\nobject U : Real 1 [low=0.0, high=3.0]\n"
                     "morphism e : T -> E [role=embed]\nmorphism u : T -> U [role=embed]\nexport e\n")
    e, u = prog["e"], prog["u"]
    assert e.centers.shape == (4, 3) and torch.equal(e.log_sigma, torch.zeros(4, 3))
    assert torch.allclose(u.centers.squeeze(-1), torch.tensor([0.0, 1.0, 2.0, 3.0]))
    x = torch.tensor([[0, 3], [1, 1]])
    y = e.rsample(x)
    assert y.shape == (2, 2, 3)
    expected = torch.distributions.Normal(e.centers[x], 1.0).log_prob(y).sum(-1)
    assert torch.allclose(e.log_prob(x, y), expected, atol=1e-6)


def test_discretize_soft_assignment():
    prog = qvr.loads("object H : Real 1 [low=0.0, high=1.0]\nobject B : FinSet 5\n"
                     "morphism d : H -> B [role=discretize, bins=5]\nexport d\n")
    d = prog.morphism
    x = torch.tensor([[0.0], [0.3], [1.0]])
    c = torch.linspace(0, 1, 5)
    p = torch.softmax(-(x - c) ** 2 / 0.1, -1)
    for k in range(5):
        assert torch.allclose(d.log_prob(x, torch.full((3,), k)), torch.log(p[:, k]), atol=1e-6)
    y = d.rsample(x)
    assert y.shape == (3,) and y.dtype == torch.int64


ALGEBRA_SRC = ("composition {rule} as algebra\nobject A : FinSet 3\nobject B : FinSet 4\n"
               "morphism f : A -> B [role=latent]\nmorphism g : B -> A [role=latent, scale=1.0]\n"
               "morphism h : A -> A [role=latent]\n"
               "let fg = f >> g\nlet t = f @ g\nlet d = f.dagger\nlet i = identity(A) >> h\n"
               "let r = repeat(h)\nexport fg\n")


@pytest.mark.parametrize("rule", ["product_fuzzy", "real", "log_prob"])
def test_finite_algebras(rule):
    prog = qvr.loads(ALGEBRA_SRC.format(rule=rule))
    F, G, H = prog["f"].tensor, prog["g"].tensor, prog["h"].tensor
    assert torch.allclose(F, torch.sigmoid(prog["f"].raw))
    if rule == "product_fuzzy":
        expected = 1 - torch.prod(1 - (F[:, :, None] * G[None]).clamp(1e-7, 1 - 1e-7), dim=1)
        outer = torch.einsum("ab,cd->acbd", F, G)
    elif rule == "real":
        expected = F @ G
        outer = torch.einsum("ab,cd->acbd", F, G)
    else:
        expected = torch.logsumexp(F[:, :, None] + G[None], dim=1)
        outer = F[:, None, :, None] + G[None, :, None, :]
    assert torch.allclose(prog["fg"].tensor, expected, atol=1e-6)
    assert prog["t"].tensor.shape == (3, 4, 4, 3)
    assert torch.allclose(prog["t"].tensor, outer, atol=1e-6)
    assert torch.equal(prog["d"].tensor, F.T)
    assert torch.allclose(prog["i"].tensor, H, atol=1e-6)  # identity is the unit
    for k in range(1, 9):
        prog["r"].n_steps = k
        assert torch.allclose(prog["r"].tensor, _binary_power(rule, H, k), atol=1e-6)


def _binary_power(rule, base, k):
    alg = get_algebra(rule)
    result = None
    while k > 0:  # the association order of runtime spec 4.6, written out again
        if k % 2:
            result = base if result is None else alg.compose(result, base)
        base = alg.compose(base, base)
        k //= 2
    return result


def test_repeat_runtime_count_differs_from_naive_left_fold_under_noisy_or():
    alg = get_algebra("product_fuzzy")
    t = torch.rand(4, 4)
    left = t
    for _ in range(2):
        left = alg.compose(left, t)
    # power(3) = compose(t, compose(t, t)) by binary exponentiation
    assert torch.allclose(power(alg, t, 3), alg.compose(t, alg.compose(t, t)))


def test_lookup_table_kernel_is_row_stochastic_markov():
    prog = qvr.loads("object S : FinSet 4\nmorphism k : S -> S [role=kernel]\n"
                     "let k3 = repeat(k, 3)\nexport k3\n")
    k = prog["k"]
    assert k.algebra.name == "markov" and k.logits.shape == (4, 4)
    assert torch.allclose(k.tensor.sum(-1), torch.ones(4))
    assert torch.allclose(prog["k3"].tensor, k.tensor @ k.tensor @ k.tensor, atol=1e-6)
    x = torch.tensor([0, 1, 2, 3])
    y = torch.tensor([1, 1, 0, 3])
    assert torch.allclose(k.log_prob(x, y), torch.log(k.tensor[x, y]))


def test_finite_morphism_as_a_stochastic_map_under_log_prob():
    prog = qvr.loads("composition log_prob as algebra\nobject A : FinSet 3\n"
                     "morphism o : A -> A [role=observed] ~ identity(A)\nexport o\n")
    o = prog.morphism
    x = torch.tensor([0, 2, 1, 1])
    assert torch.equal(o.rsample(x), x)  # the identity's rows are point masses
    assert torch.equal(o.log_prob(x, x), torch.zeros(4))
    assert torch.equal(o.log_prob(x, (x + 1) % 3), torch.full((4,), float("-inf")))


def test_tensor_product_of_continuous_morphisms_splits_the_row():
    prog = qvr.loads("object I : Real 4\nobject Z : Real 2\nobject D : FinSet 3\n"
                     "morphism a : I -> Z [role=kernel] ~ Normal\n"
                     "morphism e : D -> Z [role=embed]\nlet t = a @ e\nexport t\n")
    t, a, e = prog["t"], prog["a"], prog["e"]
    x = torch.cat([torch.randn(5, 4), torch.tensor([[0.], [2.], [1.], [1.], [0.]])], -1)
    y = t.rsample(x)
    assert y.shape == (5, 4)
    expected = a.log_prob(x[:, :4], y[:, :2]) + e.log_prob(x[:, 4].long(), y[:, 2:])
    assert torch.allclose(t.log_prob(x, y), expected)


def test_categorical_draws_follow_the_probabilities():
    prog = load("morphism c : X -> T [role=kernel] ~ Categorical\nexport c\n")
    c = prog.morphism
    x = torch.randn(1, 3).expand(20000, 3)
    probs = torch.softmax(c.params(x[:1])[0][0], -1)
    freq = torch.bincount(c.rsample(x), minlength=5).float() / 20000
    # 5 standard errors of a frequency near p: sqrt(p(1-p)/n) <= 0.0036
    assert torch.allclose(freq, probs, atol=0.018)


def test_replicated_let_and_observed_morphisms():
    prog = qvr.loads("object A : FinSet 3\nobject V : Real 2\n"
                     "morphism f : V -> V [role=kernel] ~ Normal\n"
                     "morphism g : V -> V [role=let, replicate=2] ~ f >> f\n"
                     "morphism o : A -> A [role=observed, replicate=2] ~ identity(A)\n"
                     "let h = fan(g)\nexport h\n")
    f, g0, g1 = prog["f"], prog["g_0"], prog["g_1"]
    # each replica of a `let` is an independent deep copy (spec 3.1)
    ids = lambda m: {id(p) for p in m.parameters()}  # noqa: E731
    assert ids(g0).isdisjoint(ids(f)) and ids(g0).isdisjoint(ids(g1))
    assert len(ids(g0)) == len(ids(f))  # the tie inside `f >> f` survives the copy
    assert prog["g"] == [g0, g1] and [p is q for p, q in zip(prog["h"].parts, (g0, g1))] == [True] * 2
    o0, o1 = prog["o_0"], prog["o_1"]
    assert torch.equal(o0.tensor, torch.eye(3)) and torch.equal(o1.tensor, torch.eye(3))
    assert o0.value.data_ptr() != o1.value.data_ptr()


def test_let_binds_the_same_object():
    prog = qvr.loads("object V : Real 2\nmorphism f : V -> V [role=kernel] ~ Normal\n"
                     "let a = f\nlet b = a\nmorphism c : V -> V [role=let] ~ b\nexport c\n")
    assert prog["a"] is prog["f"] and prog["b"] is prog["f"] and prog["c"] is prog["f"]
    assert prog.morphism is prog["f"] and prog["f"].label == "f"


def test_exact_marginal_after_a_monte_carlo_prefix():
    prog = load("morphism a : X -> Y [role=kernel] ~ Normal\n"
                "morphism c : Y -> T [role=kernel] ~ Categorical\n"
                "morphism b : T -> Y [role=kernel] ~ Normal\nlet abc = a >> c >> b\nexport abc\n")
    a, c, b, abc = prog["a"], prog["c"], prog["b"], prog["abc"]
    x, z = torch.randn(4, 3), torch.randn(4, 2)
    # exact over T, Monte-Carlo (100 draws, seed 0) over Y for every class
    with torch.random.fork_rng():
        torch.manual_seed(0)
        ys = a.rsample(x.unsqueeze(0).expand(5, 4, 3), torch.Size([100]))
    per_class = []
    for k in range(5):
        kk = torch.full((100, 4), k)
        lp_c = torch.logsumexp(c.log_prob(ys[:, k], kk), 0) - math.log(100)
        per_class.append(lp_c + b.log_prob(torch.full((4,), k), z))
    assert torch.allclose(abc.log_prob(x, z), torch.logsumexp(torch.stack(per_class), 0),
                          atol=1e-5)


def test_products_of_finite_sets():
    prog = qvr.loads("object A : FinSet 2\nobject B : FinSet 3\nobject C : FinSet 4\n"
                     "object AB : A * B\nobject V : Real 2\n"
                     "morphism w : AB -> C [role=latent]\n"
                     "morphism k : A * B -> V [role=kernel] ~ Normal\n"
                     "morphism c : V -> A * B [role=kernel] ~ Categorical\n"
                     "morphism s : C -> AB [role=kernel]\nexport w\n")
    w, k, c, s = prog["w"], prog["k"], prog["c"], prog["s"]
    assert w.raw.shape == (2, 3, 4) and w.tensor.shape == (2, 3, 4) and w.matrix.shape == (6, 4)
    assert s.tensor.shape == (4, 2, 3)
    # a kernel on a product of finite sets: one index column per factor, a table of 6 rows
    assert k.param_source.table.shape == (6, 4)
    x = torch.tensor([[0, 2], [1, 0]])
    loc, _ = k.params(x)
    assert torch.equal(loc, k.param_source.table[torch.tensor([2, 3]), :2])
    # a Categorical over a product draws the row-major flat index (spec 3.3)
    y = c.rsample(torch.randn(5, 2))
    assert y.shape == (5,) and int(y.max()) < 6
    # a finite morphism draws one index column per factor of a product codomain
    z = s.rsample(torch.tensor([0, 3, 1]))
    assert z.shape == (3, 2) and (z[:, 0] < 2).all() and (z[:, 1] < 3).all()
    assert torch.allclose(s.log_prob(torch.tensor([0, 3, 1]), z),
                          torch.log(s.matrix[torch.tensor([0, 3, 1]), z[:, 0] * 3 + z[:, 1]]))
