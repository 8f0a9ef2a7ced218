"""The layout pass (qvr-language.md section 1.7) as a lark post-lexer.

Turns the `_NL` tokens of the lexer into NEWLINE / INDENT / DEDENT, joins lines inside
brackets and records layout errors (QVR005 inconsistent dedent, QVR008 unbalanced
brackets) as diagnostics instead of raising, recovering as the spec says.  The one
exception it raises is `TooDeep` (brackets or blocks nested past `MAX_DEPTH`), which the
parser turns into QVR010.  Block-header
legality (QVR006/QVR007) is left to the grammar: an INDENT the grammar does not expect is
reported by the parser.
"""
from __future__ import annotations

from lark import Token

from qvr.syntax import errors as E
from qvr.syntax.depth import MAX_DEPTH


class TooDeep(Exception):
    """Raised out of the parse when brackets or blocks nest deeper than `MAX_DEPTH`: the
    statement is too deep anyway, so a hostile line is not lexed and parsed to its end."""

    def __init__(self, tok: Token):
        super().__init__(tok)
        self.token = tok

OPEN = {"LPAR": ")", "LSQB": "]", "LBRACE": "}", "PRAGMA_OPEN": "]"}
CLOSE = {"RPAR": ")", "RSQB": "]", "RBRACE": "}"}
_OPEN_TEXT = {"LPAR": "(", "LSQB": "[", "LBRACE": "{", "PRAGMA_OPEN": "#["}


def indent_width(ws: str) -> int:
    """Columns of leading whitespace: space 1, tab 8, form feed and lone CR 0."""
    n = 0
    for ch in ws:
        if ch == " ":
            n += 1
        elif ch == "\t":
            n += 8
    return n


def _next_line_indent(text: str, at: int):
    """Indentation of the next non-blank logical line after the line starting at `at`."""
    nl = text.find("\n", at)
    while nl >= 0:
        start = nl + 1
        nl = text.find("\n", start)
        line = text[start:] if nl < 0 else text[start:nl]
        body = line.lstrip(" \t\f\r")
        if body and (not body.startswith("#") or body.startswith(("#[", "#!["))):
            return indent_width(line[: len(line) - len(body)])
    return None


class Layout:
    """A fresh instance per parse: it holds the diagnostics and the tokens it saw."""

    always_accept = ("_NL",)

    def __init__(self, text: str = ""):
        self.text = text
        self.diagnostics = []
        self.tokens = []  # every token passed to the parser, for error context

    def _make(self, type_, at: int, like: Token, value: str = "") -> Token:
        tok = Token.new_borrow_pos(type_, value, like)
        tok.start_pos = at
        tok.end_pos = at
        return tok

    def process(self, stream):
        stack = [0]
        # per open level: [start offset of the block's first line, logical lines in it]
        blocks = [[0, 0]]
        brackets: list[Token] = []
        tokens = self.tokens
        last = None
        for tok in stream:
            t = tok.type
            if t == "_NL":
                if brackets:
                    continue
                value = str(tok)
                nl = value.rfind("\n")
                indent = indent_width(value[nl + 1:]) if nl >= 0 else 0
                line_at = tok.end_pos
                # layout tokens sit at the end of the last code token, so that node spans
                # never include trailing line breaks, comments or the next line
                sig_end = last.end_pos if last is not None else 0
                tok = self._make("_NL", sig_end, tok, str(tok))
                tokens.append(tok)
                yield tok
                if indent > stack[-1]:
                    stack.append(indent)
                    if len(stack) > MAX_DEPTH:
                        raise TooDeep(self._make("_INDENT", line_at, tok))
                    blocks.append([line_at, 1])
                    ind = self._make("_INDENT", line_at, tok)
                    tokens.append(ind)
                    yield ind
                elif indent < stack[-1]:
                    popped = None
                    while indent < stack[-1]:
                        stack.pop()
                        popped = blocks.pop()
                        ded = self._make("_DEDENT", sig_end, tok)
                        tokens.append(ded)
                        yield ded
                    if indent != stack[-1]:
                        odd = popped[0] if popped and popped[1] == 1 else None
                        if odd is not None and _next_line_indent(self.text, line_at) == indent:
                            line_at = odd
                        self.diagnostics.append(E.inconsistent_dedent(line_at))
                    blocks[-1][1] += 1
                else:
                    blocks[-1][1] += 1
                continue
            if t in OPEN:
                brackets.append(tok)
                if len(brackets) > MAX_DEPTH:
                    raise TooDeep(tok)
            elif t in CLOSE:
                if not brackets:
                    self.diagnostics.append(E.unmatched_bracket(tok))
                    continue
                opener = brackets[-1]
                if OPEN[opener.type] != CLOSE[t]:
                    self.diagnostics.append(E.unmatched_bracket(tok))
                brackets.pop()
            tokens.append(tok)
            last = tok
            yield tok
        for opener in brackets:
            self.diagnostics.append(E.unclosed_bracket(opener, _OPEN_TEXT[opener.type]))
        if brackets:
            # close the run so the parser can finish the statement
            end = last.end_pos if last is not None else 0
            nl = Token("_NL", "\n")
            nl.start_pos = nl.end_pos = end
            tokens.append(nl)
            yield nl
        while len(stack) > 1:
            stack.pop()
            ded = Token("_DEDENT", "")
            ded.start_pos = ded.end_pos = last.end_pos if last is not None else 0
            tokens.append(ded)
            yield ded
