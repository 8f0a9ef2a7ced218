"""The type of a morphism expression written somewhere the checker has not seen it.

Completion needs the codomain of the `>>` chain left of the cursor while the statement
around it is still being typed and does not parse.  `expr_type` checks the expression
text as the right-hand side of a synthetic top-level `let`, in the module environment
that holds just before statement `index` (`ModuleState` answers the checker's reads for
any position).  Nothing is stored: the module state is only read.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema.module import check_one
from qvr.sema.types import MorType, Ty
from qvr.syntax.chunks import Chunk
from qvr.syntax.parser import parse_chunk

_NAME = "__qvr_ide_expr__"


def expr_type(doc, index: int, expr: str) -> Optional[MorType]:
    expr = " ".join(expr.split())
    if not expr or not doc.state.slots:
        return None
    text = f"let {_NAME} = {expr}\n"
    parsed = parse_chunk(Chunk(text, text, "stmt", 0, ()))
    if parsed.decl is None:
        return None
    index = max(0, min(index, len(doc.state.slots)))
    result = check_one(doc.state, index, text, parsed)
    whole = parsed.decl.expr.span
    for f in result.facts:
        if f.kind == "expr" and f.span == whole:
            return f.data[0]
    return None


def chain_codomain(doc, index: int, expr: str) -> Optional[Ty]:
    t = expr_type(doc, index, expr)
    return t.cod if t is not None and t.known else None
