"""What a position names: the shared lookup behind hover, goto, rename and highlight.

`entity_at(doc, offset)` reads the checker's position facts (`qvr.sema.context.Fact`) and
answers with the token under the cursor and a small, comparable *entity*: a top-level
name (`Top`), a program or deduction local (`Local`, identified by its binding site), a
family, builtin, host-data name, option key or morphism sub-expression.  `occurrences`
lists every fact that refers to one entity, so references are semantic: a name inside a
comment has no fact, and a shadowed local is a different entity.

This module computes no presentation (see `hover.py`) and knows nothing of LSP.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Union

from qvr.sema.context import LocalInfo
from qvr.text import Span

NAME_KINDS = ("def", "ref", "local", "localref", "local-binder", "family", "builtin", "host",
              "option", "size")


@dataclass(frozen=True)
class Top:
    """A top-level declaration in the type or value namespace."""

    ns: str
    name: str


@dataclass(frozen=True)
class Local:
    """A program or deduction local, identified by its slot and binding site."""

    slot: object  # qvr.sema.module.Slot (identity, not position)
    span: Span  # chunk-relative span of the binding
    info: LocalInfo


@dataclass(frozen=True)
class Builtin:
    kind: str  # family | builtin | host | option | expr
    data: object


Entity = Union[Top, Local, Builtin]


def _slot_facts(slot) -> tuple:
    return slot.result.facts if slot.result is not None else ()


def local_info(slot, rel_span: Span) -> Optional[LocalInfo]:
    """The LocalInfo of the local bound at `rel_span` in `slot`."""
    for f in _slot_facts(slot):
        if f.kind == "local" and f.span == rel_span:
            return f.data
    return None


def pick(doc, offset: int, kinds) -> Optional[tuple]:
    """The innermost fact of one of `kinds` at `offset`, preferring facts that contain the
    character after the cursor over those that merely end at it."""
    st = doc.state
    if not st.slots:
        return None
    i = doc.chunk_at(offset)
    slot = st.slots[i]
    base = st.starts[i]
    rel = offset - base
    best = None
    for f in _slot_facts(slot):
        if f.kind not in kinds or not (f.span.start <= rel <= f.span.end):
            continue
        key = (f.span.end == rel and f.span.start != rel, f.span.end - f.span.start,
               f.kind in ("expr", "argexpr"), f.kind == "local-binder")
        if best is None or key < best[0]:
            best = (key, f)
    if best is None:
        return None
    return slot, base, best[1]


def entity_of_fact(slot, f) -> Optional[Entity]:
    k = f.kind
    if k in ("def", "ref"):
        return Top(*f.data)
    if k == "local":
        return Local(slot, f.span, f.data)
    if k == "localref":
        info = local_info(slot, f.data)
        return Local(slot, f.data, info) if info is not None else None
    if k in ("family", "builtin", "host", "option", "expr", "size", "argexpr"):
        return Builtin(k, f.data)
    return None


def entity_at(doc, offset: int, with_expr: bool = False) -> Optional[tuple[Span, Entity]]:
    """The token span (document offsets) and entity at `offset`, or None.

    With `with_expr`, a morphism sub-expression that is not a plain name (e.g. the
    `fan` keyword of `fan(head)`, or a `>>` operator) is an entity too.
    """
    kinds = NAME_KINDS + (("expr", "argexpr") if with_expr else ())  # argexpr: E9.10
    hit = pick(doc, offset, kinds)
    if hit is None:
        return None
    slot, base, f = hit
    if f.kind == "local-binder":  # a factor binder use: the localref beside it has the binding
        for g in _slot_facts(slot):
            if g.kind == "localref" and g.span == f.span:
                f = g
                break
    ent = entity_of_fact(slot, f)
    if ent is None:
        return None
    return f.span.shift(base), ent


@dataclass(frozen=True)
class Occurrence:
    span: Span  # document offsets
    is_def: bool


def occurrences(doc, ent: Entity) -> Iterator[Occurrence]:
    """Every place that names `ent` (definitions first within each statement)."""
    st = doc.state
    if isinstance(ent, Top):
        key = (ent.ns, ent.name)
        for slot in st.slots:
            base = st.starts[slot.index]
            for f in _slot_facts(slot):
                if f.kind in ("def", "ref") and f.data == key:
                    yield Occurrence(f.span.shift(base), f.kind == "def")
        return
    if isinstance(ent, Local):
        slot = ent.slot
        if slot.index < 0 or slot.index >= len(st.slots) or st.slots[slot.index] is not slot:
            return
        base = st.starts[slot.index]
        seen = set()
        for f in _slot_facts(slot):
            if f.kind == "local" and f.span == ent.span:
                hit = Occurrence(f.span.shift(base), True)
            elif f.kind == "localref" and f.data == ent.span:
                hit = Occurrence(f.span.shift(base), False)
            else:
                continue
            if hit.span not in seen:
                seen.add(hit.span)
                yield hit


def definition_spans(doc, ent: Entity) -> list[Span]:
    """Where `ent` is defined (document offsets); empty for builtins and host data."""
    if isinstance(ent, Top):
        span = doc.definition_span(ent.ns, ent.name)
        return [span] if span is not None else []
    if isinstance(ent, Local):
        slot = ent.slot
        st = doc.state
        if 0 <= slot.index < len(st.slots) and st.slots[slot.index] is slot:
            return [ent.span.shift(st.starts[slot.index])]
    return []


def slot_of_offset(doc, offset: int):
    st = doc.state
    return st.slots[doc.chunk_at(offset)] if st.slots else None
