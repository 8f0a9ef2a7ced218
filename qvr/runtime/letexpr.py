"""Compiling let-expressions (qvr-language.md section 8, runtime spec 5.8) to closures.

`compile_let(expr, resolve, type_size)` turns the AST of a `let`/`score` right-hand side
into a function `f(frame, binders) -> value`.  Names are resolved once, at compile time,
by `resolve(name)`, which returns one of

* `("local", key)` — a program local, read from `frame.env[key]`;
* `("const", value)` — a template parameter bound to a number;
* `("deduction", name)` — a deduction declared in the module;
* `("host", name)` — host data, read from `frame.host(name)` at run time;

factor binders are handled here.  Values are tensors (numbers become tensors of the
frame's float dtype on its device), charts and deductions.  The closures capture only
AST-derived data, never modules, so deep copies of a program stay independent.
This module does not run programs and does not check kinds (the front end did).
"""
from __future__ import annotations

import itertools
from typing import Callable

import torch

from qvr.runtime.numeric import _float, _num
from qvr.runtime.synth_host import HostRequest
from qvr.runtime.values import as_index
from qvr.syntax import ast as A


_UNARY = {"exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "sigmoid": torch.sigmoid}
_LOGIC_OPS = frozenset(("==", "!=", "<", "<=", ">", ">=", "and", "or"))  # E9.10


def free_names(expr, is_object=None) -> set:
    """Every name read by a let-expression (binders excluded), for level analysis.
    `is_object(name)`: whether a name in an object position of an E9.1 builtin
    (`sum(x, Coef)`, `eye(Obs)`) names an object rather than a value."""
    out: set = set()

    def walk(e, bound):
        if isinstance(e, A.EName):
            if e.name.text not in bound:
                out.add(e.name.text)
        elif isinstance(e, A.EBinOp):
            walk(e.left, bound)
            walk(e.right, bound)
        elif isinstance(e, (A.ENeg, A.ENot)):
            walk(e.operand, bound)
        elif isinstance(e, A.EParen):
            walk(e.inner, bound)
        elif isinstance(e, A.ECall):
            args = e.args[1:] if e.callee.text in ("fold", "scan") else e.args  # E9.3: O is an object
            pos = _OBJECT_ARGS.get(e.callee.text)  # E9.1: an object argument reads no value
            if pos is not None and is_object is not None and len(e.args) > pos \
                    and isinstance(e.args[pos], A.EName) and is_object(e.args[pos].name.text):
                args = tuple(a for a in args if a is not e.args[pos])
            for a in args:
                walk(a, bound)
        elif isinstance(e, A.EList):  # E9.1
            for a in e.items:
                walk(a, bound)
        elif isinstance(e, A.ELambda):  # E9.3: parameters are bound in the body
            walk(e.body, bound | {p.text for p in e.params})
        elif isinstance(e, A.EMethod):
            if e.receiver.text not in bound:
                out.add(e.receiver.text)
            for a in e.args:
                walk(a, bound)
        elif isinstance(e, A.EIndex):
            if e.base.text not in bound:
                out.add(e.base.text)
            for a in e.indices:
                walk(a, bound)
        elif isinstance(e, A.ESlice):  # E9: a range `a:b` in an index
            for a in (e.start, e.stop):
                if a is not None:
                    walk(a, bound)
        elif isinstance(e, A.EFactor):
            inner = bound | {b.name.text for b in e.binders}
            if isinstance(e.body, A.FactorCases):
                for c in e.body.cases:
                    walk(c.expr, inner)
            else:
                walk(e.body, inner)

    walk(expr, frozenset())
    return out


def compile_let(expr, resolve: Callable, type_size: Callable, axes=None) -> Callable:
    """A closure `f(frame, binders)` computing `expr` (see the module docstring).
    `axes`: a `qvr.sema.axes_walk.ExprAxes` already walked over `expr` (E9.1: the typed axes
    that resolve reductions over objects, `@` and list literals)."""
    return _Compiler(resolve, type_size, axes).expr(expr, frozenset())


#: builtin name -> compile(compiler, call, binders) -> closure; E9.1's builtins are
#: `qvr.runtime.linalg.E9_CALLS` (added at the end of this module), other parts add theirs
CALLS: dict = {}


class _Compiler:
    def __init__(self, resolve, type_size, axes=None):
        self.resolve = resolve
        self.type_size = type_size
        self.axes = axes

    # -- E9.1: typed axes of the sub-expressions (qvr.sema.axes)
    def axes_of(self, e):
        return self.axes.of(e) if self.axes is not None else None

    def is_object_arg(self, e) -> bool:
        return self.axes is not None and self.axes.object_name(e) is not None

    def object_size(self, name: str) -> int:
        from qvr.sema.axes import object_axis
        return object_axis(name, self.axes.scope.object_type(name)).size

    def expr(self, e, binders: frozenset):
        if isinstance(e, A.Number):
            v = float(e.value)
            return lambda frame, b: frame.literal(v)
        if isinstance(e, A.EName):
            return self.name(e.name.text, binders)
        if isinstance(e, A.EParen):
            return self.expr(e.inner, binders)
        if isinstance(e, A.ENeg):
            f = self.expr(e.operand, binders)
            return lambda frame, b: -_num(frame, f(frame, b))
        if isinstance(e, A.ENot):  # E9.10
            from qvr.runtime.logic import compile_not
            return compile_not(self, e, binders)
        if isinstance(e, A.EBinOp):
            return self.binop(e, binders)
        if isinstance(e, A.ECall):
            return self.call(e, binders)
        if isinstance(e, A.EMethod):
            recv = self.name(e.receiver.text, binders)
            method = e.method.text
            return lambda frame, b: getattr(recv(frame, b), method)()
        if isinstance(e, A.EIndex):
            return self.index(e, binders)
        if isinstance(e, A.EFactor):
            return self.factor(e, binders)
        if isinstance(e, A.EList):  # E9.1
            from qvr.runtime.linalg import compile_list
            return compile_list(self, e, binders)
        raise NotImplementedError(f"let-expression form {type(e).__name__} is outside the core")

    def name(self, text: str, binders: frozenset):
        if text in binders:
            return lambda frame, b: b[text]
        kind, ref = self.resolve(text)
        if kind == "local":
            return lambda frame, b: frame.env[ref]
        if kind == "const":
            return lambda frame, b: _num(frame, ref)
        if kind == "deduction":
            return lambda frame, b: frame.deduction(ref)
        if kind == "observed":  # E9.1: an observe site read before its step
            from qvr.runtime.data_step import read_observed
            return lambda frame, b: read_observed(frame, ref, text)
        return lambda frame, b: frame.host(ref)

    def binop(self, e, binders):
        if e.op == "@":  # E9.1
            from qvr.runtime.linalg import compile_matmul
            return compile_matmul(self, e, binders)
        if e.op in _LOGIC_OPS:  # E9.10: comparisons, `and`, `or` (0/1 values)
            from qvr.runtime.logic import compile_logic_binop
            return compile_logic_binop(self, e, binders)
        lf, rf, op = self.expr(e.left, binders), self.expr(e.right, binders), e.op
        if op == "+":
            return lambda frame, b: _num(frame, lf(frame, b)) + _num(frame, rf(frame, b))
        if op == "-":
            return lambda frame, b: _num(frame, lf(frame, b)) - _num(frame, rf(frame, b))
        if op == "*":
            return lambda frame, b: _num(frame, lf(frame, b)) * _num(frame, rf(frame, b))
        if op == "/":
            return lambda frame, b: torch.true_divide(_num(frame, lf(frame, b)),
                                                      _num(frame, rf(frame, b)))
        raise NotImplementedError(f"operator {op}")

    def call(self, e, binders):
        name = e.callee.text
        if name in CALLS and name not in _UNARY:  # E9.1 (table-driven)
            return CALLS[name](self, e, binders)
        if name in ("fold", "scan", "ode"):  # E9.3: recurrences and ODEs (their own module)
            from qvr.runtime.recurrence import compile_recurrence
            return compile_recurrence(self, e, binders)
        args = [self.expr(a, binders) for a in e.args]
        if name in _UNARY:
            fn = _UNARY[name]
            a0 = args[0]
            return lambda frame, b: fn(_float(_num(frame, a0(frame, b))))
        if name == "parse":
            d, inp = args
            return lambda frame, b: d(frame, b)(inp(frame, b))
        if name == "compose":
            d1, d2 = args
            return lambda frame, b: d1(frame, b).compose(d2(frame, b))
        raise NotImplementedError(f"builtin `{name}` is outside the core")

    def index(self, e, binders):
        if any(isinstance(i, A.ESlice) for i in e.indices):  # E9: `X[:, 1]`, `y[a:b]`
            from qvr.runtime.indexing import compile_sliced
            return compile_sliced(self, e, binders)
        base = self.name(e.base.text, binders)
        idx = [self.expr(i, binders) for i in e.indices]
        who = e.base.text

        def run(frame, b):
            a = _num(frame, base(frame, b))
            keys = []
            for axis, f in enumerate(idx):
                raw = f(frame, b)
                size = a.shape[axis] if axis < a.dim() else 0
                # synthetic data: host data used as an index of this axis
                i = raw.synth.index(raw, size, frame.device) if isinstance(raw, HostRequest) \
                    else _num(frame, raw)
                keys.append(as_index(i, size, who=f"{who}[...]", what=f"index on axis {axis}"))
            return a[tuple(keys)] if len(keys) > 1 else a[keys[0]]

        return run

    def factor(self, e, binders):
        names = [bd.name.text for bd in e.binders]
        sizes = [self.type_size(bd.type) for bd in e.binders]
        inner = binders | set(names)
        if isinstance(e.body, A.FactorCases):
            cases = sorted(e.body.cases, key=lambda c: c.label)
            fns = [self.expr(c.expr, inner) for c in cases]
            name = names[0]

            def run_cases(frame, b):
                vals = []
                for k, f in enumerate(fns):
                    bb = dict(b)
                    bb[name] = torch.tensor(k, device=frame.device)
                    vals.append(_num(frame, f(frame, bb)))
                shape = torch.broadcast_shapes(*[v.shape for v in vals])
                return torch.stack([v.expand(shape) for v in vals])

            return run_cases
        body = self.expr(e.body, inner)
        m = len(names)

        def run(frame, b):
            # per-index-tuple evaluation at index 0 tells whether the body is scalar per tuple
            probe = dict(b)
            for n in names:
                probe[n] = torch.tensor(0, device=frame.device)
            if _num(frame, body(frame, probe)).dim() == 0:
                bb = dict(b)
                for i, (n, s) in enumerate(zip(names, sizes)):
                    shape = [1] * m
                    shape[i] = s
                    bb[n] = torch.arange(s, device=frame.device).reshape(shape)
                return _num(frame, body(frame, bb)).expand(*sizes)
            vals = []
            for tup in itertools.product(*[range(s) for s in sizes]):
                bb = dict(b)
                for n, k in zip(names, tup):
                    bb[n] = torch.tensor(k, device=frame.device)
                vals.append(_num(frame, body(frame, bb)))
            shape = torch.broadcast_shapes(*[v.shape for v in vals])
            out = torch.stack([v.expand(shape) for v in vals])
            return out.reshape(*sizes, *shape)

        return run


# ---------------------------------------------------------------- E9.1 builtins
from qvr.sema.axes import OBJECT_ARGS as _OBJECT_ARGS  # noqa: E402
from qvr.runtime.linalg import E9_CALLS  # noqa: E402

CALLS.update(E9_CALLS)
from qvr.runtime.logic import LOGIC_CALLS  # noqa: E402  (E9.10: where, step, int_step)

CALLS.update(LOGIC_CALLS)
from qvr.runtime.indexing import INDEXING_CALLS  # noqa: E402  (E9: append_row, append_col)

CALLS.update(INDEXING_CALLS)
from qvr.runtime.steer_text import TEXT_CALLS  # noqa: E402  (E10: a steering program's text functions)

CALLS.update(TEXT_CALLS)
