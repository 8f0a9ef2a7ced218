"""Peephole simplification of traced density graphs (aten-level FX graphs from `make_fx`).

The MCMC target is compiled by tracing `z -> (grad, log_density)` into a graph of aten
operations (`qvr.inference.mcmc.potential`).  Such a graph carries the program interpreter's
bookkeeping verbatim: views to shapes a tensor already has, multiplications by 1,
additions of zero log-Jacobians, `unsqueeze` immediately summed away, the same view taken
four times.  On small models every operation costs a few microseconds of dispatch
whatever its size, so removing them is a direct speed-up.

`simplify(gm)` rewrites the graph in place, to a fixed point, with rules that are exact
(the result is the same tensor, same shape and dtype, bit for bit):

* identities: `view`/`reshape`/`expand`/`_to_copy` to the input's own shape and dtype,
  `x * 1`, `x / 1`, `x + 0`, `x - 0`, `x ** 1`;
* zeros: `x + 0-tensor` and `x - 0-tensor` (a tensor built by `zeros`, `zeros_like`,
  `new_zeros`, a zero `full`, or a sum/view/expand/negation of one) when broadcasting
  leaves `x`'s shape and dtype unchanged;
* view chains: `view(view(x, a), b)` becomes `view(x, b)`;
* `sum(unsqueeze(x, d), [d])` becomes `x`;
* common subexpressions among pure operations;
* `ones_like(x)` / `zeros_like(x)` of a statically shaped `x` become constants (so the
  caller's constant folding can precompute what follows, e.g. the gradient seed);
* a sum of `slice_backward`s / `select_backward`s that tile a tensor along one axis (the
  gradient of a flat vector cut into sites, of a vector read element by element) becomes
  one `cat` (one `stack` when every piece is a single element);
* linear predictors written term by term (`a + b[0] * x0 + ... + b[9] * x9` with data
  columns `x_j`, which the core language has no dot product for) become one matrix
  product, and so do the matching gradient pieces `stack([sum(g * x_j), ...])`.  Unlike
  the rules above these change the summation order, so results agree up to float
  rounding, not bit for bit.

The graph must be functional (no in-place operations): `functionalize` the traced
function first.  Graphs that still contain an in-place operation are left unchanged.
Correctness does not rest on this module alone: the caller compares the compiled
function with the eager one before using it.
"""
from __future__ import annotations

import torch
from torch import fx

aten = torch.ops.aten

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.expand.default, aten.alias.default}
_ZERO_MAKERS = {aten.zeros_like.default, aten.new_zeros.default, aten.zeros.default}
_ZERO_KEEPERS = {aten.sum.dim_IntList, aten.sum.default, aten.neg.default} | _VIEWS
#: names of the aten operations that draw random numbers
RANDOM_OPS = ("rand", "randn", "normal", "bernoulli", "multinomial", "poisson", "uniform",
              "exponential", "geometric", "cauchy", "log_normal", "random", "randint",
              "randperm", "_standard_gamma", "_sample_dirichlet", "binomial", "native_dropout")


def _val(x):
    return x.meta.get("val") if isinstance(x, fx.Node) else None


def _same_meta(a, b) -> bool:
    va, vb = _val(a), _val(b)
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.shape == vb.shape and va.dtype == vb.dtype)


def _is_number(x, value) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == value


def _inplace(node: fx.Node) -> bool:
    t = node.target
    name = getattr(getattr(t, "overloadpacket", None), "__name__", "") or str(t)
    return name.endswith("_") and not name.startswith("_")


def _is_zero(node, memo) -> bool:
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if node in memo:
        return memo[node]
    t, out = node.target, False
    if t in _ZERO_MAKERS:
        out = True
    elif t in (aten.full_like.default, aten.full.default, aten.new_full.default):
        fill = node.args[1] if t is not aten.new_full.default else node.args[2]
        out = _is_number(fill, 0)
    elif t is aten.scalar_tensor.default:
        out = _is_number(node.args[0], 0)
    elif t in _ZERO_KEEPERS:
        out = _is_zero(node.args[0], memo)
    memo[node] = out
    return out


