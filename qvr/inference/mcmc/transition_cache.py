"""The compiled NUTS transition on disk and in this process: `compile_transition` exports
`transition.block_function` (`torch.export`, through the density's FX graph as
`transition_graph` rewrites it) and builds it with AOTInductor into a package whose loops
are C++, kept on disk (`cache_dir`, keyed by `cache_key`: a later process loads it in
under a second instead of compiling for ~30-50 s), checks it against the same function run
by PyTorch on two short blocks (a package from the cache: against the outputs it gave
then, kept beside it), and returns a `CompiledTransition` or the reason it could not.
`BackgroundCompile` does the same in a worker process (`compile_worker`) while a run goes
on leaf by leaf (issue 37.4).  The directory is bounded (`prune`): each new package
deletes the least recently used ones beyond `max_bytes()` (1 GiB by default,
``QVR_CACHE_MAX_MB``); loading a package marks it used.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from qvr.inference.mcmc import ops
from qvr.inference.mcmc import transition as loop_module
from qvr.inference.distributed.world import process_alive
from qvr.inference.mcmc import transition_graph
from qvr.inference.mcmc.graph_cache import cache_root, tensor_bytes, write_aside
from qvr.inference.mcmc.transition import (BlockOut, CompiledTransition, block_function,
                                           blocks_agree, example_inputs)
from qvr.inference.mcmc.transition_graph import (_attr, _dead_lists, _liftable,
                                                 lift_constants, without_error_checks)


def cache_dir() -> Path:
    """Where compiled transitions are kept: ``$QVR_CACHE_DIR/transitions``, else
    ``$XDG_CACHE_HOME/qvr/transitions``, else ``~/.cache/qvr/transitions``."""
    return cache_root() / "transitions"


#: `cache_key`'s digests per graph (a run asks twice: whether the package is on disk, to
#: say that it compiles, then to compile or load it); a graph is never changed once made
_KEYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def cache_key(graph, z0: Tensor, dense: bool, thr: float, uturn: str, K: int,
              biased: bool, T: int) -> str:
    """A digest of everything the compiled transition depends on: the density's graph
    (its code and every tensor it holds), the shapes, dtype and device, the settings,
    the source of this module, the loop's, the graph rewrites' and `ops`, and the PyTorch
    version (computed once per graph and
    settings)."""
    settings = (tuple(z0.shape), str(z0.dtype), str(z0.device), dense, float(thr),
                uturn, K, biased, T)
    try:
        known = _KEYS.setdefault(graph, {})
    except TypeError:  # not weakly referable: digested every time
        known = {}
    if settings not in known:
        known[settings] = _digest(graph, z0, dense, thr, uturn, K, biased, T)
    return known[settings]


def _digest(graph, z0: Tensor, dense: bool, thr: float, uturn: str, K: int,
            biased: bool, T: int) -> str:
    h = hashlib.sha256()
    h.update(graph.code.encode())
    lifts = _liftable(graph)
    for node, t in lifts:  # inputs of the package (`lift_constants`): shapes and dtypes
        h.update(f"{node.name}{tuple(t.shape)}{t.dtype}{t.stride()}".encode())
    lifted = {n for n, _ in lifts}
    dead = _dead_lists(graph, lifted)
    for node in graph.graph.nodes:
        # a list attribute read whole (not lifted): a constant of the package
        if node.op == "get_attr" and node not in lifted and node not in dead:
            obj = _attr(graph, node.target)
            if isinstance(obj, (torch.nn.ParameterList, list, tuple)):
                for t in (t for t in obj if isinstance(t, torch.Tensor)):
                    h.update(f"{node.target}{tuple(t.shape)}{t.dtype}".encode())
                    h.update(tensor_bytes(t))
    h.update(repr((tuple(z0.shape), str(z0.dtype), str(z0.device), dense, float(thr),
                   uturn, K, biased, T, torch.__version__, _machine())).encode())
    for module in (__file__, loop_module.__file__, transition_graph.__file__,
                   ops.__file__):
        h.update(Path(module).read_bytes())
    return h.hexdigest()[:32]


#: the CPU flags that decide which vector instructions a package's C++ uses (Inductor
#: picks AVX-512 or AVX2 from them when it compiles)
_ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512dq", "avx512vl", "avx512bw",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
              "amx_int8", "asimd", "sve")


@functools.lru_cache(maxsize=None)
def _machine() -> str:
    """The processor a package is built for, in its cache key: the architecture and
    which of `_ISA_FLAGS` the CPU has (from ``/proc/cpuinfo``, where there is one).  A
    cache directory shared by machines with different CPUs (a home directory on a
    network disk) then holds one package per kind of CPU, instead of handing one
    machine code built for instructions it lacks (PyTorch's loader only logs the
    difference; the package's first call would then stop the process on an illegal
    instruction)."""
    import platform
    flags = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return f"{platform.machine()}:{','.join(f for f in _ISA_FLAGS if f in flags)}"


def _load_package(path: Path):
    """`aoti_load_package` of a package from the disk cache, without Inductor's probe of
    the CPU's vector instructions: loading only compares them with the package's, for a
    logged warning, and the probe compiles and loads six test libraries in subprocesses
    (1.47 s of eight schools' 3.1 s second run, 4 x (1000 + 1000)).  The package was
    built, probe and all, by a compile on this machine's cache; the probe's answer is
    read from the CPU's flags instead (`cpp.vec_isa_ok`), and forgotten after the load
    (its cache cleared) so that a compile later in this process still probes.  No public
    API loads a package without it; these are Inductor's own config and cache."""
    from torch._inductor import aoti_load_package, config, cpu_vec_isa
    if cpu_vec_isa.valid_vec_isa_list.cache_info().currsize:  # probed already: free
        return aoti_load_package(str(path))
    try:
        with config.patch({"cpp.vec_isa_ok": True}):
            return aoti_load_package(str(path))
    finally:
        cpu_vec_isa.valid_vec_isa_list.cache_clear()


def is_cached(graph, z0: Tensor, dense: bool, thr: float, uturn: str, K: int,
              biased: bool, T: int, directory: Path = None) -> bool:
    """Whether `compile_transition` will find its package on disk."""
    directory = Path(directory) if directory is not None else cache_dir()
    try:
        key = cache_key(graph, z0, dense, thr, uturn, K, biased, T)
    except Exception:
        return False
    return (directory / f"{key}.pt2").is_file()


#: `compile_transition`'s reason when the run was stopped during the build
STOPPED = "the transition's compile was stopped with the run"


def _build_unless_stopped(build: Callable[[], None], should_stop: Callable[[], bool]) -> bool:
    """Run `build()` in a daemon thread; True when it finished (its exception raised
    here), False as soon as `should_stop()` is true (the thread is left to finish)."""
    box = {}

    def run():
        try:
            build()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="qvr-transition-compile", daemon=True)
    worker.start()
    while worker.is_alive():
        if should_stop():
            return False
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return True


