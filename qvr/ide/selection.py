"""Selection ranges ("expand selection"): from the token at the cursor outwards through
every enclosing syntax node (sub-expression, argument list, step, block, declaration) to
the whole document.

The chain is read off the AST of the statement under the cursor; every node carries a
chunk-relative span, so this is a generic walk with no per-node code.  A statement with a
syntax error still gives the word, its line and the statement.  No LSP types here.
"""
from __future__ import annotations

import dataclasses
import re

from qvr.text import Span

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|>>|->|<-|@")


def _walk(node, rel: int, out: list) -> None:
    if isinstance(node, tuple):
        for n in node:
            _walk(n, rel, out)
        return
    if not dataclasses.is_dataclass(node):
        return
    span = getattr(node, "span", None)
    if isinstance(span, Span) and not (span.start <= rel <= span.end):
        return
    if isinstance(span, Span):
        out.append(span)
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if isinstance(v, Span):
            if f.name != "span" and v.start <= rel <= v.end:
                out.append(v)
        elif isinstance(v, (tuple,)) or dataclasses.is_dataclass(v):
            _walk(v, rel, out)


def selection_ranges(doc, offset: int) -> list[Span]:
    """Nested spans around `offset`, innermost first, each containing the previous one."""
    text = doc.text
    spans = []
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    for m in _WORD.finditer(text, line_start, line_end):
        if m.start() <= offset <= m.end():
            spans.append(Span(m.start(), m.end()))
            break
    st = doc.state
    if st.slots:
        i = doc.chunk_at(offset)
        slot = st.slots[i]
        base = st.starts[i]
        nodes: list[Span] = []
        if slot.parsed.decl is not None:
            _walk(slot.parsed.decl, offset - base, nodes)
        spans += [s.shift(base) for s in nodes]
        line = text[line_start:line_end]
        spans.append(Span(line_start + len(line) - len(line.lstrip()), line_start + len(line.rstrip())))
        stmt = base + slot.chunk.stmt_at
        if stmt <= offset:
            spans.append(Span(stmt, base + len(slot.chunk.text.rstrip())))
    spans.append(Span(0, len(text)))
    spans = [s for s in spans if s.start <= offset <= s.end]
    spans.sort(key=lambda s: (s.end - s.start, -s.start))
    chain: list[Span] = []
    for s in spans:
        if chain and (s == chain[-1] or not (s.start <= chain[-1].start and chain[-1].end <= s.end)):
            continue
        chain.append(s)
    return chain
