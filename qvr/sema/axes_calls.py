"""The axis rules of the E9 builtins (docs/extensions.md E9.1, E9.3): `CALL_AXES`, keyed
by builtin name, each a rule ``(walker, call) -> axes`` run by `qvr.sema.axes_walk.ExprAxes`
(other parts of E9 add their builtins here without touching the walk); and
`ode_arguments`, how an ``ode(...)`` call's arguments are read (shared with the runtime and
the signature help).  Pure.
"""
from __future__ import annotations

from typing import Callable

from qvr.sema.axes import (ALONG, INDICATORS, OBJECT_ARGS, REDUCTIONS, UNARY, Axes, Axis,
                           broadcast, describe_pair, int_literal, object_axis, same_axis,
                           slice_size, spell_axes)
from qvr.syntax import ast as A

__all__ = ["CALL_AXES", "ode_arguments", "unary"]


def _args(w, e: A.ECall, skip=()) -> list:
    out = []  # a loop, not a comprehension: one frame fewer per nesting level
    for i, a in enumerate(e.args):
        out.append(None if i in skip else w.expr(a))
    return out


def unary(w, e):
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
    **{n: unary for n in UNARY},
    **{n: _reduction for n in REDUCTIONS},
    **{n: _along for n in ALONG},
    **{n: unary for n in INDICATORS},  # E9.10
    "pow": _elementwise, "clamp": _elementwise, "where": _elementwise,
    "cholesky": _cholesky, "logdet": _logdet, "transpose": _transpose, "diag": _diag,
    "diag_pre_multiply": _diag_pre_multiply,
    "eye": _eye, "tri_solve": _tri_solve, "slice": _slice, "log_density": _log_density,
    "append_row": _append, "append_col": _append,
}

# -- E9.3 (docs/e9/recurrence.md): `fold`/`scan` states have init's axes, the index is a
# scalar; `scan` puts O in front of them; `ode` puts the axis of `times` in front of y0's
def _lambda_axes(w, lam, params: dict) -> None:
    if isinstance(lam, A.ELambda):
        names = [p.text for p in lam.params]
        w.binders.append({n: params.get(i) for i, n in enumerate(names)})
        w.expr(lam.body)
        w.binders.pop()
    else:
        w.expr(lam)


def _fold(w, e: A.ECall) -> Axes:
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


def _ode(w, e: A.ECall) -> Axes:
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
