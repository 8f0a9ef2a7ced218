"""The front-end facts the editor features rely on (and the small front-end changes made
for them): chunk-relative related spans, factor binder bindings, and the ide layer's
imports."""
import subprocess
import sys
from pathlib import Path

from qvr.analysis import Document, Edit
from qvr.text import Span

ROOT = Path(__file__).resolve().parents[2]


def test_duplicate_declaration_related_span_points_at_the_first_declaration():
    doc = Document("object A : FinSet 2\nobject B : FinSet 2\nobject A : FinSet 3\n")
    (d,) = doc.diagnostics()
    assert d.code == "QVR104" and d.span == Span(47, 48)
    assert [(r.span, r.message) for r in d.related] == [(Span(7, 8), "`A` is first declared here")]
    # after an edit that moves the duplicate (but not the first declaration)
    doc.apply_edits([Edit(20, 20, "object C : FinSet 2\n")])
    (d,) = doc.diagnostics()
    assert doc.text[d.span.start:d.span.end] == "A" and d.related[0].span == Span(7, 8)
    # and one that moves both
    doc.apply_edits([Edit(0, 0, "\n\n")])
    (d,) = doc.diagnostics()
    assert d.related[0].span == Span(9, 10) and doc.text[9:10] == "A"


def test_duplicate_replica_member_related_span():
    doc = Document("object A : Real 2\nmorphism head : A -> A [role=kernel, replicate=2] ~ Normal\n"
                   "morphism head_1 : A -> A [role=kernel] ~ Normal\n")
    (d,) = [d for d in doc.diagnostics() if d.code == "QVR104"]
    assert doc.text[d.related[0].span.start:d.related[0].span.end] == "head"
    assert d.related[0].span.start == doc.text.index("head")


def test_factor_binder_uses_record_their_binding_and_index_type():
    text = ("object Band : FinSet 4\nprogram p : Band -> Band\n    sample mu <- Normal(0.0, 1.0)\n"
            "    let t = factor b : Band in b * mu\n    return t\n")
    doc = Document(text)
    use = text.index("in b") + 3
    kinds = {f.kind: (s, f.data) for s, f in doc.facts_at(use)}
    binder = text.index("factor b") + 7
    assert kinds["localref"][1].shift(doc.starts[doc.chunk_at(use)]) == Span(binder, binder + 1)
    (info,) = [f.data for _, f in doc.facts_at(binder) if f.kind == "local"]
    assert info.type_text == "index over Band"


def test_ide_layer_imports_no_lsp_torch_or_tui():
    code = ("import sys\n"
            "from qvr.ide import (catalog, code_actions, completion, entities, exprtype, folding, goto, hover,"
            " inlay, rename, selection, semantic_tokens, signature, symbols, token_legend)\n"
            "print(','.join(m for m in ('pygls', 'lsprotocol', 'torch', 'textual') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


from hypothesis import given, settings, strategies as st  # noqa: E402

from qvr.text import LineIndex  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\n", max_size=30), st.data())
def test_edited_line_index_equals_a_fresh_one(text, data):
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    new = data.draw(st.text(alphabet="xy\n", max_size=8))
    after = text[:start] + new + text[end:]
    edited = LineIndex(text).edited(start, end, new)
    fresh = LineIndex(after)
    assert (edited.starts, edited.length) == (fresh.starts, fresh.length)


def test_document_keeps_its_line_index_through_edits():
    doc = Document("object A : FinSet 2\nobject B : FinSet 2\n")
    doc.position(5)  # build the index
    doc.apply_edits([Edit(0, 0, "\n\n"), Edit(10, 25, "x\ny"), Edit(3, 3, "")])
    assert doc.line_index.starts == LineIndex(doc.text).starts
