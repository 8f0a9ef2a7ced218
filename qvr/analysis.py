"""The incremental analysis host: documents, edits, diagnostics and position queries.

A `Document` owns one file's text split into statement chunks.  `apply_edits` re-splits
only the region around each edit (`qvr.syntax.chunks.split` with a resync point), parses
only chunks whose text changed (parse results are memoised by text) and re-checks only
declarations whose text or recorded dependencies changed (`qvr.sema.module`).  Results of
unchanged chunks are reused as they are: their spans are chunk-relative, so shifting a
chunk costs nothing.  Queries answer in document offsets; only `qvr_lsp` converts to LSP
positions.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Optional

from qvr.diagnostics import Diagnostic
from qvr.sema.context import Fact
from qvr.sema.module import CheckCache, ModuleResult, check_chunks
from qvr.syntax.chunks import split
from qvr.syntax.parser import parse_chunk
from qvr.text import LineIndex, Position, Span


@dataclass(frozen=True)
class Edit:
    """Replace `text[start:end]` by `new_text` (offsets in the current text)."""

    start: int
    end: int
    new_text: str


class Document:
    def __init__(self, text: str, path: str = "<memory>", cache: Optional[CheckCache] = None):
        self.path = path
        self.cache = cache or CheckCache()
        self._set_text(text.replace("\r\n", "\n"))
        parts, _ = split(self.text)
        self.starts = [s for s, _ in parts]
        self.chunks = [c for _, c in parts]
        self._analyse()

    def _set_text(self, text: str) -> None:
        self.text = text
        self._line_index = None

    @property
    def line_index(self) -> LineIndex:
        if self._line_index is None:
            self._line_index = LineIndex(self.text)
        return self._line_index

    # ------------------------------------------------------------ edits
    def apply_edits(self, edits: Iterable[Edit]) -> None:
        for e in edits:
            self._apply(e)
        self._analyse()

    def set_text(self, text: str) -> None:
        self.apply_edits([Edit(0, len(self.text), text.replace("\r\n", "\n"))])

    def _apply(self, e: Edit) -> None:
        start, end = max(0, min(e.start, len(self.text))), max(0, min(e.end, len(self.text)))
        new = e.new_text.replace("\r\n", "\n")
        text = self.text[:start] + new + self.text[end:]
        delta = len(new) - (end - start)
        starts = self.starts
        i = max(bisect.bisect_right(starts, start) - 2, 0)  # one chunk of slack before
        region = starts[i] if starts else 0
        old = set(starts[i + 1:])
        edit_end = start + len(new)

        def stop(b: int) -> bool:
            return b >= edit_end and (b - delta) in old and (b - delta) > end

        parts, stop_at = split(text, region, stop)
        j = bisect.bisect_left(starts, stop_at - delta) if stop_at < len(text) else len(starts)
        self.starts = starts[:i] + [s for s, _ in parts] + [s + delta for s in starts[j:]]
        self.chunks = self.chunks[:i] + [c for _, c in parts] + self.chunks[j:]
        self._set_text(text)

    # ------------------------------------------------------------ analysis
    def _analyse(self) -> None:
        self.parsed = [parse_chunk(c) for c in self.chunks]
        lines = []
        line = 1
        for c in self.chunks:
            lines.append(line)
            line += c.text.count("\n")
        self.start_lines = lines
        chunks = self.chunks

        def texts_lines(i: int, rel: int) -> int:
            return lines[i] + chunks[i].text.count("\n", 0, rel)

        self.result: ModuleResult = check_chunks(list(zip(self.chunks, self.parsed)), self.starts,
                                                 lines, texts_lines, self.cache)

    @property
    def rechecked(self) -> int:
        return self.result.rechecked

    def diagnostics(self) -> list[Diagnostic]:
        out = []
        for start, parsed, res in zip(self.starts, self.parsed, self.result.results):
            out.extend(d.shift(start) for d in parsed.diagnostics)
            out.extend(d.shift(start) for d in res.diagnostics)
        out.extend(self.result.module_diagnostics)
        out.sort(key=lambda d: (d.span.start, d.span.end, d.code))
        return out

    # ------------------------------------------------------------ positions
    def position(self, offset: int) -> Position:
        return self.line_index.position(offset)

    def offset(self, line: int, character: int) -> int:
        return self.line_index.offset(line, character)

    def chunk_at(self, offset: int) -> int:
        return max(bisect.bisect_right(self.starts, offset) - 1, 0)

    def facts_at(self, offset: int) -> list[tuple[Span, Fact]]:
        """Facts whose span contains `offset`, innermost (shortest) first, in document offsets."""
        if not self.chunks:
            return []
        i = self.chunk_at(offset)
        base = self.starts[i]
        rel = offset - base
        hits = [f for f in self.result.results[i].facts if f.span.start <= rel <= f.span.end]
        hits.sort(key=lambda f: (f.span.end - f.span.start, f.kind != "expr"))
        return [(f.span.shift(base), f) for f in hits]

    def all_facts(self):
        for base, res in zip(self.starts, self.result.results):
            for f in res.facts:
                yield f.span.shift(base), f

    def definition_span(self, ns: str, name: str) -> Optional[Span]:
        return self.result.env.name_spans.get((ns, name))

    def symbol(self, ns: str, name: str):
        table = self.result.env.values if ns == "value" else self.result.env.types
        e = table.get(name)
        return e[0] if e else None

    def docs_for(self, ns: str, name: str) -> tuple[str, ...]:
        span = self.definition_span(ns, name)
        if span is None:
            return ()
        return self.parsed[self.chunk_at(span.start)].docs

    def type_at(self, offset: int):
        """The innermost morphism sub-expression type at `offset`: (span, MorType, text) or None."""
        for span, f in self.facts_at(offset):
            if f.kind == "expr":
                return span, f.data[0], f.data[1]
        return None

    def definition_at(self, offset: int) -> Optional[Span]:
        """The definition site of the name at `offset` (document offsets), if any."""
        for span, f in self.facts_at(offset):
            if f.kind in ("ref", "def"):
                return self.definition_span(*f.data)
            if f.kind == "localref":
                return f.data.shift(self.starts[self.chunk_at(offset)])
            if f.kind == "local":
                return span
        return None


def analyse_text(text: str, path: str = "<memory>") -> Document:
    return Document(text, path)
