"""The program view's data: one checked QVR file as plain, immutable records.

`ProgramModel.from_text(text, path)` checks the text with `qvr.analysis.Document` and
reads `qvr.ide` (semantic tokens, hover, document symbols) into what the dashboard draws:
styled spans per line, diagnostics with 1-based lines and columns, outline entries, the
exported program and morphism names with their types (and a parametric program's
parameters, for which the dashboard's Setup asks numbers), and the SHA-256 of the exact
text (the run record holds the same hash, so a run made from an older text can be marked
stale).  `reload()` reads the file again and returns a new model; check results of
unchanged declarations are shared through one `CheckCache`.

Style names are theme-neutral (`"keyword"`, `"type"`, ...): the source view maps them to
the Textual theme's colour variables, so light and dark both work.  This module imports
neither textual nor torch (tested in a subprocess).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Optional

from qvr.analysis import Document
from qvr.diagnostics import Severity
from qvr.sema.module import CheckCache

__all__ = ["Span", "DiagnosticEntry", "HoverInfo", "OutlineEntry", "ExportEntry", "ProgramModel",
           "STYLE_OF_TOKEN", "read_program", "source_sha256"]

# Token type (LSP legend name, see qvr.ide.token_legend) -> theme-neutral style name.
STYLE_OF_TOKEN = {
    "keyword": "keyword",
    "type": "type",
    "class": "family",
    "namespace": "type",
    "function": "function",
    "method": "function",
    "macro": "constant",
    "enumMember": "constant",
    "typeParameter": "variable",
    "parameter": "variable",
    "variable": "variable",
    "property": "property",
    "comment": "comment",
    "string": "string",
    "number": "number",
    "operator": "operator",
}


def source_sha256(text: str) -> str:
    """Hex SHA-256 of the exact text (UTF-8, line ends as read): the hash a run record holds."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_program(path) -> str:
    """The file's text with its line ends as they are (as `qvr check` reads it).

    Raises OSError or UnicodeDecodeError; callers turn them into a message."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


@dataclass(frozen=True)
class Span:
    """A highlighted run on one line: columns are 0-based code points, end exclusive."""

    start: int
    end: int
    kind: str  # the qvr.ide token type, e.g. "keyword", "function"
    style: str  # the style name, e.g. "keyword", "doc-comment"
    modifiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagnosticEntry:
    line: int  # 1-based, as `qvr check` prints it
    col: int  # 1-based
    severity: str  # "error" | "warning"
    code: str
    message: str
    start: int  # document offsets of the range (the source view's coordinates)
    end: int
    end_line: int  # 1-based line of `end`
    end_col: int

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def label(self, path: str) -> str:
        return f"{path}:{self.line}:{self.col}: {self.severity}[{self.code}]: {self.message}"


@dataclass(frozen=True)
class HoverInfo:
    start: int  # the hovered token, document offsets
    end: int
    signature: str  # e.g. "backbone : Token -> Latent" (may hold a second `= structure` line)
    facts: str  # e.g. "let", "morphism · role kernel ~ Normal"
    doc: str  # the declaration's `##` doc comment, lines joined by "\n"


@dataclass(frozen=True)
class OutlineEntry:
    name: str
    kind: str  # the declaration keyword: object | morphism | let | program | deduction | local | rule
    type_text: str  # e.g. "Token -> Latent", "FinSet 32"
    line: int  # 1-based line of the name
    offset: int  # document offset of the name
    depth: int = 0  # 0 for top level, 1 for program steps, rules and replica members


@dataclass(frozen=True)
class ExportEntry:
    name: str  # the exported name, or the expression's text for `export f >> g`
    kind: str  # program | morphism | let | expression
    type_text: str  # e.g. "Token -> Token" ("?" when unknown)
    line: int  # 1-based line of the export statement
    # a parametric program's (template's) parameters: (name, type text), e.g.
    # (("spread", "Real"),); empty for every other export
    params: tuple[tuple[str, str], ...] = ()

    @property
    def parametric(self) -> bool:
        """A parametric program: fitted at numbers given for `params` (`FitConfig.args`)."""
        return bool(self.params)


_SYMBOL_KIND = {"class": "object", "module": "deduction", "method": "rule", "variable": "local"}


def _hover_parts(markdown: str) -> tuple[str, str, str]:
    """Split qvr.ide.hover's Markdown (a fenced signature, a facts line, doc lines)."""
    sig, rest = "", markdown
    if markdown.startswith("```qvr\n"):
        close = markdown.find("\n```", 7)
        if close >= 0:
            sig, rest = markdown[7:close], markdown[close + 4:]
    facts, _, doc = rest.lstrip("\n").partition("\n\n")
    if not doc and facts.startswith("\n"):
        facts, doc = "", facts.strip()
    return sig, facts.strip(), doc.strip()


