"""The let-expression builtins of E9.1 at run time (docs/e9/letexpr.md).

`E9_CALLS` maps a builtin name to `compile(compiler, call, binders) -> closure`, the
closure being `f(frame, binders) -> tensor` like every compiled let-expression
(`qvr.runtime.letexpr`); `letexpr.CALLS` holds these entries (other parts of E9 add
theirs there).  `compile_matmul` and `compile_list` compile `a @ b` and `[a, b, c]`.

Axes are trailing: a value may carry leading batch axes (rows of the input, a factor's
binders) in front of its typed axes, so every dimension named by an object, the stacking
axis of a list and the kind of product of `@` are resolved from the right with the axes the
checker's inference gives (`qvr.sema.axes_walk.ExprAxes`, run by the compiler over the whole
right-hand side).  Every closure works under `torch.func.vmap` (MCMC maps the program over
chains) and `make_fx` tracing (no `.item()`, no Python branching on tensor values), and keeps
the dtype of its inputs (float32 or float64, a fit's dtype).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from qvr.runtime.errors import InputDtypeError, InputShapeError
from qvr.runtime.numeric import _float, _num
from qvr.sema.axes import REDUCTIONS, dim_of, int_literal
from qvr.syntax import ast as A

_UNARY = {
    "abs": torch.abs, "softplus": F.softplus, "log1p": torch.log1p, "expm1": torch.expm1,
    "tanh": torch.tanh, "lgamma": torch.lgamma, "digamma": torch.digamma,
    "logsigmoid": F.logsigmoid, "square": torch.square, "erf": torch.erf, "erfc": torch.erfc,
    "log2": torch.log2, "log10": torch.log10, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
    "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh,
    "atanh": torch.atanh, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "sign": torch.sign, "reciprocal": torch.reciprocal,
    "rsqrt": torch.rsqrt, "relu": torch.relu,
}

_REDUCE = {
    "sum": lambda x, d: torch.sum(x, d),
    "mean": lambda x, d: torch.mean(x, d),
    "max": lambda x, d: torch.amax(x, d),
    "min": lambda x, d: torch.amin(x, d),
    "prod": lambda x, d: torch.prod(x, d),
    "logsumexp": lambda x, d: torch.logsumexp(x, d),
    "var": lambda x, d: torch.var(x, d, correction=1),
    "std": lambda x, d: torch.std(x, dim=d, correction=1),
}
assert set(_REDUCE) == set(REDUCTIONS)

_ALONG = {"softmax": torch.softmax, "log_softmax": torch.log_softmax, "cumsum": torch.cumsum}


def _value(frame, f, b):
    return _float(_num(frame, f(frame, b)))


def _common(*xs):
    """Floats of one dtype (float64 if any is)."""
    if any(x.dtype == torch.float64 for x in xs):
        return [x.to(torch.float64) if x.dtype != torch.float64 else x for x in xs]
    return list(xs)


def _guard(name: str, fn):
    """Run `fn`; a torch error (shapes that do not fit) becomes a runtime error naming the
    builtin (the executor adds the program and the step)."""
    def run(frame, b):
        try:
            return fn(frame, b)
        except RuntimeError as exc:
            why = str(exc).strip().split("\n")[0]
            raise InputShapeError(f"`{name}` cannot be computed: {why}") from None
    return run


def _object_dim(comp, e: A.ECall, pos: int):
    """The dimension (from the right) of the axis typed by the object argument at `pos`,
    or -1 (the last axis) without it."""
    if len(e.args) <= pos:
        return -1
    axes = comp.axes_of(e.args[0])
    obj = e.args[pos].name.text if isinstance(e.args[pos], A.EName) else None
    hits = [i for i, a in enumerate(axes or ()) if a.name == obj]
    if axes is None or len(hits) != 1:  # the checker reports these (QVR422)
        return None
    return dim_of(axes, hits[0])


def _no_axis(name):
    def run(frame, b):
        raise InputShapeError(f"`{name}`: the axis named by its object argument is not known")
    return run


# ---------------------------------------------------------------- compile functions

def _c_unary(comp, e, binders):
    fn = _UNARY[e.callee.text]
    x = comp.expr(e.args[0], binders)
    return lambda frame, b: fn(_value(frame, x, b))


def _c_pow(comp, e, binders):
    x, p = (comp.expr(a, binders) for a in e.args)
    return _guard("pow", lambda frame, b: torch.pow(*_common(_value(frame, x, b), _value(frame, p, b))))


def _c_clamp(comp, e, binders):
    x, lo, hi = (comp.expr(a, binders) for a in e.args)

    def run(frame, b):
        xv, lv, hv = _common(_value(frame, x, b), _value(frame, lo, b), _value(frame, hi, b))
        return torch.minimum(torch.maximum(xv, lv), hv)
    return _guard("clamp", run)


def _second_is_object(comp, e) -> bool:
    return len(e.args) == 2 and comp.is_object_arg(e.args[1])


def _c_reduce(comp, e, binders):
    name = e.callee.text
    if name in ("max", "min") and len(e.args) == 2 and not _second_is_object(comp, e):
        x, y = (comp.expr(a, binders) for a in e.args)
        op = torch.maximum if name == "max" else torch.minimum
        return _guard(name, lambda frame, b: op(*_common(_value(frame, x, b), _value(frame, y, b))))
    x = comp.expr(e.args[0], binders)
    d = _object_dim(comp, e, 1)
    if d is None:
        return _no_axis(name)
    fn = _REDUCE[name]
    return _guard(name, lambda frame, b: fn(_value(frame, x, b), d))


def _c_along(comp, e, binders):
    name = e.callee.text
    x = comp.expr(e.args[0], binders)
    d = _object_dim(comp, e, 1)
    if d is None:
        return _no_axis(name)
    fn = _ALONG[name]
    return _guard(name, lambda frame, b: fn(_value(frame, x, b), d))


def _c_cholesky(comp, e, binders):
    a = comp.expr(e.args[0], binders)

    def run(frame, b):
        m = _value(frame, a, b)
        low, info = torch.linalg.cholesky_ex(m)
        # not positive definite: NaN (a rejected point in MCMC), never an exception
        bad = (info != 0).unsqueeze(-1).unsqueeze(-1)
        return torch.where(bad, torch.full_like(low, math.nan), low)
    return _guard("cholesky", run)


def _c_tri_solve(comp, e, binders):
    low, rhs = (comp.expr(a, binders) for a in e.args)
    rb = comp.axes_of(e.args[1])
    rl = comp.axes_of(e.args[0])

    def run(frame, b):
        L, v = _common(_value(frame, low, b), _value(frame, rhs, b))
        vector = len(rb) == 1 if rb is not None else (
            v.dim() == L.dim() - 1 if rl is None else v.dim() == 1)
        if vector:
            return torch.linalg.solve_triangular(L, v.unsqueeze(-1), upper=False).squeeze(-1)
        return torch.linalg.solve_triangular(L, v, upper=False)
    return _guard("tri_solve", run)


def _c_logdet(comp, e, binders):
    a = comp.expr(e.args[0], binders)
    return _guard("logdet", lambda frame, b: torch.logdet(_value(frame, a, b)))


def _c_diag(comp, e, binders):
    v = comp.expr(e.args[0], binders)
    return _guard("diag", lambda frame, b: torch.diag_embed(_value(frame, v, b)))


def _c_diag_pre_multiply(comp, e, binders):
    """E9.9: diag(v) @ A as v[..., :, None] * A (no K×K diagonal matrix)."""
    v, a = comp.expr(e.args[0], binders), comp.expr(e.args[1], binders)
    return _guard("diag_pre_multiply", lambda frame, b: _value(frame, v, b).unsqueeze(-1)
                  * _value(frame, a, b))


def _c_eye(comp, e, binders):
    n = comp.object_size(e.args[0].name.text)
    return lambda frame, b: torch.eye(n, dtype=frame.dtype, device=frame.device)


def _c_transpose(comp, e, binders):
    a = comp.expr(e.args[0], binders)
    return _guard("transpose", lambda frame, b: _value(frame, a, b).transpose(-1, -2))


def _bound(comp, e, binders):
    """A `slice` bound: an int at compile time (a literal) or a closure giving an int (data,
    fixed for a run: never a traced value)."""
    v = int_literal(e)
    if v is not None:
        return v
    f = comp.expr(e, binders)

    def run(frame, b):
        t = _num(frame, f(frame, b))
        if isinstance(t, torch.Tensor):
            if t.numel() != 1:
                raise InputShapeError("a bound of `slice` must be one integer",
                                      actual=f"shape {tuple(t.shape)}")
            if t.is_floating_point() and float(t) != math.floor(float(t)):
                raise InputDtypeError("a bound of `slice` must be an integer", actual=float(t))
            return int(t)
        return int(t)
    return run


def _c_slice(comp, e, binders):
    x = comp.expr(e.args[0], binders)
    axes = comp.axes_of(e.args[0])
    d = -len(axes) if axes else 0
    start = _bound(comp, e.args[1], binders)
    stop = _bound(comp, e.args[2], binders) if len(e.args) > 2 else None

    def run(frame, b):
        v = _num(frame, x(frame, b))
        n = v.shape[d]
        s = start(frame, b) if callable(start) else start
        t = stop(frame, b) if callable(stop) else stop
        lo, hi, _ = slice(s, t).indices(n)
        return v.narrow(d, lo, max(0, hi - lo))
    return _guard("slice", run)


def _c_log_density(comp, e, binders):
    from qvr.runtime.families import inline_distribution
    from qvr.runtime.values import eval_value
    call, x = e.args
    while isinstance(call, A.EParen):
        call = call.inner
    name = call.callee.text
    args = [comp.expr(a, binders) for a in call.args]
    xf = comp.expr(x, binders)

    from qvr.sema.families import FAMILIES
    vector = FAMILIES[name].event_rank == 1  # E9.9: `Dirichlet(2.0)`'s size is x's

    def run(frame, b):
        v = _num(frame, xf(frame, b))
        size = v.shape[-1] if vector and v.dim() else None
        dist = inline_distribution(name, [_value(frame, f, b) for f in args], size)
        return dist.log_prob(eval_value(dist, v, frame))
    return _guard("log_density", run)


E9_CALLS = {
    **{n: _c_unary for n in _UNARY},
    **{n: _c_reduce for n in _REDUCE},
    **{n: _c_along for n in _ALONG},
    "pow": _c_pow, "clamp": _c_clamp, "cholesky": _c_cholesky, "tri_solve": _c_tri_solve,
    "logdet": _c_logdet, "diag": _c_diag, "eye": _c_eye, "transpose": _c_transpose,
    "diag_pre_multiply": _c_diag_pre_multiply,  # E9.9
    "slice": _c_slice, "log_density": _c_log_density,
}


# ---------------------------------------------------------------- `@` and list literals

def compile_matmul(comp, e: A.EBinOp, binders):
    """`a @ b`: torch.matmul on the typed axes, leading batch axes broadcast (a typed
    vector on either side is contracted as a vector even when it carries batch axes)."""
    lf, rf = comp.expr(e.left, binders), comp.expr(e.right, binders)
    ra, rb = comp.axes_of(e.left), comp.axes_of(e.right)
    va = ra is not None and len(ra) == 1
    vb = rb is not None and len(rb) == 1

    def run(frame, b):
        x, y = _common(_value(frame, lf, b), _value(frame, rf, b))
        if va and vb:
            return (x * y).sum(-1)
        if vb:
            return torch.matmul(x, y.unsqueeze(-1)).squeeze(-1)
        if va:
            return torch.matmul(x.unsqueeze(-2), y).squeeze(-2)
        return torch.matmul(x, y)
    return _guard("@", run)


def compile_list(comp, e: A.EList, binders):
    """`[a, b, c]`: the items (one shape) stacked along a new axis in front of their typed
    axes (numpy's `np.array([...])` when there are no batch axes)."""
    items = [comp.expr(i, binders) for i in e.items]
    axes = [comp.axes_of(i) for i in e.items]
    rank = len(axes[0]) if axes and all(a is not None for a in axes) else None

    def run(frame, b):
        vals = [_num(frame, f(frame, b)) for f in items]
        if not vals:
            return torch.zeros(0, dtype=frame.dtype, device=frame.device)
        if any(v.is_floating_point() for v in vals):
            vals = _common(*[_float(v) for v in vals])
        shapes = {tuple(v.shape) for v in vals}
        if rank is None and len(shapes) > 1:
            raise InputShapeError("the items of a list have different shapes",
                                  expected="one shape", actual=", ".join(
                                      str(tuple(v.shape)) for v in vals))
        shape = torch.broadcast_shapes(*[v.shape for v in vals])
        vals = [v.expand(shape) for v in vals]
        return torch.stack(vals, dim=-(rank + 1) if rank is not None else 0)
    return _guard("list literal", run)
