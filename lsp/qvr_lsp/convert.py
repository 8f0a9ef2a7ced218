"""The one place where qvr's editor data meets LSP: positions, URIs and protocol records.

qvr works in document offsets (Python string indices, i.e. code points, over text with
`\\n` line ends).  LSP speaks 0-based lines and characters counted in the negotiated
position encoding (UTF-16 unless the client offers UTF-8, 3.17 `positionEncoding`).  All
of that conversion lives here: `from_lsp_*` turns protocol values into offsets and edits,
`to_lsp_*` turns `qvr.ide` and `qvr.diagnostics` records into lsprotocol types.  Counting
code units uses pygls's `PositionCodec`; lines that are pure ASCII take a fast path.
Nothing here analyses QVR.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from lsprotocol import types as T
from pygls import uris
from pygls.workspace.position_codec import PositionCodec

from qvr.diagnostics import Diagnostic, Severity, TextEdit
from qvr.text import Span

if TYPE_CHECKING:  # qvr.analysis loads the parser: imported lazily, after `initialize`
    from qvr.analysis import Edit

UTF8, UTF16, UTF32 = T.PositionEncodingKind.Utf8, T.PositionEncodingKind.Utf16, T.PositionEncodingKind.Utf32


# ---------------------------------------------------------------- encodings

def choose_encoding(offered: Optional[Sequence[str]]) -> str:
    """UTF-16 by default; UTF-8 whenever the client offers it; UTF-32 only if it is all the
    client offers."""
    offered = list(offered or ())
    if UTF8 in offered:
        return UTF8
    if not offered or UTF16 in offered:
        return UTF16
    if UTF32 in offered:
        return UTF32
    return UTF16


@lru_cache(maxsize=None)
def codec(encoding: str = UTF16) -> PositionCodec:
    return PositionCodec(encoding)


def _line(doc, line: int) -> tuple[int, str]:
    idx = doc.line_index
    if line >= idx.line_count:
        return len(doc.text), ""
    start = idx.starts[line]
    end = idx.starts[line + 1] - 1 if line + 1 < idx.line_count else len(doc.text)
    return start, doc.text[start:end]


def units(text: str, pc: PositionCodec) -> int:
    """Length of `text` in the codec's code units."""
    return len(text) if text.isascii() else pc.client_num_units(text)


# ---------------------------------------------------------------- positions

def from_lsp_position(doc, pos: T.Position, pc: PositionCodec) -> int:
    """Offset of an LSP position (clamped into the document and to line ends)."""
    if pos.line < 0:
        return 0
    if pos.line >= doc.line_index.line_count:
        return len(doc.text)
    start, text = _line(doc, pos.line)
    if text.isascii():
        return start + min(max(pos.character, 0), len(text))
    if pos.character >= pc.client_num_units(text):
        return start + len(text)
    p = pc.position_from_client_units([text], T.Position(line=0, character=max(pos.character, 0)))
    return start + p.character


def to_lsp_position(doc, offset: int, pc: PositionCodec) -> T.Position:
    p = doc.position(offset)
    start, text = _line(doc, p.line)
    if text.isascii():
        return T.Position(line=p.line, character=p.character)
    q = pc.position_to_client_units([text], T.Position(line=0, character=p.character))
    return T.Position(line=p.line, character=q.character)


def from_lsp_range(doc, rng: T.Range, pc: PositionCodec) -> Span:
    a, b = from_lsp_position(doc, rng.start, pc), from_lsp_position(doc, rng.end, pc)
    return Span(min(a, b), max(a, b))


def to_lsp_range(doc, span: Span, pc: PositionCodec) -> T.Range:
    return T.Range(start=to_lsp_position(doc, span.start, pc), end=to_lsp_position(doc, span.end, pc))


def from_lsp_change(doc, change, pc: PositionCodec) -> Edit:
    """One content change of didChange as an Edit on the current text."""
    from qvr.analysis import Edit
    rng = getattr(change, "range", None)
    if rng is None:
        return Edit(0, len(doc.text), change.text)
    span = from_lsp_range(doc, rng, pc)
    return Edit(span.start, span.end, change.text)


class _TextView:
    """Just enough of a Document (text, line index) to convert positions in plain text."""

    def __init__(self, text: str):
        from qvr.text import LineIndex
        self.text = text.replace("\r\n", "\n")
        self.line_index = LineIndex(self.text)

    def position(self, offset: int):
        return self.line_index.position(offset)


