"""One compiled NUTS transition for every row count of a program (issue 37.3: "the same
program with other data ... and, where `torch.export`'s dynamic dimensions allow, another
row count reuses the package").

The runtime binds a size read from the data (`object Child : FinSet N`) as a Python
number, so the density's FX graph holds it as literals (`expand(x, [4, 434])`) and its
lifted data (`transition_graph.lift_constants`) have it in their shapes: the package
`transition_cache` builds is for 434 rows only.  Here the same graph is made generic:

* `template(graphs, sizes)` compares the graph at the run's row count `n` with the same
  program's graphs at other row counts (the *probes*: the data cut by a row or two,
  `ProgramTarget.resized`).  The graphs must be the same but for integer literals and the
  lifted data's sizes; each literal is then an affine function of the row count, `k n + c`
  (`k = 0`: a fixed number), fitted on two graphs and checked on the third, and each
  axis of the lifted data is either fixed or the row count itself.  Anything else (a
  recurrence unrolled over the rows, a latent per row that changes the position's size,
  a float computed from the row count, a data axis of `n - 1`) is not generic, and says
  why;
* `symbolic(lifted, template)` writes each literal that depends on the row count as
  `k * sym_size(data, axis) + c`, so that `torch.export` with a dynamic dimension
  (`ROWS`) on those data axes traces sizes, not numbers;
* `build(...)` exports and compiles that graph once (`transition_cache.package`) into
  ``rows-KEY.pt2``, with the template beside it (``rows-KEY.check.pt``, which
  `transition_cache.prune` deletes with the package).  `KEY` (`rows_key`) digests the
  graph with its integer literals masked, the data's dtypes and ranks, the settings and
  the sources, so a graph at another row count finds it;
* `load(...)` finds the package for a graph whose own (`transition_cache.cache_key`) is
  not on disk, checks every literal and data size against the template at the graph's row
  count, loads it, runs it on the inputs of its last check when it was built (it agreed
  with PyTorch's loop at two row counts then) and compares with what it gave, and returns
  a `transition.CompiledTransition` over this graph's data.

Measured (2-core VM, one thread, kid_scores, 4 chains, a 64-transition block from an
unadapted start): the generic package ran a block in 2.67-2.68 s where the package built
for 434 rows ran it in 2.11-2.21 s (1.2-1.25x: Inductor's loops over a symbolic size).
So a run at a row count with no package of its own samples on the generic one from its
first iteration, and the package for its own row count is compiled in the background
for later runs (`nuts.py`), as a first run's is.
"""
from __future__ import annotations

import functools
import hashlib
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from qvr.inference.mcmc import transition_cache as packages
from qvr.inference.mcmc import transition_graph
from qvr.inference.mcmc.graph_cache import tensor_bytes, write_aside
from qvr.inference.mcmc.transition import (BlockOut, CompiledTransition, block_function,
                                           blocks_agree, example_inputs)

#: the row count as `torch.export` sees it: a dimension of at least 2 (export
#: specialises sizes 0 and 1)
ROWS_MIN = 2


@dataclass(frozen=True)
class RowTemplate:
    """Where the row count shows in a lifted density graph: `ints` per integer literal
    (in `_numbers` order) and `dims` per lifted data tensor and axis, each `(k, c)` for
    the value `k n + c`; `source` `(tensor, axis)` is where the package reads `n`."""

    n: int
    source: tuple
    ints: tuple
    dims: tuple

    def row_count(self, consts: list) -> Optional[int]:
        """The row count of `consts` (a graph's lifted data), or None when their number
        or ranks are not this template's."""
        j, axis = self.source
        if len(consts) != len(self.dims) or any(
                c.dim() != len(d) for c, d in zip(consts, self.dims)):
            return None
        return int(consts[j].shape[axis])

    def matches(self, lifted, consts: list) -> Optional[int]:
        """The row count at which `lifted` (a lifted density graph) and its data are
        this template's graph, or None."""
        n = self.row_count(consts)
        if n is None or n < ROWS_MIN:
            return None
        ints = [v for _, v in _numbers(lifted) if type(v) is int]
        if len(ints) != len(self.ints) or any(
                v != k * n + c for v, (k, c) in zip(ints, self.ints)):
            return None
        for c_, dims in zip(consts, self.dims):
            if tuple(c_.shape) != tuple(k * n + c for k, c in dims):
                return None
        return n


def prepared(graph) -> tuple:
    """`(lifted, consts)`: the density graph as a package takes it (`without_error_checks`,
    `lift_constants`), its data as plain contiguous tensors (a parameter's size is fixed
    by `torch.export`, and an expanded tensor's strides would be)."""
    lifted, consts = transition_graph.lift_constants(
        transition_graph.without_error_checks(graph))
    return lifted, [c.detach().contiguous() for c in consts]


