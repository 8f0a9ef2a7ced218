"""Editor features for the statistics extension (docs/extensions.md E9): completion,
signature help, semantic tokens, symbols, inlay hints, folding and selection of `data` and
`record` steps, the new builtins, `@`, lambdas, `Flat`/`HalfFlat`, truncation bounds and
constrained spaces.

Builtins and families come from the checker's tables (`qvr.sema.families`), which grow
with the language: the expectations below are derived from those tables, and a builtin
added to the table (monkeypatched here) is served at once."""
import pytest
from ide_fixture import at, cursor

from qvr.analysis import Document
from qvr.ide import catalog as C
from qvr.ide.completion import complete
from qvr.ide.folding import folding_ranges
from qvr.ide.inlay import inlay_hints
from qvr.ide.selection import selection_ranges
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.ide.signature import signature_help
from qvr.ide.symbols import document_symbols
from qvr.sema.families import BUILTINS, FAMILIES, Builtin
from qvr.text import Span

HEAD = """\
object Household : FinSet 20
object Coef : FinSet 3
object Width : Real 2
object Means : PositiveOrdered 2
program regression : Household -> Household
    data X : Household * Coef
    sample beta : Coef <- Normal(0.0, 1.0)
    sample sigma <- HalfNormal(1.0)
"""

SRC = """\
object Household : FinSet 20
object Coef : FinSet 3
object Means : PositiveOrdered 2
program regression : Household -> Household
    data X : Household * Coef
    sample beta : Coef <- Flat
    sample means <- HalfFlat [over=Means]
    sample sigma <- StudentT(3.0, 0.0, 1.0) [lower=0.0]
    let mu = X @ beta
    record total = sum(beta, Coef) + log_density(Normal(0.0, 1.0), mu)
    let path = scan(Household, 0.0, (s, t) -> s + mu[t])
    let eta = mu + path
    observe y : Household <- Normal(eta, sigma)
    return y
export regression
"""


def items(src):
    doc, off = at(src)
    return complete(doc, off).items


def labels(src, kinds=None):
    return [i.label for i in items(src) if kinds is None or i.kind in kinds]


def by_label(src):
    return {i.label: i for i in items(src)}


# ---------------------------------------------------------------- completion: steps


def test_data_and_record_are_step_keywords_with_snippets():
    got = {(i.label, i.kind): i for i in items(HEAD + "    $0\n    return beta\n")}
    for word in ("data", "record"):
        assert (word, "keyword") in got and (word, "snippet") in got
    assert got[("data", "snippet")].insert == "data ${1:X} : ${2:Row}"
    assert got[("record", "snippet")].insert == "record ${1:v} = ${0}"
    assert got[("record", "snippet")].snippet
    # statements at the top level are not steps
    assert "data" not in labels(HEAD + "$0")


def test_a_record_step_is_a_let_expression():
    got = labels(HEAD + "    record total = $0")
    assert got[:3] == ["X", "beta", "sigma"]  # the visible locals first, the data step's name included
    assert set(BUILTINS) <= set(got)


def test_locals_bound_by_data_and_record_steps_are_visible():
    src = HEAD + "    record total = sum(beta)\n    let z = $0"
    assert labels(src, kinds=("local",)) == ["X", "beta", "sigma", "total"]
    assert labels(HEAD + "    return $0") == ["X", "beta", "sigma"]


def test_the_type_of_a_data_step_is_an_object():
    assert labels(HEAD + "    data Z : $0") == ["Coef", "Household", "Means", "Width"]
    assert labels(HEAD + "    data Z : Household * C$0") == ["Coef"]


# ------------------------------------------------------------- completion: builtins


def test_every_builtin_of_the_table_with_its_signature_and_doc():
    got = by_label(HEAD + "    let z = $0")
    for name, b in BUILTINS.items():
        item = got[name]
        assert (item.kind, item.detail, item.doc) == ("builtin", f"{b.signature} · {b.kinds}", b.doc)
        assert item.snippet and item.insert.startswith(name + "(")
        # one placeholder per required parameter (a lambda gets one per parameter and body)
        required = [p for p, optional in C.builtin_params(b) if not optional]
        holes = sum(len(C.lambda_params(b, i)) + 1 if C.lambda_params(b, i) is not None else 1
                    for i in range(len(required)))
        assert item.insert.count("${") == holes, (name, item.insert)


