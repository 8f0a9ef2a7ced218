"""Editor features for ranges in indices, list literals reduced over an object,
`append_row`/`append_col` and `ode` from t0 (docs/extensions.md E9.11): completion inside
index brackets, signature help (the t0 form of `ode` once a fourth argument that is not a
number is written), semantic tokens and hover."""
from ide_fixture import at

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.ide.signature import signature_help

SRC = """\
object Row : FinSet 4
object Coef : FinSet 3
object Comp : FinSet 2
program p : Row -> Row
    data X : Row * Coef
    data times : Row
    sample zz <- Normal(0.0, 1.0)
    let a = LINE
    return zz
"""


def src(line: str) -> str:
    return SRC.replace("LINE", line)


def labels(line: str) -> list:
    doc, off = at(src(line))
    return [i.label for i in complete(doc, off).items]


def test_completion_inside_an_index_offers_values_and_builtins():
    for line in ("X[1:$0]", "X[:, $0]", "X[$0:2, 0]"):
        got = labels(line)
        assert {"X", "zz", "times", "append_row", "append_col"} <= set(got), line


def test_signature_help_for_append_row():
    doc, off = at(src("append_row(X, $0)"))
    s = signature_help(doc, off)
    assert (s.label, s.active) == ("append_row(a, b)", 1)
    assert s.doc == ("builtin · numeric, numeric -> numeric — a and b joined along their first "
                     "axis (Stan's append_row; a scalar is one entry)")


def test_signature_help_shows_the_t0_form_of_ode_once_its_fourth_argument_is_not_a_number():
    old = "ode((y, t) -> body, y0, times, rtol?, atol?)"
    new = "ode((y, t) -> body, y0, t0, times, rtol?, atol?)"
    for line, label, active in [("ode((u, t) -> u, 1.0, $0)", old, 2),
                                ("ode((u, t) -> u, 1.0, times, 1e-6$0)", old, 3),
                                ("ode((u, t) -> u, 1.0, 0.0, tim$0)", new, 3),
                                ("ode((u, t) -> u, 1.0, 0.0, [1.0, 2.0], 1e-6$0)", new, 4)]:
        doc, off = at(src(line))
        s = signature_help(doc, off)
        assert (s.label, s.active) == (label, active), line


def test_semantic_tokens_and_hover_of_the_new_builtins():
    text = src("logsumexp([append_row(zz, X[0, :]), X[:, 0]], Comp)")
    doc = Document(text)
    assert [(d.code, d.message) for d in doc.diagnostics() if d.code != "QVR713"] == []
    toks = [(text[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)]
    assert ("append_row", "function", ("defaultLibrary",)) in toks
    assert ("Comp", "type", ()) in [(n, ty, ()) for n, ty, _m in toks]
    off = text.index("let a") + 4
    assert hover(doc, off).text == "```qvr\na : FinSet 4\n```\nlet step · line 8"
    off = text.index("append_row") + 2
    assert hover(doc, off).text.startswith("```qvr\nappend_row(a, b)\n```\nbuiltin · ")


def test_let_annotations_complete_objects_and_take_no_inlay_hint():
    from qvr.ide.inlay import inlay_hints
    from qvr.text import Span
    doc, off = at(SRC.replace("    let a = LINE", "    let lps : $0"))
    assert [i.label for i in complete(doc, off).items] == ["Coef", "Comp", "Row"]
    text = src("[zz, zz]").replace("let a = ", "let a : Comp = ")
    doc = Document(text)
    assert [(d.code, d.message) for d in doc.diagnostics() if d.code != "QVR713"] == []
    hints = [text[:h.offset].count("\n") for h in inlay_hints(doc, Span(0, len(text)))]
    assert 7 not in hints  # the `let` on line 8 writes its type
    assert hover(doc, text.index("let a") + 4).text == "```qvr\na : Comp\n```\nlet step · line 8"
