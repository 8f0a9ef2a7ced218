"""Signature help for families, builtins, combinators and morphism targets."""
import pytest
from ide_fixture import at

from qvr.ide.signature import signature_help

PROG = "object K : Real 2\nobject M : Real 3\nmorphism f : K * M -> K [role=kernel] ~ Normal\n"


def render(sig):
    """The label with the active parameter in ⟦…⟧."""
    a, b = sig.params[sig.active]
    return sig.label[:a] + "⟦" + sig.label[a:b] + "⟧" + sig.label[b:]


@pytest.mark.parametrize("src,expected", [
    (PROG + "program p : K -> K\n    sample a <- Normal($0", "Normal(⟦loc⟧, scale)"),
    (PROG + "program p : K -> K\n    sample a <- Normal(0.0, $0", "Normal(loc, ⟦scale⟧)"),
    (PROG + "program p : K -> K\n    sample a <- TruncatedNormal(a, 1.0, $0", "TruncatedNormal(mu, sigma, ⟦low⟧, high)"),
    (PROG + "object T : FinSet 2\nmorphism w : T -> T [role=latent] ~ Normal(0.0, $0", "Normal(loc, ⟦scale⟧)"),
    (PROG + "program p : K -> K\n    sample a <- Normal(0.0, 1.0)\n    let b = exp($0", "exp(⟦x⟧)"),
    (PROG + "program p : K -> K\n    let c = parse(D, $0", "parse(d, ⟦input⟧)"),
    (PROG + "morphism g : K -> K [role=kernel] ~ Normal\nlet h = stack(g, $0", "stack(f, ⟦n⟧)"),
    (PROG + "morphism g : K -> K [role=kernel] ~ Normal\nlet h = repeat($0", "repeat(⟦f⟧, n)"),
    (PROG + "let h = scan($0", "scan(⟦f⟧)"),
    (PROG + "morphism g : K -> K [role=kernel] ~ Normal\nlet h = fan(g, g, $0", "fan(⟦e1⟧, …, en)"),
    (PROG + "program p(a, b) : K * M -> K\n    sample x <- f(a, $0", "f(K, ⟦M⟧)"),
    (PROG + "program t(lo : Real, hi : Real) : K -> K\n    sample x <- Uniform(lo, hi)\n    return x\n"
     "program q : K -> K\n    sample y <- t(0.0, $0", "t(lo : Real, ⟦hi : Real⟧)"),
])
def test_signature(src, expected):
    doc, off = at(src)
    assert render(signature_help(doc, off)) == expected


def test_nested_calls_use_the_innermost_and_documentation_is_given():
    doc, off = at(PROG + "program p : K -> K\n    sample a <- Normal(0.0, 1.0)\n    let b = exp(log(a$0")
    sig = signature_help(doc, off)
    assert render(sig) == "log(⟦x⟧)"
    assert sig.doc == "builtin · numeric -> numeric — elementwise natural logarithm"


@pytest.mark.parametrize("src", [PROG + "$0", PROG + "let h = (f$0", "# Normal($0"])
def test_no_signature_outside_calls(src):
    doc, off = at(src)
    assert signature_help(doc, off) is None
