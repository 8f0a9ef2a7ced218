"""Semantic tokens: a classification of every significant token, for highlighting.

Each statement chunk is lexed with one regular expression (comments, strings, numbers,
names, operators); names are then classified by the checker's facts, so an object, a
morphism, a family, a program local, a pattern variable or host data each get their own
type, and binding sites carry the `declaration` modifier.  Reserved words and the
contextual deduction-entry words are keywords, and so are the extension's step keywords
`data` and `record` (docs/extensions.md E9) at the start of a program step.  Tokens never
span a line break (block comments are split per line) and come sorted.  The legend
(`TOKEN_TYPES`, `TOKEN_MODIFIERS`) uses the standard LSP names, but this module knows no
LSP types: the adapter encodes the tokens.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from qvr.ide.token_legend import TOKEN_MODIFIERS, TOKEN_TYPES
from qvr.sema.symbols import DeductionSym, ObjectSym, UnknownSym
from qvr.syntax import ast as A
from qvr.syntax.parser import RESERVED_WORDS
from qvr.text import Span


_TOKEN = re.compile(
    r'(?P<block>#\{.*?(?:\}#|\Z))'
    r'|(?P<pragma>#!?\[)'
    r'|(?P<comment>#[^\n]*)'
    r'|(?P<string>"(?:[^"\\\n]|\\.)*"?)'
    r'|(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)'
    r'|(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
    r'|(?P<op>>>|->|<-|\|-|⊢|==|!=|<=|>=|[@~*+/=<>-])', re.S)  # comparisons: E9.10

__all__ = ["TOKEN_MODIFIERS", "TOKEN_TYPES", "SemanticToken", "semantic_tokens"]

_ENTRY_WORDS = ("atoms", "binders", "rule", "lexicon")
_LOGIC_WORDS = ("and", "or", "not")  # E9.10 (keywords of let-expressions only)
_LOCAL_TYPES = {"parameter": "parameter", "atom": "enumMember", "binder": "macro", "patvar": "typeParameter",
                "rule": "method", "bound": "parameter", "lambda": "parameter"}
# locals that are host data declared by a `data` step (E9): read-only, like host data
_READONLY_LOCALS = frozenset({"data"})


@dataclass(frozen=True)
class SemanticToken:
    start: int  # document offsets; never spans a line break
    end: int
    type: str
    modifiers: tuple[str, ...] = ()


def _classify_fact(doc, f, locals_) -> Optional[tuple[str, tuple]]:
    k = f.kind
    if k in ("def", "ref"):
        ns, name = f.data
        mods = ("declaration",) if k == "def" else ()
        if ns == "type":
            return "type", mods
        sym = doc.symbol(ns, name)
        if isinstance(sym, DeductionSym):
            return "namespace", mods
        if isinstance(sym, (UnknownSym, ObjectSym)) or sym is None:
            return "variable", mods
        return "function", mods
    if k in ("local", "localref"):
        info = f.data if k == "local" else locals_.get(f.data)
        if info is None:
            return None
        mods = ("declaration",) if k == "local" else ()
        if info.kind in _READONLY_LOCALS:
            mods += ("readonly",)
        return _LOCAL_TYPES.get(info.kind, "variable"), mods
    if k == "local-binder":
        return "variable", ()
    if k == "family":
        return "class", ("defaultLibrary",)
    if k == "builtin":
        return "function", ("defaultLibrary",)
    if k in ("host", "size"):  # host data; a size read from the data (`FinSet N`)
        return "variable", ("readonly",)
    if k == "option":
        return "property", ()
    if k == "keyword":
        return ("enumMember", ()) if f.data == "composition" else ("keyword", ())
    return None


def _option_value(text: str, start: int, end: int) -> bool:
    """A name written as an option value: `=` before it, `,` or `]` after it."""
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    j = end
    while j < len(text) and text[j] in " \t":
        j += 1
    return i >= 0 and text[i] == "=" and j < len(text) and text[j] in ",]"


_STEP_KEYWORD = re.compile(r"^[ \t]+(data|record)[ \t]+[A-Za-z_]\w*[ \t]*[:=]", re.M)


def _step_keywords(slot) -> set[int]:
    """Chunk offsets of the E9 step keywords `data` and `record` (contextual: elsewhere
    they are names).  From the program's AST, or, when the statement does not parse, from
    lines that start like such a step."""
    decl = slot.parsed.decl
    if isinstance(decl, A.ProgramDecl):
        out: set[int] = set()

        def walk(steps):
            for st in steps:
                if isinstance(st, A.DataStep) or (isinstance(st, A.LetStep) and st.recorded):
                    out.add(st.kw.start)
                elif isinstance(st, A.MarginalizeStep):
                    walk(st.body)
        walk(decl.body)
        return out
    if decl is None and slot.keyword == "program":
        return {m.start(1) for m in _STEP_KEYWORD.finditer(slot.chunk.text)}
    return set()


def _split_lines(text: str, start: int, end: int, typ: str, mods: tuple, out: list) -> None:
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        if stop > pos:
            out.append(SemanticToken(pos, stop, typ, mods))
        pos = stop + 1


def semantic_tokens(doc, span: Optional[Span] = None) -> list[SemanticToken]:
    st = doc.state
    text = doc.text
    out: list[SemanticToken] = []
    for slot in st.slots:
        base = st.starts[slot.index]
        chunk_text = slot.chunk.text
        end = base + len(chunk_text)
        if span is not None and (end < span.start or base > span.end):
            continue
        facts = slot.result.facts if slot.result is not None else ()
        locals_ = {f.span: f.data for f in facts if f.kind == "local"}
        step_kws = _step_keywords(slot)
        by_start: dict[int, object] = {}
        for f in facts:
            if f.kind in ("expr", "argexpr"):  # whole expressions, not tokens
                continue
            prev = by_start.get(f.span.start)
            if prev is None or (prev.kind == "local-binder" and f.kind == "localref"):
                by_start[f.span.start] = f
        for m in _TOKEN.finditer(chunk_text):
            a, b = base + m.start(), base + m.end()
            g = m.lastgroup
            if g == "block":
                _split_lines(text, a, b, "comment", (), out)
            elif g == "comment":
                doc_comment = m.group().startswith("##") or (m.group().startswith("#!")
                                                            and not m.group().startswith("#!["))
                out.append(SemanticToken(a, b, "comment", ("documentation",) if doc_comment else ()))
            elif g == "string":
                out.append(SemanticToken(a, b, "string"))
            elif g == "number":
                out.append(SemanticToken(a, b, "number"))
            elif g == "op":
                out.append(SemanticToken(a, b, "operator"))
            elif g == "name":
                word = m.group()
                f = by_start.get(m.start())
                cls = _classify_fact(doc, f, locals_) if f is not None and f.span.end == m.end() else None
                if cls is None:
                    line_head = chunk_text[chunk_text.rfind("\n", 0, m.start()) + 1:m.start()]
                    if word in RESERVED_WORDS or m.start() in step_kws:
                        cls = ("keyword", ())
                    elif word in _LOGIC_WORDS and slot.keyword in ("program", "deduction"):
                        cls = ("keyword", ())  # E9.10: `and`, `or`, `not` in let-expressions
                    elif word in _ENTRY_WORDS and slot.keyword == "deduction" and line_head.strip() == "" \
                            and line_head:
                        cls = ("keyword", ())
                    elif _option_value(chunk_text, m.start(), m.end()):
                        cls = ("enumMember", ())  # e.g. `kernel` in `[role=kernel]`
                if cls is not None:
                    out.append(SemanticToken(a, b, cls[0], cls[1]))
    if span is not None:
        out = [t for t in out if t.end >= span.start and t.start <= span.end]
    return out
