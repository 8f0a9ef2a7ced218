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
import contextlib
import gc
from dataclasses import dataclass
from typing import Iterable, Optional

from qvr.diagnostics import Diagnostic
from qvr.sema.context import Fact
from qvr.sema.module import CheckCache, ModuleState, Slot
from qvr.syntax.chunks import comments, split
from qvr.syntax.parser import parse_chunk
from qvr.text import LineIndex, Position, Span


@contextlib.contextmanager
def _gc_paused():
    """Analysis allocates many small, long-lived objects: the cyclic collector would scan
    them over and over (a third of a cold check).  Pause it for the duration."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True)
class Edit:
    """Replace `text[start:end]` by `new_text` (offsets in the current text)."""

    start: int
    end: int
    new_text: str


class Document:
    def __init__(self, text: str, path: str = "<memory>", cache: Optional[CheckCache] = None):
        self.path = path
        from qvr.sema.pretrained import base_dir_of
        self.state = ModuleState(cache, base_dir_of(path))
        with _gc_paused():
            self._build(text)

    def _build(self, text: str) -> None:
        self._set_text(text.replace("\r\n", "\n"))
        parts, _ = split(self.text)
        slots = [Slot(c, parse_chunk(c)) for _, c in parts]
        lines, line = [], 1
        for s in slots:
            lines.append(line)
            line += s.chunk.text.count("\n")
        self.state.replace(0, 0, slots, [p for p, _ in parts], lines, moved=False)

    def _set_text(self, text: str) -> None:
        self.text = text
        self._line_index = None

    @property
    def line_index(self) -> LineIndex:
        if self._line_index is None:
            self._line_index = LineIndex(self.text)
        return self._line_index

    # views used by tools and tests
    @property
    def chunks(self) -> list:
        return [s.chunk for s in self.state.slots]

    @property
    def parsed(self) -> list:
        return [s.parsed for s in self.state.slots]

    @property
    def starts(self) -> list[int]:
        return self.state.starts

    @property
    def rechecked(self) -> int:
        """How many declarations the last edit checked afresh."""
        return self.state.rechecked

    # ------------------------------------------------------------ edits
    def apply_edits(self, edits: Iterable[Edit]) -> None:
        with _gc_paused():
            for e in edits:
                self._apply(e)

    def set_text(self, text: str) -> None:
        self.apply_edits([Edit(0, len(self.text), text)])

    def _apply(self, e: Edit) -> None:
        start, end = max(0, min(e.start, len(self.text))), max(0, min(e.end, len(self.text)))
        start, end = min(start, end), max(start, end)
        new = e.new_text.replace("\r\n", "\n")
        removed = self.text[start:end]
        text = self.text[:start] + new + self.text[end:]
        delta = len(new) - (end - start)
        line_delta = new.count("\n") - removed.count("\n")
        st = self.state
        starts = st.starts
        i = max(bisect.bisect_right(starts, start) - 2, 0)  # one chunk of slack before
        region = starts[i] if starts else 0
        old = set(starts[i + 1:])
        edit_end = start + len(new)

        def stop(b: int) -> bool:
            return b >= edit_end and (b - delta) in old and (b - delta) > end

        parts, stop_at = split(text, region, stop)
        j = bisect.bisect_left(starts, stop_at - delta) if stop_at < len(text) else len(starts)
        slots = [Slot(c, parse_chunk(c)) for _, c in parts]
        line = st.start_lines[i] if i < len(st.start_lines) else 1
        lines = []
        for s in slots:
            lines.append(line)
            line += s.chunk.text.count("\n")
        new_starts = starts[:i] + [p for p, _ in parts] + [s + delta for s in starts[j:]]
        new_lines = st.start_lines[:i] + lines + [n + line_delta for n in st.start_lines[j:]]
        index = self._line_index.edited(start, end, new) if self._line_index is not None else None
        self._set_text(text)
        self._line_index = index  # kept up to date instead of rescanning the whole text
        st.replace(i, j, slots, new_starts, new_lines, moved=delta != 0 or line_delta != 0)

    def comments(self) -> list[tuple]:
        """Every comment as (Span, text, kind) in document offsets; `docs_for` gives the
        doc comments attached to a declaration."""
        out = []
        for slot in self.state.slots:
            base = self.state.starts[slot.index]
            out.extend((sp.shift(base), t, k) for sp, t, k in comments(slot.chunk.text))
        return out

    def diagnostics(self) -> list[Diagnostic]:
        st = self.state
        out = []
        for slot in st.diag_slots:
            start = st.starts[slot.index]
            out.extend(d.shift(start) for d in slot.parsed.diagnostics)
            if slot.result is not None:
                out.extend(d.shift(start) for d in slot.result.diagnostics)
        out.extend(st.module_diagnostics())
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
        st = self.state
        if not st.slots:
            return []
        i = self.chunk_at(offset)
        base = st.starts[i]
        rel = offset - base
        res = st.slots[i].result
        hits = [f for f in (res.facts if res else ()) if f.span.start <= rel <= f.span.end]
        hits.sort(key=lambda f: (f.span.end - f.span.start, f.kind != "expr"))
        return [(f.span.shift(base), f) for f in hits]

    def all_facts(self):
        st = self.state
        for slot in st.slots:
            base = st.starts[slot.index]
            for f in (slot.result.facts if slot.result else ()):
                yield f.span.shift(base), f

    def definition_span(self, ns: str, name: str) -> Optional[Span]:
        return self.state.name_span(ns, name)

    def symbol(self, ns: str, name: str):
        """The symbol a use after the whole module would see (the first binding)."""
        lst = self.state.bound.get((ns, name))
        return lst[0].bindings[(ns, name)] if lst else None

    def docs_for(self, ns: str, name: str) -> tuple[str, ...]:
        span = self.definition_span(ns, name)
        if span is None:
            return ()
        return self.state.slots[self.chunk_at(span.start)].parsed.docs

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
