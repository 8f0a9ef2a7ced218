"""Incremental analysis equals a from-scratch analysis of the final text (hypothesis).

Random edit sequences over the example files (insertions, deletions, replacements of
QVR-ish fragments, line breaks and indentation); after each sequence the incremental
Document's diagnostics and position queries must equal those of a fresh Document.
"""
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvr.analysis import Document, Edit

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.qvr"))
TEXTS = [p.read_text(encoding="utf-8") for p in EXAMPLES]
FRAGMENTS = ["x", "\n", "    ", "(", ")", "[", "]", " >> ", "object Z : FinSet 2\n", "#", "#{",
             "}#", "\"", "let", "sample q <- Normal(0.0, 1.0)\n    ", "Latent", "~ Normal", ",",
             "\n\n", "fan(head)", "1", ".", ":"]


def snapshot(doc: Document):
    diags = [(d.code, d.span.start, d.span.end, d.message) for d in doc.diagnostics()]
    queries = []
    for off in range(0, len(doc.text), max(1, len(doc.text) // 60)):
        t = doc.type_at(off)
        queries.append((off, None if t is None else (t[0], t[2]), doc.definition_at(off)))
    return diags, queries


@st.composite
def edit_scripts(draw):
    text = draw(st.sampled_from(TEXTS))
    edits = []
    length = len(text)
    for _ in range(draw(st.integers(1, 6))):
        a = draw(st.integers(0, length))
        b = draw(st.integers(a, min(length, a + 12)))
        new = draw(st.sampled_from(FRAGMENTS + [""]))
        edits.append(Edit(a, b, new))
        length += len(new) - (b - a)
    return text, edits


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit_scripts())
def test_incremental_equals_from_scratch(script):
    text, edits = script
    doc = Document(text)
    for e in edits:
        doc.apply_edits([e])
    fresh = Document(doc.text)
    assert doc.chunks == fresh.chunks
    assert doc.starts == fresh.starts
    assert snapshot(doc) == snapshot(fresh)


def test_one_character_edit_rechecks_one_declaration():
    text = (Path(__file__).resolve().parent.parent / "examples" / "transformer_lm.qvr").read_text()
    doc = Document(text)
    at = doc.text.index("scale=0.01")
    doc.apply_edits([Edit(at + len("scale=0.0"), at + len("scale=0.01"), "2")])
    # the edited morphism is re-checked; its users see an equal symbol (scale is not a
    # dependency of their types) only if the symbol is unchanged: scale is part of the
    # symbol, so dependents of residual_attn are re-checked too, nothing else.
    assert 1 <= doc.rechecked <= 3
    at = doc.text.index("observe next_token")
    doc.apply_edits([Edit(at, at, "")])  # no-op edit: nothing re-checked
    assert doc.rechecked == 0
