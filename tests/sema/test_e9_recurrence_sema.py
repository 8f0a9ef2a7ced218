"""E9.3 in the front end: `fold`/`scan` (QVR424) and `ode` (QVR425) in let-expressions:
parsing of `scan(`, lambda scoping, diagnostics (code, source text, exact message) and the
hover of the lambda parameters (docs/e9/recurrence.md)."""
import pytest

from qvr.analysis import Document
from qvr.ide.hover import hover
from qvr.syntax import ast as A
from qvr.syntax.parser import parse_module

HEAD = """\
object Time : FinSet 10
object State : FinSet 2
object Latent : Real 3

"""


def prog(*lines: str) -> str:
    body = "\n".join("    " + ln for ln in lines)
    return HEAD + f"program p : Time -> Time\n    sample rho <- Normal(0.0, 1.0)\n{body}\n" \
                  "    observe y : Time <- Normal(rho, 1.0)\n    return y\n"


def diags(src: str):
    doc = Document(src)
    return [(d.code, doc.text[d.span.start:d.span.end], d.message) for d in doc.diagnostics()]


def hover_at(src: str, needle: str, offset: int = 0) -> str:
    doc = Document(src)
    h = hover(doc, src.index(needle) + offset)
    return h.text if h is not None else None


# ---------------------------------------------------------------- parsing

def test_scan_parses_as_a_call_in_let_expressions():
    text = "program p : Time -> Time\n    let v = scan(Time, 0.0, (s, t) -> s + w[t - 1])\n    return v\n"
    mod = parse_module(text)
    assert not mod.diagnostics
    step = mod.decls[0].body[0]
    assert isinstance(step.rhs, A.ECall) and step.rhs.callee.text == "scan"
    lam = step.rhs.args[2]
    assert isinstance(lam, A.ELambda) and [p.text for p in lam.params] == ["s", "t"]


# ---------------------------------------------------------------- checking

def test_recurrences_and_odes_check_clean():
    src = prog("let path = scan(Time, x0, (s, t) -> rho * s + w[t - 1])",
               "let last = fold(Time, 0.0, (s, t) -> s + path[t] * t)",
               "let sol = ode((u, t) -> -rho * u * t, 1.0, times, 1e-8, 1e-8)",
               "let sol2 = ode((u, t) -> -u, 1.0, times)",
               "score extra = last + sol2[0] + sol[0]")
    assert diags(src) == []


def test_lambda_parameters_are_visible_in_the_body_only():
    src = prog("let last = fold(Time, 0.0, (s, t) -> s + w[t])", "score extra = last + s")
    # `s` after the fold is host data (no binding is visible there), as after a factor
    doc = Document(src)
    i = src.index("last + s") + len("last + ")
    assert doc.definition_at(i) is None
    j = src.index("s + w[t]")
    assert doc.definition_at(j) == doc.definition_at(src.index("(s, t)") + 1)
    assert diags(src) == []


def test_a_lambda_parameter_shadows_a_local():
    src = prog("let s = 2.0", "let last = fold(Time, s, (s, t) -> s * rho)", "score extra = last")
    doc = Document(src)
    use = src.index("s * rho")
    param = src.index("(s, t)") + 1
    assert doc.definition_at(use).start == param
    assert diags(src) == []


def test_scan_values_are_range_checked_over_o():
    src = prog("let path = scan(Time, 0.0, (s, t) -> rho * s)", "score extra = path[10]")
    assert diags(src) == [("QVR415", "10", "index 10 is out of range for an axis of size 10")]


