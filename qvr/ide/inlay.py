"""Inlay hints: the inferred types the source does not spell out.

A hint `: T` goes after the name of every top-level `let` (its morphism type), every
program `let` or `record` step (its value kind: numeric, chart or deduction, or its axes
when the checker knows them) and every `sample` step without an index annotation (the type
of the draw: the target's codomain, or the family's support).  Annotated sample steps
already show their plate, and `data X : T` steps (E9) their type, so they get no hint.
Types come from the checker's facts; nothing is re-checked here.  No LSP types here.
"""
from __future__ import annotations

from dataclasses import dataclass

from qvr.sema.symbols import LetSym
from qvr.sema.types import spell_mor
from qvr.syntax import ast as A
from qvr.text import Span


@dataclass(frozen=True)
class InlayHint:
    offset: int  # document offset the hint is shown at
    label: str
    kind: str = "type"


def _steps(steps):
    for s in steps:
        yield s
        if isinstance(s, A.MarginalizeStep):
            yield from _steps(s.body)


def inlay_hints(doc, span: Span) -> list[InlayHint]:
    st = doc.state
    out = []
    for slot in st.slots:
        base = st.starts[slot.index]
        if base > span.end or base + len(slot.chunk.text) < span.start:
            continue
        decl = slot.parsed.decl
        if isinstance(decl, A.LetDecl):
            sym = slot.bindings.get(("value", decl.name.text))
            if isinstance(sym, LetSym):
                out.append(InlayHint(base + decl.name.span.end, f": {spell_mor(sym.type)}"))
        elif isinstance(decl, A.ProgramDecl) and slot.result is not None:
            locals_ = {f.span: f.data for f in slot.result.facts if f.kind == "local"}
            for s in _steps(decl.body):
                if (isinstance(s, A.LetStep) and s.index is None) or (  # E9.11: `let v : T`
                        isinstance(s, A.SampleStep) and s.index is None
                        and isinstance(s.bind, A.Name)):
                    info = locals_.get(s.bind.span)
                    if info is not None and info.type_text and info.type_text != "?":
                        out.append(InlayHint(base + s.bind.span.end, f": {info.type_text}"))
    return [h for h in out if span.start <= h.offset <= span.end]