def apply_changes(text: str, changes, pc: PositionCodec) -> str:
    """The text after didChange's content changes, by string operations only (the recovery
    path when the incremental analysis fails)."""
    for change in changes:
        view = _TextView(text)
        e = from_lsp_change(view, change, pc)
        text = view.text[:e.start] + e.new_text.replace("\r\n", "\n") + view.text[e.end:]
    return text


# ---------------------------------------------------------------- URIs

def to_path(uri: str) -> Optional[str]:
    return uris.to_fs_path(uri) if uri.startswith("file:") else None


def to_uri(path: str) -> str:
    return uris.from_fs_path(path)


# ---------------------------------------------------------------- diagnostics and edits

def to_lsp_diagnostic(doc, d: Diagnostic, uri: str, pc: PositionCodec) -> T.Diagnostic:
    related = [T.DiagnosticRelatedInformation(location=T.Location(uri=uri, range=to_lsp_range(doc, r.span, pc)),
                                              message=r.message) for r in d.related] or None
    data = dict(d.data) if d.data else None
    return T.Diagnostic(
        range=to_lsp_range(doc, d.span, pc),
        message=d.message,
        severity=T.DiagnosticSeverity.Error if d.severity is Severity.ERROR else T.DiagnosticSeverity.Warning,
        code=d.code,
        source="qvr",
        related_information=related,
        data=data,
    )


def to_lsp_diagnostics(doc, diags: Iterable[Diagnostic], uri: str, pc: PositionCodec) -> list[T.Diagnostic]:
    return [to_lsp_diagnostic(doc, d, uri, pc) for d in diags]


def to_lsp_text_edit(doc, e: TextEdit, pc: PositionCodec) -> T.TextEdit:
    return T.TextEdit(range=to_lsp_range(doc, e.span, pc), new_text=e.new_text)


def to_lsp_workspace_edit(doc, uri: str, edits: Iterable[TextEdit], pc: PositionCodec) -> T.WorkspaceEdit:
    return T.WorkspaceEdit(changes={uri: [to_lsp_text_edit(doc, e, pc) for e in edits]})


# ---------------------------------------------------------------- features

def markup(text: str, markdown: bool = True) -> T.MarkupContent:
    """Markdown as is, or as plain text (code fences dropped) for clients without Markdown."""
    if markdown:
        return T.MarkupContent(kind=T.MarkupKind.Markdown, value=text)
    lines = [l for l in text.split("\n") if not l.startswith("```")]
    return T.MarkupContent(kind=T.MarkupKind.PlainText, value="\n".join(lines))


def to_lsp_hover(doc, h, pc: PositionCodec, markdown: bool = True) -> T.Hover:
    return T.Hover(contents=markup(h.text, markdown), range=to_lsp_range(doc, h.span, pc))


def to_lsp_locations(doc, uri: str, spans: Iterable[Span], pc: PositionCodec) -> list[T.Location]:
    return [T.Location(uri=uri, range=to_lsp_range(doc, s, pc)) for s in spans]


def to_lsp_highlights(doc, hs, pc: PositionCodec) -> list[T.DocumentHighlight]:
    return [T.DocumentHighlight(range=to_lsp_range(doc, h.span, pc),
                                kind=T.DocumentHighlightKind.Write if h.write else T.DocumentHighlightKind.Read)
            for h in hs]


SYMBOL_KINDS = {"class": T.SymbolKind.Class, "function": T.SymbolKind.Function, "module": T.SymbolKind.Module,
                "variable": T.SymbolKind.Variable, "method": T.SymbolKind.Method}


def to_lsp_document_symbol(doc, s, pc: PositionCodec) -> T.DocumentSymbol:
    return T.DocumentSymbol(name=s.name, kind=SYMBOL_KINDS.get(s.kind, T.SymbolKind.Variable),
                            detail=s.detail or None, range=to_lsp_range(doc, s.span, pc),
                            selection_range=to_lsp_range(doc, s.selection, pc),
                            children=[to_lsp_document_symbol(doc, c, pc) for c in s.children] or None)


def to_lsp_workspace_symbol(doc, uri: str, s, pc: PositionCodec) -> T.WorkspaceSymbol:
    return T.WorkspaceSymbol(name=s.name, kind=SYMBOL_KINDS.get(s.kind, T.SymbolKind.Variable),
                             location=T.Location(uri=uri, range=to_lsp_range(doc, s.span, pc)),
                             container_name=s.container or None)