@dataclass(frozen=True, eq=False)
class ProgramModel:
    """One checked program as plain data (build with `from_text` or `load`)."""

    path: str
    text: str
    sha256: str
    lines: tuple[str, ...]  # the text ("\r\n" read as "\n") split at "\n"
    spans: tuple[tuple[Span, ...], ...]  # per line, sorted, non-overlapping
    diagnostics: tuple[DiagnosticEntry, ...]
    outline: tuple[OutlineEntry, ...]
    exports: tuple[ExportEntry, ...]
    document: Document = field(repr=False)
    cache: CheckCache = field(repr=False)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_text(cls, text: str, path: str = "<memory>", cache: Optional[CheckCache] = None) -> "ProgramModel":
        from qvr.ide.semantic_tokens import semantic_tokens
        from qvr.ide.symbols import document_symbols

        cache = cache if cache is not None else CheckCache()
        doc = Document(text, str(path), cache)
        norm = doc.text  # "\r\n" -> "\n"; offsets below are in this text
        lines = tuple(norm.split("\n"))
        index = doc.line_index
        per_line: list[list[Span]] = [[] for _ in lines]
        for t in semantic_tokens(doc):
            p = index.position(t.start)
            style = STYLE_OF_TOKEN.get(t.type, "variable")
            if t.type == "comment" and "documentation" in t.modifiers:
                style = "doc-comment"
            elif "defaultLibrary" in t.modifiers and t.type == "function":
                style = "builtin"
            per_line[p.line].append(Span(p.character, p.character + (t.end - t.start), t.type, style,
                                         t.modifiers))
        diags = []
        for d in doc.diagnostics():
            a, b = index.position(d.span.start), index.position(d.span.end)
            diags.append(DiagnosticEntry(a.line + 1, a.character + 1,
                                         "error" if d.severity is Severity.ERROR else "warning",
                                         d.code, d.message, d.span.start, d.span.end, b.line + 1,
                                         b.character + 1))
        outline = []

        def add(sym, depth: int) -> None:
            kind = _SYMBOL_KIND.get(sym.kind, "")
            if not kind:  # function: morphism, let or program; read the keyword
                slot = doc.state.slots[doc.chunk_at(sym.selection.start)]
                kind = slot.parsed.keyword or "morphism"
                if depth:
                    kind = "morphism"  # a replica member
            p = index.position(sym.selection.start)
            outline.append(OutlineEntry(sym.name, kind, sym.detail, p.line + 1, sym.selection.start, depth))
            for c in sym.children:
                add(c, depth + 1)

        for s in document_symbols(doc):
            add(s, 0)
        return cls(str(path), text, source_sha256(text), lines, tuple(tuple(s) for s in per_line),
                   tuple(diags), tuple(outline), _exports(doc), doc, cache)

    @classmethod
    def load(cls, path, cache: Optional[CheckCache] = None) -> "ProgramModel":
        """Read and check a file (OSError / UnicodeDecodeError propagate)."""
        return cls.from_text(read_program(path), str(path), cache)

    def reload(self) -> "ProgramModel":
        """The file read again and re-checked, reusing this model's check cache."""
        return ProgramModel.load(self.path, self.cache)

    def with_text(self, text: str) -> "ProgramModel":
        """A model of new text for the same path (shares the check cache)."""
        return ProgramModel.from_text(text, self.path, self.cache)

    # ------------------------------------------------------------ queries
    @property
    def errors(self) -> tuple[DiagnosticEntry, ...]:
        return tuple(d for d in self.diagnostics if d.is_error)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    def is_stale(self, run_sha256: str) -> bool:
        """Whether a run recorded with `run_sha256` was made from a different text."""
        return run_sha256 != self.sha256

    def offset(self, line: int, col: int) -> int:
        """Document offset of 0-based (line, col), clamped to the line."""
        return self.document.offset(line, col)

    def position(self, offset: int) -> tuple[int, int]:
        """0-based (line, col) of a document offset."""
        p = self.document.position(offset)
        return p.line, p.character

    def hover_at(self, offset: int) -> Optional[HoverInfo]:
        """Type and doc comment of the name at `offset` (qvr.ide.hover), or None."""
        from qvr.ide.hover import hover

        h = hover(self.document, offset)
        if h is None:
            return None
        sig, facts, doc = _hover_parts(h.text)
        return HoverInfo(h.span.start, h.span.end, sig, facts, doc)

    def diagnostics_on_line(self, line: int) -> tuple[DiagnosticEntry, ...]:
        """Diagnostics whose range touches 1-based `line`."""
        return tuple(d for d in self.diagnostics if d.line <= line <= d.end_line)


def _exports(doc: Document) -> tuple[ExportEntry, ...]:
    from qvr.sema.symbols import LetSym, MorphismSym, ProgramSym
    from qvr.sema.types import spell_mor

    st = doc.state
    out = []
    for slot in sorted(st.export_slots, key=lambda s: st.starts[s.index]):
        base = st.starts[slot.index]
        facts = {f.span: f for f in slot.result.facts if f.kind == "expr"}
        for name, span in slot.result.exports:
            line = doc.position(base + span.start).line + 1
            if name is None:
                f = facts.get(span)
                text = doc.text[base + span.start:base + span.end]
                out.append(ExportEntry(text, "expression", spell_mor(f.data[0]) if f else "?", line))
                continue
            sym = doc.symbol("value", name)
            kind = ("program" if isinstance(sym, ProgramSym) else "let" if isinstance(sym, LetSym)
                    else "morphism" if isinstance(sym, MorphismSym) else "unknown")
            try:
                type_text = spell_mor(sym.type) if kind != "unknown" else "?"
            except AttributeError:
                type_text = "?"
            params = tuple((n, t or "?") for n, t in sym.params) \
                if isinstance(sym, ProgramSym) and sym.parametric else ()
            out.append(ExportEntry(name, kind, type_text, line, params))
    return tuple(out)
