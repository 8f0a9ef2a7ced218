"""Document symbols (an outline) and workspace symbol search (qvr-language.md 14.3).

Top-level declarations are symbols: objects as *class*, morphisms, `let`s and programs as
*function*, deductions as *module*; replica members are children of their group; the
name-binding steps of a program (marginalize blocks nested; the extension's `data` and
`record` steps too, E9) are *variable* children of the program, and the rules of a
deduction are *method* children.  A statement with a syntax error still appears when its
name can be read.  Kinds are plain strings; the LSP adapter maps them to protocol kinds.
Workspace search is a case-insensitive subsequence match over the top-level symbols of
several documents.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from qvr.sema.families import space_of
from qvr.sema.symbols import GroupSym, ObjectSym
from qvr.sema.types import bounds_text, spell, spell_mor
from qvr.syntax import ast as A
from qvr.text import Span

_KINDS = {"object": "class", "morphism": "function", "let": "function", "program": "function",
          "deduction": "module"}


@dataclass(frozen=True)
class DocSymbol:
    name: str
    kind: str  # class | function | module | variable | method
    detail: str
    span: Span  # the whole construct, document offsets
    selection: Span  # the name
    children: tuple["DocSymbol", ...] = field(default=())


@dataclass(frozen=True)
class WorkspaceSymbol:
    name: str
    kind: str
    container: str  # e.g. the group of a replica member, or ""
    key: object  # the document key given by the caller (a path or URI)
    span: Span  # the name, document offsets


def _detail(sym) -> str:
    if sym is None:
        return ""
    if isinstance(sym, ObjectSym):
        space = space_of(sym.type)
        if space is not None:  # a constrained space (E9): `PositiveOrdered 2`, not its `Real 2`
            return space.spelling
        return spell(sym.type) + bounds_text(sym.type)
    t = getattr(sym, "type", None)
    try:
        return spell_mor(t) if t is not None else ""
    except AttributeError:
        return ""


def _local_types(slot) -> dict:
    out = {}
    for f in (slot.result.facts if slot.result else ()):
        if f.kind == "local":
            out[f.span] = f.data.type_text
    return out


def _steps(steps, base: int, types: dict, text: str = "") -> tuple:
    out = []
    for s in steps:
        bind = getattr(s, "bind", None)
        if isinstance(s, A.ReturnStep) or not isinstance(bind, A.Name):
            continue
        children = _steps(s.body, base, types, text) if isinstance(s, A.MarginalizeStep) else ()
        detail = types.get(bind.span, "")
        if not detail and isinstance(s, A.DataStep) and text:
            detail = " ".join(text[s.type.span.start:s.type.span.end].split())  # as declared (E9)
        out.append(DocSymbol(bind.text, "variable", detail, s.span.shift(base), bind.span.shift(base), children))
    return tuple(out)


def _children(slot, decl, base: int) -> tuple:
    if isinstance(decl, A.ProgramDecl):
        types = _local_types(slot)
        params = ()
        if decl.params is not None:
            params = tuple(DocSymbol(p.name.text, "variable", types.get(p.name.span, ""), p.span.shift(base),
                                     p.name.span.shift(base)) for p in decl.params.items)
        return params + _steps(decl.body, base, types, slot.chunk.text)
    if isinstance(decl, A.DeductionDecl):
        return tuple(DocSymbol(e.name.text, "method", "rule", e.span.shift(base), e.name.span.shift(base))
                     for e in decl.entries if isinstance(e, A.RuleEntry))
    return ()


def document_symbols(doc) -> list[DocSymbol]:
    st = doc.state
    out = []
    for slot in st.slots:
        parsed = slot.parsed
        kind = _KINDS.get(parsed.keyword or "")
        if kind is None or parsed.name is None:
            continue
        base = st.starts[slot.index]
        ns = "type" if parsed.keyword == "object" else "value"
        name = parsed.name.text
        sym = slot.bindings.get((ns, name))
        decl = parsed.decl
        if decl is not None:
            span = decl.span.shift(base)
        else:
            text = slot.chunk.text
            span = Span(base + slot.chunk.stmt_at, base + len(text.rstrip()))
        sel = parsed.name.span.shift(base)
        children = _children(slot, decl, base) if decl is not None else ()
        if isinstance(sym, GroupSym):
            children = tuple(DocSymbol(m, "function", _detail(slot.bindings.get(("value", m))), span, sel)
                             for m in sym.members)
        out.append(DocSymbol(name, kind, _detail(sym), span, sel, children))
    return out


def _matches(query: str, name: str) -> bool:
    q = query.lower()
    if not q:
        return True
    it = iter(name.lower())
    return all(c in it for c in q)


def workspace_symbols(docs: Iterable[tuple[object, object]], query: str, limit: int = 500) -> list[WorkspaceSymbol]:
    """Top-level symbols (and replica members) of every `(key, Document)` matching `query`."""
    out = []
    for key, doc in docs:
        for s in document_symbols(doc):
            if _matches(query, s.name):
                out.append(WorkspaceSymbol(s.name, s.kind, "", key, s.selection))
            if s.kind == "function" and s.children and s.children[0].kind == "function":
                for c in s.children:
                    if _matches(query, c.name):
                        out.append(WorkspaceSymbol(c.name, c.kind, s.name, key, c.selection))
            if len(out) >= limit:
                return out
    out.sort(key=lambda w: (not w.name.lower().startswith(query.lower()), w.name.lower(), str(w.key)))
    return out