def _numbers(graph) -> list:
    """`(place, value)` for every number in the graph's node arguments (ints and floats,
    not bools), in node order: `place` is the node's index and the path to the value."""
    out = []

    def walk(a, path):
        if isinstance(a, (list, tuple)):
            for i, b in enumerate(a):
                walk(b, path + (i,))
        elif isinstance(a, dict):
            for k, b in a.items():
                walk(b, path + (k,))
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            out.append((path, a))

    for i, node in enumerate(graph.graph.nodes):
        walk(node.args, (i, "a"))
        walk(node.kwargs, (i, "k"))
    return out


def _masked(graph, floats: bool = True) -> str:
    """The graph's structure with its integer literals masked (and its floats, unless
    `floats`): two graphs of one program at two row counts give the same text when only
    sizes differ."""
    index = {n: i for i, n in enumerate(graph.graph.nodes)}

    def show(a):
        if isinstance(a, torch.fx.Node):
            return f"%{index[a]}"
        if isinstance(a, (list, tuple)):
            return "[" + ",".join(show(b) for b in a) + "]"
        if isinstance(a, dict):
            return "{" + ",".join(f"{k}:{show(b)}" for k, b in a.items()) + "}"
        if type(a) is int or (type(a) is float and not floats):
            return "#"
        return repr(a)

    return "\n".join(f"{n.op} {n.target} {show(n.args)} {show(n.kwargs)}"
                     for n in graph.graph.nodes)


def template(graphs: list, sizes: list) -> tuple:
    """`(RowTemplate, None)` for the density graphs `graphs` of one program at the row
    counts `sizes` (the run's first, then at least two probes), or `(None, why)`."""
    if len(graphs) < 3 or len(set(sizes)) != len(sizes):
        return None, "three graphs at three row counts are needed"
    preps = [prepared(g) for g in graphs]
    shapes = {_masked(lifted, floats=False) for lifted, _ in preps}
    if len(shapes) != 1:
        return None, "the density's operations change with the row count"
    nums = [_numbers(lifted) for lifted, _ in preps]
    n0, n1 = sizes[0], sizes[1]
    ints = []
    for values in zip(*nums):
        a, b = values[0][1], values[1][1]
        if any(type(v[1]) is not type(a) for v in values):
            return None, "the density's numbers change type with the row count"
        if type(a) is not int:
            if any(v[1] != a for v in values):
                return None, "a number in the density is computed from the row count"
            continue
        if (a - b) % (n0 - n1):
            return None, "a size in the density is not a whole multiple of the row count"
        k = (a - b) // (n0 - n1)
        c = a - k * n0
        if any(v[1] != k * n + c for v, n in zip(values, sizes)):
            return None, "a size in the density is not linear in the row count"
        ints.append((k, c))
    consts = [c for _, c in preps]
    if any(len(cs) != len(consts[0]) for cs in consts):
        return None, "the density holds another number of data tensors at another row count"
    dims, source = [], None
    for j, per in enumerate(zip(*consts)):
        if any(t.dtype != per[0].dtype or t.dim() != per[0].dim() for t in per):
            return None, "a data tensor changes dtype or rank with the row count"
        axes = []
        for axis in range(per[0].dim()):
            got = [int(t.shape[axis]) for t in per]
            if all(g == got[0] for g in got):
                axes.append((0, got[0]))
            elif got == list(sizes):
                axes.append((1, 0))
                source = source or (j, axis)
            else:
                return None, "a data tensor's size is not the row count itself"
        dims.append(tuple(axes))
    if source is None:
        return None, "no data tensor has the row count as a size"
    if min(sizes) < ROWS_MIN:
        return None, f"fewer than {ROWS_MIN} rows"
    return RowTemplate(int(n0), source, tuple(ints), tuple(dims)), None


def symbolic(lifted, tmpl: RowTemplate):
    """A copy of `lifted` (`prepared`'s graph, at `tmpl.n` rows) in which every integer
    literal that depends on the row count is `k * sym_size(data, axis) + c`."""
    import copy
    import operator
    gm = copy.deepcopy(lifted)
    nodes = list(gm.graph.nodes)
    places = [p for p, v in _numbers(gm) if type(v) is int]
    inputs = [n for n in nodes if n.op == "placeholder"]
    first = next(n for n in nodes if n.op != "placeholder")
    j, axis = tmpl.source
    with gm.graph.inserting_before(first):
        rows = gm.graph.call_function(torch.ops.aten.sym_size.int, (inputs[1 + j], axis))
    for place, (k, c) in zip(places, tmpl.ints):
        if k == 0:
            continue
        node = nodes[place[0]]
        with gm.graph.inserting_before(node):
            value = rows
            if k != 1:
                value = gm.graph.call_function(operator.mul, (value, k))
            if c != 0:
                value = gm.graph.call_function(operator.add, (value, c))
        where = "args" if place[1] == "a" else "kwargs"
        setattr(node, where, _replaced(getattr(node, where), place[2:], value))
    gm.graph.lint()
    gm.recompile()
    return gm


