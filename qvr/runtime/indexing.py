"""Ranges in indices and concatenation at run time (docs/extensions.md E9.10).

`compile_sliced` compiles `X[:, 1]`, `X[2, :]`, `y[a:b]` (an index holding a range); the
concatenation builtins `append_row(a, b)` and `append_col(a, b)` are `CALLS` entries
(`INDEXING_CALLS`, added to `qvr.runtime.letexpr.CALLS`).

The indices name the value's *typed* axes in order (`qvr.sema.axes`: resolved from the
right, so a value's leading batch axes — rows of the input — are kept in front; without
typed axes, from the left).  A range narrows its axis (Python semantics: 0-based, the
stop excluded, negative bounds from the end, bounds clipped); an integer index drops its
axis; the axes of the integer indices (broadcast, e.g. a factor binder's) come first in
the result, then the kept axes.  Everything works under `torch.func.vmap` and `make_fx`
(bounds are fixed for a run, never traced values).
"""
from __future__ import annotations

import torch

from qvr.runtime.errors import InputShapeError
from qvr.runtime.linalg import _bound, _common, _guard, _value
from qvr.runtime.numeric import _num
from qvr.runtime.synth_host import HostRequest
from qvr.runtime.values import as_index
from qvr.syntax import ast as A


def _at(v, frame, b):
    return v(frame, b) if callable(v) else v


def compile_sliced(comp, e: A.EIndex, binders):
    base = comp.name(e.base.text, binders)
    axes = comp.axes_of(e.base)
    items = []
    for ix in e.indices:
        if isinstance(ix, A.ESlice):
            items.append((True, None if ix.start is None else _bound(comp, ix.start, binders),
                          None if ix.stop is None else _bound(comp, ix.stop, binders)))
        else:
            items.append((False, comp.expr(ix, binders), None))
    who = e.base.text

    def run(frame, b):
        v = _num(frame, base(frame, b))
        rank = len(axes) if axes is not None else v.dim()
        if v.dim() < rank or len(items) > rank:
            raise InputShapeError(f"`{who}[…]` has {len(items)} indices but `{who}` has "
                                  f"{min(rank, v.dim())} axes", actual=f"shape {tuple(v.shape)}")
        first = v.dim() - rank  # the dimension of the first typed axis
        dims, keys = [], []
        for j, (is_range, lo, hi) in enumerate(items):
            d = first + j
            n = v.shape[d]
            if is_range:
                start, stop, _ = slice(_at(lo, frame, b), _at(hi, frame, b)).indices(n)
                v = v.narrow(d, start, max(0, stop - start))
                continue
            raw = lo(frame, b)
            i = raw.synth.index(raw, n, frame.device) if isinstance(raw, HostRequest) \
                else _num(frame, raw)
            keys.append(as_index(i, n, who=f"{who}[…]", what=f"index on axis {j}"))
            dims.append(d)
        if not keys:
            return v
        # the indexed axes moved to the front: their (broadcast) index axes lead the result
        return v.movedim(dims, list(range(len(dims))))[tuple(keys)]

    return run


# ---------------------------------------------------------------- concatenation

def _c_append(comp, e: A.ECall, binders):
    """`append_row(a, b)` (along the first typed axis) / `append_col(a, b)` (the last): a
    scalar is one entry of a vector; leading batch axes are broadcast."""
    name = e.callee.text
    fa, fb = (comp.expr(a, binders) for a in e.args)
    xa, xb = comp.axes_of(e.args[0]), comp.axes_of(e.args[1])
    known = xa is not None and xb is not None
    rank = max(len(xa), len(xb)) if known else None

    def run(frame, b):
        x, y = _common(_value(frame, fa, b), _value(frame, fb, b))
        r = rank if rank is not None else max(x.dim(), y.dim(), 1)
        # a scalar operand (typed, or a 0-d value when the axes are unknown): one entry
        if (known and len(xa) == 0) or (not known and x.dim() == 0):
            x = x.unsqueeze(-1)
        if (known and len(xb) == 0) or (not known and y.dim() == 0):
            y = y.unsqueeze(-1)
        d = -r if name == "append_row" else -1
        batch = torch.broadcast_shapes(x.shape[:x.dim() - r], y.shape[:y.dim() - r])
        x = x.expand(*batch, *x.shape[x.dim() - r:])
        y = y.expand(*batch, *y.shape[y.dim() - r:])
        return torch.cat([x, y], dim=d)
    return _guard(name, run)


INDEXING_CALLS = {"append_row": _c_append, "append_col": _c_append}
