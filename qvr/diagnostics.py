"""Diagnostics as values: a code, a severity, a range and a message.

User errors are data, never exceptions.  Every diagnostic the front end emits is built by a
constructor in `qvr.syntax.errors` or `qvr.sema.errors`; this module holds only the record
type and the compiler-style text renderer used by `qvr check` and the dashboard.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from qvr.text import Span


class Severity(enum.IntEnum):
    ERROR = 1
    WARNING = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Related:
    """A secondary location a message refers to (e.g. the earlier declaration)."""

    span: Span
    message: str


@dataclass(frozen=True, slots=True)
class TextEdit:
    span: Span
    new_text: str


@dataclass(frozen=True, slots=True)
class Fix:
    """A suggested change (quick fix)."""

    title: str
    edits: tuple[TextEdit, ...]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    severity: Severity
    span: Span
    message: str
    related: tuple[Related, ...] = ()
    fixes: tuple[Fix, ...] = field(default=(), compare=False)
    # data for quick fixes and companions (e.g. the suggested name); not rendered
    data: tuple = field(default=(), compare=False)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def shift(self, delta: int) -> "Diagnostic":
        if delta == 0:
            return self
        return replace(
            self,
            span=self.span.shift(delta),
            related=tuple(Related(r.span.shift(delta), r.message) for r in self.related),
            fixes=tuple(
                Fix(f.title, tuple(TextEdit(e.span.shift(delta), e.new_text) for e in f.edits))
                for f in self.fixes
            ),
        )


def error(code: str, span: Span, message: str, **kw) -> Diagnostic:
    return Diagnostic(code, Severity.ERROR, span, message, **kw)


def warning(code: str, span: Span, message: str, **kw) -> Diagnostic:
    return Diagnostic(code, Severity.WARNING, span, message, **kw)


def render_text(path: str, text: str, diags, line_index=None) -> str:
    """Render diagnostics in the compiler style::

        file:line:col: error[QVR301]: message
           3 | let g = hosts >> writes
             |               ^^
    """
    from qvr.text import LineIndex

    index = line_index or LineIndex(text)
    lines = text.split("\n")
    out = []
    for d in diags:
        start = index.position(d.span.start)
        end = index.position(d.span.end)
        out.append(
            f"{path}:{start.line + 1}:{start.character + 1}: {d.severity}[{d.code}]: {d.message}"
        )
        src = lines[start.line] if start.line < len(lines) else ""
        src = src.rstrip("\r")
        width = (end.character if end.line == start.line else len(src)) - start.character
        width = max(1, width)
        num = str(start.line + 1)
        pad = " " * len(num)
        out.append(f" {num} | {src}")
        out.append(f" {pad} | {' ' * start.character}{'^' * width}")
    return "\n".join(out)