@pytest.mark.parametrize("line, expected", [
    ("let v = scan(Latent, 0.0, (s, t) -> s)",
     ("QVR424", "Latent", "the first argument of `scan` must be a discrete object (the index set "
                          "of the recurrence), got `Latent` (Real 3)")),
    ("let v = fold(rho, 0.0, (s, t) -> s)",
     ("QVR424", "rho", "the first argument of `fold` must be a discrete object (the index set of "
                       "the recurrence), got the value `rho`")),
    ("let v = fold(3, 0.0, (s, t) -> s)",
     ("QVR424", "3", "the first argument of `fold` must be a discrete object (the index set of "
                     "the recurrence), got a number")),
    ("let v = fold(Time, 0.0, rho)",
     ("QVR424", "rho", "the third argument of `fold` must be a lambda `(s, t) -> body`")),
    ("let v = scan(Time, 0.0, s -> s)",
     ("QVR424", "s -> s", "the lambda of `scan` takes 2 parameters (the state and the index), got 1")),
    ("let v = scan(Time, 0.0, (s, t, u) -> s)",
     ("QVR424", "(s, t, u) -> s",
      "the lambda of `scan` takes 2 parameters (the state and the index), got 3")),
    ("let v = scan(Time, (s, t) -> s, (s, t) -> s)",
     ("QVR424", "(s, t) -> s", "a lambda cannot be the second argument of `scan`; only its third "
                              "argument is a lambda")),
    ("let v = scan(Time, 0.0, (s, s) -> s)",
     ("QVR424", "s", "the parameters of the lambda of `scan` must be distinct: `s` is repeated")),
    ("let v = ode(rho, 1.0, times)",
     ("QVR425", "rho", "the first argument of `ode` must be a lambda `(y, t) -> dydt`")),
    ("let v = ode(u -> u, 1.0, times)",
     ("QVR425", "u -> u", "the lambda of `ode` takes 2 parameters (the state and the time), got 1")),
    ("let v = ode((u, t) -> u, 1.0, 2.0)",
     ("QVR425", "2.0", "the times of `ode` must be a vector (a data vector or a list literal), "
                       "got a number")),
    ("let v = ode((u, t) -> u, 1.0, times, -1.0)",
     ("QVR425", "-1.0", "`rtol` of `ode` must be a positive number literal")),
    ("let v = ode((u, t) -> u, 1.0, times, 1e-6, rho)",
     ("QVR425", "rho", "`atol` of `ode` must be a positive number literal")),
    ("let v = ode((u, t) -> u, 1.0)",
     ("QVR425", "ode", "`ode` expects 3 to 6 arguments (f, y0, t0?, times, rtol?, atol?), got 2")),
    ("let v = ode((u, t) -> u, 1.0, (u, t) -> u)",
     ("QVR425", "(u, t) -> u", "a lambda cannot be the third argument of `ode`; only its first "
                              "argument is a lambda")),
    ("let v = ode((u, u) -> u, 1.0, times)",
     ("QVR425", "u", "the parameters of the lambda of `ode` must be distinct: `u` is repeated")),
    ("let v = fold(Time, 0.0)",
     ("QVR416", "fold", "`fold` expects 3 arguments, got 2")),
    ("let v = map(u -> u, xs)",
     ("QVR900", "map", "the builtin `map` is outside the supported core")),
])
def test_diagnostics(line, expected):
    got = diags(prog(line, "score extra = v"))
    assert got[0] == expected, got
    if expected[0] != "QVR900":
        assert len(got) == 1, got


def test_a_lambda_outside_fold_scan_ode_stays_outside_the_core():
    got = diags(prog("let v = exp(u -> u)", "score extra = v"))
    assert ("QVR900", "u -> u", "lambda arguments are outside the supported core") in got


def test_the_body_must_be_numeric():
    src = HEAD + "deduction D : Time -> Time\n    atoms A\n    rule r : A |- A\n\n" + \
        prog("let v = fold(Time, 0.0, (s, t) -> D)", "score extra = v")
    got = [g for g in diags(src) if g[0] == "QVR420"]
    assert got == [("QVR420", "D", "the body of the lambda of `fold` needs numeric operands, "
                                   "got a deduction")]


# ---------------------------------------------------------------- hover

def test_hover_of_the_state_and_the_index():
    src = prog("let path = scan(Time, 0.0, (s, t) -> rho * s + w[t - 1])", "score extra = path[0]")
    line = 7
    assert hover_at(src, "(s, t)", 1) == f"```qvr\ns : numeric\n```\nstate of `scan` over Time · line {line}"
    assert hover_at(src, "rho * s", 6) == f"```qvr\ns : numeric\n```\nstate of `scan` over Time · line {line}"
    assert hover_at(src, "(s, t)", 4) == f"```qvr\nt : index over Time\n```\nindex of `scan` · line {line}"
    assert hover_at(src, "[t - 1]", 1) == f"```qvr\nt : index over Time\n```\nindex of `scan` · line {line}"
    assert hover_at(src, "let path", 4) == f"```qvr\npath : Time\n```\nlet step · line {line}"


def test_hover_of_a_vector_state_shows_its_axes():
    src = prog("let e0 = factor k : State in rho * k",
               "let last = fold(Time, e0, (a, t) -> a * rho)", "score extra = last[0]")
    assert hover_at(src, "(a, t)", 1) == "```qvr\na : State\n```\nstate of `fold` over Time · line 8"
    assert hover_at(src, "let last", 4) == "```qvr\nlast : State\n```\nlet step · line 8"


def test_hover_of_the_ode_parameters():
    src = prog("let sol = ode((u, t) -> -rho * u, 1.0, times)", "score extra = sol[0]")
    assert hover_at(src, "(u, t)", 1) == "```qvr\nu : numeric\n```\nstate of `ode` · line 7"
    assert hover_at(src, "(u, t)", 4) == "```qvr\nt : Real\n```\ntime of `ode` · line 7"


def test_hover_of_the_builtins():
    src = prog("let path = scan(Time, 0.0, (s, t) -> rho * s)", "score extra = path[0]")
    assert hover_at(src, "scan(") == (
        "```qvr\nscan(O, init, f)\n```\nbuiltin · object, numeric, lambda (s, t) -> numeric\n\n"
        "every state of the recurrence s[0] = init, s[t] = f(s[t-1], t), stacked along O")
