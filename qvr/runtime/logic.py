"""Comparisons, boolean operators, `where` and Stan's indicators at run time
(docs/extensions.md E9.10).

A comparison or a boolean operator gives a 0/1 real tensor (Stan's int semantics used
arithmetically: `beta * (age == 2)`), of the floating dtype of its operands (the default
dtype when both are integers, e.g. host index data), broadcast as arithmetic is.  Any
value that is not 0 is true for `and`, `or`, `not` and the condition of `where`.
Comparisons are piecewise constant: no gradient flows through the test (a 0/1 tensor made
from a boolean has none); `where(c, a, b)` passes gradients to the branch it chooses
(`torch.where`).  Every closure works under `torch.func.vmap` and `make_fx` (no `.item()`,
no Python branching on tensor values), like the other builtins (`qvr.runtime.linalg`).
"""
from __future__ import annotations

import torch

from qvr.runtime.numeric import _num

_COMPARE = {
    "==": torch.eq, "!=": torch.ne, "<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge,
}


def _dtype(*xs):
    """The floating dtype of a 0/1 result: float64 if an operand is, else the floating
    dtype among the operands, else the default dtype."""
    floats = [x.dtype for x in xs if x.is_floating_point()]
    if torch.float64 in floats:
        return torch.float64
    return floats[0] if floats else torch.get_default_dtype()


def _truth(x):
    return x != 0


def compile_logic_binop(comp, e, binders):
    """`a == b` … `a >= b`, `a and b`, `a or b`: 0/1 values."""
    lf, rf, op = comp.expr(e.left, binders), comp.expr(e.right, binders), e.op
    if op in _COMPARE:
        fn = _COMPARE[op]

        def compare(frame, b):
            x, y = _num(frame, lf(frame, b)), _num(frame, rf(frame, b))
            return fn(x, y).to(_dtype(x, y))
        return compare
    combine = torch.logical_and if op == "and" else torch.logical_or

    def logic(frame, b):
        x, y = _num(frame, lf(frame, b)), _num(frame, rf(frame, b))
        return combine(_truth(x), _truth(y)).to(_dtype(x, y))
    return logic


def compile_not(comp, e, binders):
    f = comp.expr(e.operand, binders)

    def run(frame, b):
        x = _num(frame, f(frame, b))
        return torch.logical_not(_truth(x)).to(_dtype(x))
    return run


def _c_where(comp, e, binders):
    c, a, b_ = (comp.expr(x, binders) for x in e.args)

    def run(frame, b):
        cond = _num(frame, c(frame, b))
        x, y = _num(frame, a(frame, b)), _num(frame, b_(frame, b))
        dt = _dtype(x, y)
        return torch.where(_truth(cond), x.to(dt), y.to(dt))
    return run


def _indicator(strict: bool):
    def compile_(comp, e, binders):
        f = comp.expr(e.args[0], binders)

        def run(frame, b):
            x = _num(frame, f(frame, b))
            # Stan: step(x) is 0 for x < 0, else 1 (NaN gives 1); int_step(x) is 1 for x > 0
            hit = (x > 0) if strict else torch.logical_not(x < 0)
            return hit.to(_dtype(x))
        return run
    return compile_


LOGIC_CALLS = {"where": _c_where, "step": _indicator(False), "int_step": _indicator(True)}
