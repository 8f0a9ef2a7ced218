"""Axes typed by objects (docs/extensions.md E9, part E9.1).

A numeric value of a let-expression has, when it is known, a tuple of *axes*: each an
object (`Axis("Coef", 3)`) or an anonymous size (`Axis(None, 3)`, spelled `FinSet 3`).
Axes are trailing: at run time a value may carry leading batch axes (rows of the program
input) in front of them, never in between; so a dimension named by an object is resolved
from the right (`dim_of`).

This module is pure (no torch, no checker state) and shared by the checker
(`qvr.sema.check_letexpr`, which reports QVR421-QVR423 through `ExprAxes`) and the runtime
(`qvr.runtime.compile_program` / `letexpr`, which resolve reduction dimensions, the
stacking axis of list literals and the contraction of `@` from the same inference):

* the rules: `broadcast`, `matmul_axes`, `site_axes`, `type_expr_axes`, `object_axis`;
* `ExprAxes`, the walk over a let-expression, given a `scope` that answers what a name
  is (`name_axes`, `object_type`) and, in the checker, how to report (`report`,
  `snippet`);
* the E9 builtin table of axis rules (`CALL_AXES`), keyed by builtin name, so that other
  parts add entries (`fold`, `scan`, ...) without touching the walk.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from qvr.sema.types import dim, is_continuous, is_discrete, is_unknown, size
from qvr.syntax import ast as A


@dataclass(frozen=True, slots=True)
class Axis:
    name: Optional[str]  # the object typing this axis; None: an anonymous size
    size: Optional[int]  # None: not known

    def spell(self) -> str:
        if self.name is not None:
            return self.name
        return f"FinSet {self.size}" if self.size is not None else "?"

    def describe(self, sized: bool = False) -> str:
        """For messages: `Coef` (`Coef` (size 3) when `sized`), or an axis of size 3."""
        if self.name is not None:
            return f"`{self.name}`" + (f" (size {self.size})" if sized and self.size is not None else "")
        return f"an axis of size {self.size}" if self.size is not None else "an axis of unknown size"


def describe_pair(a: Axis, b: Axis) -> tuple[str, str]:
    """Two clashing axes for a message: sizes shown only when they are what differs."""
    sized = a.size is not None and b.size is not None and a.size != b.size
    return a.describe(sized), b.describe(sized)


Axes = Optional[tuple]  # tuple[Axis, ...] when known, None when not


def spell_axes(axes: Axes) -> str:
    """`Household * Coef`; `scalar` for (); `?` when unknown."""
    if axes is None:
        return "?"
    if not axes:
        return "scalar"
    return " * ".join(a.spell() for a in axes)


def hover_text(axes: Axes) -> Optional[str]:
    """The type text a local with these axes shows on hover, None to keep the default."""
    if not axes:
        return None
    return spell_axes(axes)


# ---------------------------------------------------------------- rules

def _merge(cands: list) -> tuple[bool, Optional[Axis]]:
    """One axis from the axes aligned at one position: (ok, axis); ok False on a conflict
    (sizes that do not broadcast, or two different objects)."""
    real = [a for a in cands if not (a.name is None and a.size == 1)] or cands[:1]
    sizes = {a.size for a in real if a.size is not None}
    names = {a.name for a in real if a.name is not None}
    if len(sizes) > 1 or len(names) > 1:
        return False, None
    return True, Axis(next(iter(names)) if names else None, next(iter(sizes)) if sizes else None)


def broadcast(*xs: Axes) -> Axes:
    """Right-aligned broadcasting of known axes; None when one is unknown or they clash."""
    if any(x is None for x in xs):
        return None
    n = max((len(x) for x in xs), default=0)
    out = []
    for i in range(1, n + 1):
        ok, a = _merge([x[-i] for x in xs if len(x) >= i])
        if not ok:
            return None
        out.append(a)
    return tuple(reversed(out))


def same_axis(a: Axis, b: Axis) -> bool:
    """False when two axes are known to differ: different objects, or different sizes."""
    if a.name is not None and b.name is not None and a.name != b.name:
        return False
    if a.size is not None and b.size is not None and a.size != b.size:
        return False
    return True


def matmul_axes(a: Axes, b: Axes):
    """`(axes, problem)` of `a @ b` (torch.matmul): problem is None, ("scalar", side) or
    ("contract", axis of a, axis of b)."""
    if a is not None and len(a) == 0:
        return None, ("scalar", "left")
    if b is not None and len(b) == 0:
        return None, ("scalar", "right")
    if a is None or b is None:
        return None, None
    ca, cb = a[-1], (b[0] if len(b) == 1 else b[-2])
    if not same_axis(ca, cb):
        return None, ("contract", ca, cb)
    if len(b) == 1:
        return a[:-1], None
    if len(a) == 1:
        return b[:-2] + b[-1:], None
    batch = broadcast(a[:-2], b[:-2])
    return (None if batch is None else batch + a[-2:-1] + b[-1:]), None


def object_axis(name: str, ty) -> Axis:
    """The axis an object of type `ty` gives: its size (finite) or dimension (real)."""
    if ty is None or is_unknown(ty):
        return Axis(name, None)
    if is_discrete(ty):
        return Axis(name, size(ty))
    if is_continuous(ty):
        return Axis(name, dim(ty))
    return Axis(name, None)


def type_expr_axes(t, object_type: Callable) -> Axes:
    """The axes of a type expression written in a `data` step, a plate annotation or a
    factor binder: one per factor as written (`Household * Coef`; an object defined as a
    product is one axis), `FinSet n` / `Real n` an anonymous axis of size n."""
    if isinstance(t, A.TParen):
        return type_expr_axes(t.inner, object_type)
    if isinstance(t, A.TProd):
        out = []
        for f in t.factors:
            fa = type_expr_axes(f, object_type)
            if fa is None:
                return None
            out.extend(fa)
        return tuple(out)
    if isinstance(t, A.TAtom):
        return (Axis(None, t.size),) if t.size >= 1 else None
    if isinstance(t, A.TName):
        ty = object_type(t.name.text)
        return None if ty is None else (object_axis(t.name.text, ty),)
    return None


def site_axes(index: Axes, event: Axes, rank: int, args: list) -> Axes:
    """The axes of the value of a family `sample`/`observe` step.

    `index`: the plate annotation's axes (None when there is none); `event`: the axes
    named by `over=` (None without `over`); `rank`: the family's event rank; `args`: the
    axes of the family's arguments.  A plate puts its axis first (arguments broadcast
    against it), `over=` names the trailing event axes."""
    a = broadcast(*args) if args else ()
    if rank >= 1:
        if event is None:
            base = a  # the event axes come from the arguments (e.g. a concentration vector)
            if base is None or len(base) < rank:
                return None
        else:
            if a is None:
                return None
            batch = a[:-rank] if len(a) >= rank else ()
            base = batch + tuple(event)
    else:
        base = a
    if index is None:
        return base
    if base is None:
        return None
    if not base:
        return tuple(index)
    lead = base[:len(index)]
    if len(lead) == len(index) and all(same_axis(x, y) for x, y in zip(lead, index)):
        return tuple(index) + base[len(index):]
    return tuple(index) + base


def annotate_axes(value: Axes, want: tuple) -> Axes:
    """`let v : T = e` (E9.11): e's axes with its leading axes named by T's factors; None
    when they do not fit (unknown axes, fewer axes than T has factors, another object, or
    another size).  An anonymous axis of the same size takes the object's name."""
    if value is None or len(value) < len(want):
        return None
    for got, w in zip(value, want):
        if (got.name is not None and got.name != w.name) or not same_axis(got, w):
            return None
    return tuple(want) + tuple(value[len(want):])