@pytest.mark.parametrize("name, snippet", [
    ("sum", "sum(${1:x})"),  # the optional axis is left out
    ("slice", "slice(${1:x}, ${2:start})"),
    ("fold", "fold(${1:O}, ${2:init}, (${3:s}, ${4:t}) -> ${5:body})"),
    ("scan", "scan(${1:O}, ${2:init}, (${3:s}, ${4:t}) -> ${5:body})"),
    ("log_density", "log_density(${1:F}, ${2:x})"),
    ("eye", "eye(${1:O})"),
])
def test_builtin_snippets(name, snippet):
    assert by_label(HEAD + "    let z = $0")[name].insert == snippet


def test_a_builtin_added_to_the_table_is_offered(monkeypatch):
    monkeypatch.setitem(BUILTINS, "zeta_e9", Builtin("zeta_e9", ("x",), "numeric, object? -> numeric",
                                                     "a builtin that only this test knows", ("axis",)))
    item = by_label(HEAD + "    let z = zeta$0")["zeta_e9"]
    assert (item.insert, item.detail) == ("zeta_e9(${1:x})", "zeta_e9(x, axis?) · numeric, object? -> numeric")
    assert labels(HEAD + "    let z = zeta_e9(beta, $0") == ["Coef", "Household"]
    sig = signature_help(*at(HEAD + "    let z = zeta_e9(beta, $0"))
    assert render(sig) == "zeta_e9(x, ⟦axis?⟧)"


def _object_params():
    for name, b in BUILTINS.items():
        for i in range(len(C.builtin_params(b))):
            if C.is_object_param(b, i):
                yield name, i


@pytest.mark.parametrize("name, index", list(_object_params()))
def test_object_arguments_offer_objects(name, index):
    """Every object parameter of the table (`sum(x, O)`, `fold(O, …)`, `eye(O)`, …)."""
    args = ", ".join(["beta"] * index)
    got = labels(HEAD + f"    let z = {name}({args}{', ' if index else ''}$0")
    finite = ["Coef", "Household"]  # discrete objects only: not the Real `Width`, nor `Means`
    if C.is_only_object_param(BUILTINS[name], index):
        assert got == finite
    else:  # max(a, b), min(a, b): an object or a value
        assert got[:2] == finite and {"beta", "sigma"} <= set(got)


def test_object_argument_cases_named_in_the_design():
    assert labels(HEAD + "    let z = sum(beta, $0") == ["Coef", "Household"]
    for call in ("fold(", "scan(", "eye("):
        assert labels(HEAD + f"    let z = {call}$0") == ["Coef", "Household"]
    # the other arguments are values
    got = labels(HEAD + "    let z = fold(Household, $0")
    assert got[:3] == ["X", "beta", "sigma"] and "Coef" not in got
    # inside a nested call and on a continuation line
    assert labels(HEAD + "    let z = exp(sum(beta,\n        $0") == ["Coef", "Household"]
    assert labels(HEAD + "    let z = max(beta, $0")[:2] == ["Coef", "Household"]


def test_log_density_takes_a_family_call():
    got = {i.label: i for i in items(HEAD + "    let z = log_density($0")}
    assert got["Normal"].insert == "Normal(${1:loc}, ${2:scale})"
    from qvr.sema import runnable  # E9.9: the families the runtime builds there
    assert {f for f in FAMILIES if FAMILIES[f].step != "no" and not FAMILIES[f].improper
            and runnable.step_supported(f) and f not in runnable.SPACE_FAMILIES} == set(got)
    assert {"MultivariateNormal", "MultivariateNormalCov", "LowRankMVN"} <= set(got)
    assert "Wishart" not in got and "LKJCholesky" not in got
    assert "Flat" not in got and "HalfFlat" not in got
    # the second argument is a value
    assert labels(HEAD + "    let z = log_density(Normal(0.0, 1.0), $0")[:3] == ["X", "beta", "sigma"]


def test_lambda_parameters_inside_the_lambda_body():
    src = HEAD + "    let z = scan(Household, 0.0, (s, t) -> s + $0"
    assert labels(src, kinds=("local",)) == ["X", "beta", "s", "sigma", "t"]
    assert by_label(src)["s"].detail == "lambda parameter"
    # inside a call in the body, and on the next line
    assert "t" in labels(HEAD + "    let z = fold(Household, 0.0, (s, t) -> exp(s) + beta[$0")
    assert "t" in labels(HEAD + "    let z = fold(Household, 0.0, (s, t) ->\n        s + $0")
    # not after the lambda, nor in the next step
    assert "s" not in labels(HEAD + "    let z = scan(Household, 0.0, (s, t) -> s) + $0")
    assert "s" not in labels(HEAD + "    let z = scan(Household, 0.0, (s, t) -> s)\n    let w = $0")


