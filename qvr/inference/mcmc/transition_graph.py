"""The density's FX graph as the compiled NUTS transition takes it (`transition_cache`):

* `without_error_checks` — `cholesky`'s, `logdet`'s and `solve`'s raise on a singular
  matrix made a NaN log density for the chains whose factorisation failed;
* `lift_constants` — every tensor the graph holds (the data, and what constant folding
  computed from them) made an input, so that the same program with other data of the
  same shapes reuses the compiled package (issue 37.4); `_liftable` lists them for the
  cache key, which digests their shapes, dtypes and strides, not their values.
"""
from __future__ import annotations

import math

import torch


def without_error_checks(graph):
    """A copy of the density's FX graph without `aten._linalg_check_errors` (the raise of
    `cholesky`, `logdet`, `solve` on a singular or non-positive-definite matrix), each
    replaced by a NaN log density for the chains whose factorisation failed (the loop maps
    it to -inf, as the eager density's error is).  Inside `torch.while_loop` the check
    makes `torch.export` lift a constant tensor it does not keep (the exported program's
    decompositions fail "Constant tensor lifted_tensor_0 is not in the constants
    dictionary", AOTInductor "Expected positional argument for parameter arg45_1": a GP
    regression scored through `logdet`, issue 36.10).  The graph itself when it has none."""
    import copy
    import operator
    checks = [n for n in graph.graph.nodes if n.op == "call_function"
              and n.target is torch.ops.aten._linalg_check_errors.default]
    if not checks:
        return graph
    gm = copy.deepcopy(graph)
    checks = [n for n in gm.graph.nodes if n.op == "call_function"
              and n.target is torch.ops.aten._linalg_check_errors.default]
    out = next(n for n in gm.graph.nodes if n.op == "output")
    grad, lp = out.args[0]
    with gm.graph.inserting_before(out):
        for node in checks:
            info = node.args[0]
            bad = gm.graph.call_function(torch.ne, (info, 0))
            # one flag per chain: the info of a chain's matrices (any trailing batch axes)
            flat = gm.graph.call_function(torch.reshape, (bad, (-1,)))
            rows = gm.graph.call_function(operator.getitem, (
                gm.graph.call_function(getattr, (lp, "shape")), 0))
            per = gm.graph.call_function(torch.reshape, (flat, (rows, -1)))
            failed = gm.graph.call_function(torch.any, (per, 1))
            nan = gm.graph.call_function(torch.full_like, (lp, math.nan))
            lp = gm.graph.call_function(torch.where, (failed, nan, lp))
    for node in checks:
        gm.graph.erase_node(node)
    out.args = ((grad, lp),)
    gm.recompile()
    return gm


def _attr(graph, target: str):
    obj = graph
    for part in str(target).split("."):
        obj = getattr(obj, part)
    return obj


def _liftable(graph) -> list:
    """`(node, tensor)` for every tensor the density's graph holds, in graph order: a
    tensor attribute read by `get_attr`, or an element of a constant folder's list
    (`_FX_CONST_FOLDED_ATTRS`) read by `getitem` with a fixed index."""
    import operator
    out = []
    for n in graph.graph.nodes:
        if n.op == "get_attr":
            obj = _attr(graph, n.target)
            if isinstance(obj, torch.Tensor):
                out.append((n, obj))
        elif n.op == "call_function" and n.target is operator.getitem:
            src, i = n.args
            if isinstance(src, torch.fx.Node) and src.op == "get_attr" and isinstance(i, int):
                obj = _attr(graph, src.target)
                if isinstance(obj, (torch.nn.ParameterList, list, tuple)) and \
                        isinstance(obj[i], torch.Tensor):
                    out.append((n, obj[i]))
    return out


def _dead_lists(graph, lifted: set) -> set:
    """The list attributes every reader of which is lifted (nothing else reads them)."""
    return {n for n in graph.graph.nodes if n.op == "get_attr" and n.users
            and not isinstance(_attr(graph, n.target), torch.Tensor)
            and all(u in lifted for u in n.users)}


def lift_constants(graph) -> tuple:
    """`(lifted, consts)`: the density's FX graph with every tensor it holds (the data,
    and what constant folding computed from them: `_liftable`) made an input after the
    position, `lifted(z, *consts)`, and those tensors in order (issue 37.4: data are
    inputs of the compiled transition, not constants, so the same program with other
    data of the same shapes reuses the package; `cache_key` digests their shapes and
    dtypes only).  A number computed from the data in Python is in the graph's code,
    which the key digests: such a program compiles again for other data."""
    import torch.fx as fx
    lifts = _liftable(graph)
    lifted = {n for n, _ in lifts}
    dead = _dead_lists(graph, lifted)
    new = fx.Graph()
    env = {}
    for n in graph.graph.nodes:
        if n.op == "placeholder":
            env[n] = new.placeholder(n.name)
    for i, (n, _) in enumerate(lifts):
        env[n] = new.placeholder(f"lifted_const_{i}")
    for n in graph.graph.nodes:
        if n.op == "placeholder" or n in env or n in dead:
            continue
        env[n] = new.node_copy(n, lambda a: env[a])
    return fx.GraphModule(graph, new), [t for _, t in lifts]
