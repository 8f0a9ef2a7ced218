"""Statement chunking: split a module into top-level statements before parsing.

A new statement starts at every line that, outside brackets and block comments, begins
with a non-blank character in column 1 (qvr-language.md Appendix A).  Blank and comment
lines before a statement belong to it (its *leading trivia*, where doc comments live).
Block comments are blanked out here (replaced by spaces, line breaks kept) so the lexer
never sees them; their errors (QVR004) are attached to the chunk.

Chunking is what makes the front end incremental: each chunk is parsed on its own and
parse results are cached by chunk text, so an edit re-parses only the chunks it touches.
`rechunk` re-splits only the region around an edit and reuses the rest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from qvr.syntax import errors as E
from qvr.syntax.layout import indent_width
from qvr.text import Span

STATEMENT_WORDS = ("object", "morphism", "let", "program", "export", "composition", "deduction")
UNSUPPORTED_WORDS = ("category", "rule", "schema", "bundle", "contraction", "signature",
                     "encoder", "decoder", "loss")
_RECOVERY = re.compile(r"(?:%s)\b" % "|".join(STATEMENT_WORDS))
_INTERESTING = re.compile(r'["#()\[\]{}]')
_STRING_REST = re.compile(r'(?:[^"\\\n]|\\.)*"')
_FIRST_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLANK = re.compile(r"[^\n\r]")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One top-level statement (plus its leading trivia), position-independent."""

    text: str  # as written
    clean: str  # block comments blanked
    kind: str  # "stmt" | "trivia" | "unsupported" | "stray"
    stmt_at: int  # offset in `text` of the statement's first character (len(text) for trivia)
    diagnostics: tuple  # block-comment diagnostics, relative to the chunk


@dataclass
class _Line:
    start: int
    end: int  # exclusive, includes the line break
    clean: str
    depth_before: int
    first: int  # offset in line of first significant char, -1 if blank
    diag: tuple
    cont: bool = False  # the line starts inside a block comment opened on an earlier line
    stmt: bool = False  # the line starts a top-level statement (indentation 0, outside brackets)


def _scan_lines(text: str, pos: int):
    """Yield `_Line`s from `pos` (a clean-state boundary) to the end of `text`."""
    depth = 0
    in_block = None  # start offset of an open block comment
    block_multiline = False
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl + 1
        line = text[pos:end]
        diags = []
        pieces = None  # list of (a, b) ranges to blank, relative to line
        i = 0
        depth_before = depth
        cont = in_block is not None
        if in_block is not None:
            k = line.find("}#")
            if k < 0:
                tail = (E.unterminated_block_comment(Span(in_block, in_block + 2)),) if end >= n else ()
                yield _Line(pos, end, _BLANK.sub(" ", line), depth_before, -1, tail, True)
                pos = end
                continue
            pieces = [(0, k + 2)]
            i = k + 2
            in_block = None
            if block_multiline:
                rest = line[i:]
                m = re.match(r"[ \t\f\r]*(#(?![\[{]|!\[)[^\n]*)?\n?$", rest)
                if not m:
                    j = i + len(rest) - len(rest.lstrip(" \t\f\r"))
                    tok = _FIRST_WORD.match(line, j)
                    diags.append(E.code_after_block_comment(
                        Span(pos + j, pos + (tok.end() if tok else j + 1))))
        while True:
            m = _INTERESTING.search(line, i)
            if not m:
                break
            c = m.group()
            j = m.start()
            if c == '"':
                s = _STRING_REST.match(line, j + 1)
                if not s:
                    break  # unterminated: the lexer reports QVR003
                i = s.end()
            elif c == "#":
                nxt = line[j + 1:j + 2]
                if nxt == "[":
                    depth += 1
                    i = j + 2
                elif nxt == "!" and line[j + 2:j + 3] == "[":
                    depth += 1
                    i = j + 3
                elif nxt == "{":
                    k = line.find("}#", j + 2)
                    pieces = pieces or []
                    if k >= 0:
                        pieces.append((j, k + 2))
                        i = k + 2
                    else:
                        pieces.append((j, len(line)))
                        in_block = pos + j
                        block_multiline = True
                        break
                else:
                    break  # line comment
            elif c in "([{":
                depth += 1
                i = j + 1
            else:
                if depth:
                    depth -= 1
                i = j + 1
        clean = line
        if pieces:
            chars = list(line)
            for a, b in pieces:
                for q in range(a, b):
                    if chars[q] not in "\r\n":
                        chars[q] = " "
            clean = "".join(chars)
        stripped = clean.lstrip(" \t\f\r")
        if not stripped or stripped[0] == "\n" or (
            stripped[0] == "#" and not stripped.startswith(("#[", "#!["))
        ):
            first = -1
        else:
            first = len(clean) - len(stripped)
        # a statement starts at indentation 0 (a form feed or lone CR counts 0 columns, 1.7)
        stmt = first >= 0 and indent_width(clean[:first]) == 0
        if stmt and depth_before > 0:
            if _RECOVERY.match(clean, first):
                # recovery: a keyword in column 1 ends the bracket run; recount this line
                depth = _count_brackets(clean)
            else:
                stmt = False  # continuation inside brackets
        if in_block is not None and end >= n:
            diags.append(E.unterminated_block_comment(Span(in_block, in_block + 2)))
        yield _Line(pos, end, clean, depth_before, first, tuple(diags), cont, stmt)
        pos = end