def dim_of(axes: tuple, i: int) -> int:
    """The tensor dimension, counted from the right, of typed axis `i`."""
    return i - len(axes)


# ---------------------------------------------------------------- builtin signatures (E9)

#: elementwise builtins of one argument
UNARY = ("exp", "log", "sqrt", "sigmoid", "abs", "softplus", "log1p", "expm1", "tanh", "lgamma",
         "digamma", "logsigmoid", "square", "erf", "erfc", "log2", "log10", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil",
         "round", "trunc", "sign", "reciprocal", "rsqrt", "relu")
#: reductions `f(x)` (last axis) / `f(x, O)` (the axis typed O)
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "std")
#: `f(x)` / `f(x, O)` keeping the axes
ALONG = ("softmax", "log_softmax", "cumsum")
#: builtins whose argument at this position is an object name
OBJECT_ARGS = {**{f: 1 for f in REDUCTIONS + ALONG}, "eye": 0}
#: E9.10: Stan's indicators, elementwise 0/1 (`step(x)`: x >= 0, `int_step(x)`: x > 0);
#: `where(c, a, b)` is the elementwise conditional
INDICATORS = ("step", "int_step")
#: every builtin of E9.1 (arity is in `qvr.sema.families.BUILTINS`)
E9_BUILTINS = frozenset(UNARY + REDUCTIONS + ALONG + INDICATORS + (
    "pow", "clamp", "cholesky", "tri_solve", "logdet", "diag", "eye", "transpose", "slice",
    "log_density", "append_row", "append_col", "diag_pre_multiply", "where"))


