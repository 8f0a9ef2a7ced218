"""`ExprAxes`, the walk that gives the typed axes (`qvr.sema.axes`) of every
sub-expression of a let-expression (docs/extensions.md E9.1), given a `scope` that answers
what a name is; builtin calls are `qvr.sema.axes_calls.CALL_AXES`'s.  Pure (no torch, no
checker state): the checker (`qvr.sema.check_axes`) and the runtime
(`qvr.runtime.compile_program`) run the same walk.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema.axes import (Axes, Axis, broadcast, describe_pair, int_literal, matmul_axes,
                           object_axis, same_axis, slice_size, spell_axes, type_expr_axes)
from qvr.sema.axes_calls import CALL_AXES, unary
from qvr.syntax import ast as A

__all__ = ["ExprAxes"]


class ExprAxes:
    """The axes of the sub-expressions of a let-expression.

    `scope` answers `name_axes(text) -> Axes` (a local, an observed value, a constant;
    None for host data or unknown), `object_type(text)` (the resolved type of an object
    declaration, None if `text` is not one) and, optionally, `report(code, span,
    message)` and `snippet(span)` (the checker's; the runtime passes none).  `of(e)`
    returns the axes of a node walked before (by identity), so the runtime can ask for
    the axes of any argument after walking the whole right-hand side once."""

    def __init__(self, scope):
        self.scope = scope
        self.table: dict = {}
        self.binders: list[dict] = []

    # -- helpers
    def of(self, e) -> Axes:
        return self.table.get(id(e))

    def _report(self, kind: str, span, *args) -> None:
        """Report the diagnostic whose constructor is `qvr.sema.errors.<kind>`."""
        rep = getattr(self.scope, "report", None)
        if rep is not None:
            rep(kind, span, *args)

    def text(self, e) -> str:
        snip = getattr(self.scope, "snippet", None)
        return snip(e.span) if snip is not None else "…"

    def bound(self, text: str) -> Optional[tuple]:
        """(axes,) of a factor binder or lambda parameter in scope, else None."""
        for b in reversed(self.binders):
            if text in b:
                return (b[text],)
        return None

    def object_name(self, e) -> Optional[str]:
        """The object an argument names: a bare name that is neither a binder, a local
        (locals win inside let-expressions, 7.3) nor anything but an object."""
        if not isinstance(e, A.EName):
            return None
        text = e.name.text
        if self.bound(text) is not None:
            return None
        is_local = getattr(self.scope, "is_local", None)
        if is_local is not None and is_local(text):
            return None
        return text if self.scope.object_type(text) is not None else None

    # -- the walk
    def expr(self, e) -> Axes:
        out = self._expr(e)
        self.table[id(e)] = out
        return out

    def _expr(self, e) -> Axes:
        if isinstance(e, A.Number):
            return ()
        if isinstance(e, A.EName):
            b = self.bound(e.name.text)
            if b is not None:
                return b[0]
            return self.scope.name_axes(e.name.text)
        if isinstance(e, A.EParen):
            return self.expr(e.inner)
        if isinstance(e, (A.ENeg, A.ENot)):  # E9.10: `not x` keeps x's axes
            return self.expr(e.operand)
        if isinstance(e, A.EBinOp):
            left, right = self.expr(e.left), self.expr(e.right)
            if e.op == "@":
                return self._matmul(e, left, right)
            return broadcast(left, right)
        if isinstance(e, A.EList):
            return self._list(e)
        if isinstance(e, A.ECall):
            return self._call(e)
        if isinstance(e, A.EIndex):
            return self._index(e)
        if isinstance(e, A.EFactor):
            return self._factor(e)
        if isinstance(e, A.ELambda):
            self.binders.append({p.text: None for p in e.params})
            self.expr(e.body)
            self.binders.pop()
            return None
        if isinstance(e, A.EMethod):
            for a in e.args:
                self.expr(a)
            return None
        return None

    def _matmul(self, e, left, right) -> Axes:
        axes, problem = matmul_axes(left, right)
        if problem is not None:
            a, b = self.text(e.left), self.text(e.right)
            if problem[0] == "scalar":
                self._report("contraction_scalar", e.op_span, self.text(e),
                             a if problem[1] == "left" else b)
            else:
                da, db = describe_pair(problem[1], problem[2])
                self._report("contraction", e.op_span, self.text(e), a, da, b, db)
        return axes

    def _list(self, e: A.EList) -> Axes:
        items = [self.expr(i) for i in e.items]
        n = Axis(None, len(e.items))
        if not items:
            return (n,)
        if any(x is None for x in items):
            return None
        shapes = [tuple(a.size for a in x) for x in items]
        first = shapes[0]
        for i, (s, x) in enumerate(zip(shapes, items)):
            if len(s) != len(first) or any(p is not None and q is not None and p != q
                                           for p, q in zip(s, first)):
                self._report("list_shapes", e.items[i].span, self.text(e.items[0]),
                             spell_axes(items[0]), self.text(e.items[i]), spell_axes(x))
                return None
        merged = []
        for k in range(len(first)):
            names = {x[k].name for x in items}
            sizes = {x[k].size for x in items if x[k].size is not None}
            merged.append(Axis(names.pop() if len(names) == 1 else None,
                               sizes.pop() if sizes else None))
        return (n,) + tuple(merged)

    def _index(self, e: A.EIndex) -> Axes:
        b = self.bound(e.base.text)
        base = b[0] if b is not None else self.scope.name_axes(e.base.text)
        if any(isinstance(i, A.ESlice) for i in e.indices):
            return self._sliced(e, base)
        idx = [self.expr(i) for i in e.indices]
        if base is None or len(e.indices) > len(base):
            return None
        lead = broadcast(*idx)
        return None if lead is None else lead + base[len(e.indices):]

    def _sliced(self, e: A.EIndex, base: Axes) -> Axes:
        """`X[:, 1]`, `y[a:b]` (an index holding a range): the indices name the typed axes
        in order; `:` keeps its axis, `a:b` gives an anonymous axis of the range's length
        (Python semantics), an integer index drops its axis; the axes of the integer
        indices (broadcast) come first, then the kept axes, then the axes not indexed."""
        lead = []
        for ix in e.indices:
            if isinstance(ix, A.ESlice):
                for part in (ix.start, ix.stop):
                    if part is not None:
                        self.expr(part)
            else:
                lead.append(self.expr(ix))
        self.table[id(e.base)] = base  # the runtime resolves the indexed dimensions from it
        if base is None:
            return None
        if len(e.indices) > len(base):
            self._report("too_many_indices", e.base.span, e.base.text, len(base), len(e.indices))
            return None
        kept = []
        for ix, ax in zip(e.indices, base):
            if isinstance(ix, A.ESlice):
                if ix.start is None and ix.stop is None:
                    kept.append(ax)
                    continue
                start = 0 if ix.start is None else int_literal(ix.start)
                stop = None if ix.stop is None else int_literal(ix.stop)
                kept.append(Axis(None, slice_size(ax.size, start, stop, ix.stop is not None)))
                continue
            v = int_literal(ix)
            if v is not None and ax.size is not None and not 0 <= v < ax.size:
                self._report("index_out_of_range", ix.span, v, ax.size)
        first = broadcast(*lead) if lead else ()
        return None if first is None else first + tuple(kept) + base[len(e.indices):]

    def _factor(self, e: A.EFactor) -> Axes:
        axes = []
        for bd in e.binders:
            ta = type_expr_axes(bd.type, self.scope.object_type)
            axes.append(ta[0] if ta and len(ta) == 1 else None)
            if ta is not None and len(ta) > 1:  # a product type: one axis of its size
                sz = 1
                for a in ta:
                    sz = None if sz is None or a.size is None else sz * a.size
                axes[-1] = Axis(None, sz)
        self.binders.append({bd.name.text: () for bd in e.binders})
        if isinstance(e.body, A.FactorCases):
            body = broadcast(*[self.expr(c.expr) for c in e.body.cases])
        else:
            body = self.expr(e.body)
        self.binders.pop()
        if body is None or any(a is None for a in axes):
            return None
        return tuple(axes) + body

    def _call(self, e: A.ECall) -> Axes:
        name = e.callee.text
        rule = CALL_AXES.get(name)
        if rule is None:  # core builtins without axes rules, families, unknown callees
            for a in e.args:
                self.expr(a)
            return None
        if rule is unary and len(e.args) == 1:
            # inline: three frames per nesting level (`exp(exp(...))` 196 deep stays
            # within Python's default recursion limit, tests/test_hostile_files.py)
            return self.expr(e.args[0])
        return rule(self, e)

    # -- helpers for rules
    def axis_arg(self, e: A.ECall, x, pos: int):
        """For `f(x, O)`: (index of the axis typed O in x's axes, O) after checking it
        (QVR422); (None, None) without the argument; ("bad", None) on an error."""
        if len(e.args) <= pos:
            return None, None
        obj = self.object_name(e.args[pos])
        if obj is None:
            return "bad", None  # not an object: the kind check reports it (QVR420)
        xa = self.of(e.args[0])
        call = f"{e.callee.text}({self.text(e.args[0])}, {obj})"
        what = self.text(e.args[0])
        if xa is None:
            self._report("axis_not_known", e.args[pos].span, call, what, obj)
            return "bad", obj
        hits = [i for i, a in enumerate(xa) if a.name == obj]
        if not hits:
            lst = self._list_literal(e.args[0])
            if lst is not None and xa and xa[0].name is None:  # `logsumexp([a, b], Comp)`
                ax = object_axis(obj, self.scope.object_type(obj))
                if ax.size is not None and ax.size == xa[0].size:
                    typed = (ax,) + xa[1:]
                    node = e.args[0]
                    while True:  # the list and the parentheses around it
                        self.table[id(node)] = typed
                        if not isinstance(node, A.EParen):
                            break
                        node = node.inner
                    return 0, obj
                self._report("list_axis_size", e.args[pos].span, call, obj, what,
                             len(lst.items), ax.size)
                return "bad", obj
            self._report("not_an_axis_of", e.args[pos].span, call, obj, what,
                         spell_axes(xa) if xa else None)
            return "bad", obj
        if len(hits) > 1:
            self._report("axis_ambiguous", e.args[pos].span, call, obj, len(hits), what,
                         spell_axes(xa))
            return "bad", obj
        return hits[0], obj

    @staticmethod
    def _list_literal(e) -> Optional[A.EList]:
        while isinstance(e, A.EParen):
            e = e.inner
        return e if isinstance(e, A.EList) else None

    def need_matrix(self, e: A.ECall, a: Axes, what: str) -> bool:
        """QVR422 unless `a` (when known) has at least two axes, the last two of one size
        when `square`."""
        if a is None:
            return False
        square = what == "a square matrix"
        if len(a) < 2 or (square and not same_axis(Axis(None, a[-1].size), Axis(None, a[-2].size))):
            self._report("needs_axes", e.args[0].span, e.callee.text, what, self.text(e.args[0]),
                         spell_axes(a) if a else None)
            return False
        return True