def test_list_literals_and_indices_are_let_expressions():
    got = labels(HEAD + "    let z = [beta, $0")
    assert got[:3] == ["X", "beta", "sigma"] and "over" not in got and "lower" not in got
    assert labels(HEAD + "    let z = X[$0")[:3] == ["X", "beta", "sigma"]


# ------------------------------------------------------- completion: families, options


def test_flat_and_half_flat_are_families_without_parentheses():
    got = {i.label: i for i in items(HEAD + "    sample w <- $0")}
    for name in ("Flat", "HalfFlat"):
        assert name in FAMILIES and FAMILIES[name].params == ()
        assert (got[name].kind, got[name].insert, got[name].snippet) == ("family", "", False)
    assert got["Normal"].insert == "Normal(${1:loc}, ${2:scale})"
    # improper priors are sample targets only (QVR426 elsewhere)
    for step in ("observe y : Household", "marginalize z"):
        got = labels(HEAD + f"    {step} <- $0")
        assert "Normal" in got and "Flat" not in got and "HalfFlat" not in got
    assert labels(HEAD + "    sample w <- Fl$0") == ["Flat", "HalfFlat"]
    # not kernels either
    assert "Flat" not in labels("object A : Real 2\nmorphism f : A -> A [role=kernel] ~ $0")


def test_lower_and_upper_inside_sample_and_observe_options():
    assert labels(HEAD + "    sample w <- Normal(0.0, 1.0) [$0") == ["iid_over", "lower", "over", "upper"]
    assert labels(HEAD + "    observe y : Household <- Normal(0.0, 1.0) [$0") == ["lower", "upper", "via"]
    got = by_label(HEAD + "    sample w <- Normal(0.0, 1.0) [lower=0.0, $0")
    assert "lower" not in got and got["upper"].insert == "upper="
    assert got["upper"].doc == C.OPTION_DOCS["sample step"]["upper"]
    # a bound is a number, a local or host data
    assert labels(HEAD + "    sample w <- Normal(0.0, 1.0) [lower=$0") == ["X", "beta", "sigma"]
    # not on marginalize steps or morphisms
    assert "lower" not in labels(HEAD + "    marginalize z <- Categorical(beta) [$0")
    assert "lower" not in labels("object A : Real 2\nmorphism f : A -> A [role=kernel, $0")


def test_spaces_after_object_colon():
    got = {i.label: i for i in items("object Coef : FinSet 3\nobject Mu : $0")}
    assert [label for label in got] == ["Coef", "FinSet", "FinSet N", "Real", "Real N",
                                        *sorted(C.SPACES)]  # E9.13: sizes from the data
    assert set(C.SPACES) == {"Ordered", "PositiveOrdered", "Simplex", "CholeskyFactor",
                             "CorrCholesky"}  # E9.9
    assert got["Simplex"].insert == "Simplex ${1:2}" and got["Simplex"].snippet
    assert got["CholeskyFactor"].doc == "Cholesky factors of n×n correlation matrices"
    # only objects have spaces: not a morphism signature or a step annotation
    assert "Simplex" not in labels("object Coef : FinSet 3\nmorphism f : $0")
    assert "Simplex" not in labels(HEAD + "    sample w : $0")


def test_over_offers_constrained_spaces_on_sample_steps():
    assert labels(HEAD + "    sample m <- HalfFlat [over=$0") == ["Coef", "Household", "Means"]
    assert labels(HEAD + "    marginalize z <- Categorical(beta) [over=$0") == ["Coef", "Household"]


# ------------------------------------------------------------------- signature help


def render(sig):
    a, b = sig.params[sig.active]
    return sig.label[:a] + "⟦" + sig.label[a:b] + "⟧" + sig.label[b:]


@pytest.mark.parametrize("src, expected", [
    ("    let z = sum($0", "sum(⟦x⟧, axis?)"),
    ("    record z = sum(beta, $0", "sum(x, ⟦axis?⟧)"),
    ("    let z = slice(beta, 1, $0", "slice(x, start, ⟦stop?⟧)"),
    ("    let z = fold($0", "fold(⟦O⟧, init, (s, t) -> body)"),
    ("    let z = fold(Household, 0.0, $0", "fold(O, init, ⟦(s, t) -> body⟧)"),
    ("    let z = scan(Household, 0.0, (s, t) -> s + beta[$0", "scan(O, init, ⟦(s, t) -> body⟧)"),
    ("    let z = scan(Household, 0.0, (s, t) -> s + exp($0", "exp(⟦x⟧)"),
    ("    let z = scan(Household,\n        0.0,\n        $0", "scan(O, init, ⟦(s, t) -> body⟧)"),
    ("    score z = log_density($0", "log_density(⟦F⟧, x)"),
    ("    score z = log_density(Normal(0.0, $0", "Normal(loc, ⟦scale⟧)"),
    ("    let z = X @ cholesky($0", "cholesky(⟦A⟧)"),
])
def test_signature_help(src, expected):
    assert render(signature_help(*at(HEAD + src))) == expected


