"""Formatter plumbing: source items, the line writer and the comment-aware token cursor.

`qvr.syntax.format` prints each parsed statement from its AST (`qvr.syntax.format_print`)
while walking, in step, the statement's *source items*: its code tokens and the comments
between them.  Every token the printer emits is checked against the next source token, so
comments (which are not in the AST) are re-inserted exactly where they sat between tokens,
and a printer/parser disagreement is detected (`Mismatch`) instead of producing wrong
output.  This module knows nothing of the AST; it lexes code tokens, lays out lines and
places comments.  It does not decide the canonical style of any construct.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

OPENERS = frozenset(("(", "[", "{", "#["))
CLOSERS = frozenset((")", "]", "}"))
INDENT = 4  # columns per block level and per multi-line bracket

# Code tokens of a statement's *clean* text (block comments already blanked by the chunker).
_TOKEN = re.compile(r"""
  (?P<ws>[ \t\f\r\n]+)
| (?P<comment>\#(?![\[{]|!\[)[^\n]*)
| (?P<code>"(?:[^"\\\n]|\\.)*"
   | [0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)? | [0-9]+[eE][+-]?[0-9]+ | [0-9]+
   | [A-Za-z_][A-Za-z0-9_]*
   | >>> | >=> | \|\|> | &&> | >> | << | \*> | ~> | \?> | \+> | \$> | %>
   | -> | <- | == | != | <= | >= | \|- | ⊢ | \#!?\[ | [:=~,.()\[\]{}*+\-/@]
   | .)