def _identity_input(node: fx.Node, memo):
    """The node this one equals (same value, shape, dtype), or None."""
    t, a = node.target, node.args
    if not a or not isinstance(a[0], fx.Node):
        if t in (aten.add.Tensor, aten.mul.Tensor) and len(a) > 1 and isinstance(a[1], fx.Node):
            # 0 + x, 1 * x
            x, s = a[1], a[0]
            if t is aten.add.Tensor and _is_number(s, 0) and _same_meta(node, x):
                return x
            if t is aten.mul.Tensor and _is_number(s, 1) and _same_meta(node, x):
                return x
        return None
    x = a[0]
    if t in _VIEWS or t is aten._to_copy.default:
        if t is aten._to_copy.default and set(node.kwargs) - {"dtype"}:
            return None
        return x if _same_meta(node, x) else None
    if len(a) < 2:
        return None
    other = a[1]
    if t in (aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
             aten.pow.Tensor_Scalar):
        if _is_number(other, 1) and not node.kwargs and _same_meta(node, x):
            return x
        if t is aten.mul.Tensor and isinstance(other, fx.Node) and _is_number(x, 1):
            return None
    if t in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        if node.kwargs.get("alpha", 1) != 1:
            return None
        if _is_number(other, 0) and _same_meta(node, x):
            return x
        if _is_zero(other, memo) and _same_meta(node, x):
            return x
        if t is aten.add.Tensor and _is_zero(x, memo) and isinstance(other, fx.Node) \
                and _same_meta(node, other):
            return other
    return None


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _summed_unsqueeze(node: fx.Node):
    """`sum(unsqueeze(x, d), [d])` (no keepdim) -> x."""
    if node.target is not aten.sum.dim_IntList or len(node.args) < 2:
        return None
    if (len(node.args) > 2 and node.args[2]) or node.kwargs.get("keepdim") or \
            node.kwargs.get("dtype") is not None:
        return None
    src, dims = node.args[0], node.args[1]
    if not (isinstance(src, fx.Node) and src.target is aten.unsqueeze.default):
        return None
    if not (isinstance(dims, (list, tuple)) and len(dims) == 1):
        return None
    v = _val(src)
    if not isinstance(v, torch.Tensor):
        return None
    rank = v.dim()
    if _norm_dim(dims[0], rank) != _norm_dim(src.args[1], rank):
        return None
    x = src.args[0]
    return x if _same_meta(node, x) else None


def _rewrite_view_chain(graph: fx.Graph, node: fx.Node) -> bool:
    if node.target is not aten.view.default:
        return False
    inner = node.args[0]
    if not (isinstance(inner, fx.Node) and inner.target is aten.view.default):
        return False
    node.args = (inner.args[0],) + tuple(node.args[1:])
    return True


def _key(node: fx.Node):
    def norm(v):
        if isinstance(v, (list, tuple)):
            return tuple(norm(i) for i in v)
        if isinstance(v, torch.Tensor):
            return ("tensor", id(v))
        if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return str(v)
        if isinstance(v, float) and v != v:
            return ("nan",)
        return v
    try:
        key = (node.target, norm(node.args), tuple(sorted((k, norm(v))
                                                         for k, v in node.kwargs.items())))
        hash(key)
        return key
    except TypeError:
        return None


def _random(node: fx.Node) -> bool:
    return node.op == "call_function" and any(r in str(node.target) for r in RANDOM_OPS)


def _pure(node: fx.Node) -> bool:
    return node.op == "call_function" and not _inplace(node) and not _random(node)


def draws_random_numbers(gm: fx.GraphModule) -> bool:
    """Whether the graph holds an operation that draws random numbers."""
    return any(_random(n) for n in gm.graph.nodes)


def _constant_like(graph: fx.Graph, node: fx.Node) -> bool:
    """`ones_like(x)`/`zeros_like(x)` -> `full(shape, value)`: no input dependency."""
    if node.target not in (aten.ones_like.default, aten.zeros_like.default):
        return False
    v = _val(node)
    if not isinstance(v, torch.Tensor) or set(node.kwargs) - {
            "dtype", "layout", "device", "pin_memory", "memory_format"}:
        return False
    fill = 1.0 if node.target is aten.ones_like.default else 0.0
    if not v.dtype.is_floating_point:
        fill = int(fill)
    with graph.inserting_before(node):
        new = graph.call_function(aten.full.default, (list(v.shape), fill),
                                  {"dtype": v.dtype, "device": v.device})
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    return True


