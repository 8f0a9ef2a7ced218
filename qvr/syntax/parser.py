"""Parsing: a statement chunk in, an AST plus diagnostics out.  Never raises on user input.

`parse_chunk` parses one top-level statement (see `qvr.syntax.chunks`) with lark's LALR
parser and the layout post-lexer, lowers the tree to `qvr.syntax.ast`, and turns lark's
exceptions into curated diagnostics (QVR001-QVR010, QVR900); a statement nested deeper than
`qvr.syntax.depth.MAX_DEPTH` becomes QVR010 and no tree, so no later pass recurses on it.  Results are memoised by
chunk text, which is what makes re-parsing after an edit cheap.  `parse_module` is the
whole-file convenience used by tests and tools that do not need incrementality.
"""
from __future__ import annotations

import difflib
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from qvr.syntax import ast as A
from qvr.syntax import errors as E
from qvr.syntax.chunks import Chunk, split
from qvr.syntax.depth import MAX_DEPTH, too_deep
from qvr.syntax.layout import Layout, TooDeep
from qvr.syntax.lower import ToAst
from qvr.text import Span

_local = threading.local()


class _PostLex:
    always_accept = ("_NL",)

    def process(self, stream):
        return _local.layout.process(stream)


@lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = (Path(__file__).with_name("grammar.lark")).read_text(encoding="utf-8")
    # the AST is built by lark's callbacks during parsing (no intermediate tree)
    return Lark(grammar, parser="lalr", lexer="contextual", postlex=_PostLex(),
                maybe_placeholders=False, transformer=ToAst(), cache=True)