def test_signature_help_is_the_table_for_every_builtin():
    for name, b in BUILTINS.items():
        sig = signature_help(*at(HEAD + f"    let z = {name}($0"))
        shown = [sig.label[x:y] for x, y in sig.params]
        expected = [f"({', '.join(C.lambda_params(b, i))}) -> body" if C.lambda_params(b, i) is not None else p
                    for i, (p, _o) in enumerate(C.builtin_params(b))]
        assert shown == expected, name
        assert sig.doc == f"builtin · {b.kinds} — {b.doc}"
        assert sig.active == 0
    # an optional parameter is shown as the table shows it
    assert C.builtin_params(BUILTINS["sum"]) == [("x", False), ("axis?", True)]


def test_ode_signature_has_its_lambda_first():
    sig = signature_help(*at(HEAD + "    let z = ode($0"))
    assert sig.label.startswith("ode((y, t) -> body, y0, times")
    assert sig.label[slice(*sig.params[0])] == "(y, t) -> body"


# ------------------------------------------------------------------ semantic tokens


def tokens(src):
    doc = Document(src)
    return [(doc.text[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)]


def test_semantic_tokens_of_the_new_steps():
    toks = tokens(SRC)
    assert ("data", "keyword", ()) in toks and ("record", "keyword", ()) in toks
    assert ("X", "variable", ("declaration", "readonly")) in toks  # declared host data
    assert ("X", "variable", ("readonly",)) in toks
    assert ("total", "variable", ("declaration",)) in toks
    assert ("@", "operator", ()) in toks and ("->", "operator", ()) in toks
    for name in ("sum", "log_density", "scan"):
        assert (name, "function", ("defaultLibrary",)) in toks
    assert ("s", "parameter", ("declaration",)) in toks and ("t", "parameter", ()) in toks
    assert ("Flat", "class", ("defaultLibrary",)) in toks and ("HalfFlat", "class", ("defaultLibrary",)) in toks
    assert ("lower", "property", ()) in toks
    assert ("PositiveOrdered", "keyword", ()) in toks


def test_data_and_record_are_keywords_only_at_a_step_start():
    src = HEAD + "    let data = beta\n    let record = data + 1.0\n    return record\n"
    toks = tokens(src)
    assert ("data", "keyword", ()) in toks  # the step `data X : …`
    assert toks.count(("data", "keyword", ())) == 1
    assert ("record", "keyword", ()) not in toks
    assert ("data", "variable", ("declaration",)) in toks and ("record", "variable", ()) in toks


def test_data_and_record_keywords_in_a_program_that_does_not_parse():
    src = HEAD + "    record total = sum(beta,\n    data Z : Coef\n"
    doc = Document(src)
    assert any(d.code.startswith("QVR0") for d in doc.diagnostics())
    toks = [(doc.text[t.start:t.end], t.type) for t in semantic_tokens(doc)]
    assert toks.count(("data", "keyword")) == 2 and ("record", "keyword") in toks


# ------------------------------------------------- symbols, inlay, folding, selection


def local_types(doc) -> dict:
    """name -> the type the checker gives a program local (what outline and hints show)."""
    [slot] = [s for s in doc.state.slots if s.parsed.keyword == "program"]
    return {f.data.name: f.data.type_text for f in slot.result.facts if f.kind == "local"}


def test_document_symbols_list_data_and_record_steps_like_lets():
    doc = Document(SRC)
    [program] = [s for s in document_symbols(doc) if s.name == "regression"]
    children = [(c.name, c.kind) for c in program.children]
    assert children == [("X", "variable"), ("beta", "variable"), ("means", "variable"), ("sigma", "variable"),
                        ("mu", "variable"), ("total", "variable"), ("path", "variable"), ("eta", "variable"),
                        ("y", "variable")]
    types = local_types(doc)
    assert [c.detail for c in program.children] == [types[c.name] for c in program.children]
    details = {c.name: c.detail for c in program.children}
    assert (details["X"], details["total"], details["beta"]) == ("Household * Coef", "Household", "[Coef] Real")
    objects = {s.name: s.detail for s in document_symbols(doc) if s.kind == "class"}
    assert objects == {"Household": "FinSet 20", "Coef": "FinSet 3", "Means": "PositiveOrdered 2"}
    data = program.children[0]
    assert doc.text[data.span.start:data.span.end] == "data X : Household * Coef"
    assert doc.text[data.selection.start:data.selection.end] == "X"


def test_document_symbol_of_a_data_step_the_checker_has_no_type_for():
    # an unknown object: the checker gives no type, the outline shows the declared one
    doc = Document(HEAD.replace("data X : Household * Coef", "data X : Household * Nowhere") + "    return X\n")
    [program] = [s for s in document_symbols(doc) if s.name == "regression"]
    assert program.children[0].detail in ("Household * Nowhere", "Household * ?")


def test_inlay_hints_of_record_steps_like_let_steps():
    doc = Document(SRC)
    text = doc.text
    for h in sorted(inlay_hints(doc, Span(0, len(text))), key=lambda h: -h.offset):
        text = text[:h.offset] + "⟨" + h.label + "⟩" + text[h.offset:]
    hinted = [line.strip() for line in text.splitlines() if "⟨" in line]
    types = local_types(doc)
    assert hinted == [
        "sample means⟨: Means⟩ <- HalfFlat [over=Means]",
        "sample sigma⟨: Real⟩ <- StudentT(3.0, 0.0, 1.0) [lower=0.0]",
        "let mu⟨: Household⟩ = X @ beta",
        "record total⟨: Household⟩ = sum(beta, Coef) + log_density(Normal(0.0, 1.0), mu)",
        f"let path⟨: {types['path']}⟩ = scan(Household, 0.0, (s, t) -> s + mu[t])",
        f"let eta⟨: {types['eta']}⟩ = mu + path",
    ]  # the data step and the annotated samples spell their types out: no hint


def test_folding_covers_a_program_with_the_new_steps_and_a_multiline_let_expression():
    src = SRC.replace("    let path = scan(Household, 0.0, (s, t) -> s + mu[t])",
                      "    let path = scan(Household, 0.0,\n        (s, t) -> s + mu[t])")
    doc = Document(src)
    folds = {(doc.position(f.start).line, doc.position(f.end).line) for f in folding_ranges(doc)}
    program = src[:src.index("program")].count("\n")
    end = src[:src.index("    return y")].count("\n")
    assert (program, end) in folds


def test_selection_grows_from_a_lambda_parameter_to_the_step():
    doc, off = cursor(SRC, "(s, t) -> $0s + mu[t]")
    chain = [doc.text[s.start:s.end] for s in selection_ranges(doc, off)]
    assert chain[0] == "s"
    assert "s + mu[t]" in chain
    assert "(s, t) -> s + mu[t]" in chain
    assert "scan(Household, 0.0, (s, t) -> s + mu[t])" in chain
    assert "let path = scan(Household, 0.0, (s, t) -> s + mu[t])" in chain
    doc, off = cursor(SRC, "X $0@ beta")
    chain = [doc.text[s.start:s.end] for s in selection_ranges(doc, off)]
    assert chain[:3] == ["@", "X @ beta", "let mu = X @ beta"]
    doc, off = cursor(SRC, "data X : House$0hold")
    chain = [doc.text[s.start:s.end] for s in selection_ranges(doc, off)]
    assert chain[:3] == ["Household", "Household * Coef", "data X : Household * Coef"]


# ------------------------------------------------------------- outside the core


def test_section_15_constructs_nobody_implements_are_still_qvr900():
    src = """\
object K : FinSet 3
object Ball3 : Sphere 3
program p : K -> K
    sample a : K <- Normal(0.0, 1.0)
    let m = map(a, x -> x + 1.0)
    let f = filter(a, x -> x)
    return m
"""
    doc = Document(src)
    got = [(d.code, src[d.span.start:d.span.end]) for d in doc.diagnostics() if d.code == "QVR900"]
    assert ("QVR900", "Sphere") in got
    assert ("QVR900", "map") in got and ("QVR900", "filter") in got
    assert "map" not in BUILTINS and "filter" not in BUILTINS
    # the editors still do not offer them
    assert "map" not in labels(HEAD + "    let z = ma$0")
    assert "Sphere" not in labels("object Mu : Sph$0")
