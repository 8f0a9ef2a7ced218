"""Where the cursor is, for completion (`qvr.ide.completion`): `Ctx` reads the text of the
current statement before the cursor (the code being typed rarely parses): the statement
keyword, the innermost open bracket, the current step line (`step_head`) and the word
being typed; `matches` says whether a label matches that word.  `Item` and `Completions`
are what completion answers.  No LSP types here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from qvr.ide.textscan import bracket_stack, word_before
from qvr.text import Span

__all__ = ["Item", "Completions", "Ctx", "step_head", "matches", "FIRST_WORD"]

_WORD_START = re.compile(r"[A-Za-z0-9_]*")
FIRST_WORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Item:
    label: str
    kind: str  # keyword | snippet | object | morphism | let | program | deduction | family | builtin |
    #            local | option | value | combinator
    detail: str = ""
    insert: str = ""  # text to insert (defaults to label)
    snippet: bool = False
    sort: str = ""  # sort key (defaults to label)
    doc: str = ""


@dataclass(frozen=True)
class Completions:
    span: Span  # the range the chosen item replaces (the word around the cursor)
    items: tuple[Item, ...]
    incomplete: bool = False  # truncated to `limit`: ask again as the word grows


class Ctx:
    """Everything completion needs to know about the cursor position."""

    def __init__(self, doc, offset: int):
        self.doc = doc
        st = doc.state
        self.index = doc.chunk_at(offset) if st.slots else 0
        self.slot = st.slots[self.index] if st.slots else None
        base = st.starts[self.index] if st.slots else 0
        text = doc.text
        line_start = text.rfind("\n", 0, offset) + 1
        self.line = text[line_start:offset]
        self.prefix = word_before(self.line)
        end = _WORD_START.match(text, offset).end()
        self.span = Span(offset - len(self.prefix), end)
        chunk = self.slot.chunk if self.slot else None
        stmt_at = base + (chunk.stmt_at if chunk else 0)
        self.stmt = text[stmt_at:offset - len(self.prefix)] if stmt_at <= offset else ""
        self.in_trivia = stmt_at > offset - len(self.prefix) or not self.stmt.strip()
        self.line_head = self.line[:len(self.line) - len(self.prefix)]
        self.indent = len(self.line) - len(self.line.lstrip(" \t"))
        fm = FIRST_WORD.match(self.stmt)
        self.keyword = fm.group(1) if fm else ""
        self.stack = bracket_stack(self.stmt)
        self.limit = 200
        self.truncated = False

    # environment before the current statement
    def names(self, ns: str):
        return self.doc.state.answer(("names", ns), self.index) if self.slot else frozenset()

    def value(self, name: str):
        return self.doc.state.answer(("v", name), self.index)

    def obj(self, name: str):
        return self.doc.state.answer(("t", name), self.index)


def step_head(c: Ctx) -> str:
    """The text of the step line that the open brackets at the cursor belong to (a let
    expression may continue over several lines inside its brackets)."""
    first_open = c.stack[0][1] if c.stack else len(c.stmt)
    return c.stmt[c.stmt.rfind("\n", 0, first_open) + 1:first_open]


_SEGMENT = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def matches(prefix: str, label: str) -> bool:
    """The label starts with the prefix, or one of its words does (`Norm` finds
    `LogNormal`, `hid` finds `hidden_dim`, `dim` finds `hidden_dim`); case-insensitive."""
    p = prefix.lower()
    if label.lower().startswith(p):
        return True
    return any(label[m.start():].lower().startswith(p) for m in _SEGMENT.finditer(label))