def slice_size(n: Optional[int], start: Optional[int], stop: Optional[int], has_stop: bool
               ) -> Optional[int]:
    """The length of `x[start:stop]` along an axis of size n (Python semantics)."""
    if n is None or start is None or (has_stop and stop is None):
        return None
    return len(range(n)[start:stop] if has_stop else range(n)[start:])


def int_literal(e) -> Optional[int]:
    """The value of an integer literal, optionally negated or parenthesised; else None."""
    while isinstance(e, A.EParen):
        e = e.inner
    if isinstance(e, A.ENeg):
        v = int_literal(e.operand)
        return None if v is None else -v
    if isinstance(e, A.Number) and e.is_int:
        return int(e.value)
    return None


# ---------------------------------------------------------------- the walk

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
        if rule is _unary and len(e.args) == 1:
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


def _args(w: ExprAxes, e: A.ECall, skip=()) -> list:
    out = []  # a loop, not a comprehension: one frame fewer per nesting level
    for i, a in enumerate(e.args):
        out.append(None if i in skip else w.expr(a))
    return out


def _unary(w, e):
    xs = _args(w, e)
    return xs[0] if len(xs) == 1 else None


def _elementwise(w, e):
    return broadcast(*_args(w, e)) if e.args else None


def _reduction(w, e):
    obj_pos = OBJECT_ARGS[e.callee.text]
    second_is_object = len(e.args) > obj_pos and w.object_name(e.args[obj_pos]) is not None
    if e.callee.text in ("max", "min") and len(e.args) == 2 and not second_is_object:
        return broadcast(*_args(w, e))  # elementwise max(a, b)
    xs = _args(w, e, skip=(1,))
    if len(e.args) not in (1, 2):
        return None
    x = xs[0]
    i, _obj = w.axis_arg(e, x, 1)
    if i == "bad" or x is None:
        return None
    if i is None:
        return x[:-1]
    return x[:i] + x[i + 1:]


def _along(w, e):
    xs = _args(w, e, skip=(1,))
    if len(e.args) not in (1, 2):
        return None
    i, _ = w.axis_arg(e, xs[0], 1)
    return None if i == "bad" else w.of(e.args[0])  # a list literal's axis may be named now


def _cholesky(w, e):
    xs = _args(w, e)
    if len(xs) != 1:
        return None
    return xs[0] if w.need_matrix(e, xs[0], "a square matrix") else None


def _logdet(w, e):
    xs = _args(w, e)
    if len(xs) != 1:
        return None
    return xs[0][:-2] if w.need_matrix(e, xs[0], "a square matrix") else None


