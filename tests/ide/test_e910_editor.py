"""Editor features for expression arguments, comparisons, `and`/`or`/`not`, `where` and
the indicators (docs/extensions.md E9.10): hover over a family argument expression and the
names in it, definition / references / rename inside it, completion inside it (locals,
builtins, `and`/`or`/`not`), semantic tokens of the new operators and keywords."""
from ide_fixture import at, cursor, mark

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.goto import definition, references
from qvr.ide.hover import hover
from qvr.ide.rename import rename
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.ide.signature import signature_help
from qvr.sema.families import BUILTINS

F = "```qvr\n{}\n```"

SRC = """object Person : FinSet 20
object Coef : FinSet 2
program earnings : Person -> Person
    data height : Person
    data age : Person
    sample beta : Coef <- Normal(0.0, 1.0)
    sample sigma <- HalfNormal(1.0)
    observe earn : Person <- Normal(beta[0] + beta[1] * height * (age == 2), sigma)
    return earn
"""


def h(sig, facts=""):
    return F.format(sig) + (f"\n{facts}" if facts else "")


def test_hover_on_an_operator_of_a_family_argument_shows_the_expression_and_its_axes():
    doc, off = cursor(SRC, "] $0+ beta")
    got = hover(doc, off)
    assert doc.text[got.span.start:got.span.end] == "beta[0] + beta[1] * height * (age == 2)"
    assert got.text == h("beta[0] + beta[1] * height * (age == 2) : Person",
                         "argument `loc` of `Normal` · computed as a `let`")


def test_hover_on_a_name_inside_a_family_argument_shows_the_local():
    doc, off = cursor(SRC, "* hei$0ght")
    got = hover(doc, off)
    assert doc.text[got.span.start:got.span.end] == "height"
    assert got.text == h("height : Person", "data step · line 4")
    doc, off = cursor(SRC, "(ag$0e ==")
    assert hover(doc, off).text == h("age : Person", "data step · line 5")


def test_definition_references_and_rename_inside_a_family_argument():
    doc, off = cursor(SRC, "+ be$0ta[1]")
    (d,) = definition(doc, off)
    assert doc.text[d.start:d.end] == "beta" and doc.text[:d.start].endswith("sample ")
    refs = references(doc, off)
    assert mark(doc.text, refs).count("⟦beta⟧") == 3
    edits = rename(doc, off, "coef")
    out = doc.text
    for e in sorted(edits, key=lambda e: e.span.start, reverse=True):
        out = out[:e.span.start] + e.new_text + out[e.span.end:]
    assert "Normal(coef[0] + coef[1] * height * (age == 2), sigma)" in out
    assert "sample coef : Coef" in out
    assert Document(out).diagnostics() == []


def _labels(src):
    doc, off = at(src)
    return [i.label for i in complete(doc, off).items]


HEAD = SRC.split("    observe")[0]


def test_completion_inside_a_family_argument_offers_locals_builtins_and_boolean_keywords():
    got = _labels(HEAD + "    observe earn : Person <- Normal($0\n    return earn\n")
    assert got == ["age", "beta", "height", "sigma", *sorted(BUILTINS), "and", "factor", "not", "or"]
    assert {"where", "step", "int_step"} <= set(got)
    assert _labels(HEAD + "    observe earn : Person <- Normal(beta[0] + be$0\n    return earn\n") == ["beta"]
    assert _labels(HEAD + "    observe earn : Person <- Normal(whe$0\n    return earn\n") == ["where"]
    # inside a builtin call inside the argument, and inside an index
    assert "height" in _labels(HEAD + "    observe earn : Person <- Normal(where(age > 2, $0\n")
    assert "sigma" in _labels(HEAD + "    observe earn : Person <- Normal(beta[$0\n")
    assert _labels(HEAD + "    let q = age > 2 an$0\n    return q\n") == ["and"]


def test_completion_in_a_morphism_target_still_offers_locals_only():
    src = ("object Vec : Real 4\nmorphism f : Vec -> Vec [role=kernel] ~ Normal\n"
           "program p : Vec -> Vec\n    sample h <- f\n    sample o <- f($0\n    return o\n")
    assert _labels(src) == ["h"]


def test_semantic_tokens_of_comparisons_and_boolean_keywords():
    src = HEAD + "    let q = not age >= 2 and height != 1 or age < 3\n    return q\n"
    doc = Document(src)
    start = src.index("let q")
    toks = [(src[t.start:t.end], t.type) for t in semantic_tokens(doc) if t.start > start]
    assert toks[:13] == [("q", "variable"), ("=", "operator"), ("not", "keyword"), ("age", "variable"),
                         (">=", "operator"), ("2", "number"), ("and", "keyword"),
                         ("height", "variable"), ("!=", "operator"), ("1", "number"),
                         ("or", "keyword"), ("age", "variable"), ("<", "operator")]


def test_signature_help_of_a_builtin_inside_a_family_argument():
    doc, off = at(HEAD + "    observe earn : Person <- Normal(beta[0] + where(height > 0, $0\n")
    sig = signature_help(doc, off)
    assert (sig.label, sig.active) == ("where(c, a, b)", 1)
    doc, off = at(HEAD + "    observe earn : Person <- Normal(where(age > 1, 1.0, 2.0), $0\n")
    sig = signature_help(doc, off)
    assert (sig.label, sig.active) == ("Normal(loc, scale)", 1)


def test_hover_on_where_step_int_step_shows_the_builtin():
    src = HEAD + "    let w = where(age > 1, step(height), int_step(age))\n    return w\n"
    doc, off = cursor(src, "whe$0re")
    assert hover(doc, off).text == h("where(c, a, b)", "builtin · numeric, numeric, numeric -> numeric") + \
        "\n\nelementwise a where c is not 0, else b (Stan's c ? a : b); gradients reach the branch chosen"
    doc, off = cursor(src, "int_st$0ep")
    assert hover(doc, off).text.startswith(F.format("int_step(x)"))
