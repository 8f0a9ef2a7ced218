"""Name and type resolution shared by every declaration checker.

`resolve_type` turns a type expression into a resolved type (3.2), reporting QVR101,
QVR103, QVR105 and QVR205; `lookup_object` is the object-namespace lookup behind it.
"""
from __future__ import annotations

from qvr.sema import errors as E
from qvr.sema.context import DeclContext
from qvr.sema.suggest import suggest
from qvr.sema.symbols import ObjectSym, UnknownSym
from qvr.sema.types import UNKNOWN, FinSet, Named, Prod, Real, Ty
from qvr.syntax import ast as A

_KIND_NAMES = {"morphism": "morphism", "let": "let-bound morphism", "program": "program",
               "deduction": "deduction", "group": "replica group"}


def lookup_object(ctx: DeclContext, name: A.Name, report: bool = True):
    """The ObjectSym for a use of `name` in the type namespace, or None (reported)."""
    sym = ctx.object(name.text)
    if isinstance(sym, ObjectSym):
        ctx.use("type", name.text)
        ctx.fact(name.span, "ref", ("type", name.text))
        return sym
    if isinstance(sym, UnknownSym):
        return None
    if not report:
        return None
    line = ctx.later("type", name.text)
    if line is not None:
        ctx.report(E.used_before_declaration(name.span, name.text, line))
        return None
    value = ctx.value(name.text)
    if value is not None and not isinstance(value, UnknownSym):
        ctx.report(E.not_an_object(name.span, name.text, _KIND_NAMES.get(value.kind, value.kind)))
        return None
    s = suggest(name.text, ctx.names("type"))
    if s:
        ctx.suggest("type", s, name.text, "referenced and undefined")
    ctx.report(E.undefined_object(name.span, name.text, s))
    return None


def resolve_type(ctx: DeclContext, t) -> Ty:
    if isinstance(t, A.TName):
        sym = lookup_object(ctx, t.name)
        return Named(t.name.text, sym.type) if sym is not None else UNKNOWN
    if isinstance(t, A.TAtom):
        if t.size < 1:
            ctx.report(E.size_zero(t.size_span, t.kind))
            return UNKNOWN
        return FinSet(t.size) if t.kind == "FinSet" else Real(t.size)
    if isinstance(t, A.TSize):  # legal only as an object's right-hand side (check_object)
        ctx.report(E.size_name_placement(t.span, t.kind, t.name.text))
        return UNKNOWN
    if isinstance(t, A.TProd):
        return Prod(tuple(resolve_type(ctx, f) for f in t.factors))
    if isinstance(t, A.TParen):
        return resolve_type(ctx, t.inner)
    return UNKNOWN


def type_names(t) -> list[A.Name]:
    """Every object name written in a type expression (axis names of 5.2)."""
    if isinstance(t, A.TName):
        return [t.name]
    if isinstance(t, A.TProd):
        return [n for f in t.factors for n in type_names(f)]
    if isinstance(t, A.TParen):
        return type_names(t.inner)
    return []
