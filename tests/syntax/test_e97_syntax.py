"""Extension E9.7 (docs/extensions.md): `score v : T = e` and `observe v [: T] = e <- F`
parse to the AST fields `ScoreStep.index` / `ObserveStep.value`, and `qvr fmt` prints them
canonically and idempotently."""
from qvr.syntax import ast as A
from qvr.syntax.format import format_text
from qvr.syntax.parser import parse_module

MESSY = """\
object Person : FinSet 4

program weights : Person -> Person
    data weight : Person
    sample mu <- Normal(0.0, 1.0)
    observe   log_weight:Person=log( weight )<-Normal(mu, 1.0)   # computed
    observe centred = log(weight) - mean(log(weight)) <- Normal(0.0, 1.0)
    score lik:Person =log_density(Normal(mu, 1.0), weight)
    score total = sum(weight)
    return mu
"""

CANONICAL = """\
object Person : FinSet 4

program weights : Person -> Person
    data weight : Person
    sample mu <- Normal(0.0, 1.0)
    observe log_weight : Person = log(weight) <- Normal(mu, 1.0)  # computed
    observe centred = log(weight) - mean(log(weight)) <- Normal(0.0, 1.0)
    score lik : Person = log_density(Normal(mu, 1.0), weight)
    score total = sum(weight)
    return mu
"""


def _steps(text):
    m = parse_module(text)
    prog = [p.decl for _, _, p in m.chunks if isinstance(p.decl, A.ProgramDecl)][0]
    return {s.bind.text: s for s in prog.body if hasattr(s, "bind")}


def test_the_new_fields():
    steps = _steps(CANONICAL)
    lw, centred, lik, total = (steps[n] for n in ("log_weight", "centred", "lik", "total"))
    assert isinstance(lw, A.ObserveStep) and isinstance(lw.value, A.ECall)
    assert lw.value.callee.text == "log" and lw.index.name.text == "Person"
    assert lw.target.name.text == "Normal"
    assert isinstance(centred.value, A.EBinOp) and centred.index is None
    assert isinstance(lik, A.ScoreStep) and lik.index.name.text == "Person"
    assert lik.rhs.callee.text == "log_density"
    assert total.index is None and steps["mu"].__class__ is A.SampleStep
    assert _steps("program p : A -> A\n    observe y <- Normal(0.0, 1.0)\n    return y\n")[
        "y"].value is None


def test_format_is_canonical_and_idempotent():
    out = format_text(MESSY).text
    assert out == CANONICAL
    assert format_text(out).text == out
