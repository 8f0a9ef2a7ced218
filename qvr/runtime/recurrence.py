"""Recurrences in let-expressions: `fold(O, init, (s, t) -> body)` and `scan(...)` (E9.3).

The state at index 0 of the discrete object `O` is `init`; for t = 1 … |O|−1 the state is
`body` with `s` bound to the state at t−1 and `t` to the integer index t.  `fold` gives
the last state, `scan` the |O| states stacked along a new axis O (one `torch.stack`): the
leading axis of the result's typed axes `(O, *init's axes)` — after the batch axes (rows)
the state carries when init's typed axes are known (E9.1), the very first axis otherwise.

A recurrence is a Python loop over t of the compiled body closure, so one evaluation costs
O(|O|) tensor operations.  The body is split once, at compile time, so that the loop does
only what depends on the state:

* **integer index expressions** of `t` (`y[t - 1]`, `w[2 * t + 1]`: integer literals,
  `t`, `+ - *`, parentheses, negation) are computed in Python and become int64 index
  tensors: `y[t - 1]` never turns `t` into a float and back, and the index is exact;
* **invariant sub-expressions** (reading neither `s` nor `t`, e.g. `alpha0`, `1.0 - rho`,
  literals) are evaluated once per evaluation of the let, before the loop;
* **sub-expressions of `t` alone** (e.g. `alpha1 * square(y[t - 1] - mu)`) are evaluated
  for all steps at once with `t = arange(1, |O|)` when they are elementwise arithmetic,
  elementwise builtins and gathers; the result is used only if its shape is
  `(|O|-1, *shape at one step)` (the shape at t = 1 is probed), otherwise they are
  evaluated step by step, still before the loop;
* the rest — what reads the state — runs once per step.

Everything is tensor code without `.item()` or branching on tensor values (shapes only), so
a recurrence runs under `torch.func.vmap` (MCMC chains) and is traced by `make_fx` (the
compiled MCMC density) in float32 or float64.  `ode` lives in `qvr.runtime.ode`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from qvr.runtime.errors import InputShapeError, QvrRuntimeError
from qvr.syntax import ast as A

# builtins that act elementwise (their value at a step is their value at that step's
# arguments): sub-expressions of `t` made of these are evaluated for all steps at once
ELEMENTWISE = frozenset("""exp log sqrt sigmoid abs softplus log1p expm1 tanh lgamma digamma
logsigmoid square erf erfc log2 log10 sin cos tan asin acos atan sinh cosh asinh acosh atanh
floor ceil round trunc sign reciprocal rsqrt relu pow clamp""".split())
# calls whose arguments hold binders of their own: never split (evaluated as a whole)
_SCOPED_CALLS = frozenset({"fold", "scan", "ode", "map", "filter"})

_PREFIX = "\0"  # placeholder names: no source name contains a NUL


def _num(frame, v):
    from qvr.runtime.numeric import _num as num
    return num(frame, v)


# ---------------------------------------------------------------- AST helpers

def _names(node) -> set:
    """Every name text read anywhere in `node` (an over-approximation of its free names:
    shadowing is ignored, which only ever makes a sub-expression look less invariant)."""
    out = set()

    def walk(x):
        if isinstance(x, A.Name):
            out.add(x.text)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                if f.name not in ("span", "op_span", "kw", "label_span"):
                    walk(getattr(x, f.name))

    walk(node)
    return out


def _placeholder(kind: str, n: int, span) -> A.EName:
    return A.EName(A.Name(f"{_PREFIX}{kind}{n}", span), span)


def _int_affine(e, t: str) -> Optional[Callable[[int], int]]:
    """`e` as a Python function of the integer t when `e` is integer arithmetic on `t` and
    integer literals (at least one `t`); None otherwise."""
    uses = [False]

    def comp(x):
        if isinstance(x, A.EParen):
            return comp(x.inner)
        if isinstance(x, A.Number):
            if not x.is_int:
                return None
            v = int(x.value)
            return lambda k: v
        if isinstance(x, A.EName):
            if x.name.text != t:
                return None
            uses[0] = True
            return lambda k: k
        if isinstance(x, A.ENeg):
            f = comp(x.operand)
            return None if f is None else (lambda k: -f(k))
        if isinstance(x, A.EBinOp) and x.op in ("+", "-", "*"):
            lf, rf = comp(x.left), comp(x.right)
            if lf is None or rf is None:
                return None
            if x.op == "+":
                return lambda k: lf(k) + rf(k)
            if x.op == "-":
                return lambda k: lf(k) - rf(k)
            return lambda k: lf(k) * rf(k)
        return None

    f = comp(e)
    return f if (f is not None and uses[0]) else None


def _vectorizable(e) -> bool:
    """Whether a sub-expression of `t` alone may be evaluated for all steps at once (its
    value at a step is then its row of the result; the shape is checked at run time)."""
    if isinstance(e, (A.Number, A.EName)):
        return True
    if isinstance(e, A.EParen):
        return _vectorizable(e.inner)
    if isinstance(e, A.ENeg):
        return _vectorizable(e.operand)
    if isinstance(e, A.EBinOp):
        return e.op in ("+", "-", "*", "/") and _vectorizable(e.left) and _vectorizable(e.right)
    if isinstance(e, A.ECall):
        return e.callee.text in ELEMENTWISE and all(_vectorizable(a) for a in e.args)
    if isinstance(e, A.EIndex):
        return all(_vectorizable(i) for i in e.indices)
    if isinstance(e, A.ESlice):  # a range in an index: its bounds are fixed for a run
        return all(_vectorizable(i) for i in (e.start, e.stop) if i is not None)
    return False


@dataclasses.dataclass
class _Plan:
    body: object  # the rewritten body (placeholders for the parts computed before the loop)
    indices: list  # (placeholder name, int function of t)
    invariants: list  # (placeholder name, expression)
    stepwise: list  # (placeholder name, expression of t alone)


class _Splitter:
    def __init__(self, s: str, t: str):
        self.s, self.t = s, t
        self.plan = _Plan(None, [], [], [])

    def deps(self, e) -> set:
        out = set()
        for n in _names(e):
            if n == self.s:
                out.add("s")
            elif n == self.t or n.startswith(_PREFIX + "i"):
                out.add("t")
        return out

    def index_pass(self, e):
        """Replace integer index expressions of t by placeholders (outside nested scopes)."""
        if isinstance(e, A.EIndex):
            idx = []
            for i in e.indices:
                f = _int_affine(i, self.t)
                if f is not None:
                    ph = _placeholder("i", len(self.plan.indices), i.span)
                    self.plan.indices.append((ph.name.text, f))
                    idx.append(ph)
                else:
                    idx.append(self.index_pass(i))
            return dataclasses.replace(e, indices=tuple(idx))
        return self._map_children(e, self.index_pass)

    def split(self, e):
        d = self.deps(e)
        if not d:
            if isinstance(e, A.EName):  # a plain read: nothing to save
                return e
            ph = _placeholder("c", len(self.plan.invariants), e.span)
            self.plan.invariants.append((ph.name.text, e))
            return ph
        if d == {"t"} and not (isinstance(e, A.EName) and e.name.text == self.t) \
                and not (isinstance(e, A.EName) and e.name.text.startswith(_PREFIX)):
            if _vectorizable(e):
                ph = _placeholder("v", len(self.plan.stepwise), e.span)
                self.plan.stepwise.append((ph.name.text, e))
                return ph
        return self._map_children(e, self.split)

    @staticmethod
    def _map_children(e, fn):
        if isinstance(e, A.EParen):
            return dataclasses.replace(e, inner=fn(e.inner))
        if isinstance(e, A.ENeg):
            return dataclasses.replace(e, operand=fn(e.operand))
        if isinstance(e, A.EBinOp):
            return dataclasses.replace(e, left=fn(e.left), right=fn(e.right))
        if isinstance(e, A.ECall) and e.callee.text not in _SCOPED_CALLS:
            return dataclasses.replace(e, args=tuple(fn(a) for a in e.args))
        if isinstance(e, A.EMethod):
            return dataclasses.replace(e, args=tuple(fn(a) for a in e.args))
        if isinstance(e, A.EIndex):
            return dataclasses.replace(e, indices=tuple(
                i if isinstance(i, A.ESlice) else fn(i) for i in e.indices))  # ranges: fixed
        items = getattr(e, "items", None)  # a list literal (E9.1)
        if isinstance(items, tuple) and dataclasses.is_dataclass(e):
            return dataclasses.replace(e, items=tuple(fn(i) for i in items))
        return e  # factor expressions, lambdas, anything else: evaluated as a whole


def plan_body(body, s: str, t: str) -> _Plan:
    sp = _Splitter(s, t)
    rewritten = sp.index_pass(body)
    sp.plan.body = sp.split(rewritten)
    return sp.plan


# ---------------------------------------------------------------- compile

def compile_recurrence(compiler, e: A.ECall, binders: frozenset) -> Callable:
    """The closure `f(frame, b)` of `fold(...)`/`scan(...)` (`ode(...)`: qvr.runtime.ode)."""
    name = e.callee.text
    if name == "ode":
        from qvr.runtime.ode import compile_ode
        return compile_ode(compiler, e, binders)
    obj, init_e, lam = e.args
    n = int(compiler.type_size(A.TName(obj.name, obj.span)))
    s_name, t_name = lam.params[0].text, lam.params[1].text
    init = compiler.expr(init_e, binders)
    # the typed axes of the state (E9.1's walk, when known): leading axes beyond them are
    # batch axes (rows), and `scan` puts O after those, in front of the typed ones
    init_axes = compiler.axes_of(init_e) if hasattr(compiler, "axes_of") else None
    typed_rank = len(init_axes) if init_axes is not None else None
    plan = plan_body(lam.body, s_name, t_name)
    idx_names = {p for p, _ in plan.indices}
    invariants = [(p, compiler.expr(x, binders)) for p, x in plan.invariants]
    t_scope = binders | {t_name} | idx_names
    stepwise = [(p, compiler.expr(x, t_scope)) for p, x in plan.stepwise]
    body_scope = t_scope | {s_name} | {p for p, _ in plan.invariants} | \
        {p for p, _ in plan.stepwise}
    body = compiler.expr(plan.body, body_scope)
    loop_names = _names(plan.body)  # what the loop reads (placeholders, `t`)
    needs_t = t_name in loop_names
    index_values = [[f(k) for k in range(1, n)] for _, f in plan.indices]
    keep_all = name == "scan"

    def run(frame, b):
        state = _num(frame, init(frame, b))
        if not state.is_floating_point():
            state = state.to(frame.dtype)
        states = [state] if keep_all else None
        if n > 1:
            dev = frame.device
            bb = dict(b)
            for p, f in invariants:
                bb[p] = f(frame, b)
            steps = n - 1
            per_step: list = []  # (name, values at t = 1 … n-1)
            vec_b = None
            for (p, _), vals in zip(plan.indices, index_values):
                per_step.append((p, _Ints(vals, dev)))
                if stepwise:
                    vec_b = vec_b if vec_b is not None else dict(bb)
                    vec_b[p] = torch.tensor(vals, dtype=torch.int64, device=dev)
            t_steps = _Ints(range(1, n), dev) if (needs_t or stepwise) else None
            if t_steps is not None:
                per_step.append((t_name, t_steps))
            for p, f in stepwise:
                per_step.append((p, _stepwise_values(frame, f, bb, vec_b, per_step, t_name,
                                                     steps, dev)))
            in_loop = [(p, vals) for p, vals in per_step if p in loop_names]
            for k in range(steps):
                sb = dict(bb)
                for p, vals in in_loop:
                    sb[p] = vals[k]
                sb[s_name] = state
                new = _num(frame, body(frame, sb))
                if new.shape != state.shape:
                    new = _fit_state(new, state, name, k + 1)
                state = new
                if keep_all:
                    states.append(state)
        if keep_all:
            dim = 0 if typed_rank is None else max(state.dim() - typed_rank, 0)
            return torch.stack(states, dim)
        return state

    return run


class _Ints:
    """Integer values at t = 1 … n-1 as 0-d int64 tensors, made when read: a tensor made
    from a Python number is a constant to `make_fx`, so indexing with it traces (a 0-d
    index computed by tensor operations would be read back with `.item()`)."""

    __slots__ = ("vals", "device")

    def __init__(self, vals, device):
        self.vals = vals
        self.device = device

    def __getitem__(self, k):
        return torch.tensor(self.vals[k], dtype=torch.int64, device=self.device)


def _stepwise_values(frame, f, bb, vec_b, per_step, t_name, steps, dev):
    """The values at t = 1 … steps of a sub-expression of t alone: all at once when that
    gives one row per step, else step by step."""
    one = dict(bb)
    for p, vals in per_step:
        one[p] = vals[0]
    probe = _num(frame, f(frame, one))
    vb = dict(vec_b) if vec_b is not None else dict(bb)
    vb[t_name] = torch.arange(1, steps + 1, device=dev)
    try:
        whole = _num(frame, f(frame, vb))
        if tuple(whole.shape) == (steps, *probe.shape):
            return whole.unbind(0)
    except QvrRuntimeError:
        raise
    except (RuntimeError, IndexError):
        pass  # not elementwise in t after all: step by step below
    out = [probe]
    for k in range(1, steps):
        sb = dict(bb)
        for p, vals in per_step:
            sb[p] = vals[k]
        out.append(_num(frame, f(frame, sb)))
    return out


def _fit_state(new: torch.Tensor, state: torch.Tensor, fn: str, t: int) -> torch.Tensor:
    """The body's value at step t broadcast to the state's shape, or a clear error."""
    try:
        ok = torch.broadcast_shapes(new.shape, state.shape) == state.shape
    except RuntimeError:
        ok = False
    if not ok:
        raise InputShapeError(
            f"the lambda of `{fn}` gives a value of shape {tuple(new.shape)} at step t = {t}, "
            f"which does not broadcast to the state's shape (the shape of its initial value)",
            expected=f"shape {tuple(state.shape)}", actual=f"shape {tuple(new.shape)}")
    return new.expand(state.shape)