def _count_brackets(clean: str) -> int:
    depth = 0
    for m in _INTERESTING.finditer(clean):
        c = m.group()
        if c in "([{":
            depth += 1
        elif c in ")]}" and depth:
            depth -= 1
    return depth


def _kind_of(clean_line: str, first: int, stmt: bool) -> str:
    if not stmt:
        return "stray"
    if clean_line.startswith(("#[", "#!["), first):
        return "unsupported"
    m = _FIRST_WORD.match(clean_line, first)
    if m and m.group() in UNSUPPORTED_WORDS:
        return "unsupported"
    return "stmt"


def split(text: str, pos: int = 0, stop=None):
    """Split `text[pos:]` into chunks.

    Returns a list of ``(start, Chunk)``.  If `stop(offset)` is given, splitting stops at
    the first statement boundary `b` for which ``stop(b)`` is true; the returned list then
    ends before `b` and the caller reuses its old chunks from there on.
    """
    out = []
    cur_start = pos
    cur_clean: list[str] = []
    cur_diags: list = []
    cur_kind = None
    cur_stmt_at = None
    seen_code = False

    def flush(end):
        if end <= cur_start:
            return
        kind = cur_kind or "trivia"
        chunk_text = text[cur_start:end]
        stmt_at = cur_stmt_at if cur_stmt_at is not None else len(chunk_text)
        out.append((cur_start, Chunk(chunk_text, "".join(cur_clean), kind, stmt_at,
                                     tuple(d.shift(-cur_start) for d in cur_diags))))

    for ln in _scan_lines(text, pos):
        starts_stmt = ln.stmt or (ln.first >= 0 and not seen_code and cur_kind is None)
        if starts_stmt and seen_code:
            # the statement begins at this line; trivia since the last code line move with it
            boundary = _trivia_start
            # split pending trivia off into the new chunk
            trivia_clean = cur_clean[_trivia_index:]
            del cur_clean[_trivia_index:]
            trivia_diags = [d for d in cur_diags if d.span.start >= boundary]
            cur_diags[:] = [d for d in cur_diags if d.span.start < boundary]
            flush(boundary)
            if stop is not None and stop(boundary):
                return out, boundary
            cur_start = boundary
            cur_clean = trivia_clean
            cur_diags = trivia_diags
            cur_kind = None
            cur_stmt_at = None
        if ln.first >= 0 and cur_kind is None:
            cur_kind = _kind_of(ln.clean, ln.first, ln.stmt)
            cur_stmt_at = ln.start + ln.first - cur_start
            seen_code = True
        cur_clean.append(ln.clean)
        cur_diags.extend(ln.diag)
        if ln.first >= 0 or ln.cont:
            # a block comment's continuation lines stay with the line that opened it, so a
            # comment is never split between two chunks
            _trivia_start = ln.end
            _trivia_index = len(cur_clean)
    flush(len(text))
    return out, len(text)


_COMMENT_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|#\{.*?(?:\}#|\Z)|#(?![\[{]|!\[)[^\n]*|#!?\[', re.S)


def comments(text: str) -> tuple:
    """Every comment of `text` as ``(Span, text, kind)`` with kind line | doc | block.

    Strings are skipped, so a `#` inside a string starts nothing; `#[`/`#![` are pragma
    openers, not comments.  Spans are offsets into `text`.
    """
    out = []
    for m in _COMMENT_SCAN.finditer(text):
        tok = m.group()
        if tok.startswith('"') or tok.startswith(("#[", "#![")):
            continue
        if tok.startswith("#{"):
            kind = "block"
        elif tok.startswith("##") or (tok.startswith("#!") and not tok.startswith("#![")):
            kind = "doc"
        else:
            kind = "line"
        out.append((Span(m.start(), m.end()), tok, kind))
    return tuple(out)
