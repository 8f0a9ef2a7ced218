"""Axes typed by objects (docs/extensions.md E9, part E9.1).

A numeric value of a let-expression has, when it is known, a tuple of *axes*: each an
object (`Axis("Coef", 3)`) or an anonymous size (`Axis(None, 3)`, spelled `FinSet 3`).
Axes are trailing: at run time a value may carry leading batch axes (rows of the program
input) in front of them, never in between; so a dimension named by an object is resolved
from the right (`dim_of`).

This module is pure (no torch, no checker state) and shared by the checker
(`qvr.sema.check_axes`, which reports QVR421-QVR423 through `ExprAxes`) and the runtime
(`qvr.runtime.compile_program` / `letexpr`, which resolve reduction dimensions, the
stacking axis of list literals and the contraction of `@` from the same inference):

* the rules: `broadcast`, `matmul_axes`, `site_axes`, `type_expr_axes`, `object_axis`;
* the builtin signatures (`UNARY`, `REDUCTIONS`, ... `E9_BUILTINS`);
* the axes of family and observe steps (`family_step_axes`, `observed_axes`);
* `qvr.sema.axes_walk.ExprAxes`, the walk over a let-expression, given a `scope` that
  answers what a name is (`name_axes`, `object_type`) and, in the checker, how to report
  (`report`, `snippet`);
* `qvr.sema.axes_calls.CALL_AXES`, the E9 builtin table of axis rules, keyed by builtin
  name, so that other parts add entries (`fold`, `scan`, ...) without touching the walk.
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