def _slice_pieces(node, shape, out):
    """Collect the `(start, end, grad)` of an add-tree of `slice_backward`s into `out`;
    False if the tree holds anything else."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if node.target is aten.add.Tensor and not node.kwargs and len(node.args) == 2:
        return _slice_pieces(node.args[0], shape, out) and \
            _slice_pieces(node.args[1], shape, out)
    if node.target is aten.slice_backward.default:
        grad, in_shape, dim, start, end, step = node.args
        if step != 1 or list(in_shape) != list(shape[0]) or \
                _norm_dim(dim, len(in_shape)) != shape[1]:
            return False
        out.append((start, end, grad, False))
        return True
    if node.target is aten.select_backward.default:
        grad, in_shape, dim, index = node.args
        if list(in_shape) != list(shape[0]) or _norm_dim(dim, len(in_shape)) != shape[1]:
            return False
        index = _norm_dim(index, in_shape[shape[1]])
        out.append((index, index + 1, grad, True))
        return True
    return False


def _tiled_slices_to_cat(graph: fx.Graph, node: fx.Node) -> bool:
    if node.target is not aten.add.Tensor:
        return False
    first = node.args[0]
    while isinstance(first, fx.Node) and first.target is aten.add.Tensor:
        first = first.args[0]
    if not (isinstance(first, fx.Node) and first.target in (aten.slice_backward.default,
                                                             aten.select_backward.default)):
        return False
    in_shape = list(first.args[1])
    dim = _norm_dim(first.args[2], len(in_shape))
    pieces: list = []
    if not _slice_pieces(node, (in_shape, dim), pieces) or len(pieces) < 2:
        return False
    size = in_shape[dim]
    pieces.sort(key=lambda t: t[0])
    pos = 0
    for start, end, grad, selected in pieces:
        end = min(end, size)
        g = _val(grad)
        if start != pos or not isinstance(g, torch.Tensor):
            return False
        if (g.dim() != len(in_shape) - 1) if selected else (g.shape[dim] != end - start):
            return False
        pos = end
    if pos != size or not _same_meta(node, first):
        return False
    with graph.inserting_before(node):
        if all(selected for *_, selected in pieces):
            new = graph.call_function(aten.stack.default, ([g for _, _, g, _ in pieces], dim))
        else:
            grads = [graph.call_function(aten.unsqueeze.default, (g, dim)) if selected else g
                     for _, _, g, selected in pieces]
            new = graph.call_function(aten.cat.default, (grads, dim))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    return True


def _const(node) -> bool:
    return isinstance(node, fx.Node) and node.op == "get_attr"


def _term(node):
    """`(S, j, K)` when `node` is `view(select(S, 1, j), [C, 1]) * K` (either order) with `K`
    a constant vector; else None."""
    if not (isinstance(node, fx.Node) and node.target is aten.mul.Tensor) or node.kwargs:
        return None
    a, b = node.args
    if _const(a):
        a, b = b, a
    if not (_const(b) and isinstance(a, fx.Node) and a.target is aten.view.default):
        return None
    sel = a.args[0]
    if not (isinstance(sel, fx.Node) and sel.target is aten.select.int and sel.args[1] == 1):
        return None
    S, K, out = sel.args[0], _val(b), _val(node)
    vs, va = _val(S), _val(a)
    if not all(isinstance(t, torch.Tensor) for t in (K, out, vs, va)):
        return None
    C = vs.shape[0]
    if vs.dim() != 2 or K.dim() != 1 or tuple(va.shape) != (C, 1) or \
            tuple(out.shape) != (C, K.shape[0]) or K.dtype != vs.dtype:
        return None
    return S, _norm_dim(sel.args[2], vs.shape[1]), b


def _add_leaves(node, root, out) -> None:
    if node is root or (isinstance(node, fx.Node) and node.target is aten.add.Tensor and
                        not node.kwargs and len(node.users) == 1):
        _add_leaves(node.args[0], None, out)
        _add_leaves(node.args[1], None, out)
    else:
        out.append(node)


def _linear_predictor(gm: fx.GraphModule, node: fx.Node) -> bool:
    """`x0 + sum_j S[:, j] * K_j` -> `x0 + S[:, idx] @ stack(K_j)`."""
    if node.target is not aten.add.Tensor or node.kwargs:
        return False
    if any(u.target is aten.add.Tensor and len(node.users) == 1 for u in node.users):
        return False  # not the root of its add-tree
    leaves: list = []
    _add_leaves(node, node, leaves)
    terms = [(leaf, _term(leaf)) for leaf in leaves]
    by_source: dict = {}
    for leaf, t in terms:
        if t is not None:
            by_source.setdefault(t[0], []).append((leaf, t))
    source, group = max(by_source.items(), key=lambda kv: len(kv[1]), default=(None, []))
    idx = [t[1] for _, t in group]
    if len(group) < 3 or len(set(idx)) != len(idx):
        return False
    graph = gm.graph
    width = _val(source).shape[1]
    with graph.inserting_before(node):
        if idx == list(range(width)):
            picked = source
        else:
            name = f"_qvr_index_{len(list(gm.buffers()))}"
            gm.register_buffer(name, torch.tensor(idx, device=_val(source).device))
            picked = graph.call_function(aten.index_select.default,
                                         (source, 1, graph.get_attr(name)))
        weights = graph.call_function(aten.stack.default, ([t[2] for _, t in group], 0))
        total = graph.call_function(aten.mm.default, (picked, weights))
        used = {leaf for leaf, _ in group}
        for leaf in leaves:
            if leaf not in used:
                total = graph.call_function(aten.add.Tensor, (leaf, total))
    if not total.meta:
        total.meta.update(node.meta)
    node.replace_all_uses_with(total)
    return True


def _gradient_columns(gm: fx.GraphModule, node: fx.Node) -> bool:
    """`stack([sum(G * K_j, [1]) ...], 1)` -> `G @ stack(K_j, 1)`."""
    if node.target is not aten.stack.default or len(node.args) < 2 or node.args[1] != 1:
        return False
    pieces = node.args[0]
    if len(pieces) < 3:
        return False
    G, consts = None, []
    for piece in pieces:
        if not (isinstance(piece, fx.Node) and piece.target is aten.sum.dim_IntList and
                list(piece.args[1]) == [1] and len(piece.args) == 2 and not piece.kwargs):
            return False
        prod = piece.args[0]
        if not (isinstance(prod, fx.Node) and prod.target is aten.mul.Tensor) or prod.kwargs:
            return False
        a, b = prod.args
        if _const(a):
            a, b = b, a
        if not _const(b) or (G is not None and a is not G):
            return False
        G = a
        consts.append(b)
    vg = _val(G)
    vk = [_val(k) for k in consts]
    if not isinstance(vg, torch.Tensor) or vg.dim() != 2 or not all(
            isinstance(k, torch.Tensor) and k.dim() == 1 and k.shape[0] == vg.shape[1]
            and k.dtype == vg.dtype for k in vk):
        return False
    graph = gm.graph
    with graph.inserting_before(node):
        weights = graph.call_function(aten.stack.default, (consts, 1))
        new = graph.call_function(aten.mm.default, (G, weights))
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    return True


def simplify(gm: fx.GraphModule) -> fx.GraphModule:
    """Simplify `gm`'s graph in place (see the module docstring); returns `gm`."""
    graph = gm.graph
    if any(n.op == "call_function" and _inplace(n) for n in graph.nodes):
        return gm
    for _ in range(20):
        changed = False
        memo: dict = {}
        seen: dict = {}
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            target = _identity_input(node, memo) or _summed_unsqueeze(node)
            if target is not None and target is not node:
                node.replace_all_uses_with(target)
                changed = True
                continue
            if _constant_like(graph, node) or _tiled_slices_to_cat(graph, node) or \
                    _linear_predictor(gm, node) or _gradient_columns(gm, node):
                changed = True
                continue
            if _rewrite_view_chain(graph, node):
                changed = True
            if _pure(node):
                key = _key(node)
                if key is not None:
                    prev = seen.get(key)
                    if prev is not None:
                        node.replace_all_uses_with(prev)
                        changed = True
                    else:
                        seen[key] = node
        graph.eliminate_dead_code()
        if not changed:
            break
    graph.lint()
    gm.recompile()
    return gm


def count_ops(gm: fx.GraphModule) -> int:
    """Number of operation nodes (for reports and tests)."""
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")