def _transpose(w, e):
    xs = _args(w, e)
    if len(xs) != 1:
        return None
    a = xs[0]
    return a[:-2] + (a[-1], a[-2]) if w.need_matrix(e, a, "at least two axes") else None


def _diag(w, e):
    xs = _args(w, e)
    if len(xs) != 1 or xs[0] is None:
        return None
    v = xs[0]
    if not v:
        w._report("needs_axes", e.args[0].span, "diag", "a vector", w.text(e.args[0]), None)
        return None
    return v + (v[-1],)


def _diag_pre_multiply(w, e):
    """E9.9 `diag_pre_multiply(v, A)` = diag(v) @ A: v's axis scales A's rows (QVR421 when
    they are known to differ); the axes of A, its row axis named by v's when A's is not."""
    xs = _args(w, e)
    if len(xs) != 2 or xs[0] is None or xs[1] is None:
        return None
    v, a = xs
    if not v:
        w._report("needs_axes", e.args[0].span, "diag_pre_multiply", "a vector",
                  w.text(e.args[0]), None)
        return None
    if len(a) < 2:
        w._report("needs_axes", e.args[1].span, "diag_pre_multiply", "a matrix",
                  w.text(e.args[1]), spell_axes(a) if a else None)
        return None
    if not same_axis(v[-1], a[-2]):
        da, db = describe_pair(v[-1], a[-2])
        w._report("contraction", e.callee.span, w.text(e), w.text(e.args[0]), da,
                  w.text(e.args[1]), db)
        return None
    row = Axis(v[-1].name if v[-1].name is not None else a[-2].name,
               v[-1].size if v[-1].size is not None else a[-2].size)
    return a[:-2] + (row, a[-1])


def _eye(w, e):
    if len(e.args) != 1:
        return None
    obj = w.object_name(e.args[0])
    if obj is None:
        return None
    ax = object_axis(obj, w.scope.object_type(obj))
    return (ax, ax)


def _tri_solve(w, e):
    xs = _args(w, e)
    if len(xs) != 2:
        return None
    L, b = xs
    if not w.need_matrix(e, L, "a square matrix"):
        return None
    if b is None:
        return None
    if not b:
        w._report("needs_axes", e.args[1].span, "tri_solve", "a vector or a matrix on the right",
                  w.text(e.args[1]), None)
        return None
    rows = b[0] if len(b) == 1 else b[-2]
    if not same_axis(L[-2], rows):
        da, db = describe_pair(L[-2], rows)
        w._report("contraction", e.callee.span, w.text(e), w.text(e.args[0]), da, w.text(e.args[1]), db)
        return None
    if len(b) == 1:
        return L[:-2] + (L[-1],)
    batch = broadcast(L[:-2], b[:-2])
    return None if batch is None else batch + (L[-1], b[-1])


def _slice(w, e):
    xs = _args(w, e)
    if len(xs) not in (2, 3) or xs[0] is None:
        return None
    x = xs[0]
    if not x:
        w._report("needs_axes", e.args[0].span, "slice", "an axis to slice", w.text(e.args[0]), None)
        return None
    n = slice_size(x[0].size, int_literal(e.args[1]),
                   int_literal(e.args[2]) if len(e.args) == 3 else None, len(e.args) == 3)
    return (Axis(None, n),) + x[1:]


def _log_density(w, e):
    if len(e.args) != 2:
        for a in e.args:
            w.expr(a)
        return None
    fam_call, x = e.args
    if isinstance(fam_call, A.ECall):
        args = [w.expr(a) for a in fam_call.args]
        w.table[id(fam_call)] = None
    else:
        args = [w.expr(fam_call)]
    xa = w.expr(x)
    from qvr.sema.families import FAMILIES
    fam = FAMILIES.get(fam_call.callee.text) if isinstance(fam_call, A.ECall) else None
    rank = fam.event_rank if fam is not None else 0
    out = broadcast(*args, xa)
    if out is None:
        return None
    if rank:
        return out[:-rank] if len(out) >= rank else None
    return out


