"""Go to definition, find references and document highlight, in document offsets.

All three start from `qvr.ide.entities.entity_at`, so they work from any occurrence: a
declaration, a use in a morphism expression, a program step target or argument, a
let-expression, a deduction rule or lexicon entry.  References are the checker's facts,
not a text search: a name inside a comment is not a reference, and a factor binder that
shadows a program local is a different variable.  Families, builtins and host data have
no definition in the document.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.ide.entities import Builtin, definition_spans, entity_at, occurrences
from qvr.text import Span


@dataclass(frozen=True)
class Highlight:
    span: Span
    write: bool  # a binding or declaration (LSP Write) rather than a use (Read)


def definition(doc, offset: int) -> list[Span]:
    hit = entity_at(doc, offset)
    if hit is None or isinstance(hit[1], Builtin):
        return []
    return definition_spans(doc, hit[1])


def references(doc, offset: int, include_declaration: bool = True) -> list[Span]:
    hit = entity_at(doc, offset)
    if hit is None or isinstance(hit[1], Builtin):
        return []
    out = sorted({o.span for o in occurrences(doc, hit[1]) if include_declaration or not o.is_def},
                 key=lambda s: (s.start, s.end))
    if include_declaration:  # the declaration site, even when no fact marks it (e.g. a replica member)
        for d in definition_spans(doc, hit[1]):
            if d not in out:
                out.append(d)
        out.sort(key=lambda s: (s.start, s.end))
    return out


def highlights(doc, offset: int) -> list[Highlight]:
    hit = entity_at(doc, offset)
    if hit is None:
        return []
    span, ent = hit
    if isinstance(ent, Builtin):
        return [Highlight(span, False)]
    out: dict[Span, bool] = {}
    for o in occurrences(doc, ent):
        out[o.span] = out.get(o.span, False) or o.is_def
    return [Highlight(s, w) for s, w in sorted(out.items(), key=lambda kv: kv[0].start)]


def name_span_at(doc, offset: int) -> Optional[Span]:
    hit = entity_at(doc, offset)
    return hit[0] if hit else None
