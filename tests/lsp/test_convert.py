"""Unit tests of `qvr_lsp.convert`: positions in UTF-16, UTF-8 and UTF-32 (non-BMP
characters included), clamping, edits, diagnostics and semantic-token encoding."""
import pytest
from hypothesis import given, settings, strategies as st
from lsprotocol import types as T

from qvr.analysis import Document
from qvr.diagnostics import Related, TextEdit, error, warning
from qvr.text import Span
from qvr_lsp import convert as C

TEXT = "# é😋x\nobject A : FinSet 2 # 𝄞 ok\n\"😋\" : N = dog\n"
U16, U8, U32 = C.codec(C.UTF16), C.codec(C.UTF8), C.codec(C.UTF32)


def P(line, ch):
    return T.Position(line=line, character=ch)


@pytest.mark.parametrize("offset,u16,u8,u32", [
    (0, P(0, 0), P(0, 0), P(0, 0)),
    (2, P(0, 2), P(0, 2), P(0, 2)),        # before é
    (3, P(0, 3), P(0, 4), P(0, 3)),        # after é (2 UTF-8 bytes)
    (4, P(0, 5), P(0, 8), P(0, 4)),        # after 😋 (2 UTF-16 units, 4 UTF-8 bytes)
    (5, P(0, 6), P(0, 9), P(0, 5)),        # after x: end of line
    (6, P(1, 0), P(1, 0), P(1, 0)),        # next line
    (TEXT.index("ok"), P(1, 25), P(1, 27), P(1, 24)),   # after 𝄞 (non-BMP musical symbol)
    (TEXT.index(": N"), P(2, 5), P(2, 7), P(2, 4)),
    (len(TEXT), P(3, 0), P(3, 0), P(3, 0)),
])
def test_offsets_to_positions_and_back(offset, u16, u8, u32):
    doc = Document(TEXT)
    for pc, pos in ((U16, u16), (U8, u8), (U32, u32)):
        assert C.to_lsp_position(doc, offset, pc) == pos
        assert C.from_lsp_position(doc, pos, pc) == offset


def test_positions_inside_a_surrogate_pair_or_past_the_line_end_are_clamped():
    doc = Document(TEXT)
    assert C.from_lsp_position(doc, P(0, 4), U16) == 4  # middle of 😋 -> after it
    assert C.from_lsp_position(doc, P(0, 99), U16) == 5  # past the end -> line end
    assert C.from_lsp_position(doc, P(0, 99), U8) == 5
    assert C.from_lsp_position(doc, P(1, 999), U16) == TEXT.index("\n", 6)
    assert C.from_lsp_position(doc, P(50, 3), U16) == len(TEXT)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \n\té😋𝄞中\u00a0")), max_size=40), st.data())
def test_round_trip_every_offset(text, data):
    doc = Document(text)
    norm = doc.text
    offset = data.draw(st.integers(0, len(norm)))
    for pc, enc in ((U16, "utf-16-le"), (U8, "utf-8"), (U32, "utf-32-le")):
        pos = C.to_lsp_position(doc, offset, pc)
        line_start = norm.rfind("\n", 0, offset) + 1
        width = {"utf-16-le": 2, "utf-8": 1, "utf-32-le": 4}[enc]
        assert pos.line == norm.count("\n", 0, offset)
        assert pos.character == len(norm[line_start:offset].encode(enc)) // width
        assert C.from_lsp_position(doc, pos, pc) == offset


def test_choose_encoding():
    assert C.choose_encoding(None) == "utf-16"
    assert C.choose_encoding([]) == "utf-16"
    assert C.choose_encoding(["utf-16"]) == "utf-16"
    assert C.choose_encoding(["utf-16", "utf-8"]) == "utf-8"
    assert C.choose_encoding(["utf-32", "utf-8", "utf-16"]) == "utf-8"
    assert C.choose_encoding(["utf-32"]) == "utf-32"
    assert C.choose_encoding(["ebcdic"]) == "utf-16"


def test_changes_become_edits():
    doc = Document(TEXT)
    rng = T.Range(start=P(0, 5), end=P(0, 6))  # UTF-16: `x`
    e = C.from_lsp_change(doc, T.TextDocumentContentChangePartial(range=rng, text="y"), U16)
    assert (e.start, e.end, e.new_text) == (4, 5, "y")
    e = C.from_lsp_change(doc, T.TextDocumentContentChangeWholeDocument(text="new"), U16)
    assert (e.start, e.end, e.new_text) == (0, len(TEXT), "new")


def test_crlf_documents_keep_lsp_positions():
    doc = Document("object A : FinSet 2\r\nobject B : FinSet 0\r\n")
    (d,) = doc.diagnostics()
    assert C.to_lsp_range(doc, d.span, U16) == T.Range(start=P(1, 18), end=P(1, 19))


def test_diagnostic_conversion_with_related_information_and_data():
    doc = Document(TEXT)
    d = error("QVR104", Span(8, 14), "`A` is already declared on line 1",
              related=(Related(Span(2, 4), "`A` is first declared here"),), data=(("suggest", "B"),))
    lsp = C.to_lsp_diagnostic(doc, d, "file:///x.qvr", U16)
    assert (lsp.code, lsp.source, lsp.severity, lsp.message) == (
        "QVR104", "qvr", T.DiagnosticSeverity.Error, "`A` is already declared on line 1")
    assert lsp.range == T.Range(start=P(1, 2), end=P(1, 8))
    (rel,) = lsp.related_information
    assert rel.location == T.Location(uri="file:///x.qvr", range=T.Range(start=P(0, 2), end=P(0, 5)))
    assert lsp.data == {"suggest": "B"}
    w = C.to_lsp_diagnostic(doc, warning("QVR713", Span(0, 1), "m"), "file:///x.qvr", U16)
    assert w.severity == T.DiagnosticSeverity.Warning and w.related_information is None


def test_text_edits_and_workspace_edit():
    doc = Document(TEXT)
    we = C.to_lsp_workspace_edit(doc, "file:///x.qvr", [TextEdit(Span(4, 5), "z")], U8)
    assert we.changes["file:///x.qvr"] == [T.TextEdit(range=T.Range(start=P(0, 8), end=P(0, 9)), new_text="z")]


def test_semantic_token_encoding_counts_code_units():
    from qvr.ide.semantic_tokens import SemanticToken
    doc = Document(TEXT)
    toks = [SemanticToken(0, 5, "comment"), SemanticToken(6, 12, "keyword"),
            SemanticToken(TEXT.index('"😋"'), TEXT.index('"😋"') + 3, "string"),
            SemanticToken(TEXT.index("N ="), TEXT.index("N =") + 1, "enumMember", ("declaration", "readonly"))]
    types = ["comment", "keyword", "string", "enumMember"]
    mods = ["declaration", "readonly"]
    assert C.encode_semantic_tokens(doc, toks, types, mods, U16) == [
        0, 0, 6, 0, 0,     # "# é😋x": 6 UTF-16 units
        1, 0, 6, 1, 0,
        1, 0, 4, 2, 0,     # "😋" with quotes: 4 units
        0, 7, 1, 3, 3,     # N after `"😋" : ` (7 units), both modifier bits
    ]
    assert C.encode_semantic_tokens(doc, toks, types, mods, U8)[:3] == [0, 0, 9]


def test_uris():
    assert C.to_path("file:///tmp/a%20b.qvr") == "/tmp/a b.qvr"
    assert C.to_uri("/tmp/a b.qvr") == "file:///tmp/a%20b.qvr"
    assert C.to_path("untitled:Untitled-1") is None
