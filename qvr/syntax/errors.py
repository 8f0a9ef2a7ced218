"""Constructors for lexical, layout and syntax diagnostics (QVR0xx, QVR900).

Every syntax diagnostic is built here, never inline at a call site.  Spans are relative to
the statement chunk being parsed.
"""
from __future__ import annotations

from qvr.diagnostics import Diagnostic, error
from qvr.text import Span

# Source spellings of terminals, for "expected ..." messages.
SPELLING = {
    "_NL": "end of line", "$END": "end of input", "_INDENT": "an indented block",
    "_DEDENT": "end of block", "NAME": "a name", "INT": "an integer", "FLOAT": "a number",
    "STRING": "a string", "COLON": ":", "ARROW": "->", "LARROW": "<-", "EQUAL": "=",
    "TILDE": "~", "COMMA": ",", "DOT": ".", "LPAR": "(", "RPAR": ")", "LSQB": "[",
    "RSQB": "]", "LBRACE": "{", "RBRACE": "}", "PRAGMA_OPEN": "#[", "STAR": "*",
    "PLUS": "+", "MINUS": "-", "SLASH": "/", "COMPOSE_OP": ">>", "AT": "@",
    "TURNSTILE": "|-", "FINSET": "FinSet", "REAL": "Real",
    "CMP_OP": "a comparison",  # extension E9.10 (`and`, `or`, `not` spell as themselves)
}

RESERVED = {
    "OBJECT": "object", "MORPHISM": "morphism", "LET": "let", "PROGRAM": "program",
    "EXPORT": "export", "COMPOSITION": "composition", "DEDUCTION": "deduction",
    "SAMPLE": "sample", "OBSERVE": "observe", "MARGINALIZE": "marginalize", "SCORE": "score",
    "RETURN": "return", "FAN": "fan", "STACK": "stack", "REPEAT": "repeat", "SCAN": "scan",
    "FACTOR": "factor", "IN": "in", "AS": "as", "FINSET": "FinSet", "REAL": "Real",
}
CONTEXTUAL = {"WHERE": "where", "ATOMS": "atoms", "BINDERS": "binders", "RULE": "rule",
              "LEXICON": "lexicon", "FROM": "from"}


def spell(terminal: str) -> str:
    if terminal in SPELLING:
        return SPELLING[terminal]
    if terminal in RESERVED:
        return RESERVED[terminal]
    if terminal in CONTEXTUAL:
        return CONTEXTUAL[terminal]
    if terminal.startswith("__ANON") or terminal.isupper():
        return terminal.lower()
    return terminal


def _q(s: str) -> str:
    return s if s.startswith(("end of", "a ", "an ")) else f"`{s}`"


def syntax_error(span: Span, expected: list[str], found: str) -> Diagnostic:
    """QVR001 with up to five expected tokens spelled as in the source."""
    exp = [_q(e) for e in expected[:5]]
    if not exp:
        msg = f"unexpected {_q(found)}"
    elif len(exp) == 1:
        msg = f"expected {exp[0]} but found {_q(found)}"
    else:
        msg = f"expected one of {', '.join(exp)} but found {_q(found)}"
    return error("QVR001", span, msg)


def unknown_keyword(span: Span, word: str, what: str, suggestion: str | None) -> Diagnostic:
    msg = f"unknown {what} `{word}`"
    if suggestion:
        msg += f"; did you mean `{suggestion}`?"
    return error("QVR001", span, msg, data=(("suggest", suggestion),) if suggestion else ())


def bad_number(span: Span, text: str) -> Diagnostic:
    return error("QVR001", span, f"`{text}` is not a number; write digits on both sides of `.`")


def unexpected_character(span: Span, ch: str) -> Diagnostic:
    shown = ch if ch.isprintable() else repr(ch)
    return error("QVR002", span, f"unexpected character `{shown}`")


def unterminated_string(span: Span) -> Diagnostic:
    return error("QVR003", span, "unterminated string literal")


def unterminated_block_comment(span: Span) -> Diagnostic:
    return error("QVR004", span, "unterminated block comment")


def code_after_block_comment(span: Span) -> Diagnostic:
    return error("QVR004", span, "code may not follow the end of a multi-line block comment")


def inconsistent_dedent(at: int) -> Diagnostic:
    return error("QVR005", Span(at, at + 1), "indentation does not match any enclosing block")


def unexpected_indent(span: Span) -> Diagnostic:
    return error("QVR006", span, "unexpected indentation")


def missing_block(span: Span) -> Diagnostic:
    return error("QVR007", span, "expected an indented block after this line")


def unmatched_bracket(tok) -> Diagnostic:
    return error("QVR008", Span(tok.start_pos, tok.end_pos), f"unmatched `{tok}`")


def unclosed_bracket(tok, text: str) -> Diagnostic:
    return error("QVR008", Span(tok.start_pos, tok.end_pos), f"unclosed `{text}`")


def reserved_word(span: Span, word: str) -> Diagnostic:
    return error("QVR009", span, f"`{word}` is a reserved word and cannot be used as a name")


def nested_too_deeply(span: Span, limit: int) -> Diagnostic:
    """QVR010 on the first token of the construct that goes past the nesting limit."""
    return error("QVR010", span, f"this statement is nested too deeply (more than {limit} levels of "
                 "brackets, calls, blocks and chained operators); name parts of it with `let`")


def count_not_literal(span: Span, fn: str, name: str) -> Diagnostic:
    """QVR116: `stack(f, N)` / `repeat(f, N)` — a copy count given by a name."""
    return error("QVR116", span, f"the count of `{fn}` is a whole number written in the program, "
                 f"got the name `{name}` (a size read from the data cannot be one)")


def outside_core(span: Span, construct: str, plural: bool = False) -> Diagnostic:
    """QVR900; `construct` is a noun phrase ("`signature` declarations", "family `VonMises`")."""
    verb = "are" if plural else "is"
    return error("QVR900", span, f"{construct} {verb} outside the supported core")
