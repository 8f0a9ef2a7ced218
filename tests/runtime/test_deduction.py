"""Deduction systems (runtime spec 6.8): charts, goal weights, semirings, `compose`."""
import pytest
import torch

import qvr
from runtime_support import load_example

CFG = """
object W : FinSet 3
deduction G : W -> W [semiring={sr}, start=S]
    atoms S, A, B, span
    rule r1 : span(I, K, A), span(K, J, B) |- span(I, J, S) #[learnable]
    rule r2 : span(I, K, S), span(K, J, B) |- span(I, J, S)
    lexicon
        "a" : A = A #[learnable]
        "b" : B = B
        "b" : A = A
"""


def _cfg(sr="LogProb"):
    return qvr.loads(CFG.format(sr=sr)).deductions["G"]


def test_goal_weight_of_a_tiny_cfg_equals_enumeration():
    g = _cfg()
    chart = g(["a", "b", "b"])
    # lexicon parameter exists from the start; rule parameters appear per binding
    names = [n for n, _ in g.named_parameters()]
    assert names == ["_axiom_module.lex_weight_0", "_rule_module.r1__0", "_rule_module.r1__1"]
    assert sorted(it for it in chart.goal_items) == [
        ("span", 0, 2, ("atom", "S")), ("span", 0, 3, ("atom", "S")), ("span", 1, 3, ("atom", "S"))]
    with torch.no_grad():
        g._axiom_module.lex_weight_0.fill_(0.3)
        g._rule_module.r1__0.fill_(-0.5)
        g._rule_module.r1__1.fill_(0.2)
    chart = g(["a", "b", "b"])
    # which binding got which parameter: r1 over (0,1,2) was derived first
    s02 = 0.3 - 0.5
    s13 = 0.0 + 0.2
    s03 = s02 + 0.0
    expected = torch.logsumexp(torch.tensor([s02, s13, s03]), 0)
    assert torch.allclose(chart.goal_weight(), expected)
    assert torch.allclose(chart.try_weight(("span", 0, 3, ("atom", "S"))), torch.tensor(s03))
    assert chart.try_weight(("span", 0, 1, ("atom", "S"))) == float("-inf")
    with pytest.raises(KeyError):
        chart.weight(("span", 0, 1, ("atom", "S")))
    loss = -chart.goal_weight()
    loss.backward()
    assert g._axiom_module.lex_weight_0.grad is not None


def test_viterbi_takes_the_best_derivation():
    g = _cfg("Viterbi")
    g(["a", "b", "b"])
    with torch.no_grad():
        g._rule_module.r1__0.fill_(-0.5)
        g._rule_module.r1__1.fill_(0.2)
    assert torch.allclose(g(["a", "b", "b"]).goal_weight(), torch.tensor(0.2))


def test_no_parse_gives_the_semiring_zero():
    g = _cfg()
    assert g(["b"]).goal_weight() == float("-inf")
    assert g([]).goal_weight() == float("-inf")


def test_boolean_reachability_on_a_cyclic_rule_graph():
    reach = load_example("ccg_semantics").deductions["Reach"]
    chart = reach(["walk", "bus"])
    items = set(chart.chart)
    assert ("path", ("atom", "home"), ("atom", "shop")) in items
    assert chart.goal_weight() == 0.0  # Boolean "true" in log space


def test_axioms_can_be_given_directly():
    g = _cfg()
    axioms = [(("span", 0, 1, ("atom", "A")), torch.tensor(-1.0)),
              (("span", 1, 2, ("atom", "B")), torch.tensor(-2.0))]
    chart = g(axioms)
    r1 = dict(g._rule_module.named_parameters())
    assert len(r1) == 1
    assert torch.allclose(chart.goal_weight(), torch.tensor(-3.0))


def test_compose_feeds_the_first_systems_goal_items():
    prog = load_example("pcfg_deduction")
    morph, grammar = prog.deductions["Morphology"], prog.deductions["Grammar"]
    toks = ["the", "dog", "s", "saw", "a", "cat"]
    m = morph(toks)
    assert sorted(m.goal_items) == [("span", 1, 2, ("atom", "N")), ("span", 1, 3, ("atom", "N")),
                                    ("span", 5, 6, ("atom", "N"))]
    both = morph.compose(grammar)
    chart = both(toks)
    assert chart.goal_items == [("span", 0, 6, ("atom", "S"))]
    # every weight is 0 at initialisation and there is exactly one derivation
    assert torch.allclose(chart.goal_weight(), torch.tensor(0.0))
    assert grammar(toks).goal_weight() == float("-inf")  # Grammar alone has no nouns
    # the composed system has both systems' parameters; programs do not
    assert len(list(both.parameters())) == len(list(morph.parameters())) + len(
        list(grammar.parameters()))
    assert list(prog.parameters()) == []


def test_depth_bounds_conclusions():
    src = ("object W : FinSet 2\ndeduction D : W -> W [start=T, depth=1]\n"
           "    atoms T, U, f\n    rule grow : T(X) |- T(f(X))\n    lexicon\n"
           "        \"x\" : T(U) = U\n")
    d = qvr.loads(src).deductions["D"]
    chart = d(["x"])
    assert set(chart.chart) == {("T", ("atom", "U"))}
