"""Recurrences and ODEs in let-expressions (docs/extensions.md E9.3, docs/e9/recurrence.md):
`fold(O, init, (s, t) -> body)`, `scan(O, init, (s, t) -> body)` (QVR424) and
`ode((y, t) -> dydt, y0, times[, rtol, atol])` (QVR425).

`RecurrenceChecks` is a mixin of `LetChecker` (check_letexpr.py), whose `_infer` sends
these calls to `_recurrence`.
"""
from __future__ import annotations

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.check_axes import AxesScope
from qvr.sema.context import LocalInfo
from qvr.sema import axes as X  # E9.1
from qvr.sema.axes_calls import ode_arguments
from qvr.sema.axes_walk import ExprAxes
from qvr.sema.resolve import resolve_type
from qvr.sema.types import is_discrete, is_unknown, size
from qvr.syntax import ast as A


class RecurrenceChecks:
    """`fold`, `scan` and `ode` calls: a mixin of `LetChecker`."""

    # ------------------------------------------------------------ E9.3 recurrences and ODEs
    # `fold(O, init, (s, t) -> body)`, `scan(O, init, (s, t) -> body)` (QVR424) and
    # `ode((y, t) -> dydt, y0, times[, rtol, atol])` (QVR425); docs/e9/recurrence.md.
    _ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")

    def _recurrence(self, e: A.ECall) -> str:
        ctx = self.ctx
        name = e.callee.text
        ctx.fact(e.callee.span, "builtin", name)
        args = e.args
        if name == "ode":
            self._ode(e)
            self.last_axes = None
            return "numeric"
        if len(args) != 3:
            ctx.report(E.builtin_arity(e.callee.span, name, 3, len(args)))
        n, over = self._recurrence_object(name, args[0]) if args else (None, None)
        init = args[1] if len(args) > 1 else None
        if init is not None:
            self._recurrence_value(name, init, 1, f"the initial state of `{name}`")
        lam = args[2] if len(args) > 2 else None
        if lam is not None:
            if not isinstance(lam, A.ELambda):
                ctx.report(SE.recurrence_needs_lambda(lam.span, name))
                self._infer(lam)
            else:
                if len(lam.params) != 2:
                    ctx.report(SE.recurrence_lambda_arity(lam.span, name, len(lam.params)))
                axes = self._quiet_axes(init) if init is not None else None
                scalar = init is not None and (axes == () or self.is_scalar(init))
                infos = [(X.hover_text(axes) or "numeric",
                          f"state of `{name}`" if over is None else f"state of `{name}` over {over}"),
                         ("index" if over is None else f"index over {over}", f"index of `{name}`")]
                self._lambda_body(lam, name, infos, vector_state=not scalar,
                                  repeated=lambda sp, p: SE.recurrence_lambda_repeated(sp, name, p))
        for i, a in enumerate(args[3:], start=3):
            self._recurrence_value(name, a, i, "an argument")
        self.last_axes = None
        if name == "scan" and n is not None and init is not None and self.is_scalar(init):
            self.last_axes = (n,)  # one state per index of O: `v[k]` is range-checked
        return "numeric"

    def _quiet_axes(self, e):
        """The typed axes of `e` (E9.1's walk) without reporting anything (hover text)."""
        scope = AxesScope(self)
        quiet = type("_Quiet", (), {"name_axes": lambda _s, t: scope.name_axes(t),
                                    "is_local": lambda _s, t: scope.is_local(t),
                                    "object_type": lambda _s, t: scope.object_type(t)})()
        try:
            return ExprAxes(quiet).expr(e)
        except Exception:  # the walk is E9.1's; a hover text never fails the check
            return None

    def _recurrence_object(self, fn: str, a) -> tuple:
        """The first argument of fold/scan: a discrete object; (its size, its name) or Nones."""
        ctx = self.ctx
        if isinstance(a, A.ELambda):
            ctx.report(SE.recurrence_lambda_misplaced(a.span, fn, "first"))
            return None, None
        if not isinstance(a, A.EName):
            self._infer(a)
            got = "a number" if isinstance(a, A.Number) else "an expression"
            ctx.report(SE.recurrence_not_object(a.span, fn, got))
            return None, None
        text = a.name.text
        if ctx.object(text) is None and (self.visible(text) is not None
                                         or text in self.binders_in_scope()):
            self._infer(a)  # the reference, for goto and unused-binding checks
            ctx.report(SE.recurrence_not_object(a.span, fn, f"the value `{text}`"))
            return None, None
        t = resolve_type(ctx, A.TName(a.name, a.span))  # QVR101 when undefined
        if is_unknown(t):
            return None, None
        if not is_discrete(t):
            ctx.report(SE.recurrence_not_object(a.span, fn, E.describe(t)))
            return None, None
        return size(t), text

    def _recurrence_value(self, fn: str, a, i: int, what: str) -> None:
        if isinstance(a, A.ELambda):
            if fn == "ode":
                self.ctx.report(SE.ode_lambda_misplaced(a.span, self._ORDINALS[i]))
            else:
                self.ctx.report(SE.recurrence_lambda_misplaced(a.span, fn, self._ORDINALS[i]))
            return
        k = self._infer(a)
        self._need_numeric(a, k, what)

    def _lambda_body(self, lam: A.ELambda, fn: str, infos, vector_state: bool, repeated) -> None:
        """Check a lambda's body with its parameters bound (visible in the body only)."""
        ctx = self.ctx
        sizes: dict[str, int] = {}
        spans: dict[str, object] = {}
        for i, p in enumerate(lam.params):
            if p.text in sizes:
                ctx.report(repeated(p.span, p.text))
                continue
            type_text, detail = infos[i] if i < len(infos) else ("numeric", f"parameter of `{fn}`")
            ctx.fact(p.span, "local", LocalInfo(p.text, "lambda", type_text, detail, self.owner))
            sizes[p.text] = 0
            spans[p.text] = p.span
        saved = self.vector_binders
        state = lam.params[0].text if lam.params else None
        if state is not None:
            self.vector_binders = (saved - {state}) | ({state} if vector_state else set())
        self.binders.append(sizes)
        self.binder_spans.append(spans)
        try:
            k = self._infer(lam.body)
            self._need_numeric(lam.body, k, f"the body of the lambda of `{fn}`")
        finally:
            self.binders.pop()
            self.binder_spans.pop()
            self.vector_binders = saved

    def _ode(self, e: A.ECall) -> None:
        ctx = self.ctx
        args = e.args
        t0, times, rtol, atol = ode_arguments(args)  # `ode(f, y0[, t0], times, …)`
        if not 3 <= len(args) <= (5 if t0 is None else 6):
            ctx.report(SE.ode_arity(e.callee.span, len(args)))
        if args:
            lam = args[0]
            if not isinstance(lam, A.ELambda):
                ctx.report(SE.ode_needs_lambda(lam.span))
                self._infer(lam)
            else:
                if len(lam.params) != 2:
                    ctx.report(SE.ode_lambda_arity(lam.span, len(lam.params)))
                axes = self._quiet_axes(args[1]) if len(args) > 1 else None
                scalar = len(args) > 1 and (axes == () or self.is_scalar(args[1]))
                self._lambda_body(lam, "ode", [(X.hover_text(axes) or "numeric", "state of `ode`"),
                                               ("Real", "time of `ode`")],
                                  vector_state=not scalar, repeated=SE.ode_lambda_repeated)
        if len(args) > 1:
            self._recurrence_value("ode", args[1], 1, "the initial state of `ode`")
        if t0 is not None:
            self._recurrence_value("ode", t0, 2, "the initial time of `ode`")
            t0_axes = self._quiet_axes(t0)
            if t0_axes:
                ctx.report(SE.ode_t0_scalar(t0.span, ctx.snippet(t0.span), X.spell_axes(t0_axes)))
        position = {id(a): i for i, a in enumerate(args)}
        if times is not None:
            self._recurrence_value("ode", times, position[id(times)], "the times of `ode`")
            inner = times
            while isinstance(inner, A.EParen):
                inner = inner.inner
            if isinstance(inner, A.Number) or (isinstance(inner, A.ENeg) and isinstance(inner.operand, A.Number)):
                ctx.report(SE.ode_times_scalar(times.span))
        for a, which in ((rtol, "rtol"), (atol, "atol")):
            if a is not None:
                i = position[id(a)]
                if isinstance(a, A.ELambda):
                    ctx.report(SE.ode_lambda_misplaced(a.span, self._ORDINALS[i]))
                elif not (isinstance(a, A.Number) and a.value > 0):
                    self._infer(a)
                    ctx.report(SE.ode_tolerance(a.span, which))
