"""The canonical QVR formatter (`qvr fmt`, editor formatting): text in, canonical text out.

`format_text` formats a whole module; `format_range` formats only the top-level statements
overlapping a range and returns the edits.  Both never raise on user input: a statement
with a syntax error (or an outside-core statement the parser cannot shape) is kept
byte-for-byte and reported in `FormatResult.skipped`, and the rest is formatted.

How: the module is split into statement chunks (`qvr.syntax.chunks`) and each chunk is
parsed (`qvr.syntax.parser`).  A parsed statement is printed from its AST
(`qvr.syntax.format_print`) while its source tokens are walked in step
(`qvr.syntax.format_writer`), so every comment is put back between the same two tokens it
sat between.  The printed statement is then re-parsed: unless it gives the same AST (spans
aside) and the same comments, the statement is kept as written (and listed as skipped), so
formatting never changes the meaning of a program.

Canonical style:

* Top-level statements start in column 1; blocks (program steps, `marginalize` bodies,
  deduction entries, lexicon items, outside-core `where` lets) are indented 4 spaces per
  level, whatever indentation the source used.
* One space around `:`, `->`, `<-`, `=`, `~`, `>>` (and the other composition operators),
  `@`, `*`, `+`, `-`, `/` and the turnstile; `, ` after commas; no space inside `( )` and
  `[ ]`, before `(` of a call, parameter list or target, before `[` of an index, or around
  `.`; one space inside single-line braces, as the spec writes case blocks:
  `factor b : Band in { 0 -> base, 1 -> base + gap }`.
  Inside option blocks and pragmas `=` has no spaces: `[role=kernel, scale=0.1]`,
  `#[learnable]`; likewise `scan(f, init=x)`.  Unary minus and signed numbers are glued:
  `-x`, `[low=-1.0]`.  A space separates a declaration from its option block or pragma.
* Names, numbers and strings are printed exactly as written (`1e-5` stays `1e-5`), and the
  turnstile is kept as written (`|-` or `⊢`: both are the same token; the formatter does
  not choose between them).  Redundant parentheses are kept.
* Line breaks are the user's: a bracketed construct written on one line stays on one line
  (its trailing comma, if any, is removed); one that the user split over several lines is
  laid out one entry per line, indented one level from the line of its opener, with a
  trailing comma where the grammar allows one (not in `fan(...)`, `stack`/`repeat`/`scan`,
  morphism call arguments, patterns and parentheses) and the closer on its own line.
  There is no line-length limit: the formatter never joins or wraps lines by width.
* Blank lines are preserved but a run of them is collapsed to one; none is kept at the
  start of the file, directly after a block header or an opening bracket, or before a
  closing bracket.  The file ends with exactly one newline (an empty module formats to
  the empty string).  Trailing whitespace is removed.  CRLF line ends become LF.
* Comments: every comment is kept with its text (trailing whitespace of line comments
  removed; block comments `#{ }#` verbatim, inner lines included).  A comment that
  followed code on a line stays at the end of that line, two spaces after the code; the
  trailing comments of consecutive lines are aligned in one column, two spaces after the
  longest code among them (a blank line, or a line without a trailing comment, ends such a
  run).  A comment on its own line stays on its own line, indented like the code it
  precedes, except that a comment below the last line of a nested block and indented at
  least as deep as that block stays in it (doc comments `##`/`#!` between statements go
  to column 1; comments after a statement kept as written keep their columns).  A block
  comment between tokens stays between them, with one space on each side (none next to a
  bracket).

Deliberately not done: reordering or grouping declarations, inserting blank lines between
declarations, wrapping long lines, normalising the spelling of numbers, strings or the
turnstile, re-indenting the text inside block comments, and formatting statements that do
not parse (they are left exactly as written, apart from CRLF normalisation).
"""
from __future__ import annotations

import bisect
import dataclasses
import re
from dataclasses import dataclass

from qvr.diagnostics import TextEdit
from qvr.syntax.chunks import comments, split
from qvr.syntax.format_print import Printer
from qvr.syntax.format_writer import (INDENT, OPENERS, CLOSERS, Item, Mismatch, Writer,
                                      code_tokens, indent_width, is_doc)