RESERVED_WORDS = frozenset(E.RESERVED.values())
_STEP_WORDS = ("sample", "observe", "marginalize", "let", "score", "return")
_ENTRY_WORDS = ("atoms", "binders", "rule", "lexicon")
_HEAD = re.compile(r"(object|morphism|let|program|deduction|composition)[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_TOKEN_AT = re.compile(r'[A-Za-z_][A-Za-z0-9_]*|[0-9]+(\.[0-9]+)?|"[^"\n]*"?|\S')
_TYPE_CONSTRUCTORS = {"Simplex", "Sphere", "Ball", "CholeskyFactor", "Covariance",
                      "Correlation", "Orthogonal", "Stiefel", "LowerTriangular", "Diagonal",
                      "FreeMonoid", "FreeResiduated"}
_UNSUPPORTED_NAMES = {
    "category": "`category` declarations", "rule": "top-level `rule` declarations",
    "schema": "`schema` declarations", "bundle": "`bundle` declarations",
    "contraction": "`contraction` declarations", "signature": "`signature` declarations",
    "encoder": "`encoder` declarations", "decoder": "`decoder` declarations",
    "loss": "`loss` declarations",
}


@dataclass(frozen=True, slots=True)
class ParsedChunk:
    """The parse of one chunk: spans are relative to the chunk start."""

    decl: Optional[A.Decl]
    diagnostics: tuple
    keyword: Optional[str]  # first word of the statement
    name: Optional[A.Name]  # the declared name, readable even after a syntax error
    docs: tuple[str, ...]  # doc-comment lines of the leading trivia
    unsupported: bool = False



def _token_span(text: str, at: int) -> Span:
    m = _TOKEN_AT.match(text, at)
    return Span(at, m.end() if m else at + 1)


def _suggest(word: str, candidates) -> Optional[str]:
    for c in sorted(candidates):
        if c.lower() == word.lower():
            return c
    got = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.75)
    return got[0] if got else None


def _docs(text: str, stmt_at: int) -> tuple[str, ...]:
    out = []
    for line in text[:stmt_at].split("\n"):
        s = line.strip()
        if s.startswith("##"):
            out.append(s[2:].strip())
        elif s.startswith("#!") and not s.startswith("#!["):
            out.append(s[2:].strip())
    return tuple(out)


def _prev_significant(tokens, tok) -> Optional[Token]:
    """The token before `tok` in the stream, skipping layout tokens."""
    seen = False
    for t in reversed(tokens):
        if not seen:
            if t is tok:
                seen = True
            continue
        if t.type not in ("_NL", "_INDENT", "_DEDENT"):
            return t
    if not seen:
        for t in reversed(tokens):
            if t.type not in ("_NL", "_INDENT", "_DEDENT") and t is not tok:
                return t
    return None


def _end_anchor(prev: Optional[Token]) -> Span:
    if prev is None:
        return Span(0, 1)
    return Span(max(prev.end_pos - 1, prev.start_pos), prev.end_pos)


def _map_unexpected_token(exc: UnexpectedToken, text: str, keyword: Optional[str], layout: Layout):
    tok = exc.token
    t = tok.type
    try:
        expected = {k for k in exc.interactive_parser.choices() if k.isupper() or k.startswith("_")}
    except Exception:  # pragma: no cover - defensive
        expected = set(exc.expected)
    tokens = layout.tokens
    prev = _prev_significant(tokens, tok)
    # an INDENT the grammar does not allow
    if t == "_INDENT":
        span = _token_span(text, tok.start_pos)
        if keyword == "composition":
            line = text.split("\n", 1)[0].rstrip()
            start = len(line) - len(line.lstrip())
            return E.outside_core(Span(start, len(line)), "a user-defined composition rule (an indented `composition` body)")
        return E.unexpected_indent(span)
    if "_INDENT" in expected and t != "_INDENT":
        return E.missing_block(_end_anchor(prev))
    if t in ("_NL", "_DEDENT", "$END"):
        span = _end_anchor(prev)
        found = "end of line"
    else:
        span = Span(tok.start_pos, tok.end_pos)
        found = str(tok)
    # a name where a statement, step or deduction entry must start
    if t == "NAME":
        for words, what in (
            (E.RESERVED.keys() & {"OBJECT", "MORPHISM", "PROGRAM", "EXPORT", "DEDUCTION"}, "statement"),
            ({"SAMPLE", "OBSERVE", "MARGINALIZE", "SCORE", "RETURN"}, "step"),
            ({"ATOMS", "BINDERS", "RULE", "LEXICON"}, "deduction entry"),
        ):
            if words & expected:
                pool = {"statement": STATEMENT_KEYWORDS, "step": _STEP_WORDS,
                        "deduction entry": _ENTRY_WORDS}[what]
                return E.unknown_keyword(span, str(tok), what, _suggest(str(tok), pool))
    if t == "NAME" and "INT" in expected and prev is not None and prev.type == "COMMA":
        fn = _enclosing_call(tokens, tok)  # `stack(f, N)`, `repeat(f, N)`
        if fn in ("STACK", "REPEAT"):
            return E.count_not_literal(span, fn.lower(), str(tok))
    if t == "DOT" and prev is not None and prev.type == "INT" and prev.end_pos == tok.start_pos:
        return E.bad_number(Span(prev.start_pos, tok.end_pos), f"{prev}.")
    if t == "DOT" and text[tok.end_pos:tok.end_pos + 1].isdigit():
        m = re.match(r"\.[0-9]+", text[tok.start_pos:])
        return E.bad_number(Span(tok.start_pos, tok.start_pos + m.end()), m.group())
    unsupported = _recognise_outside_core(tok, prev, tokens, keyword, text)
    if unsupported is not None:
        return unsupported
    names = sorted({E.spell(x) for x in expected if not x.startswith("__")},
                   key=lambda s: (s.startswith(("a ", "an ", "end")), s))
    return E.syntax_error(span, names, found)


STATEMENT_KEYWORDS = ("object", "morphism", "let", "program", "export", "composition", "deduction")


def _in_header(tokens, tok) -> bool:
    """True while `tok` is on the first logical line before any `[` or `~`."""
    seen_code = False
    for t in tokens:
        if t is tok:
            return True
        if t.type in ("LSQB", "TILDE", "_INDENT") or (t.type == "_NL" and seen_code):
            return False
        seen_code = seen_code or t.type != "_NL"
    return True


def _enclosing_call(tokens, tok) -> Optional[str]:
    """The token type before the `(` that encloses `tok` (None at depth 0)."""
    upto = next((i for i, x in enumerate(tokens) if x is tok), len(tokens))
    depth = 0
    for i in range(upto - 1, -1, -1):
        x = tokens[i]
        if x.type in ("RPAR", "RSQB"):
            depth += 1
        elif x.type in ("LPAR", "LSQB"):
            if depth == 0:
                return tokens[i - 1].type if i > 0 and x.type == "LPAR" else None
            depth -= 1
    return None


def _recognise_outside_core(tok, prev, tokens, keyword, text):
    t = tok.type
    span = Span(tok.start_pos, tok.end_pos)
    if prev is None:
        return None
    # type positions of a declaration header
    if keyword in ("object", "morphism", "program", "deduction") and _in_header(tokens, tok):
        colon_seen = True
        if prev.type == "NAME" and str(prev) in _TYPE_CONSTRUCTORS:
            return E.outside_core(Span(prev.start_pos, prev.end_pos), f"the object constructor `{prev}`")
        if t == "LBRACE":
            return E.outside_core(span, "enumerated sets `{a, b, …}`", plural=True)
        if t == "PLUS" and prev.type in ("NAME", "INT", "RPAR"):
            return E.outside_core(span, "coproduct types `A + B`", plural=True)
        if t == "SLASH" and prev.type in ("NAME", "INT", "RPAR"):
            return E.outside_core(span, "slash types `A / B`", plural=True)
        if t == "LPAR" and prev.type == "NAME":
            return E.outside_core(Span(prev.start_pos, prev.end_pos), f"the type application `{prev}(…)`")
        if t in ("INT", "NAME") and prev.type == "NAME" and colon_seen:
            return E.outside_core(Span(prev.start_pos, prev.end_pos), f"the object constructor `{prev}`")
        if t == "INT" and prev.type == "INT":
            return E.outside_core(span, "`Real` with several sizes", plural=True)
        if t == "LSQB" and keyword == "morphism" and prev.type == "INT":
            return E.outside_core(span, "bounds inside a morphism signature", plural=True)
    # keyword arguments in a morphism expression: parser(…), ccg(…), lambek(…), chart_fold(…)
    if t == "EQUAL" and prev.type == "NAME" and keyword in ("let", "export", "morphism"):
        depth = 0
        upto = next((i for i, x in enumerate(tokens) if x is tok), len(tokens))
        for x in reversed(tokens[:upto]):
            if x.type == "RPAR":
                depth += 1
            elif x.type == "LPAR":
                if depth == 0:
                    i = next(k for k, y in enumerate(tokens) if y is x)
                    if i > 0 and tokens[i - 1].type == "NAME":
                        callee = tokens[i - 1]
                        return E.outside_core(Span(callee.start_pos, callee.end_pos),
                                              f"`{callee}(…)` with keyword arguments")
                    break
                depth -= 1
    if keyword == "deduction" and t == "SLASH":
        return E.outside_core(span, "slash patterns in rules", plural=True)
    return None


def _map_unexpected_chars(exc: UnexpectedCharacters, text: str, keyword):
    pos = exc.pos_in_stream
    ch = text[pos] if pos < len(text) else ""
    if ch == '"':
        return E.unterminated_string(Span(pos, pos + 1))
    if ch == "\\":
        if keyword == "deduction":
            return E.outside_core(Span(pos, pos + 1), "slash patterns in rules", plural=True)
        if keyword == "object":
            return E.outside_core(Span(pos, pos + 1), "slash types `A \\ B`", plural=True)
    if ch == "." and pos > 0 and text[pos - 1].isdigit():
        m = re.search(r"[0-9]+\.?$", text[:pos + 1])
        if m:
            return E.bad_number(Span(m.start(), pos + 1), m.group())
    return E.unexpected_character(Span(pos, pos + 1), ch)


def _parse_uncached(clean: str, kind: str, stmt_at: int, chunk_diags: tuple) -> ParsedChunk:
    docs = _docs(clean, stmt_at)
    first_line = clean[stmt_at:].split("\n", 1)[0]
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", first_line)
    keyword = m.group() if m else None
    hm = _HEAD.match(first_line)
    name = A.Name(hm.group(2), Span(stmt_at + hm.start(2), stmt_at + hm.end(2))) if hm else None
    if name is not None and name.text in RESERVED_WORDS:
        name = None
    if kind == "trivia":
        return ParsedChunk(None, chunk_diags, None, None, docs)
    if kind == "stray":
        return ParsedChunk(None, chunk_diags + (E.unexpected_indent(_token_span(clean, stmt_at)),),
                           keyword, None, docs)
    if kind == "unsupported":
        line = first_line.rstrip()
        if line.startswith("#!["):
            what = "inner (module) pragmas `#![…]`"
        elif line.startswith("#["):
            what = "pragmas on their own line `#[…]`"
        else:
            what = _UNSUPPORTED_NAMES.get(keyword, f"`{keyword}` declarations")
        span = Span(stmt_at, stmt_at + len(line))
        return ParsedChunk(None, chunk_diags + (E.outside_core(span, what, plural=True),), keyword, None, docs,
                           unsupported=True)
    layout = Layout(clean)
    _local.layout = layout
    source = clean if clean.endswith("\n") else clean + "\n"
    decl = None
    err = None
    try:
        decls = _lark().parse(source)
        decl = decls[0] if decls else None
    except UnexpectedCharacters as exc:
        err = _map_unexpected_chars(exc, source, keyword)
    except UnexpectedToken as exc:
        err = _map_unexpected_token(exc, source, keyword, layout)
    except UnexpectedEOF:
        err = E.syntax_error(Span(max(len(clean.rstrip()) - 1, 0), len(clean.rstrip())), [], "end of input")
    except UnexpectedInput as exc:  # pragma: no cover - defensive
        err = E.syntax_error(Span(0, 1), [], str(exc))
    except TooDeep as exc:  # the layout pass stopped at the bracket or block too many
        err = E.nested_too_deeply(_token_span(source, exc.token.start_pos), MAX_DEPTH)
    if decl is not None:
        deep = too_deep(decl)
        if deep is not None:  # the whole statement is dropped, as after a syntax error
            err = E.nested_too_deeply(_token_span(source, deep.span.start), MAX_DEPTH)
    # reserved words lexed as names in name positions
    reserved = [t for t in layout.tokens if t.type == "NAME" and str(t) in RESERVED_WORDS]
    problems = list(layout.diagnostics)
    problems += [E.reserved_word(Span(t.start_pos, t.end_pos), str(t)) for t in reserved]
    if err is not None:
        problems.append(err)
    for i, d in enumerate(problems):  # widen point anchors to the whole token
        if d.code in ("QVR005",) and d.span.end - d.span.start == 1:
            problems[i] = type(d)(d.code, d.severity, _token_span(clean, d.span.start), d.message)
    # one syntax error per statement (section 12.5): the first by position
    problems = [d for d in chunk_diags if d.is_error] + problems
    diags = [d for d in chunk_diags if not d.is_error]
    if problems:
        diags.append(min(problems, key=lambda d: d.span.start))
        decl = None
    return ParsedChunk(decl, tuple(sorted(diags, key=lambda d: d.span.start)), keyword, name, docs)


@lru_cache(maxsize=65536)
def _parse_cached(clean: str, kind: str, stmt_at: int, chunk_diags: tuple) -> ParsedChunk:
    return _parse_uncached(clean, kind, stmt_at, chunk_diags)


def parse_chunk(chunk: Chunk) -> ParsedChunk:
    return _parse_cached(chunk.clean, chunk.kind, chunk.stmt_at, chunk.diagnostics)


@dataclass(frozen=True)
class Module:
    """A whole parsed file: chunks with their absolute starts and parse results."""

    text: str
    chunks: tuple[tuple[int, Chunk, ParsedChunk], ...]

    @property
    def decls(self) -> list:
        return [p.decl for _, _, p in self.chunks if p.decl is not None]

    @property
    def diagnostics(self) -> list:
        out = []
        for start, _, p in self.chunks:
            out.extend(d.shift(start) for d in p.diagnostics)
        return out


def parse_module(text: str) -> Module:
    text = text.replace("\r\n", "\n")
    parts, _ = split(text)
    return Module(text, tuple((s, c, parse_chunk(c)) for s, c in parts))