def _append(w, e):
    """`append_row(a, b)` joins along the first axis, `append_col(a, b)` along the last: an
    anonymous axis of the summed length; the other axes must agree (QVR435); a scalar is
    one entry of a vector."""
    xs = _args(w, e)
    if len(xs) != 2 or xs[0] is None or xs[1] is None:
        return None
    a, b = xs
    call = f"{e.callee.text}({w.text(e.args[0])}, {w.text(e.args[1])})"
    if not a and not b:
        w._report("concat_scalars", e.callee.span, call)
        return None
    if not a or not b:  # Stan's append_row(real, vector)
        vi = 1 if not a else 0  # the operand with axes
        v = xs[vi]
        if len(v) != 1:
            w._report("concat_scalar", e.args[vi].span, call, w.text(e.args[1 - vi]),
                      spell_axes(v))
            return None
        n = v[0].size
        return (Axis(None, None if n is None else n + 1),)
    if len(a) != len(b):
        w._report("concat_axes", e.args[1].span, call, w.text(e.args[0]), spell_axes(a),
                  w.text(e.args[1]), spell_axes(b), "the same number of axes")
        return None
    d = 0 if e.callee.text == "append_row" else len(a) - 1
    out = []
    for k, (x, y) in enumerate(zip(a, b)):
        if k == d:
            out.append(Axis(None, None if x.size is None or y.size is None else x.size + y.size))
            continue
        if not same_axis(x, y):  # torch.cat: equal sizes (no broadcasting)
            w._report("concat_axes", e.args[1].span, call, w.text(e.args[0]), spell_axes(a),
                      w.text(e.args[1]), spell_axes(b), "the same axes apart from the joined one")
            return None
        out.append(Axis(x.name if x.name is not None else y.name,
                        x.size if x.size is not None else y.size))
    return tuple(out)


#: name -> rule(walker, call) -> axes.  Other parts of E9 add their builtins here.
CALL_AXES: dict[str, Callable] = {
    **{n: _unary for n in UNARY},
    **{n: _reduction for n in REDUCTIONS},
    **{n: _along for n in ALONG},
    **{n: _unary for n in INDICATORS},  # E9.10
    "pow": _elementwise, "clamp": _elementwise, "where": _elementwise,
    "cholesky": _cholesky, "logdet": _logdet, "transpose": _transpose, "diag": _diag,
    "diag_pre_multiply": _diag_pre_multiply,
    "eye": _eye, "tri_solve": _tri_solve, "slice": _slice, "log_density": _log_density,
    "append_row": _append, "append_col": _append,
}

# -- E9.3 (docs/e9/recurrence.md): `fold`/`scan` states have init's axes, the index is a
# scalar; `scan` puts O in front of them; `ode` puts the axis of `times` in front of y0's
def _lambda_axes(w: ExprAxes, lam, params: dict) -> None:
    if isinstance(lam, A.ELambda):
        names = [p.text for p in lam.params]
        w.binders.append({n: params.get(i) for i, n in enumerate(names)})
        w.expr(lam.body)
        w.binders.pop()
    else:
        w.expr(lam)


def _fold(w: ExprAxes, e: A.ECall) -> Axes:
    if len(e.args) != 3:
        for a in e.args[1:]:
            w.expr(a)
        return None
    init = w.expr(e.args[1])
    _lambda_axes(w, e.args[2], {0: init, 1: ()})
    if e.callee.text == "fold" or init is None:
        return init
    obj = e.args[0].name.text if isinstance(e.args[0], A.EName) else None
    ty = w.scope.object_type(obj) if obj is not None else None
    return None if ty is None else (object_axis(obj, ty),) + init


