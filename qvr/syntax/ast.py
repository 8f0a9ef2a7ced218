"""The QVR abstract syntax tree: frozen dataclasses with tuple children.

Every node carries a `span` (offsets relative to the start of the top-level statement's
chunk, see `qvr.syntax.chunks`; add the chunk's start for document offsets).  The tree
records only what was written: names are not resolved and nothing semantic is stored here
(the checker keeps its facts in side tables keyed by spans).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from qvr.text import Span


@dataclass(frozen=True, slots=True)
class Name:
    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class Number:
    value: float
    is_int: bool
    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class StringLit:
    text: str  # with quotes, as written
    span: Span

    @property
    def value(self) -> str:
        body = self.text[1:-1]
        out, i = [], 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body):
                nxt = body[i + 1]
                out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                i += 2
            else:
                out.append(c)
                i += 1
        return "".join(out)


# ---------------------------------------------------------------- types

@dataclass(frozen=True, slots=True)
class TName:
    name: Name
    span: Span


@dataclass(frozen=True, slots=True)
class TAtom:
    kind: str  # "FinSet" | "Real"
    size: int
    kw_span: Span
    size_span: Span
    span: Span


@dataclass(frozen=True, slots=True)
class TProd:
    factors: tuple["TypeExpr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TParen:
    inner: "TypeExpr"
    span: Span


@dataclass(frozen=True, slots=True)
class TSize:
    """`FinSet N` / `Real N`: a size named `N`, read from the data when it is bound
    (issue 36; legal only as an object's right-hand side, QVR113)."""
    kind: str  # "FinSet" | "Real"
    name: "Name"
    kw_span: Span
    span: Span


TypeExpr = Union[TName, TAtom, TProd, TParen, TSize]


# ---------------------------------------------------------------- options

@dataclass(frozen=True, slots=True)
class OVName:
    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class OVList:
    items: tuple["OptValue", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class OVCall:
    name: Name
    args: tuple["OptValue", ...]
    span: Span


OptValue = Union[OVName, Number, StringLit, OVList, OVCall]


@dataclass(frozen=True, slots=True)
class OptionEntry:
    key: Name
    value: Optional[OptValue]
    span: Span


@dataclass(frozen=True, slots=True)
class OptionBlock:
    entries: tuple[OptionEntry, ...]
    span: Span


# ---------------------------------------------------------------- morphism expressions

@dataclass(frozen=True, slots=True)
class MName:
    name: Name
    span: Span


@dataclass(frozen=True, slots=True)
class MCall:
    callee: Name
    args: tuple["CallArg", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class MParen:
    inner: "MorphExpr"
    span: Span


@dataclass(frozen=True, slots=True)
class MFan:
    kw: Span
    args: tuple["MorphExpr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class MStack:
    kw: Span
    arg: "MorphExpr"
    count: int
    count_span: Span
    span: Span


@dataclass(frozen=True, slots=True)
class MRepeat:
    kw: Span
    arg: "MorphExpr"
    count: Optional[int]
    count_span: Optional[Span]
    span: Span


@dataclass(frozen=True, slots=True)
class MScan:
    kw: Span
    arg: "MorphExpr"
    init: Optional[tuple[Name, Name]]  # outside core
    span: Span


@dataclass(frozen=True, slots=True)
class MCompose:
    left: "MorphExpr"
    op: Name  # the operator token (`>>` in the core)
    right: "MorphExpr"
    span: Span


@dataclass(frozen=True, slots=True)
class MTensor:
    left: "MorphExpr"
    op: Span
    right: "MorphExpr"
    span: Span


@dataclass(frozen=True, slots=True)
class MPostfix:
    base: "MorphExpr"
    name: Name
    args: Optional[tuple["CallArg", ...]]
    span: Span


MorphExpr = Union[MName, MCall, MParen, MFan, MStack, MRepeat, MScan, MCompose, MTensor, MPostfix]
CallArg = Union[MorphExpr, Number, StringLit]


# ---------------------------------------------------------------- let-expressions

@dataclass(frozen=True, slots=True)
class EName:
    name: Name
    span: Span


@dataclass(frozen=True, slots=True)
class ECall:
    callee: Name
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class EMethod:
    receiver: Name
    method: Name
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class EIndex:
    base: Name
    indices: tuple["Expr", ...]  # an index, or an `ESlice` (extension E9)
    span: Span


@dataclass(frozen=True, slots=True)
class ESlice:
    """An index `start:stop` (extension E9): `:` keeps the axis, `a:b` its range [a, b)."""

    start: Optional["Expr"]
    colon: Span
    stop: Optional["Expr"]
    span: Span


@dataclass(frozen=True, slots=True)
class EList:
    items: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class EParen:
    inner: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class ENeg:
    op: Span
    operand: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class ENot:
    """`not e` (extension E9.10): 1 where e is 0, else 0."""

    op: Span
    operand: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class EBinOp:
    op: str
    op_span: Span
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class ELambda:
    """`x -> e` (outside the core), or `(s, t) -> e` (extension E9: `fold`/`scan`)."""

    params: tuple[Name, ...]
    body: "Expr"
    span: Span

    @property
    def param(self) -> Name:
        return self.params[0]


@dataclass(frozen=True, slots=True)
class FactorBinder:
    name: Name
    type: TypeExpr
    span: Span


@dataclass(frozen=True, slots=True)
class FactorCase:
    label: int
    label_span: Span
    expr: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class FactorCases:
    cases: tuple[FactorCase, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class EFactor:
    kw: Span
    binders: tuple[FactorBinder, ...]
    body: Union["Expr", FactorCases]
    span: Span


Expr = Union[Number, StringLit, EName, ECall, EMethod, EIndex, EList, EParen, ENeg, ENot, EBinOp,
             ELambda, EFactor]


# ---------------------------------------------------------------- programs

@dataclass(frozen=True, slots=True)
class ParamKind:
    kind: str  # "Real" | "FinSet" | "name" | "mor"
    name: Optional[Name]
    span: Span


@dataclass(frozen=True, slots=True)
class Param:
    name: Name
    kind: Optional[ParamKind]
    span: Span


@dataclass(frozen=True, slots=True)
class Params:
    items: tuple[Param, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class DAIndex:
    """A family argument written `a[z]`: the bracketed argument of 7.5 when z is the
    coordinate of the enclosing grouped marginalize block, else (extension E9.10) the
    let-expression `expr`, an ordinary index (`beta[k]`, `mu[group]`)."""

    base: Name
    index: Name
    span: Span
    expr: Optional["EIndex"] = None


#: a family argument: a number, a name, `a[z]`, or (extension E9.10) any other
#: let-expression (`beta[0] + beta[1] * x`)
DrawArg = Union[Number, Name, DAIndex, Expr]


def arg_expr(a) -> "Expr":
    """A family argument as the let-expression it is (E9.10): `let tmp = <arg>`."""
    if isinstance(a, Name):
        return EName(a, a.span)
    if isinstance(a, DAIndex):
        return a.expr if a.expr is not None else EIndex(a.base, (EName(a.index, a.index.span),), a.span)
    return a


def is_expr_arg(a) -> bool:
    """A family argument that is neither a number, a name nor `a[z]` (E9.10)."""
    return not isinstance(a, (Number, Name, DAIndex))


@dataclass(frozen=True, slots=True)
class Target:
    name: Name
    args: Optional[tuple[DrawArg, ...]]
    span: Span


@dataclass(frozen=True, slots=True)
class TupleBind:  # outside core
    names: tuple[Name, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TupleReturn:  # outside core
    items: tuple[tuple[Name, Optional[Name]], ...]
    span: Span


@dataclass(frozen=True, slots=True)
class SampleStep:
    kw: Span
    bind: Union[Name, TupleBind]
    index: Optional[TypeExpr]
    target: Target
    options: Optional[OptionBlock]
    span: Span


@dataclass(frozen=True, slots=True)
class ObserveStep:
    kw: Span
    bind: Name
    index: Optional[TypeExpr]
    target: Target
    options: Optional[OptionBlock]
    span: Span
    # `observe v : T = e <- F(...)` (extension E9.7): the observed value computed from data
    value: Optional["Expr"] = None


@dataclass(frozen=True, slots=True)
class MarginalizeStep:
    kw: Span
    bind: Name
    index: Optional[TypeExpr]
    target: Target
    options: Optional[OptionBlock]
    body: tuple["Step", ...]
    header: Span
    span: Span


@dataclass(frozen=True, slots=True)
class LetStep:
    """`let v = e`; `record v = e` (extension E9) is a let step whose value is recorded
    per draw in a fit (`recorded` is then the span of the `record` keyword)."""

    kw: Span
    bind: Name
    rhs: Expr
    span: Span
    recorded: bool = False
    # `let v : T = e` (extension E9.11): T names the leading axes of the value
    index: Optional[TypeExpr] = None


@dataclass(frozen=True, slots=True)
class ScoreStep:
    kw: Span
    bind: Name
    rhs: Expr
    span: Span
    # `score v : T = e` (extension E9.7): one term per element of T (pointwise terms)
    index: Optional[TypeExpr] = None


@dataclass(frozen=True, slots=True)
class ReturnStep:
    kw: Span
    value: Union[Name, TupleReturn]
    span: Span


@dataclass(frozen=True, slots=True)
class DataStep:
    """`data X : Household * Coef` (extension E9): declares host data `X` and its type."""

    kw: Span
    bind: Name
    type: TypeExpr
    span: Span


Step = Union[SampleStep, ObserveStep, MarginalizeStep, LetStep, ScoreStep, ReturnStep, DataStep]


# ---------------------------------------------------------------- deductions

@dataclass(frozen=True, slots=True)
class Pattern:
    head: Name
    args: Optional[tuple["Pattern", ...]]
    span: Span


@dataclass(frozen=True, slots=True)
class CatStar:  # outside core
    span: Span


@dataclass(frozen=True, slots=True)
class CatSet:  # outside core
    names: tuple[Name, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class PragmaEntry:
    key: Name
    value: Optional[OptValue]
    span: Span


@dataclass(frozen=True, slots=True)
class Pragma:
    entries: tuple[PragmaEntry, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class AtomsEntry:
    kw: Span
    names: tuple[Name, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class BindersEntry:
    kw: Span
    names: tuple[Name, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class RuleEntry:
    kw: Span
    name: Name
    premises: tuple[Pattern, ...]
    turnstile: Span
    conclusion: Pattern
    pragma: Optional[Pragma]
    span: Span


@dataclass(frozen=True, slots=True)
class LexItem:
    word: StringLit
    category: Union[Pattern, CatStar, CatSet]
    lf: Expr
    pragma: Optional[Pragma]
    span: Span


@dataclass(frozen=True, slots=True)
class LexiconBlock:
    kw: Span
    items: tuple[LexItem, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class LexiconFile:  # outside core
    kw: Span
    path: StringLit
    options: Optional[OptionBlock]
    span: Span


DedEntry = Union[AtomsEntry, BindersEntry, RuleEntry, LexiconBlock, LexiconFile]


# ---------------------------------------------------------------- declarations

@dataclass(frozen=True, slots=True)
class CompositionDecl:
    kw: Span
    name: Name
    level: Optional[Name]
    span: Span


@dataclass(frozen=True, slots=True)
class ObjectDecl:
    kw: Span
    name: Name
    type: TypeExpr
    options: Optional[OptionBlock]
    span: Span


@dataclass(frozen=True, slots=True)
class MorphInit:
    tilde: Span
    expr: MorphExpr
    span: Span


@dataclass(frozen=True, slots=True)
class MorphismDecl:
    kw: Span
    name: Name
    dom: TypeExpr
    cod: TypeExpr
    options: Optional[OptionBlock]
    init: Optional[MorphInit]
    span: Span


@dataclass(frozen=True, slots=True)
class LetDecl:
    kw: Span
    name: Name
    expr: MorphExpr
    where: Optional[tuple["LetDecl", ...]]  # outside core
    where_kw: Optional[Span]
    span: Span


@dataclass(frozen=True, slots=True)
class ExportDecl:
    kw: Span
    expr: MorphExpr
    span: Span


@dataclass(frozen=True, slots=True)
class ProgramDecl:
    kw: Span
    name: Name
    params: Optional[Params]
    dom: TypeExpr
    cod: TypeExpr
    options: Optional[OptionBlock]
    body: tuple[Step, ...]
    header: Span
    span: Span


@dataclass(frozen=True, slots=True)
class DeductionDecl:
    kw: Span
    name: Name
    dom: TypeExpr
    cod: TypeExpr
    options: Optional[OptionBlock]
    entries: tuple[DedEntry, ...]
    header: Span
    span: Span


Decl = Union[CompositionDecl, ObjectDecl, MorphismDecl, LetDecl, ExportDecl, ProgramDecl, DeductionDecl]
