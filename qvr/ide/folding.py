"""Folding ranges: statements that span lines (program and deduction blocks, long option
blocks), marginalize and lexicon blocks, multi-line block comments and runs of two or
more comment lines.

Ranges are returned in document offsets (start of the first line's construct, last
character of the last line); the adapter turns them into LSP line ranges and drops those
that fit on one line.  No LSP types here.
"""
from __future__ import annotations

from dataclasses import dataclass

from qvr.syntax import ast as A


@dataclass(frozen=True)
class Fold:
    start: int
    end: int
    kind: str = "region"  # region | comment


def _trim_end(text: str, start: int, end: int) -> int:
    """The offset of the last non-blank character of text[start:end] (at least start)."""
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return max(start, end - 1)


def _blocks(steps, base: int, out: list, text: str) -> None:
    for s in steps:
        if isinstance(s, A.MarginalizeStep):
            out.append(Fold(base + s.span.start, _trim_end(text, base + s.span.start, base + s.span.end)))
            _blocks(s.body, base, out, text)


def folding_ranges(doc) -> list[Fold]:
    st = doc.state
    text = doc.text
    out: list[Fold] = []
    for slot in st.slots:
        base = st.starts[slot.index]
        decl = slot.parsed.decl
        chunk = slot.chunk
        if decl is not None:
            a = base + decl.span.start
            out.append(Fold(a, _trim_end(text, a, base + decl.span.end)))
            if isinstance(decl, A.ProgramDecl):
                _blocks(decl.body, base, out, text)
            elif isinstance(decl, A.DeductionDecl):
                for e in decl.entries:
                    if isinstance(e, A.LexiconBlock):
                        out.append(Fold(base + e.span.start, _trim_end(text, base + e.span.start, base + e.span.end)))
        elif chunk.kind != "trivia" and chunk.stmt_at < len(chunk.text):
            a = base + chunk.stmt_at
            out.append(Fold(a, _trim_end(text, a, base + len(chunk.text))))
    out.extend(_comment_folds(doc))
    out.sort(key=lambda f: (f.start, -f.end))
    return out


def _comment_folds(doc) -> list[Fold]:
    out = []
    run_start = run_end = None
    prev_line = -2
    for span, _text, kind in doc.comments():
        if kind == "block":
            out.append(Fold(span.start, span.end - 1, "comment"))
            continue
        line_start = doc.text.rfind("\n", 0, span.start) + 1
        whole_line = doc.text[line_start:span.start].strip() == ""
        line = doc.position(span.start).line
        if whole_line and line == prev_line + 1 and run_start is not None:
            run_end = span.end - 1
        else:
            if run_start is not None and doc.position(run_end).line > doc.position(run_start).line:
                out.append(Fold(run_start, run_end, "comment"))
            run_start, run_end = (span.start, span.end - 1) if whole_line else (None, None)
        prev_line = line if whole_line else -2
    if run_start is not None and doc.position(run_end).line > doc.position(run_start).line:
        out.append(Fold(run_start, run_end, "comment"))
    return out