def ode_arguments(args) -> tuple:
    """`(t0, times, rtol, atol)` of `ode(f, y0, times[, rtol, atol])` (t0 None) or
    `ode(f, y0, t0, times[, rtol, atol])`: the second form when a fourth argument is there
    and is not a number literal (a tolerance is one; times never are); None when absent."""
    rest = list(args[2:])
    if len(rest) > 1 and not isinstance(_unparen(rest[1]), A.Number):
        t0, rest = rest[0], rest[1:]
    else:
        t0 = None
    rest += [None] * (3 - len(rest))
    return (t0, rest[0], rest[1], rest[2])


def _unparen(e):
    while isinstance(e, A.EParen):
        e = e.inner
    return e.operand if isinstance(e, A.ENeg) else e


def _ode(w: ExprAxes, e: A.ECall) -> Axes:
    if len(e.args) < 3:
        for a in e.args:
            w.expr(a)
        return None
    y0 = w.expr(e.args[1])
    t0_e, times_e, _, _ = ode_arguments(e.args)
    times = w.expr(times_e)
    for a in e.args[2:]:
        if a is not times_e:
            w.expr(a)
    _lambda_axes(w, e.args[0], {0: y0, 1: ()})
    if y0 is None or times is None or len(times) != 1:
        return None
    return times + y0


CALL_AXES.update({"fold": _fold, "scan": _fold, "ode": _ode})


# ---------------------------------------------------------------- steps (checker and runtime)

def option_names(block, key: str) -> list:
    """The names an option `key=Name` or `key=[A, B]` gives (the first entry wins)."""
    for e in (block.entries if block else ()):
        if e.key.text == key:
            v = e.value
            if isinstance(v, A.OVName):
                return [v.text]
            if isinstance(v, A.OVList):
                return [i.text for i in v.items if isinstance(i, A.OVName)]
            return []
    return []


def family_step_axes(step, fam, object_type: Callable, local_axes: Callable,
                     expr_axes: Optional[Callable] = None) -> Axes:
    """The axes of the value of a `sample`/`observe` step whose target is family `fam`:
    `local_axes(name)` gives the axes of an argument that is a local (None: unknown),
    `expr_axes(e)` those of an argument that is a let-expression (E9.10: `A.arg_expr`)."""
    index = None
    if step.index is not None:
        index = type_expr_axes(step.index, object_type)
        if index is None:
            return None
    over = option_names(step.options, "over")
    event = tuple(a for n in over for a in _event_axes(n, object_type(n))) if over else None
    args = []
    for a in step.target.args or ():
        if isinstance(a, A.Number):
            args.append(())
        elif isinstance(a, A.Name):
            args.append(local_axes(a.text))
        else:
            args.append(expr_axes(A.arg_expr(a)) if expr_axes is not None else None)
    rank = max(fam.event_rank, len(event)) if event else fam.event_rank
    # E9.9: a matrix parameter (`scale_tril`, `cov_factor`) has one axis more than the value
    kinds = [k for _, k in fam.params]
    args = [a[:-1] if a and i < len(kinds) and kinds[i] == "mat" else a
            for i, a in enumerate(args)]
    return site_axes(index, event, rank, args)


def _event_axes(name: str, ty) -> tuple:
    """The axes `over=name` gives: one per object, two anonymous K-axes for a matrix
    space (`CorrCholesky K`: a K×K factor, E9.9)."""
    from qvr.sema.families import space_of
    sp = space_of(ty) if ty is not None else None
    if sp is not None and sp.space.matrix:
        return (Axis(None, sp.size), Axis(None, sp.size))
    return (object_axis(name, ty),)


def observed_axes(step, object_type: Callable) -> Axes:
    """The axes of an `observe` step's value as known before the step runs (a value read
    before its observe, E9.1): its plate for an event-rank-0 family, else unknown."""
    from qvr.sema.families import FAMILIES
    fam = FAMILIES.get(step.target.name.text)
    if fam is None or fam.event_rank != 0:
        return None
    if step.index is not None:
        return type_expr_axes(step.index, object_type)
    return () if all(isinstance(a, A.Number) for a in step.target.args or ()) else None