def _replaced(container, path: tuple, value):
    """`container` (nested tuples, lists and dicts) with the item at `path` replaced."""
    head, rest = path[0], path[1:]
    item = value if not rest else _replaced(container[head], rest, value)
    if isinstance(container, dict):
        return {**container, head: item}
    out = list(container)
    out[head] = item
    return type(container)(out) if isinstance(container, tuple) else out


def rows_key(lifted, consts: list, z0: Tensor, dense: bool, thr: float, uturn: str, K: int,
             biased: bool, T: int) -> str:
    """The generic package's key: the graph's structure with integer literals masked
    (`_masked`), the data's dtypes and ranks, every tensor the graph still holds (by
    value), the settings, the sources (`transition_cache`'s and this module's) and the
    machine."""
    h = hashlib.sha256(b"rows")
    h.update(_masked(lifted).encode())
    for c in consts:
        h.update(f"{c.dtype}:{c.dim()}".encode())
    for node in lifted.graph.nodes:
        if node.op == "get_attr":
            obj = transition_graph._attr(lifted, node.target)
            for t in (obj if isinstance(obj, (list, tuple, torch.nn.ParameterList))
                      else [obj]):
                if isinstance(t, torch.Tensor):
                    h.update(f"{node.target}{tuple(t.shape)}{t.dtype}".encode())
                    h.update(tensor_bytes(t))
    h.update(repr((tuple(z0.shape), str(z0.dtype), str(z0.device), dense, float(thr),
                   uturn, K, biased, T, torch.__version__, packages._machine())).encode())
    h.update(_sources())
    return "rows-" + h.hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def _sources() -> bytes:
    """This module's and `transition_cache`'s source, which decide what a package holds."""
    return Path(__file__).read_bytes() + Path(packages.__file__).read_bytes()


def build(graphs: list, sizes: list, z0: Tensor, dense: bool, thr: float, uturn: str,
          K: int, biased: bool, T: int, directory: Path = None) -> tuple:
    """`(path, None)` after compiling the generic package of `graphs[0]` (at `sizes[0]`
    rows; the others are its probes) into `directory`, or `(None, why not)`.  The package
    is checked against PyTorch's loop on two graphs of two row counts before it is kept;
    one already on disk is left as it is."""
    directory = Path(directory) if directory is not None else packages.cache_dir()
    tmpl, why = template(graphs, sizes)
    if tmpl is None:
        return None, why
    preps = [prepared(g) for g in graphs[:2]]  # the graph, and a probe to check on
    lifted, consts = preps[0]
    key = rows_key(lifted, consts, z0, dense, thr, uturn, K, biased, T)
    path = directory / f"{key}.pt2"
    if path.is_file() and (directory / f"{key}.check.pt").is_file():
        return path, None
    settings = (dense, thr, uturn, K, biased)
    state = torch.get_rng_state()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            example = example_inputs(graphs[0], torch.full_like(z0, 0.1), dense, K, T)
            dynamic = [None] * len(example) + [
                {axis: torch.export.Dim("rows", min=ROWS_MIN)
                 for axis, (k, _) in enumerate(dims) if k} or None
                for dims in tmpl.dims]
            packages.package(symbolic(lifted, tmpl), example, consts, settings, path,
                             dynamic_shapes=dynamic)
            from torch._inductor import aoti_load_package
            runner = aoti_load_package(str(path))
            # two row counts: the sizes are read from the data, not built in
            for graph, (_, data) in zip(graphs, preps):
                got = _agrees(runner, graph, data, z0, settings, T, seed=5, limit=min(T, 2))
                if got is None:
                    packages._discard(path)
                    return None, "the generic transition disagrees with PyTorch on test inputs"
        args, want = got  # the last check, kept: a load runs the package on it again
        write_aside(directory / f"{key}.check.pt", lambda tmp: torch.save(
            {"template": tmpl.__dict__, "args": list(args),
             "want": [t.detach().cpu() for t in want]}, tmp))
    except Exception as exc:
        packages._discard(path)
        first = (str(exc).strip().splitlines() or [""])[0]
        return None, f"the generic transition did not compile: {type(exc).__name__}: {first[:200]}"
    finally:
        torch.set_rng_state(state)
    return path, None


