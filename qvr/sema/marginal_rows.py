"""Per-row `marginalize` blocks (issue 36, point 8): what `marginalize z : I <- F(p)` admits.

A plain block (no `over=`) annotated by an object I sums out one latent `z` per element of
I, each against the terms of its own row (`qvr.runtime.marginal`: the log-likelihood is
`sum_n logsumexp_k [log pi(n, k) + l_k(n)]`).  The runtime evaluates the block once per
class k with `z = k` for every row at once, so the result is the per-row mixture only when
every term of the block has one entry per element of I and a row reads only its own `z`.
`check_per_row` refuses the shapes where that fails, never a silent wrong answer:

* QVR319: an `observe` not indexed by I, or a `score` step (no term per row; a `sample`
  inside any marginalize block is QVR950, `score v : T = e` QVR323);
* QVR320: a `let` that combines the elements of a value depending on `z` (a reduction over
  the rows, a list, `@`, a `factor`, a call other than an elementwise builtin or a family,
  indexing a value that depends on `z`);
* QVR321: an annotation that is not one declared object.
"""
from __future__ import annotations

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.axes import REDUCTIONS, UNARY
from qvr.sema.families import FAMILIES
from qvr.syntax import ast as A
from qvr.syntax.depth import child_nodes

#: calls that act element by element (a row of the result reads the same row of each
#: argument): they may take a value that depends on the coordinate
ELEMENTWISE = frozenset(UNARY + ("pow", "clamp", "log_density", "where", "step"))


def _unparen(t):
    while isinstance(t, (A.TParen, A.EParen)):
        t = t.inner
    return t


def plate_of(chk, step: A.MarginalizeStep):
    """The plate name of a plain block's annotation, reporting QVR321 when it is not one
    declared object; None without an annotation (or after the error)."""
    if step.index is None:
        return None
    t = _unparen(step.index)
    if isinstance(t, A.TName) and chk.object_type(t.name.text) is not None:
        return t.name.text
    if isinstance(t, A.TName):
        return None  # an undefined name: resolve_type reported it
    chk.ctx.report(E.per_row_plate(step.index.span, step.bind.text,
                                   " ".join(chk.ctx.snippet(step.index.span).split())))
    return None


def check_per_row(chk, step: A.MarginalizeStep, plate: str) -> None:
    """QVR319/QVR320 for the steps of `marginalize z : plate <- …` (its direct body)."""
    ctx, z = chk.ctx, step.bind.text
    dep = {z}  # the coordinate and the block's lets that read it
    for s in step.body:
        if isinstance(s, A.ObserveStep):  # a `sample` in any block is QVR950
            name, kind = s.bind.text, "observe"
            t = _unparen(s.index) if s.index is not None else None
            if t is None:
                ctx.report(E.per_row_term(s.bind.span, z, plate, name, kind))
            elif not (isinstance(t, A.TName) and t.name.text == plate):
                ctx.report(E.per_row_term(s.index.span, z, plate, name, kind,
                                          " ".join(ctx.snippet(s.index.span).split())))
            if s.value is not None:  # E9.7 `observe v : T = e <- F`
                _check_expr(chk, s.value, dep, z, plate, name)
            for a in s.target.args or ():  # E9.10: an argument expression is a let
                if not isinstance(a, (A.Number, A.Name)):
                    _check_expr(chk, A.arg_expr(a), dep, z, plate, name)
        elif isinstance(s, A.ScoreStep):
            if s.index is None:  # `score v : T = e` in a block: QVR323
                ctx.report(E.per_row_term(s.kw, z, plate, s.bind.text, "score"))
        elif isinstance(s, A.LetStep):
            if _reads(s.rhs, dep):
                dep.add(s.bind.text)
                _check_expr(chk, s.rhs, dep, z, plate, s.bind.text)


def check_grouped(chk, step: A.MarginalizeStep) -> None:
    """QVR950 for a `score` step in a grouped block (`over=G`): the runtime scatters only
    observed rows into their groups (`qvr.runtime.compile_program` refuses it, so `qvr run`
    would fail after a clean check).  `score v : T = e` there is QVR323."""
    for s in step.body:
        if isinstance(s, A.ScoreStep) and s.index is None:
            chk.ctx.report(SE.runtime_unsupported(
                s.kw, "a `score` step inside a grouped marginalize block (score after the "
                "block)"))


def _reads(e, dep: set) -> bool:
    """Whether expression `e` names one of `dep` (an over-approximation: binders count)."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name) and n.text in dep:
            return True
        stack.extend(child_nodes(n))
    return False


def _check_expr(chk, e, dep: set, z: str, plate: str, name: str) -> None:
    """Report the first row-combining form of `e` that reads `dep` (QVR320)."""
    stack = [e]
    while stack:
        n = stack.pop()
        what = _combines(n, dep, plate, chk.object_type)
        if what is not None:
            chk.ctx.report(E.per_row_combines(n.span, z, plate, name, what))
            return
        stack.extend(child_nodes(n))


def _combines(n, dep: set, plate: str, object_type):
    """What `n` does that mixes elements of a value depending on `dep`, or None."""
    if isinstance(n, A.EIndex):
        return f"indexing `{n.base.text}`" if n.base.text in dep else None
    if isinstance(n, A.ECall):
        callee = n.callee.text
        if callee in FAMILIES or not any(_reads(a, dep) for a in n.args):
            return None
        if callee in ELEMENTWISE:
            return None
        if callee in ("max", "min") and len(n.args) == 2 and not _is_object_arg(n.args[1], object_type):
            return None  # elementwise max(a, b)
        if callee in REDUCTIONS and len(n.args) == 2 and _is_object_arg(n.args[1], object_type) and \
                _unparen(n.args[1]).name.text != plate:
            return None  # a reduction over another axis (`sum(w, Component)`)
        return f"`{callee}(…)`"
    if isinstance(n, A.EMethod) and _reads(n, dep):
        return "a method call"
    if isinstance(n, A.EList) and _reads(n, dep):
        return "a list"
    if isinstance(n, A.EBinOp) and n.op == "@" and _reads(n, dep):
        return "`@`"
    if isinstance(n, A.EFactor) and _reads(n, dep):
        return "a `factor`"
    return None


def _is_object_arg(a, object_type) -> bool:
    a = _unparen(a)
    return isinstance(a, A.EName) and object_type(a.name.text) is not None