from qvr.syntax.parser import parse_chunk
from qvr.text import Span


@dataclass(frozen=True)
class FormatResult:
    """`text`: the formatted module; `changed`: whether it differs from the input;
    `skipped`: spans (in the input text) of the statements left as written."""

    text: str
    changed: bool
    skipped: tuple[Span, ...]


# ---------------------------------------------------------------- units

@dataclass
class _Unit:
    """One chunk: leading comments, then a statement (formatted or raw), then (in the last
    chunk only) trailing comments.  `start`/`end` tile the (LF) text."""

    start: int
    end: int
    decl: object  # the AST, or None when the statement is kept as written (or absent)
    stmt_start: int
    raw_end: int  # end of the statement's last line (without the line break)
    fmt_items: list  # comments + code tokens (formatted statement)
    raw_items: list  # comments outside the statement + one raw item
    chunk_start: int
    chunk: object
    raw_start: int = 0


_CODE_LINE = re.compile(r"[ \t\f\r]*(?:#\[|#!\[|[^#\s])")


def _last_code_line_end(clean: str, base: int, stmt_at: int) -> int:
    """Offset (in the module) of the end of the chunk's last line holding code."""
    end = stmt_at
    pos = stmt_at
    while pos < len(clean):
        nl = clean.find("\n", pos)
        stop = len(clean) if nl < 0 else nl
        if _CODE_LINE.match(clean, pos, stop):
            end = stop
        pos = stop + 1
    return base + end


def _units(text: str) -> list:
    parts, _ = split(text)
    cmts = [(sp.start, sp.end, t) for sp, t, _ in comments(text)]
    starts = [c[0] for c in cmts]
    units = []
    for start, chunk in parts:
        end = start + len(chunk.text)
        stmt_start = start + chunk.stmt_at
        decl = None
        if chunk.kind == "stmt":
            decl = parse_chunk(chunk).decl
        raw_end = stmt_start
        if chunk.kind != "trivia":
            raw_end = _last_code_line_end(chunk.clean, start, chunk.stmt_at)
        units.append(_Unit(start, end, decl, stmt_start, raw_end, [], [], start, chunk))
    # a comment that starts in one chunk and ends in the next (a block comment after code
    # on the last line of a statement) belongs to the first: move the boundary past it
    for a, b in zip(units, units[1:]):
        i = bisect.bisect_left(starts, a.start)
        while i < len(cmts) and cmts[i][0] < a.end:
            cs, ce, _ = cmts[i]
            if ce > a.end:
                nl = text.find("\n", ce)
                line_end = len(text) if nl < 0 else nl
                if cs <= a.raw_end:
                    a.raw_end = max(a.raw_end, min(line_end, b.stmt_start))
                a.end = b.start = max(a.end, min(line_end + 1, b.stmt_start))
            i += 1
    for u in units:
        i = bisect.bisect_left(starts, u.start)
        spans = []
        while i < len(cmts) and cmts[i][0] < u.end:
            spans.append(cmts[i])
            i += 1
        raw_start = min(u.stmt_start, u.end)
        line_start = text.rfind("\n", 0, raw_start) + 1
        if not text[line_start:raw_start].strip(" \t\f\r"):
            raw_start = line_start  # an indented (stray) statement keeps its indentation
        u.raw_start = raw_start
        raw_items = [Item("comment", t, cs, ce) for cs, ce, t in spans
                     if not raw_start <= cs < u.raw_end]
        if u.raw_end > raw_start:
            raw_items.append(Item("raw", text[raw_start:u.raw_end], raw_start, u.raw_end))
        u.raw_items = sorted(raw_items, key=lambda it: it.start)
        if u.decl is not None:
            base = u.chunk_start
            toks = [Item("code", t, base + q, base + q + len(t))
                    for q, t in code_tokens(u.chunk.clean, u.chunk.stmt_at, len(u.chunk.clean))]
            fmt = [Item("comment", t, cs, ce) for cs, ce, t in spans]
            u.fmt_items = sorted(fmt + toks, key=lambda it: it.start)
    return units