def _agrees(runner, graph, consts: list, z0: Tensor, settings: tuple, T: int, seed: int,
            limit: int) -> Optional[tuple]:
    """`(inputs, outputs)` when the package `runner` gives what PyTorch's loop gives on
    `graph`'s data (`consts`, its lifted data; test inputs from `seed`), else None."""
    dense, thr, uturn, K, biased = settings
    args = list(example_inputs(graph, z0, dense, K, T, seed=seed, limit=limit))
    want = block_function(graph, dense, thr, uturn, K, biased)(*args)
    args += consts
    return (args, want) if blocks_agree(BlockOut(*want), BlockOut(*runner(*args))) else None


def load(graph, z0: Tensor, dense: bool, thr: float, uturn: str, K: int, biased: bool,
         T: int, directory: Path = None) -> tuple:
    """`(CompiledTransition, note)` from a generic package that fits `graph` (built at
    another row count), or `(None, None)` when there is none (`(None, why)` when one was
    found but failed its check, and was deleted)."""
    directory = Path(directory) if directory is not None else packages.cache_dir()
    try:
        lifted, consts = prepared(graph)
        key = rows_key(lifted, consts, z0, dense, thr, uturn, K, biased, T)
    except Exception:
        return None, None
    path, kept = directory / f"{key}.pt2", directory / f"{key}.check.pt"
    if not (path.is_file() and kept.is_file()):
        return None, None
    try:
        stored = torch.load(kept, weights_only=True)
        tmpl = RowTemplate(**stored["template"])
        check_args = [a.to(z0.device) for a in stored["args"]]
        check_want = BlockOut(*(w.to(z0.device) for w in stored["want"]))
    except Exception:  # a damaged check file: both go, and the next first run rebuilds
        packages._discard(path, kept)
        return None, None
    n = tmpl.matches(lifted, consts)
    if n is None:
        return None, None
    t0 = time.perf_counter()
    state = torch.get_rng_state()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            runner = packages._load_package(path)
            packages._mark_used(path)
            # it agreed with PyTorch at two row counts when it was built: run on the
            # inputs of that check (its data included), it must give what it gave then
            if not blocks_agree(check_want, BlockOut(*runner(*check_args))):
                packages._discard(path, kept)
                return None, ("the compiled transition for any row count disagrees with "
                              "what it gave when it was built")
    except Exception as exc:
        packages._discard(path, kept)
        return None, (f"the compiled transition for any row count did not load: "
                      f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        torch.set_rng_state(state)
    seconds = time.perf_counter() - t0
    return (CompiledTransition(runner, K, T, z0.device, seconds, True, consts),
            f"the whole NUTS transition loaded from the disk cache, built for {tmpl.n} rows "
            f"and reused at {n} (a C++ loop of up to {T} transitions a call; "
            f"{seconds:.1f} s)")


#: the largest density (operations per evaluation) whose probes are traced: they are
#: traced on the run's first iteration, before it samples (kid_scores' 138 operations:
#: 0.8 s for both, binding included; tracing costs ~1-3 ms an operation), so a larger
#: graph keeps a package per row count rather than delay every first run by seconds
PROBE_MAX_OPS = 600


def probes(target, graph, z0: Tensor) -> Optional[tuple]:
    """`(graphs, sizes)`: `graph` (the density graph of `target` at `z0`'s chain count)
    and the graphs of the same program with one and two rows fewer (`target.resized`, set
    by the fit for a program whose sizes are read from the data), for `build`; None when
    the target has no probes or they cannot be generic: another position size (a latent
    per row), or another number of operations (a recurrence over the rows, found by one
    eager evaluation each, before any tracing), or more than `PROBE_MAX_OPS` of them."""
    resized = getattr(target, "resized", None)
    count = getattr(target, "operation_count", None)
    if resized is None or count is None:
        return None
    try:
        graphs, sizes, ops = [graph], [], count(z0)
        if ops > PROBE_MAX_OPS:
            return None
        for drop in (1, 2):
            got = resized(drop)
            if got is None:
                return None
            n, probe = got
            if not sizes:
                sizes.append(n + drop)
            if probe.dim != target.dim or probe.operation_count(z0) != ops:
                return None
            g = probe.density_graph(z0)
            if g is None:
                return None
            graphs.append(g)
            sizes.append(n)
    except Exception:  # a probe that cannot be bound or traced: no generic package
        return None
    return graphs, sizes