""", re.X)


def code_tokens(clean: str, start: int, end: int):
    """``(offset, text)`` of the code tokens of ``clean[start:end]`` (comments skipped)."""
    out = []
    pos = start
    while pos < end:
        m = _TOKEN.match(clean, pos, end)
        if m.lastgroup == "code":
            out.append((pos, m.group()))
        pos = m.end()
    return out


def indent_width(ws: str) -> int:
    """Columns of leading whitespace as the layout pass counts them (tab 8, \\f and \\r 0)."""
    return sum(1 if ch == " " else 8 if ch == "\t" else 0 for ch in ws)


def is_doc(text: str) -> bool:
    return text.startswith("##") or (text.startswith("#!") and not text.startswith("#!["))


@dataclass(slots=True)
class Item:
    """A code token, a comment, or (``raw``) a statement kept byte-for-byte."""

    kind: str  # code | comment | raw
    text: str
    start: int
    end: int
    line: int = 0  # 0-based source line of `start`
    nl_before: int = 0  # line breaks between the previous item and this one
    own_line: bool = False  # only whitespace precedes it on its source line
    col: int = 0  # indentation width of its source line
    close_line: int = -1  # for an opener: the source line of its matching closer

    @property
    def breaks_after(self) -> bool:
        """A line comment, or a block comment spanning lines: the next token starts a line."""
        return self.kind == "comment" and (not self.text.startswith("#{") or "\n" in self.text)


class Mismatch(Exception):
    """The printer and the source tokens disagree (internal; the statement is kept as is)."""


@dataclass
class Writer:
    """Output lines with indentation, single spaces between tokens and blank-line control."""

    lines: list = field(default_factory=list)
    trails: list = field(default_factory=list)  # per line: column where a trailing comment's code ends
    cur: str = ""  # content of the line being built (without indentation)
    cur_indent: int = 0
    indent: int = 0  # indentation of the next new line
    last: str = ""  # what ends the current line: "" | tok | open | comment
    glue: bool = False  # no space before the next token
    must_break: bool = False  # the next token starts a new line
    no_blank: bool = True  # directly after an opener or block header: no blank line
    trail_col: Optional[int] = None  # the current line ends with a trailing comment after this

    def newline(self) -> None:
        if self.cur:
            self.lines.append((" " * self.cur_indent + self.cur).rstrip())
            self.trails.append(self.trail_col)
            self.trail_col = None
            self.cur = ""
            self.last = ""
            self.glue = False
        self.must_break = False
        self.cur_indent = self.indent

    def blank(self) -> None:
        """One blank line before the next line (runs collapse; none after an opener)."""
        self.newline()
        if not self.no_blank and self.lines and self.lines[-1] != "":
            self.lines.append("")
            self.trails.append(None)

    def put(self, text: str, sp: bool = True, kind: str = "tok", sep: Optional[str] = None) -> None:
        if self.must_break:
            self.newline()
        if not self.cur:
            self.cur_indent = self.indent
            self.cur = text
            self.no_blank = False
        else:
            if sep is None and self.last == "comment":  # after an inline block comment
                sep = "" if text in CLOSERS or text == "," else " "
            elif sep is None:
                sep = " " if sp and not self.glue and self.last != "open" else ""
            self.trail_col = None
            if kind == "comment" and sep == "  " and "\n" not in text and "\n" not in self.cur:
                self.trail_col = self.cur_indent + len(self.cur)
            self.cur += sep + text
        self.glue = False
        self.last = kind
        if kind != "comment":
            self.no_blank = kind == "open"

    def raw(self, text: str) -> None:
        """Lines kept exactly as written (a statement that is not formatted)."""
        self.newline()
        raw_lines = text.split("\n")
        self.lines.extend(raw_lines)
        self.trails.extend([None] * len(raw_lines))
        self.no_blank = False

    def truncate(self, n: int) -> None:
        """Forget the lines from `n` on (a statement printed and then rejected)."""
        del self.lines[n:]
        del self.trails[n:]
        self.cur, self.trail_col, self.must_break, self.indent = "", None, False, 0

    def aligned(self) -> list:
        """The lines, with the trailing comments of consecutive lines aligned in one column
        (two spaces after the longest code among them)."""
        out = list(self.lines)
        k = 0
        n = len(out)
        while k < n:
            if self.trails[k] is None:
                k += 1
                continue
            j = k
            while j < n and self.trails[j] is not None:
                j += 1
            if j - k > 1:
                col = max(self.trails[k:j]) + 2
                for q in range(k, j):
                    code, comment = out[q][:self.trails[q]], out[q][self.trails[q]:].lstrip(" ")
                    out[q] = code + " " * (col - len(code)) + comment
            k = j
        return out


class Cursor:
    """Walks the items of the module while the printer emits the same tokens."""

    def __init__(self, items: list, writer: Optional[Writer] = None):
        self.items = items
        self.i = 0
        self.w = writer or Writer()
        self.level_col: dict[int, int] = {}  # block level -> source column of its last line
        self.last_level = 0  # block level of the last logical line printed

    # ------------------------------------------------------------ looking ahead
    def peek(self) -> Optional[Item]:
        """The next code item (comments skipped), or None."""
        items, j = self.items, self.i
        while j < len(items) and items[j].kind == "comment":
            j += 1
        return items[j] if j < len(items) and items[j].kind == "code" else None

    def peek_text(self) -> str:
        it = self.peek()
        return it.text if it is not None else ""

    def _next_nl(self) -> int:
        j = self.i + 1
        return self.items[j].nl_before if j < len(self.items) else 1

    # ------------------------------------------------------------ comments
    def comment(self, c: Item, indent: Optional[int] = None, at_end: bool = False) -> None:
        """Emit comment `c` (the item at the cursor) and advance; `at_end`: the output line
        ends after it (it trails the line whatever follows it in the source)."""
        w = self.w
        text = c.text.rstrip() if not c.text.startswith("#{") else c.text
        trailing = at_end or self._next_nl() > 0
        if c.own_line:
            w.newline()
            if c.nl_before >= 2:
                w.blank()
            if indent is not None:
                w.indent = indent
                w.cur_indent = indent
            w.put(text, kind="comment")
        elif not w.cur:
            w.put(text, kind="comment")
        else:
            if w.last == "open" and not trailing:
                sep = ""
            elif trailing and w.last != "comment":
                sep = "  "
            else:
                sep = " "
            w.put(text, kind="comment", sep=sep)
        self.i += 1
        if c.breaks_after or (c.own_line and trailing):
            w.must_break = True

    def pending_comments(self) -> None:
        """Emit every comment before the next code token, at the current indentation."""
        items = self.items
        while self.i < len(items) and items[self.i].kind == "comment":
            self.comment(items[self.i])

    def nl(self) -> None:
        """End the logical line: comments on the same source line trail it."""
        items = self.items
        while self.i < len(items) and items[self.i].kind == "comment" and not items[self.i].own_line:
            self.comment(items[self.i], at_end=True)
        self.w.newline()

    # ------------------------------------------------------------ tokens
    def tk(self, text: Optional[str] = None, sp: bool = True, glue: bool = False,
           kind: str = "tok") -> Item:
        """Emit the next source token (which must read `text`, if given)."""
        self.pending_comments()
        it = self.items[self.i] if self.i < len(self.items) else None
        if it is None or it.kind != "code" or (text is not None and it.text != text):
            raise Mismatch(f"expected {text!r}, found {it.text if it else 'end'!r}")
        w = self.w
        if (w.must_break or not w.cur) and it.nl_before >= 2 and it.text not in CLOSERS:
            w.blank()
        w.put(it.text, sp, "open" if it.text in OPENERS else kind)
        if glue:
            w.glue = True
        self.i += 1
        return it

    def skip(self, text: str) -> None:
        """Drop the next code token (a comma the printer places itself), keeping comments."""
        j = self.i
        while j < len(self.items) and self.items[j].kind == "comment":
            j += 1
        if j >= len(self.items) or self.items[j].text != text:
            raise Mismatch(f"expected {text!r} to skip")
        del self.items[j]

    # ------------------------------------------------------------ brackets
    def is_multiline(self) -> bool:
        it = self.peek()
        return it is not None and it.close_line > it.line

    def seq(self, opener: str, entries, fn, closer: str, trailing: bool = True,
            sp: bool = True, pad: bool = False) -> None:
        """A bracketed, comma-separated list.

        Written on one line: printed on one line, trailing comma dropped (`pad`: one space
        inside the brackets, for braces).  Written over
        several lines: one entry per line, indented one step, trailing comma where the
        grammar allows one, the closer on its own line.
        """
        w = self.w
        multi = self.is_multiline()
        self.tk(opener, sp)
        if multi and not entries:
            nxt = self.items[self.i] if self.i < len(self.items) else None
            multi = nxt is not None and nxt.kind == "comment"
        if not multi:
            if pad and entries:
                w.last = "tok"  # `{ 0 -> a }`: a space inside the braces
            for k, e in enumerate(entries):
                if k:
                    self.tk(",", sp=False)
                fn(e)
            if self.peek_text() == ",":
                self.skip(",")
            self.tk(closer, sp=pad and bool(entries))
            return
        saved, open_indent = w.indent, w.cur_indent
        w.indent = open_indent + INDENT
        w.no_blank = True
        for k, e in enumerate(entries):
            self.nl()
            fn(e)
            last = k == len(entries) - 1
            if not last or self.peek_text() == ",":
                self.skip(",")  # the comma goes right after the entry, before its comments
            if not last or trailing:
                w.put(",", sp=False)
        self.nl()
        self.pending_comments()
        w.indent = open_indent
        w.newline()
        w.must_break = True
        self.tk(closer, sp=False)
        w.indent = saved

    # ------------------------------------------------------------ blocks
    def block_line(self, level: int) -> None:
        """Start a logical line of a block at `level`.

        Comments on their own lines before it go to the deepest level, between this one and
        that of the previous line, whose source column they reach (a comment left at the
        end of a nested block stays in it)."""
        self.nl()
        w = self.w
        items = self.items
        cap = max(level, self.last_level)
        while self.i < len(items) and items[self.i].kind == "comment":
            c = items[self.i]
            chosen = level
            if c.own_line:
                for cand in range(cap, level, -1):
                    if cand in self.level_col and c.col >= self.level_col[cand]:
                        chosen = cand
                        break
                cap = chosen
            self.comment(c, INDENT * chosen if c.own_line else None)
        w.indent = INDENT * level
        w.must_break = True
        first = self.peek()
        if first is not None:
            self.level_col[level] = first.col
        for deeper in [k for k in self.level_col if k > level]:
            del self.level_col[deeper]
        self.last_level = level
