"""Program locals and let-expressions (qvr-language.md 7.3, 7.5, 8).

`LetChecker` owns the scope side table of one program: binding (QVR107), visibility
(QVR106, QVR112), host-data warnings (QVR701-QVR703), let-expression kinds (QVR109,
QVR110, QVR414-QVR420) and, at the end, unused lets and companions (QVR713, QVR714).
`ProgramChecker` (check_program.py) adds steps and targets (check_targets.py) on top.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.context import DeclContext, LocalInfo
from qvr.sema.families import (BUILTINS, CHART_METHODS, OUTSIDE_CORE_BUILTINS,
                               OUTSIDE_CORE_CHART_METHODS)
from qvr.sema.axes import E9_BUILTINS
from qvr.sema.check_axes import AxesChecks  # E9.1
from qvr.sema.check_recurrence import RecurrenceChecks  # E9.3
from qvr.sema import pretrained_errors as PE  # E10: text functions
from qvr.sema.steering_scores import TEXT_FUNCTIONS  # E10
from qvr.sema.families import FAMILIES
from qvr.sema.resolve import resolve_type
from qvr.sema.suggest import suggest
from qvr.sema.symbols import DeductionSym, UnknownSym
from qvr.sema.types import is_discrete, is_unknown, size, spell
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core

NUMERIC_BUILTINS = ("exp", "log", "sqrt", "sigmoid")
RECURRENCE_BUILTINS = ("fold", "scan", "ode")  # E9.3, checked by LetChecker._recurrence
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")  # E9.10: 0/1 values
LOGIC_OPS = COMPARISONS + ("and", "or")


@dataclass
class Local:
    name: str
    kind: str
    type: Optional[object]  # a resolved type when known for checks (7.12)
    type_text: str
    vkind: str  # numeric | chart | deduction | unknown
    span: object
    counted: bool = False  # a `let` step subject to QVR713
    used: bool = False
    axes: Optional[tuple] = None  # sizes of the leading axes of a factor-bound value
    axes_exact: bool = False  # ... and the value has no further axes (a scalar factor body)
    scalar: bool = False  # known to be a scalar (used to know a factor body's shape)
    value_axes: Optional[tuple] = None  # E9.1: axes typed by objects (qvr.sema.axes), None: unknown


class LetChecker(RecurrenceChecks, AxesChecks):
    vector_binders: frozenset = frozenset()  # E9.3: lambda states not known to be scalars

    def __init__(self, ctx: DeclContext, owner: str):
        self.ctx = ctx
        self.owner = owner
        self.scopes: list[dict[str, Local]] = []
        self.first: dict[str, Local] = {}  # every binding so far, first wins
        self.closed: dict[str, Local] = {}  # bound inside blocks that have closed
        self.planned: dict[str, int] = {}  # name -> offset of its first binding (prescan)
        self.binders: list[dict[str, int]] = []  # factor binders in scope -> size
        self.binder_spans: list[dict[str, object]] = []  # factor binders in scope -> binding span
        self.companions: list[tuple] = []  # (suggested local, used name, how)
        self.last_axes: Optional[tuple] = None
        self.last_exact = False  # the last factor expression's body was a scalar
        self.observe_sites: dict = {}  # E9.1: observe step name -> step (observed before observe)
        self.data_sites: dict = {}  # E9.1: data step name -> step

    # ------------------------------------------------------------ scopes
    def prescan(self, steps) -> None:
        for s in steps:
            bind = getattr(s, "bind", None)
            if isinstance(bind, A.Name):
                self.planned.setdefault(bind.text, bind.span.start)
                if isinstance(s, A.ObserveStep):  # E9.1
                    self.observe_sites.setdefault(bind.text, s)
                elif isinstance(s, A.DataStep):
                    self.data_sites.setdefault(bind.text, s)
            if isinstance(s, A.MarginalizeStep):
                self.prescan(s.body)

    def push_scope(self) -> None:
        self.scopes.append({})

    def pop_scope(self) -> None:
        for name, local in self.scopes.pop().items():
            self.closed.setdefault(name, local)

    def visible(self, name: str) -> Optional[Local]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def visible_names(self) -> set[str]:
        out = set()
        for scope in self.scopes:
            out |= set(scope)
        return out

    def bind_local(self, name: A.Name, kind: str, type_, type_text: str, vkind: str,
                   detail: str = "", axes=None, counted: bool = False, scalar: bool = False,
                   axes_exact: bool = False, value_axes=None) -> None:
        ctx = self.ctx
        if name.text in self.first:
            first = self.first[name.text]
            ctx.report(E.bound_twice(name.span, name.text, ctx.line_at(first.span.start), first.span))
        local = Local(name.text, kind, type_, type_text, vkind, name.span, counted=counted, axes=axes,
                      axes_exact=axes_exact, scalar=scalar, value_axes=value_axes)
        self.first.setdefault(name.text, local)
        self.scopes[-1][name.text] = local
        ctx.fact(name.span, "local", LocalInfo(name.text, kind, type_text, detail, self.owner))

    # ------------------------------------------------------------ uses
    def _mark(self, local: Local, at: A.Name) -> None:
        local.used = True
        self.ctx.fact(at.span, "localref", local.span)

    def use_local_quiet(self, name: A.Name) -> Optional[Local]:
        local = self.visible(name.text)
        if local is not None:
            self._mark(local, name)
        return local

    def use_via(self, name: A.Name) -> None:
        if self.use_local_quiet(name) is None:
            self.ctx.fact(name.span, "host", name.text)

    def _unbound(self, name: A.Name) -> None:
        ctx = self.ctx
        if name.text in self.closed:
            local = self.closed[name.text]
            ctx.report(E.not_visible(name.span, name.text, ctx.line_at(local.span.start)))
            return
        if name.text in self.planned and self.planned[name.text] > name.span.start:
            ctx.report(E.unbound_later(name.span, name.text, ctx.line_at(self.planned[name.text])))
            return
        s = suggest(name.text, self.visible_names())
        if s:
            self.companions.append((s, name.text, "unbound"))
        ctx.report(E.unbound_variable(name.span, name.text, s))

    def use_step_arg(self, name: A.Name) -> Optional[Local]:
        local = self.use_local_quiet(name)
        if local is None:
            self._unbound(name)
        return local

    use_local_strict = use_step_arg

    def bare_local(self, e: A.EName) -> str:
        """`let v = name`: the name must be a visible local (7.9)."""
        if e.name.text in self.binders_in_scope():
            return "numeric"
        if self.visible(e.name.text) is None and self.observed_early(e.name) is not None:
            return "numeric"  # E9.1: an observed value read before its observe step
        local = self.use_step_arg(e.name)
        self.last_axes = local.axes if local else None
        return local.vkind if local else "unknown"

    def binders_in_scope(self) -> dict:
        out = {}
        for b in self.binders:
            out.update(b)
        return out

    # ------------------------------------------------------------ let-expressions
    def infer(self, e) -> str:
        self.last_axes = None
        kind = self._infer(e)
        return kind

    def _need_numeric(self, e, kind: str, what: str) -> None:
        if kind in ("chart", "deduction"):
            self.ctx.report(E.kind_mismatch(e.span, f"{what} needs numeric operands, got a {kind}"))

    def _name(self, n: A.Name) -> tuple[str, Optional[tuple]]:
        ctx = self.ctx
        if n.text in self.binders_in_scope():
            ctx.fact(n.span, "local-binder", n.text)
            for spans in reversed(self.binder_spans):  # the binding, for goto and references
                if n.text in spans:
                    ctx.fact(n.span, "localref", spans[n.text])
                    break
            return "numeric", None
        local = self.use_local_quiet(n)
        if local is not None:
            return local.vkind, local.axes
        sym = ctx.value(n.text)
        if isinstance(sym, DeductionSym):
            ctx.use("value", n.text)
            ctx.fact(n.span, "ref", ("value", n.text))
            return "deduction", None
        if sym is None and ctx.later_kind("value", n.text) == "deduction":
            ctx.report(E.used_before_declaration(n.span, n.text, ctx.later("value", n.text)))
            return "unknown", None
        if not isinstance(sym, DeductionSym) and self.observed_early(n) is not None:
            return "numeric", None  # E9.1: the observed value of a later observe step
        # host data (8.2) and its warnings, in priority order
        ctx.fact(n.span, "host", n.text)
        if n.text in self.closed:
            ctx.report(E.host_closed_block(n.span, n.text, ctx.line_at(self.closed[n.text].span.start)))
        elif n.text in self.planned and self.planned[n.text] > n.span.start \
                and not self.data_later(n):  # E9.1: the host data a later `data` step declares
            ctx.report(E.host_bound_later(n.span, n.text, ctx.line_at(self.planned[n.text])))
        elif (sym is not None and not isinstance(sym, UnknownSym)) or ctx.object(n.text) is not None:
            ctx.report(E.host_is_declaration(n.span, n.text))
        else:
            pool = self.visible_names() | set(self.binders_in_scope())
            s = suggest(n.text, pool, cutoff=0.8)
            if s and (len(n.text) >= 2 or s.lower() == n.text.lower()):
                self.companions.append((s, n.text, "read from host data"))
                ctx.report(E.host_resembles(n.span, n.text, s))
        return "unknown", None

    def _infer(self, e) -> str:
        ctx = self.ctx
        if isinstance(e, A.Number):
            return "numeric"
        if isinstance(e, A.StringLit):
            ctx.report(outside_core(e.span, "string literals in let-expressions", plural=True))
            return "unknown"
        if isinstance(e, A.EName):
            kind, axes = self._name(e.name)
            self.last_axes = axes
            return kind
        if isinstance(e, A.EParen):
            return self._infer(e.inner)
        if isinstance(e, A.ENeg):
            k = self._infer(e.operand)
            self._need_numeric(e.operand, k, "negation")
            self.last_axes = None
            return "numeric"
        if isinstance(e, A.EBinOp):
            what = "arithmetic" if e.op not in LOGIC_OPS else "a comparison" if e.op in COMPARISONS \
                else f"`{e.op}`"  # E9.10
            kl = self._infer(e.left)
            self._need_numeric(e.left, kl, what)
            kr = self._infer(e.right)
            self._need_numeric(e.right, kr, what)
            if e.op in COMPARISONS and isinstance(e.left, A.EBinOp) and e.left.op in COMPARISONS:
                ctx.report(SE.chained_comparison(e.op_span, ctx.snippet(e.span, limit=60)))
            self.last_axes = None
            return "numeric"
        if isinstance(e, A.ENot):  # E9.10
            k = self._infer(e.operand)
            self._need_numeric(e.operand, k, "`not`")
            self.last_axes = None
            return "numeric"
        if isinstance(e, A.EList):
            return self._e9_list(e)  # E9.1: list literals in let-expressions
        if isinstance(e, A.ELambda):
            ctx.report(outside_core(e.span, "lambda arguments", plural=True))
            return "unknown"
        if isinstance(e, A.ECall):
            return self._call(e)
        if isinstance(e, A.EMethod):
            return self._method(e)
        if isinstance(e, A.EIndex):
            return self._index(e)
        if isinstance(e, A.EFactor):
            return self._factor(e)
        return "unknown"

    def _call(self, e: A.ECall) -> str:
        ctx = self.ctx
        name = e.callee.text
        if name in TEXT_FUNCTIONS:  # E10: only in a steering program's score steps
            ctx.report(PE.text_function_outside(e.callee.span, name))
            for a in e.args:
                if not isinstance(a, A.StringLit):
                    self._infer(a)
            return "unknown"
        if name in RECURRENCE_BUILTINS:  # E9.3: fold, scan, ode (below)
            return self._recurrence(e)
        if (name in E9_BUILTINS and name not in NUMERIC_BUILTINS) or (name in FAMILIES and name not in BUILTINS):
            return self._e9_call(e)  # E9.1: builtins, reductions, linear algebra, family calls
        b = BUILTINS.get(name)
        if b is None:
            for a in e.args:
                self._infer(a)
            if name in OUTSIDE_CORE_BUILTINS:
                ctx.report(outside_core(e.callee.span, f"the builtin `{name}`"))
                return "unknown"
            sym = ctx.value(name)
            if sym is not None and not isinstance(sym, (UnknownSym, DeductionSym)):
                ctx.report(E.cannot_call_morphism(e.callee.span, name, "program" if sym.kind == "program" else "morphism"))
                return "unknown"
            ctx.report(E.unknown_function(e.callee.span, name, suggest(name, BUILTINS)))
            return "unknown"
        ctx.fact(e.callee.span, "builtin", name)
        kinds = [self._infer(a) for a in e.args]
        self.last_axes = None
        if len(e.args) != len(b.params):
            ctx.report(E.builtin_arity(e.callee.span, name, len(b.params), len(e.args)))
            return "chart" if name == "parse" else ("deduction" if name == "compose" else "unknown")
        if name in NUMERIC_BUILTINS:
            self._need_numeric(e.args[0], kinds[0], f"`{name}`")
            return "numeric"
        if name == "parse":
            if kinds[0] not in ("deduction", "unknown"):
                ctx.report(E.needs_deduction(e.args[0].span, "first", "parse"))
            return "chart"
        # compose
        for which, a, k in (("first", e.args[0], kinds[0]), ("second", e.args[1], kinds[1])):
            if k not in ("deduction", "unknown"):
                ctx.report(E.needs_deduction(a.span, which, "compose"))
        return "deduction"

    def _method(self, e: A.EMethod) -> str:
        ctx = self.ctx
        for a in e.args:
            self._infer(a)
        local = self.use_local_quiet(e.receiver)
        if local is None or local.vkind not in ("chart", "unknown"):
            if local is None:
                ctx.fact(e.receiver.span, "host", e.receiver.text)
            ctx.report(E.not_a_chart(e.receiver.span, e.receiver.text))
            return "numeric"
        m = e.method.text
        if m in CHART_METHODS:
            if len(e.args) != CHART_METHODS[m]:
                ctx.report(E.builtin_arity(e.method.span, f"{e.receiver.text}.{m}", CHART_METHODS[m], len(e.args)))
        elif m in OUTSIDE_CORE_CHART_METHODS:
            ctx.report(outside_core(e.method.span, f"the chart method `{m}`"))
        else:
            ctx.report(E.unknown_method(e.method.span, m))
        self.last_axes = None
        return "numeric"

    def _index(self, e: A.EIndex) -> str:
        ctx = self.ctx
        kind, axes = self._name(e.base)
        if kind in ("chart", "deduction"):
            ctx.report(E.kind_mismatch(e.base.span, f"a {kind} cannot be indexed"))
        for ix in e.indices:
            if isinstance(ix, A.ESlice):  # E9: `X[:, 1]`, `y[a:b]`
                self._range_bounds(ix)
            elif isinstance(ix, A.Number) and not ix.is_int:
                ctx.report(E.index_not_integer(ix.span))
            else:
                self._infer(ix)
        local = self.visible(e.base.text)
        if axes is not None and not any(isinstance(ix, A.ESlice) for ix in e.indices):
            # a factor value has one axis per binder followed by its body's own shape (8.5):
            # "too many indices" is known only when the body is a scalar
            if len(e.indices) > len(axes) and local is not None and local.axes_exact:
                ctx.report(E.too_many_indices(e.base.span, e.base.text, len(axes), len(e.indices)))
            else:
                for ix, n in zip(e.indices, axes):
                    if isinstance(ix, A.Number) and ix.is_int and ix.value >= n:
                        ctx.report(E.index_out_of_range(ix.span, int(ix.value), n))
        self.last_axes = None
        return "numeric"

    def _range_bounds(self, ix: A.ESlice) -> None:
        """The bounds of a range `a:b` in an index: integers fixed when the program runs,
        as `slice`'s (QVR415 for a number that is not an integer, QVR420 otherwise)."""
        for part in (ix.start, ix.stop):
            if part is None:
                continue
            if isinstance(part, A.Number) and not part.is_int:
                self.ctx.report(E.index_not_integer(part.span))
                continue
            k = self._infer(part)
            self._need_numeric(part, k, "a range")
            if k not in ("chart", "deduction") and not self._e9_fixed(part):
                self.ctx.report(SE.range_bounds(part.span, self.ctx.snippet(part.span)))

    def _factor(self, e: A.EFactor) -> str:
        ctx = self.ctx
        sizes: dict[str, int] = {}
        spans: dict[str, object] = {}
        axes = []
        seen = set()
        for i, b in enumerate(e.binders):
            t = resolve_type(ctx, b.type)
            n = None
            if not is_unknown(t):
                if not is_discrete(t):
                    ctx.report(E.factor_problem(b.type.span, f"a factor binder must range over a finite set, "
                                                             f"got {E.describe(t)}"))
                else:
                    n = size(t)
            if b.name.text in seen:
                ctx.report(E.factor_problem(b.name.span, f"factor binder `{b.name.text}` is repeated"))
            seen.add(b.name.text)
            if self.visible(b.name.text) is not None:
                ctx.report(E.binder_shadows(b.name.span, b.name.text))
            index_text = "index" if is_unknown(t) else f"index over {spell(t)}"
            ctx.fact(b.name.span, "local", LocalInfo(b.name.text, "factor", index_text, "factor binder", self.owner))
            sizes[b.name.text] = n if n is not None else 0
            spans.setdefault(b.name.text, b.name.span)
            axes.append(n)
        self.binders.append(sizes)
        self.binder_spans.append(spans)
        if isinstance(e.body, A.FactorCases):
            if len(e.binders) != 1:
                ctx.report(E.factor_problem(e.binders[1].span if len(e.binders) > 1 else e.kw,
                                            "the case form of `factor` takes exactly one binder"))
            n = axes[0] if axes else None
            labels = set()
            for case in e.body.cases:
                if n is not None and not (0 <= case.label < n):
                    ctx.report(E.factor_problem(case.label_span, f"factor case label {case.label} is out of "
                                                                 f"range 0..{n - 1}"))
                elif case.label in labels:
                    ctx.report(E.factor_problem(case.label_span, f"factor case label {case.label} is repeated"))
                labels.add(case.label)
                k = self._infer(case.expr)
                self._need_numeric(case.expr, k, "a factor case")
            if n is not None and len(e.binders) == 1:
                missing = [str(i) for i in range(n) if i not in labels]
                if missing:
                    ctx.report(E.factor_problem(e.binders[0].name.span, f"factor cases must cover 0..{n - 1}; "
                                                                        f"missing {', '.join(missing)}"))
        else:
            k = self._infer(e.body)
            self._need_numeric(e.body, k, "a factor body")
        if isinstance(e.body, A.FactorCases):
            exact = all(self.is_scalar(c.expr) for c in e.body.cases)
        else:
            exact = self.is_scalar(e.body)
        self.binders.pop()
        self.binder_spans.pop()
        self.last_axes = tuple(a for a in axes) if all(a is not None for a in axes) else None
        self.last_exact = exact
        return "numeric"

    def is_scalar(self, e) -> bool:
        """True when `e` is known to be a scalar: numbers, factor binders, scalar locals and
        arithmetic or numeric builtins of those."""
        if isinstance(e, A.Number):
            return True
        if isinstance(e, A.EName):
            if e.name.text in self.binders_in_scope():
                return e.name.text not in self.vector_binders  # E9.3: a vector state
            local = self.visible(e.name.text)
            return local is not None and local.scalar
        if isinstance(e, A.EParen):
            return self.is_scalar(e.inner)
        if isinstance(e, (A.ENeg, A.ENot)):
            return self.is_scalar(e.operand)
        if isinstance(e, A.EBinOp):
            return self.is_scalar(e.left) and self.is_scalar(e.right)
        if isinstance(e, A.ECall) and e.callee.text in NUMERIC_BUILTINS and len(e.args) == 1:
            return self.is_scalar(e.args[0])
        return False

    # ------------------------------------------------------------ end of program
    def finish(self) -> None:
        ctx = self.ctx
        companions_at = set()
        for s, used, how in self.companions:
            local = self.first.get(s)
            if local is None or local.used or local.span in companions_at:
                continue
            companions_at.add(local.span)
            ctx.report(E.companion(local.span, s, used, how))
        for local in self.first.values():
            if local.counted and not local.used and local.span not in companions_at:
                ctx.report(E.unused_let(local.span, local.name))