def _write_check(path: Path, args: list, want) -> None:
    """Keep a built package's last check (its inputs, the data included, and PyTorch's
    outputs) beside it, written aside and renamed; never raises."""
    data = {"args": list(args), "want": [t.detach().cpu() for t in want]}
    try:
        write_aside(path, lambda tmp: torch.save(data, tmp))
    except Exception:
        pass


def _read_check(path: Path):
    """`(args, want)` kept by `_write_check` (on the device of the args), or None."""
    try:
        data = torch.load(path, weights_only=True)
        return data["args"], [w.to(data["args"][0].device) for w in data["want"]]
    except Exception:
        return None


def _discard(*paths: Path) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


#: the environment variable that bounds the transitions cache, in MiB (`max_bytes`)
MAX_MB_ENV = "QVR_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024


def max_bytes() -> int:
    """The most the transitions directory keeps: ``$QVR_CACHE_MAX_MB`` MiB (a positive
    number), else 1 GiB (a package is 1-2 MiB: hundreds of models, or of edits of one,
    each version of qvr or PyTorch keying its own)."""
    try:
        mb = float(os.environ.get(MAX_MB_ENV, DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int((mb if mb > 0 else DEFAULT_MAX_MB) * 2 ** 20)


def _mark_used(path: Path) -> None:
    """A package's modification time is when it was last used (`prune` keeps the most
    recent); never raises (a read-only cache is still usable)."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune(directory: Path, keep: Path = None, limit: int = None) -> list:
    """Delete the least recently used packages of `directory` (oldest modification time
    first), each with its check file, until the packages and checks left total at most
    `limit` bytes (default `max_bytes()`); never `keep` (the package just written) nor a
    file a live build is writing (``*.tmp.pt2``, locks, jobs).  Returns the packages
    deleted.  A process that was about to load one compiles it again (or, if that
    fails, runs leaf by leaf): only the least recently used go."""
    limit = max_bytes() if limit is None else int(limit)
    entries = []
    for pkg in Path(directory).glob("*.pt2"):
        if pkg.name.endswith(".tmp.pt2"):
            continue
        check = pkg.with_name(f"{pkg.stem}.check.pt")
        try:
            st = pkg.stat()
            size = st.st_size + (check.stat().st_size if check.is_file() else 0)
        except OSError:  # deleted meanwhile by another process
            continue
        entries.append((st.st_mtime, pkg, check, size))
    total = sum(e[3] for e in entries)
    gone = []
    for _, pkg, check, size in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if keep is not None and pkg == Path(keep):
            continue
        _discard(pkg, check)
        total -= size
        gone.append(pkg)
    return gone


class BackgroundCompile:
    """The transition compiled by a worker process while the run goes on leaf by leaf
    (issue 37.4; `compile_worker`): `done()` says whether the worker has ended,
    `result()` loads its package into this process (`compile_transition` finding it on
    disk: a load and a check, well under a second) or says why there is none.

    A process, not a thread: the export and Inductor's code generation are seconds of
    Python, which a thread beside the sampler would share the interpreter lock with (a
    thread took 26 s for a 16 s compile, and slowed the sampler as much).  The worker runs
    at a lower priority with one thread; it writes the package aside and renames it, so
    it may outlive the run: a run that ends first leaves it to finish for the next one.
    A second run of the same model meanwhile waits for that worker's package instead of
    starting another (`KEY.compiling` holds its pid).  With `rows` (`transition_rows.probes`:
    the graphs at other row counts), the worker then starts another that builds the
    package for every row count (`transition_rows.build`), after this one's is ready."""

    def __init__(self, graph, z0: Tensor, dense: bool, thr: float, uturn: str, K: int,
                 biased: bool, T: int, directory: Path = None, rows: tuple = None):
        import subprocess
        import sys
        self.args = (graph, z0, dense, thr, uturn, K, biased, T)
        self.directory = Path(directory) if directory is not None else cache_dir()
        key = cache_key(graph, z0, dense, thr, uturn, K, biased, T)
        self.package = self.directory / f"{key}.pt2"
        self.lock = self.directory / f"{key}.compiling"
        self.out = self.directory / f"{key}.compile-note"
        self.proc = None
        self.directory.mkdir(parents=True, exist_ok=True)
        if _alive(self.lock):
            return  # another run's worker compiles this very package: wait for it
        job = self.directory / f"{key}.job.{os.getpid()}.pt"
        torch.save({"graph": graph, "z0": z0.detach().cpu(), "device": str(z0.device),
                    "settings": (dense, thr, uturn, K, biased, T),
                    "directory": str(self.directory), "rows": rows}, job)
        self.out.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qvr.inference.mcmc.compile_worker", str(job)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)  # Ctrl-C in the terminal stops the run, not this
        self.lock.write_text(str(self.proc.pid))

    def done(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is not None
        return not _alive(self.lock)

    def result(self) -> tuple:
        why = None
        if self.proc is not None:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            self.proc.stderr.close()
            self.lock.unlink(missing_ok=True)
            try:
                why = self.out.read_text().strip() or None
            except OSError:
                lines = [ln for ln in err.strip().splitlines() if ln.strip()]
                why = (f"the transition did not compile: the compile worker exited with "
                       f"status {self.proc.returncode}"
                       + (f": {lines[-1][:200]}" if lines else ""))
        if not self.package.is_file():
            return None, why or "the transition did not compile (its worker left no package)"
        graph, z0, dense, thr, uturn, K, biased, T = self.args
        return compile_transition(graph, z0, dense, thr, uturn, K, biased, T,
                                  directory=self.directory)

    def stop(self) -> None:
        """End the worker now (a test's tidy-up; runs leave it to finish)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.lock.unlink(missing_ok=True)


def _alive(lock: Path) -> bool:
    """Whether the pid in `lock` names a live process (`world.process_alive`)."""
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return False
    return process_alive(pid)


def package(lifted, example: list, consts: list, settings: tuple, path: Path,
            dynamic_shapes=None) -> None:
    """Export `block_function` around the lifted density `lifted(z, *consts)` at the
    inputs `example + consts` (`torch.export`, strict; `dynamic_shapes` per input, None:
    every size fixed) and build it with AOTInductor into the package `path` (written
    aside and renamed: a killed compile leaves no broken package), then `prune` the
    directory.  `settings` is `(dense, thr, uturn, K, biased)`."""
    from torch._inductor import aoti_compile_and_package
    dense, thr, uturn, K, biased = settings
    n_args = len(example)

    class Transition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.density = lifted  # a submodule: export inlines it

        def forward(self, *args):
            data = args[n_args:]
            fn = block_function(lambda z: self.density(z, *data), dense, thr,
                                uturn, K, biased, torch.while_loop)
            return fn(*args[:n_args])

    with torch.no_grad():  # (grad mode is per thread)
        # strict (Dynamo) export: the non-strict one leaves the inner loop of the nested
        # while_loop without the metadata the verifier asks for
        exported = torch.export.export(
            Transition(), tuple(example) + tuple(consts), strict=True,
            dynamic_shapes=None if dynamic_shapes is None else (tuple(dynamic_shapes),))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.pt2")
        aoti_compile_and_package(exported, package_path=str(tmp))
        os.replace(tmp, path)
    try:  # bounded: the least recently used packages beyond max_bytes()
        prune(path.parent, keep=path)
    except OSError:
        pass


def compile_transition(graph, z0: Tensor, dense: bool, thr: float, uturn: str,
                       K: int, biased: bool, T: int, directory: Path = None,
                       should_stop: Callable[[], bool] = None) -> tuple:
    """`(CompiledTransition, note)` or `(None, why not)`.

    The block of `T` transitions (`block_function`) around the density's FX `graph`
    (`ProgramTarget.density_graph`) is exported (`torch.export`) and compiled by
    AOTInductor into a package of C++ (the loop runs in C++), kept in `directory`
    (default `cache_dir()`) under `cache_key`: a later process with the same model loads
    it in milliseconds. A package it builds is checked against the same function run by
    PyTorch (`eager_loop`) on two short blocks, and the last check's inputs and outputs
    are kept beside it (``KEY.check.pt``); one loaded from the cache is run on those
    inputs and must give those outputs (without them: checked against PyTorch on one
    transition). Any disagreement beyond float rounding rejects it (and a cached package
    that disagrees or fails to load is deleted, with its check).

    With `should_stop`, a build runs in a thread of its own, and the call returns
    `(None, STOPPED)` within a tenth of a second of `should_stop()` turning true (a
    cancelled run does not wait tens of seconds for a C++ compile it will not use; the
    abandoned build finishes or dies with the process, its package written aside, never
    half)."""
    directory = Path(directory) if directory is not None else cache_dir()
    reference = block_function(graph, dense, thr, uturn, K, biased)
    t0 = time.perf_counter()
    state = torch.get_rng_state()
    path = None
    try:
        key = cache_key(graph, z0, dense, thr, uturn, K, biased, T)
        path = directory / f"{key}.pt2"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            from torch._inductor import aoti_load_package
            cached = path.is_file()
            built = without_error_checks(graph)
            lifted, consts = lift_constants(built)
            if not cached:
                example = example_inputs(built, torch.full_like(z0, 0.1), dense, K, T)

                def build():
                    package(lifted, example, consts, (dense, thr, uturn, K, biased), path)

                if should_stop is None:
                    build()
                elif not _build_unless_stopped(build, should_stop):
                    return None, STOPPED
            runner = _load_package(path) if cached else aoti_load_package(str(path))
            if cached:
                _mark_used(path)
            seconds = time.perf_counter() - t0
            # a few transitions: over many, float rounding (an ulp of a step size from dual
            # averaging) grows into different trajectories, as any two builds' would.  A
            # package from the cache passed both checks when it was built: one transition
            # at the run's start checks that it loaded right (the PyTorch side runs
            # eagerly: eight schools, 0.27 s for both checks, a third of a short run).
            # Cheaper still, the package is run on the inputs of its last check when it
            # was built and must give the outputs PyTorch gave then (`KEY.check.pt`)
            checks = [(6, z0, 1)] if cached else [(5, torch.full_like(z0, 0.1), min(T, 3)),
                                                  (6, z0, min(T, 2))]
            kept = directory / f"{key}.check.pt"
            if cached:
                stored = _read_check(kept)
                if stored is not None:
                    args, want = stored  # with the data it was built with
                    if not blocks_agree(BlockOut(*want), BlockOut(*runner(*args))):
                        _discard(path, kept)
                        return None, ("the compiled transition disagrees with what it gave "
                                      "when it was built")
                    checks = []
            for seed, at, limit in checks:
                args = example_inputs(graph, at, dense, K, T, seed=seed, limit=limit)
                want = reference(*args)
                args = args + consts
                got = runner(*args)
                if not blocks_agree(BlockOut(*want), BlockOut(*got)):
                    _discard(path, kept)
                    return None, "the compiled transition disagrees with PyTorch on test inputs"
            if not cached:
                _write_check(kept, args, want)
    except Exception as exc:  # no C++ compiler, an unsupported operation, ...
        if path is not None and path.is_file() and "cached" in locals() and cached:
            _discard(path, path.with_name(f"{path.stem}.check.pt"))
        first = (str(exc).strip().splitlines() or [""])[0]  # InductorError: many lines
        return None, f"the transition did not compile: {type(exc).__name__}: {first[:200]}"
    finally:
        torch.set_rng_state(state)
    how = "loaded from the disk cache" if cached else "compiled by AOTInductor"
    return (CompiledTransition(runner, K, T, z0.device, seconds, cached, consts),
            f"the whole NUTS transition {how} (a C++ loop of up to {T} transitions "
            f"a call; {seconds:.1f} s)")