COMPLETION_KINDS = {
    "keyword": T.CompletionItemKind.Keyword, "snippet": T.CompletionItemKind.Snippet,
    "object": T.CompletionItemKind.Class, "morphism": T.CompletionItemKind.Function,
    "let": T.CompletionItemKind.Function, "program": T.CompletionItemKind.Function,
    "deduction": T.CompletionItemKind.Module, "family": T.CompletionItemKind.Struct,
    "builtin": T.CompletionItemKind.Function, "local": T.CompletionItemKind.Variable,
    "option": T.CompletionItemKind.Property, "value": T.CompletionItemKind.EnumMember,
    "combinator": T.CompletionItemKind.Operator,
}


def to_lsp_completions(doc, result, pc: PositionCodec, snippets: bool = True,
                       markdown: bool = True) -> T.CompletionList:
    rng = to_lsp_range(doc, result.span, pc)
    items = []
    for i, it in enumerate(result.items):
        if it.snippet and not snippets:
            if it.kind == "snippet":
                continue
            text, fmt = it.label, T.InsertTextFormat.PlainText
        else:
            text = it.insert or it.label
            fmt = T.InsertTextFormat.Snippet if it.snippet else T.InsertTextFormat.PlainText
        items.append(T.CompletionItem(
            label=it.label, kind=COMPLETION_KINDS.get(it.kind, T.CompletionItemKind.Text),
            detail=it.detail or None,
            documentation=(markup(it.doc) if markdown else it.doc) if it.doc else None,
            sort_text=f"{i:05d}", filter_text=it.label, insert_text_format=fmt,
            text_edit=T.TextEdit(range=rng, new_text=text)))
    return T.CompletionList(is_incomplete=result.incomplete, items=items)


def _utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def to_lsp_signature_help(sig, markdown: bool = True) -> T.SignatureHelp:
    params = [T.ParameterInformation(label=(_utf16(sig.label[:a]), _utf16(sig.label[:b]))) for a, b in sig.params]
    info = T.SignatureInformation(label=sig.label, parameters=params,
                                  documentation=(markup(sig.doc) if markdown else sig.doc) if sig.doc else None,
                                  active_parameter=sig.active)
    return T.SignatureHelp(signatures=[info], active_signature=0, active_parameter=sig.active)


def to_lsp_inlay_hints(doc, hints, pc: PositionCodec) -> list[T.InlayHint]:
    return [T.InlayHint(position=to_lsp_position(doc, h.offset, pc), label=h.label, kind=T.InlayHintKind.Type)
            for h in hints]


def encode_semantic_tokens(doc, tokens, types: Sequence[str], modifiers: Sequence[str],
                           pc: PositionCodec) -> list[int]:
    """The LSP relative encoding: (Δline, Δstart, length, type, modifier bits) per token."""
    tindex = {t: i for i, t in enumerate(types)}
    mbits = {m: 1 << i for i, m in enumerate(modifiers)}
    data: list[int] = []
    prev_line = prev_char = 0
    line_cache: dict[int, tuple[int, str]] = {}
    idx = doc.line_index
    for t in tokens:
        p = idx.position(t.start)
        if p.line not in line_cache:
            line_cache[p.line] = _line(doc, p.line)
        start, text = line_cache[p.line]
        if text.isascii():
            char, length = p.character, t.end - t.start
        else:
            char = units(text[:p.character], pc)
            length = units(doc.text[t.start:t.end], pc)
        d_line = p.line - prev_line
        d_char = char - prev_char if d_line == 0 else char
        bits = 0
        for m in t.modifiers:
            bits |= mbits.get(m, 0)
        data += [d_line, d_char, length, tindex[t.type], bits]
        prev_line, prev_char = p.line, char
    return data


def to_lsp_folding_ranges(doc, folds) -> list[T.FoldingRange]:
    out = []
    seen = set()
    for f in folds:
        a, b = doc.position(f.start).line, doc.position(f.end).line
        if b <= a or (a, b) in seen:
            continue
        seen.add((a, b))
        out.append(T.FoldingRange(start_line=a, end_line=b,
                                  kind=T.FoldingRangeKind.Comment if f.kind == "comment" else T.FoldingRangeKind.Region))
    return out


def to_lsp_selection_range(doc, chain: Sequence[Span], pc: PositionCodec) -> T.SelectionRange:
    parent = None
    for span in reversed(chain):
        parent = T.SelectionRange(range=to_lsp_range(doc, span, pc), parent=parent)
    return parent


def to_lsp_code_action(doc, uri: str, a, pc: PositionCodec) -> T.CodeAction:
    return T.CodeAction(title=a.title, kind=T.CodeActionKind.QuickFix,
                        diagnostics=[to_lsp_diagnostic(doc, a.diagnostic, uri, pc)] if a.diagnostic else None,
                        edit=to_lsp_workspace_edit(doc, uri, a.edits, pc), is_preferred=a.preferred or None)