def _annotate(text: str, items: list, prev_end: int, line_starts: list) -> None:
    """Fill in line, nl_before, own_line, col and (for openers) close_line."""
    stack = []
    for it in items:
        it.nl_before = text.count("\n", prev_end, it.start)
        line = bisect.bisect_right(line_starts, it.start) - 1
        it.line = line
        prefix = text[line_starts[line]:it.start]
        body = prefix.lstrip(" \t\f\r")
        it.own_line = not body
        it.col = indent_width(prefix[:len(prefix) - len(body)])
        prev_end = it.end
        if it.kind == "code":
            if it.text in OPENERS:
                stack.append(it)
            elif it.text in CLOSERS and stack:
                opener = stack.pop()
                opener.close_line = bisect.bisect_right(line_starts, it.start) - 1


# ---------------------------------------------------------------- printing

_FIELDS: dict = {}


def _shape(x):
    """An AST without its spans, for comparing a statement before and after formatting."""
    if isinstance(x, tuple):
        return tuple(_shape(y) for y in x)
    if isinstance(x, Span):
        return None
    names = _FIELDS.get(type(x))
    if names is None:
        names = _FIELDS[type(x)] = (tuple(f.name for f in dataclasses.fields(x))
                                    if dataclasses.is_dataclass(x) else ())
    if not names:
        return x
    return (type(x).__name__,) + tuple(_shape(getattr(x, n)) for n in names)


def _comment_text(t: str) -> str:
    return t if t.startswith("#{") else t.rstrip()


def _same_statement(out: str, decl, expected_comments: list) -> bool:
    parts, _ = split(out + "\n")
    stmts = [c for _, c in parts if c.kind != "trivia"]
    if len(stmts) != 1 or stmts[0].kind != "stmt":
        return False
    parsed = parse_chunk(stmts[0])
    if parsed.decl is None or any(d.is_error for d in parsed.diagnostics):
        return False
    got = [_comment_text(t) for _, t, _ in comments(out)]
    return got == expected_comments and _shape(parsed.decl) == _shape(decl)


def _trivia(p: Printer, prev) -> None:
    """Comments between statements.  `prev` is ``(last_level, level_col)`` of the statement
    before, or None (it was kept as written: comments keep their columns)."""
    items = p.items
    cap = None
    while p.i < len(items) and items[p.i].kind == "comment":
        c = items[p.i]
        indent = None
        if c.own_line:
            if prev is None:
                indent = c.col
            else:
                last_level, cols = prev
                hi = last_level if cap is None else cap
                level = 0
                if not is_doc(c.text):
                    for cand in range(hi, 0, -1):
                        if cand in cols and c.col >= cols[cand]:
                            level = cand
                            break
                cap = level
                indent = INDENT * level
        p.comment(c, indent)
    p.w.indent = 0


def _emit_unit(text: str, u: _Unit, w: Writer, prev, raw: bool):
    """Print one unit; returns the level state for the next one, or raises Mismatch."""
    items = list(u.raw_items if raw else u.fmt_items)  # the printer drops commas from it
    p = Printer(items, w)
    _trivia(p, prev)
    if p.i >= len(items):
        return prev
    first = items[p.i]
    if first.kind == "raw":
        w.newline()
        if first.nl_before >= 2:
            w.blank()
        w.raw(first.text)
        p.i += 1
        _trivia(p, None)
        return None
    w.newline()
    w.indent = 0
    w.must_break = True
    p.level_col = {0: first.col}
    p.last_level = 0
    mark = len(w.lines)
    p.decl(u.decl)
    p.nl()
    if p.peek() is not None:
        raise Mismatch("tokens left over")
    printed = "\n".join(w.lines[mark:])
    if printed != text[first.start:items[p.i - 1].end]:  # already canonical: nothing to check
        expected = [_comment_text(it.text) for it in items[items.index(first):p.i]
                    if it.kind == "comment"]
        if not _same_statement(printed, u.decl, expected):
            raise Mismatch("the printed statement does not parse back to the same tree")
    state = (p.last_level, dict(p.level_col))
    _trivia(p, state)
    return state


