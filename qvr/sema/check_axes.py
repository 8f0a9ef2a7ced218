"""Axes typed by objects in let-expressions (docs/extensions.md E9.1, docs/e9/letexpr.md):
the E9 builtins, list literals, `log_density(F(args), x)`, `data` steps and observed values
read before their `observe` (QVR421-QVR423, QVR430), and `let v : T = e` annotations.

`AxesChecks` is a mixin of `LetChecker` (check_letexpr.py); it runs the axes walk
(`qvr.sema.axes_walk.ExprAxes`) with `AxesScope`, what names mean to it in the checker.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.families import BUILTINS
from qvr.sema import axes as X  # E9.1
from qvr.sema.axes_walk import ExprAxes
from qvr.sema.families import FAMILIES, OUTSIDE_CORE_FAMILIES
from qvr.sema.runnable import SPACE_FAMILIES, step_supported  # E9.9
from qvr.sema.resolve import resolve_type
from qvr.sema.suggest import suggest
from qvr.sema.types import is_discrete, is_unknown
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core


class AxesChecks:
    """Typed axes, E9 builtins and lists: a mixin of `LetChecker`."""

    # ------------------------------------------------------------ E9.1 axes, builtins, lists
    # Axes typed by objects, the builtins of docs/e9/letexpr.md, list literals,
    # `log_density(F(args), x)`, `data` steps and observed values read before their
    # `observe` (QVR421-QVR423, QVR430).  Axis rules live in qvr.sema.axes.

    def observed_early(self, n: A.Name):
        """The observe step whose value `n` reads before that step binds it (E9.1), or
        None; records the reference (goto, hover: "observed data of `y`")."""
        step = self.observe_sites.get(n.text)
        if step is None or self.planned.get(n.text) != step.bind.span.start \
                or step.bind.span.start <= n.span.start or n.text in self.closed:
            return None
        self.ctx.fact(n.span, "localref", step.bind.span)
        return step

    def data_later(self, n: A.Name) -> bool:
        """`n` is declared by a later `data` step: reading it now reads the same host data."""
        step = self.data_sites.get(n.text)
        return step is not None and self.planned.get(n.text) == step.bind.span.start

    def object_type(self, text: str):
        """The resolved type of object `text` (no report), None if it is not an object."""
        from qvr.sema.symbols import ObjectSym
        sym = self.ctx.object(text)
        return sym.type if isinstance(sym, ObjectSym) else None

    def value_axes_of(self, e) -> Optional[tuple]:
        """The axes of a let/score right-hand side; reports QVR421-QVR423."""
        return ExprAxes(AxesScope(self)).expr(e)

    def observed_axes(self, step) -> Optional[tuple]:
        """The axes of an observe step's value, known before the step (E9.1)."""
        return X.observed_axes(step, self.object_type)

    def let_annotation(self, step, vaxes):
        """`let v : T = e` (E9.11): the value's axes with its leading ones named by T
        (QVR436 when they do not fit); `vaxes` unchanged without an annotation."""
        if step.index is None:
            return vaxes
        ctx = self.ctx
        t = resolve_type(ctx, step.index)  # QVR101, references for goto and hover
        if is_unknown(t):
            return None
        if not is_discrete(t):
            ctx.report(E.not_finite(step.index.span, "the annotation of a let", t))
            return None
        want = X.type_expr_axes(step.index, self.object_type)
        if want is None:
            return None
        out = X.annotate_axes(vaxes, want)
        if out is None:
            has = ("has axes that are not known here" if vaxes is None else "is a scalar"
                   if not vaxes else f"has axes `{X.spell_axes(vaxes)}`")
            kw = "record" if step.recorded else "let"
            ctx.report(SE.let_axes(step.index.span, f"{kw} {step.bind.text} : "
                                  f"{X.spell_axes(want)} = …", X.spell_axes(want), has))
        return out

    def _e9_object_arg(self, a) -> bool:
        """`a` names an object where a builtin takes one (`sum(x, Coef)`, `eye(Obs)`):
        record the reference, no host-data warning (QVR702)."""
        if not isinstance(a, A.EName):
            return False
        text = a.name.text
        if text in self.binders_in_scope() or self.visible(text) is not None:
            return False
        if self.object_type(text) is None:
            return False
        self.ctx.use("type", text)
        self.ctx.fact(a.name.span, "ref", ("type", text))
        return True

    def _e9_list(self, e: A.EList) -> str:
        for item in e.items:
            k = self._infer(item)
            self._need_numeric(item, k, "a list literal")
        self.last_axes = None
        return "numeric"

    def _e9_call(self, e: A.ECall) -> str:
        ctx = self.ctx
        name = e.callee.text
        self.last_axes = None
        if name not in BUILTINS:  # a family call outside `log_density`
            ctx.fact(e.callee.span, "family", name)
            for a in e.args:
                self._infer(a)
            ctx.report(SE.family_call_value(e.callee.span, name))
            return "unknown"
        b = BUILTINS[name]
        ctx.fact(e.callee.span, "builtin", name)
        if name == "log_density":
            return self._e9_log_density(e, b)
        obj_pos = X.OBJECT_ARGS.get(name)
        objects = set()
        for i, a in enumerate(e.args):
            if i == obj_pos and self._e9_object_arg(a):
                objects.add(i)
                continue
            k = self._infer(a)
            self._need_numeric(a, k, f"`{name}`")
        self.last_axes = None
        if not b.accepts(len(e.args)):
            ctx.report(SE.builtin_arity_range(e.callee.span, name, len(b.params), len(b.all_params),
                                             len(e.args)))
            return "numeric"
        if obj_pos is not None and len(e.args) > obj_pos and obj_pos not in objects \
                and name not in ("max", "min"):  # max(a, b), min(a, b): elementwise
            a = e.args[obj_pos]
            ctx.report(SE.needs_object_arg(a.span, name, "first" if obj_pos == 0 else "second",
                                          ctx.snippet(a.span)))
        if name == "slice":
            for a in e.args[1:]:
                if not self._e9_fixed(a):
                    ctx.report(SE.slice_bounds(a.span, ctx.snippet(a.span)))
        return "numeric"

    def _e9_fixed(self, e) -> bool:
        """A `slice` bound: integers fixed when the program runs (integer literals, data,
        template parameters and arithmetic of those)."""
        while isinstance(e, A.EParen):
            e = e.inner
        if isinstance(e, A.Number):
            return e.is_int
        if isinstance(e, A.ENeg):
            return self._e9_fixed(e.operand)
        if isinstance(e, A.EBinOp) and e.op in ("+", "-", "*"):
            return self._e9_fixed(e.left) and self._e9_fixed(e.right)
        if isinstance(e, A.EName):
            if e.name.text in self.binders_in_scope():
                return False
            local = self.visible(e.name.text)
            if local is None:
                return self.observe_sites.get(e.name.text) is None  # host data
            return local.kind == "data" or (local.kind == "parameter" and local.scalar)
        return False

    def _e9_log_density(self, e: A.ECall, b) -> str:
        ctx = self.ctx
        if len(e.args) != 2:
            for a in e.args:
                self._infer(a)
            ctx.report(E.builtin_arity(e.callee.span, "log_density", 2, len(e.args)))
            return "numeric"
        f, x = e.args
        inner = f
        while isinstance(inner, A.EParen):
            inner = inner.inner
        if isinstance(inner, A.ECall) and inner.callee.text in FAMILIES:
            fam = FAMILIES[inner.callee.text]
            ctx.fact(inner.callee.span, "family", fam.name)
            for a in inner.args:
                k = self._infer(a)
                self._need_numeric(a, k, f"`{fam.name}`")
            if fam.step == "no" or getattr(fam, "improper", False):
                ctx.report(SE.density_family(inner.callee.span, fam.name))
            elif not step_supported(fam.name) or fam.name in SPACE_FAMILIES:  # E9.9
                ctx.report(SE.runtime_unsupported(inner.callee.span,
                                                 f"family `{fam.name}` in `log_density`"))
            elif len(inner.args) != len(fam.params):
                ctx.report(E.arity(inner.callee.span, fam.name, len(fam.params),
                                   ", ".join(p for p, _ in fam.params), len(inner.args)))
        elif isinstance(inner, A.ECall) and inner.callee.text in OUTSIDE_CORE_FAMILIES:
            for a in inner.args:
                self._infer(a)
            ctx.report(outside_core(inner.callee.span, f"family `{inner.callee.text}`"))
        elif isinstance(inner, A.ECall) and inner.callee.text not in BUILTINS:
            for a in inner.args:
                self._infer(a)
            ctx.report(E.unknown_family(inner.callee.span, inner.callee.text,
                                        suggest(inner.callee.text, FAMILIES)))
        else:
            self._infer(f)
            ctx.report(SE.log_density_needs_family(f.span, ctx.snippet(f.span)))
        k = self._infer(x)
        self._need_numeric(x, k, "`log_density`")
        self.last_axes = None
        return "numeric"


class AxesScope:
    """What names mean to the axes walk (qvr.sema.axes_walk.ExprAxes), for the checker."""

    def __init__(self, chk):
        self.chk = chk

    def name_axes(self, text: str):
        chk = self.chk
        local = chk.visible(text)
        if local is not None:
            return local.value_axes
        step = chk.observe_sites.get(text)
        if step is not None and chk.planned.get(text) == step.bind.span.start and text not in chk.closed:
            return chk.observed_axes(step)
        return None

    def is_local(self, text: str) -> bool:
        return self.chk.visible(text) is not None

    def object_type(self, text: str):
        return self.chk.object_type(text)

    def report(self, kind: str, span, *args) -> None:
        # the axes walk's diagnostics are E9's but for QVR415 (indices), the core's
        make = getattr(SE, kind, None) or getattr(E, kind)
        self.chk.ctx.report(make(span, *args))

    def snippet(self, span) -> str:
        return self.chk.ctx.snippet(span, limit=60)
