"""A disk cache of compiled density graphs, so that a second run of a model skips tracing.

`potential.ProgramTarget` compiles a program's batched value-and-gradient function by
tracing it (`make_fx`: the program interpreter, vmap and autograd run once under a proxy)
and simplifying and constant-folding the graph.  Tracing costs about a millisecond per
operation: 0.3 s for eight schools, 9 s for a GARCH recurrence unrolled over 200 steps,
paid again by every run, where the compiled sampler that follows (`mcmc/transition.py`)
is loaded from its own cache in milliseconds.  This module keeps the finished graph on
disk under a *fingerprint* of the function:

* `fingerprint(fn, z)` evaluates `fn(z)` once, eagerly, under a dispatch mode that
  records every aten operation PyTorch runs beneath vmap and autograd: the operation, its
  non-tensor arguments, and for each tensor argument the operation that made it (or, for
  a tensor from outside, its shape, dtype and strides and, unless it is `z` itself, its
  bytes: the data and every constant).  Two functions with the same record run the same
  operations on the same constants, which is what the traced graph holds.  The record
  also names this module's, `potential`'s and `graph_opt`'s source (the post-processing)
  and the PyTorch version.  It costs one eager evaluation and a few microseconds per
  operation;
* `store(key, graph, function)`: the FX graph in ``$QVR_CACHE_DIR/densities/KEY.pt``
  (`cache_root`) and its TorchScript function in ``KEY.ts``, each written aside and
  renamed, so a killed process leaves no broken file; `load_function(key)` and
  `load_graph(key)` read them (the graph only when a whole-transition compile asks for
  it).  A file that fails to load is deleted and the density traced again.

The cache is an optimisation only: the caller checks a loaded function against the eager
one at the run's point (a freshly traced one is checked at two points, catching
value-dependent control flow), a stale file is traced afresh and replaced, and any
failure here means tracing as before.  Files here are never evicted (a density is
kilobytes; the compiled transitions beside them, 1-2 MiB each, are bounded by
`transition_cache.prune`): delete the directory to reclaim the space.
"""
from __future__ import annotations

import functools
import hashlib
import os
import warnings
from pathlib import Path
from typing import Callable, Optional

import torch

#: the modules whose code decides what a stored graph holds (tracing, post-processing)
_SOURCES = ("potential.py", "graph_opt.py", "graph_cache.py")


def cache_root() -> Path:
    """The root of qvr's caches: ``$QVR_CACHE_DIR``, else ``$XDG_CACHE_HOME/qvr``, else
    ``~/.cache/qvr``."""
    root = os.environ.get("QVR_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "qvr"


def cache_dir() -> Path:
    return cache_root() / "densities"


@functools.lru_cache(maxsize=None)
def _source_digest() -> bytes:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    h.update(torch.__version__.encode())
    return h.digest()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """A tensor's values as bytes (any strides: an expanded constant has stride 0)."""
    t = t.detach().cpu()
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.reshape(-1))
    return flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _recorder():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Record(TorchDispatchMode):
        """Digests each operation as it runs (see the module docstring)."""

        def __init__(self, z: torch.Tensor):
            super().__init__()
            self.h = hashlib.sha256()
            self.z_storage = z.untyped_storage().data_ptr()
            self.made: dict = {}  # id(tensor) -> (op index, output index)
            self.keep: list = []  # the tensors `made` refers to, kept alive (no id reuse)
            self.n = 0
            self.failed = False  # never fails the evaluation: only the digest

        def _arg(self, a) -> str:
            if isinstance(a, torch.Tensor):
                where = self.made.get(id(a))
                if where is not None:
                    return f"T{where}"
                meta = f"{tuple(a.shape)}{tuple(a.stride())}{a.storage_offset()}{a.dtype}" \
                       f"{a.device.type}"
                if a.device.type != "meta" and \
                        a.untyped_storage().data_ptr() == self.z_storage:
                    return f"Z{meta}"  # the point itself: its values are not the function's
                self.made[id(a)] = ("c", self.n)
                self.keep.append(a)
                self.h.update(meta.encode())
                self.h.update(tensor_bytes(a))
                return f"C{meta}"
            return repr(a)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not self.failed:
                try:
                    leaves, spec = tree_flatten((args, kwargs))
                    self.h.update(f"{func}|{spec}|{'|'.join(map(self._arg, leaves))}\n"
                                  .encode())
                except Exception:  # a tensor it cannot digest (sparse, meta, ...)
                    self.failed = True
            out = func(*args, **kwargs)
            if not self.failed:
                outs, _ = tree_flatten(out)
                for i, o in enumerate(outs):
                    if isinstance(o, torch.Tensor):
                        self.made[id(o)] = (self.n, i)
                        self.keep.append(o)
                self.n += 1
            return out

    return Record


def fingerprint(fn: Callable, z: torch.Tensor) -> tuple:
    """`(result of fn(z), key or None)`: one eager evaluation of `fn` at `z` (autograd on),
    digested as it runs.  An exception from `fn` itself propagates; what cannot be
    digested (a sparse or meta tensor, ...) gives key None, never an error."""
    z = z.detach()
    try:
        record = _recorder()(z)
    except Exception:  # pragma: no cover - a PyTorch without dispatch modes
        return fn(z), None
    record.h.update(_source_digest())
    record.h.update(f"{tuple(z.shape)}{z.dtype}{z.device}".encode())
    try:
        with record:
            out = fn(z)
    finally:
        record.keep.clear()
        record.made.clear()
    return out, (None if record.failed else record.h.hexdigest()[:32])


def _path(key: str, directory, suffix: str) -> Path:
    return Path(directory or cache_dir()) / f"{key}{suffix}"


def load_graph(key: str, directory: Path = None) -> Optional[torch.fx.GraphModule]:
    """The FX graph stored under `key`, or None (absent, or unreadable: then deleted)."""
    path = _path(key, directory, ".pt")
    if not path.is_file():
        return None
    try:
        gm = torch.load(path, weights_only=False)
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError("not a graph")
        return gm
    except Exception:
        path.unlink(missing_ok=True)
        return None


def load_function(key: str, directory: Path = None):
    """The TorchScript function stored under `key`, or None (absent, or unreadable: then
    deleted).  Loading it is ~10x cheaper than tracing the graph again (a 3,000-operation
    GARCH density: 0.11 s against 0.96 s)."""
    path = _path(key, directory, ".ts")
    if not path.is_file():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path))
    except Exception:
        path.unlink(missing_ok=True)
        return None


def write_aside(path: Path, save: Callable) -> None:
    """`save(tmp)` to a file beside `path`, then renamed to `path`: a killed process
    leaves no broken file (the temporary one is removed if `save` fails)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            save(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def store(key: str, graph: torch.fx.GraphModule, function=None,
          directory: Path = None) -> bool:
    """Keep `graph` (only what its nodes use: a constant folder's subgraph is left out)
    and, when it is TorchScript, the `function` compiled from it, under `key`.  Each file
    is written aside and renamed.  Whether both were written; never raises."""
    try:
        Path(directory or cache_dir()).mkdir(parents=True, exist_ok=True)
        plain = torch.fx.GraphModule(graph, graph.graph)
        if isinstance(function, torch.jit.ScriptModule):
            write_aside(_path(key, directory, ".ts"), lambda p: torch.jit.save(function, str(p)))
        write_aside(_path(key, directory, ".pt"), lambda p: torch.save(plain, p))
        return True
    except Exception:
        return False