@dataclass
class _Run:
    text: str  # LF-normalised input
    units: list
    bounds: list  # per unit: index into `lines` after its last line
    lines: list
    skipped: list  # (start, end) in the LF text


def _run(text: str) -> _Run:
    units = _units(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    prev_end = 0
    for u in units:
        _annotate(text, u.raw_items, prev_end, line_starts)
        _annotate(text, u.fmt_items, prev_end, line_starts)
        prev_end = _line_end_before(text, u.end)
    w = Writer()
    prev = (0, {0: 0})
    bounds, skipped = [], []
    for u in units:
        mark = (len(w.lines), w.no_blank)
        raw = u.decl is None
        if not raw:
            try:
                prev = _emit_unit(text, u, w, prev, raw=False)
            except Exception:  # noqa: BLE001 - a printer defect must never cost the user text
                w.truncate(mark[0])
                w.no_blank = mark[1]
                raw = True
        if raw:
            prev = _emit_unit(text, u, w, prev, raw=True)
            if u.raw_end > u.raw_start:
                skipped.append((u.raw_start, u.raw_end))
        w.newline()
        bounds.append(len(w.lines))
    return _Run(text, units, bounds, w.aligned(), skipped)


def _line_end_before(text: str, end: int) -> int:
    """The offset of the line break that ends the text before `end` (or `end`)."""
    if end > 0 and text[end - 1:end] == "\n":
        return end - 1
    return end


def _join(lines: list) -> str:
    return "\n".join(lines) + "\n" if lines else ""


# ---------------------------------------------------------------- line ends

_CRS = re.compile(r"\r+\n")


class _Crlf:
    """Offsets between the input text and its LF-normalised form (every `\r` that ends a
    line is dropped, so that the output never holds a CRLF)."""

    def __init__(self, text: str):
        self.crs = [m.start() + k for m in _CRS.finditer(text) for k in range(m.end() - m.start() - 1)]
        self.norm_crs = [r - k for k, r in enumerate(self.crs)]  # normalised offsets of the \n
        self.text = _CRS.sub("\n", text) if self.crs else text

    def to_input(self, pos: int) -> int:
        return pos + bisect.bisect_left(self.norm_crs, pos)

    def to_norm(self, pos: int) -> int:
        return pos - bisect.bisect_left(self.crs, pos)


# ---------------------------------------------------------------- API

def format_text(text: str) -> FormatResult:
    """Format a whole module (see the module docstring for the style)."""
    crlf = _Crlf(text)
    run = _run(crlf.text)
    out = _join(run.lines)
    skipped = tuple(Span(crlf.to_input(a), crlf.to_input(b)) for a, b in run.skipped)
    return FormatResult(out, out != text, skipped)


def format_range(text: str, start: int, end: int) -> list[TextEdit]:
    """Edits that format the top-level statements (each with the comments and blank lines
    before it) overlapping ``[start, end)`` of `text`; an empty range selects the statement
    containing `start`.  Offsets are those of `text`; the rest of the text is untouched."""
    crlf = _Crlf(text)
    norm = crlf.text
    a, b = crlf.to_norm(max(0, min(start, len(text)))), crlf.to_norm(max(0, min(end, len(text))))
    a, b = min(a, b), max(a, b)
    run = _run(norm)
    newline = "\r\n" if crlf.crs else "\n"
    edits = []
    lo = 0
    for k, u in enumerate(run.units):
        ustart = u.start
        uend = run.units[k + 1].start if k + 1 < len(run.units) else len(norm)
        hi = run.bounds[k]
        hit = (ustart < b and a < uend) or (a == b and ustart <= a < uend) or \
              (a == b == uend == len(norm) and k == len(run.units) - 1)
        if hit:
            new = _join(run.lines[lo:hi])
            if new != norm[ustart:uend]:
                edits.append(TextEdit(Span(crlf.to_input(ustart), crlf.to_input(uend)),
                                      new.replace("\n", newline)))
        lo = hi
    return edits


__all__ = ["FormatResult", "format_text", "format_range"]
