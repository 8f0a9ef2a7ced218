"""The MCMC target: `log p~(z)` and its gradient for a batch of chains (runtime spec 6.6.1).

For a program, the flat unconstrained vector `z` (layout: `sites.Registry`) maps to
constrained site values `T(z)` and

    log p~(z) = model.log_joint(x, {T(z), observations}).sum() + sum_sites log|det J_T(z)|

with the gradient by autograd.  A `Target` evaluates it for `C` chains at once,
`log_density_and_grad(z (C, D)) -> ((C,), (C, D))`:

* `ProgramTarget` maps the one-point function over the chain axis with
  `torch.func.vmap(grad_and_value(...))` — one pass of the program for all chains — and,
  by default, *compiles* that batched value-and-gradient function once per chain count:
  `make_fx` records the aten operations of one call (the program interpreter, vmap and
  autograd all run at trace time only) and `torch.jit.trace` turns the graph into a
  TorchScript function, so a gradient evaluation costs a few microseconds per operation
  with no Python in between.  The compiled function is used only if it reproduces the
  eager values and gradients at two points, and never for a program whose density draws
  random numbers (Monte-Carlo composites): those, and anything that fails to trace, run
  eagerly, as do a slow density of many operations (`compile_below_s`, `compile_max_ops`)
  and a run too short for tracing to pay (`expected_evaluations`).  A call that vmap
  cannot run falls back to a per-chain autograd loop (for good, if the loop works where
  vmap failed);
* `FunctionTarget` wraps a plain log-density of `z`, already batched or not.

Failures follow the spec: an evaluation that raises `ValueError`/`RuntimeError`, or a
non-finite value, gives `-inf` and a zero gradient; non-finite gradient entries become 0.
Finite latent sites are not coordinates of `z`: they are summed out of `log_joint` exactly
(`qvr.inference.enumeration.enumerate`, built when the target is).  This module holds no sampler logic.
"""
from __future__ import annotations

import time
import warnings
from typing import Callable, NamedTuple, Optional

import torch

from qvr.inference.mcmc import graph_cache
from qvr.inference.programs.sites import Registry, build_registry
from qvr.runtime.ode_op import contains_ode

_EVAL_ERRORS = (ValueError, RuntimeError)


def _clean(logp: torch.Tensor, grad: torch.Tensor) -> tuple:
    finite = torch.isfinite(logp)
    logp = torch.where(finite, logp, torch.full_like(logp, -float("inf")))
    grad = torch.where(torch.isfinite(grad) & finite.unsqueeze(-1), grad,
                       torch.zeros_like(grad))
    return logp.detach(), grad.detach()


class Target:
    """Base: `dim`, `log_density_and_grad`, `log_density`, `constrain`."""

    dim: int
    registry: Optional[Registry] = None
    #: number of gradient evaluations so far (per chain batch)
    num_evals: int = 0
    #: called before each batched evaluation, `num_evals` still counting those before it
    #: (the MCMC driver's progress heartbeat)
    on_evaluation: Optional[Callable[[], None]] = None

    def _count(self) -> None:
        if self.on_evaluation is not None:
            self.on_evaluation()
        self.num_evals += 1

    def log_density_and_grad(self, z: torch.Tensor) -> tuple:  # pragma: no cover
        raise NotImplementedError

    def log_density(self, z: torch.Tensor) -> torch.Tensor:
        return self.log_density_and_grad(z)[0]

    def constrain(self, z: torch.Tensor) -> dict:
        """`(..., D)` -> `{site: (..., *shape)}`; the identity `{"z": z}` without sites."""
        if self.registry is None:
            return {"z": z}
        return self.registry.constrain(z)


class FunctionTarget(Target):
    """A log-density `fn(z)` of unconstrained vectors.

    With `batched=True`, `fn` maps `(C, D)` to `(C,)`; otherwise `(D,)` to a scalar and it
    is called once per chain.
    """

    def __init__(self, fn: Callable, dim: int, batched: bool = True):
        self.fn = fn
        self.dim = int(dim)
        self.batched = batched

    def log_density_and_grad(self, z: torch.Tensor) -> tuple:
        self._count()
        if self.batched:
            try:
                with torch.enable_grad():
                    zz = z.detach().requires_grad_(True)
                    lp = self.fn(zz)
                    grad, = torch.autograd.grad(lp.sum(), zz, allow_unused=True)
                if grad is None:
                    grad = torch.zeros_like(z)
                return _clean(lp.detach(), grad)
            except _EVAL_ERRORS:
                pass  # find the failing chains one by one
        return _per_chain(self.fn_single, z)

    def fn_single(self, z1: torch.Tensor) -> torch.Tensor:
        if self.batched:
            return self.fn(z1.unsqueeze(0)).squeeze(0)
        return self.fn(z1)


def _per_chain(fn: Callable, z: torch.Tensor) -> tuple:
    lps, grads = [], []
    for c in range(z.shape[0]):
        try:
            with torch.enable_grad():
                zz = z[c].detach().requires_grad_(True)
                lp = fn(zz)
                grad, = torch.autograd.grad(lp, zz, allow_unused=True)
            if grad is None:
                grad = torch.zeros_like(zz)
            lps.append(lp.detach().reshape(()))
            grads.append(grad)
        except _EVAL_ERRORS:
            lps.append(torch.tensor(-float("inf"), dtype=z.dtype, device=z.device))
            grads.append(torch.zeros_like(z[c]))
    return _clean(torch.stack(lps), torch.stack(grads))


def _total(model, x, values) -> torch.Tensor:
    """`log_joint(x, values).sum()`, without row attribution when the program offers it;
    finite latents absent from `values` summed out (`qvr.inference.enumeration.enumerate`)."""
    if getattr(model, "_qvr_enum_cache", None):
        from qvr.inference.enumeration.enumerate import enumerated_total
        return enumerated_total(model, x, values)
    total = getattr(model, "log_joint_total", None)
    if total is not None:
        return total(x, values)
    return model.log_joint(x, values).sum()


class ProgramTarget(Target):
    """The posterior of a program's latent sites given `observations` (spec 6.6.1).

    Args:
      model: the program (`log_joint(x, values)`).
      x: its input.
      observations: observed site values and host data (every other site is latent).
      vectorize: evaluate all chains in one vmapped pass when possible (default True).
    """

    def __init__(self, model, x, observations: Optional[dict] = None, vectorize: bool = True,
                 compile: bool = True):
        self.model = model
        self.x = x
        self.observations = dict(observations or {})
        self.registry = build_registry(model, x, self.observations)
        from qvr.inference.enumeration.enumerate import prepare
        # finite latents are summed out of the density; their structure is built here,
        # outside vmap, so that an impossible enumeration raises now (not -inf later)
        self.enumeration = prepare(model, x, self.observations)
        if self.enumeration is not None:
            # an enumerated density is many small operations (a table cell per pass and
            # factor, an elimination step per site): interpreter-bound whatever its eager
            # time (an HMM with T = 100, K = 4: 0.3 s eager, 15 ms compiled, 4 chains)
            self.compile_below_s = self.compile_enumerated_below_s
        self.dim = self.registry.dim
        self.vectorize = vectorize
        self.compile = compile
        self._batched = None  # built lazily
        self._compiled = {}  # chain count -> compiled function, or None if not compilable
        self._graphs = {}  # chain count -> the FX graph the compiled function was traced from
        self.compile_notes = {}  # chain count -> why it was not compiled
        self.graph_cache_notes = {}  # chain count -> whether the graph came from disk
        self._short_runs = {}  # chain count -> the run length it was left eager for
        self.vmap_failed = False
        self.notes = []  # what was said about how the density runs (`_say`)

    def single(self, z: torch.Tensor) -> torch.Tensor:
        """`log p~` at one point `(D,)` (a scalar)."""
        values, logdet = self.registry.unpack(z)
        lj = _total(self.model, self.x, {**values, **self.observations})
        return lj + logdet

    def log_density_and_grad(self, z: torch.Tensor) -> tuple:
        self._count()
        if self.compile and not self.vmap_failed and self.dim > 0:
            fn = self._compiled_for(z)
            if fn is not None:
                try:
                    grad, lp = fn(z.detach())
                    return _clean(lp, grad)
                except Exception:  # never worse than eager: drop the compiled function
                    self._compiled[z.shape[0]] = None
        if self.vectorize and not self.vmap_failed and z.shape[0] > 1:
            try:
                return self._vmapped(z)
            except Exception as exc:  # vmap limitation or a model error: find out below
                out = _per_chain(self.single, z)
                if bool(torch.isfinite(out[0]).all()):
                    # the loop works where vmap did not: vmap cannot run this model
                    self.vmap_failed = True
                    self._say(vmap_note(exc))
                return out
        return _per_chain(self.single, z)

    #: where a note about how the density runs goes (the MCMC driver: a `FitNote`);
    #: without one, a `RuntimeWarning` of one line
    report_note: Optional[Callable[[str], None]] = None

    def _say(self, message: str) -> None:
        self.notes.append(message)
        if self.report_note is not None:
            self.report_note(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _vmapped(self, z: torch.Tensor) -> tuple:
        if self._batched is None:
            from torch.func import grad_and_value, vmap
            self._batched = vmap(grad_and_value(self.single), randomness="same")
        with torch.enable_grad():
            grad, lp = self._batched(z.detach())
        return _clean(lp, grad)


    #: compile densities cheaper than this (seconds of CPU per eager evaluation) ...
    compile_below_s = 0.05
    #: ... and slower ones of at most this many operations per evaluation: a slow
    #: evaluation of few operations (a recurrence unrolled over 200 steps: ~1,700-4,500
    #: operations, 0.1-0.3 s eager) is the interpreter's overhead, which compiling
    #: removes in seconds of tracing; a graph of ~12,700 (the topic model) took 70 s to
    #: trace and compile, more than a short run saves
    compile_max_ops = 6000
    #: the same for a density with finite latents summed out (`qvr.inference.enumeration.enumerate`)
    compile_enumerated_below_s = 5.0
    #: keep compiled graphs on disk (`graph_cache`): a second run of the same model at the
    #: same chain count skips tracing (eight schools 0.3 s, a 200-step GARCH 9 s)
    cache_graphs = True
    #: about how many times the run will evaluate the density (`MCMC.run` sets it from
    #: its iterations and the kernel's `expected_evaluations`; None: not known).  A run
    #: whose eager evaluations cost less than tracing them would (`trace_s_per_op` per
    #: operation) is not traced: the seed transformer's HMC snippet (3 + 3 iterations of
    #: one leapfrog) spent 9.6 s tracing ~3,000 operations for 6 evaluations of a few
    #: tens of milliseconds each.  A graph on disk is used whatever the run's length.
    expected_evaluations: Optional[int] = None
    #: tracing's CPU cost per operation: about a millisecond (eight schools' ~300 in
    #: 0.3 s; 3 ms for the seed transformer's, whose operations are larger)
    trace_s_per_op = 1e-3

    def compiled_for(self, z: torch.Tensor):
        """The compiled `z -> (grad, log_density)` for `z`'s chain count, or None (the
        density is then evaluated eagerly).  Raw outputs: non-finite values not mapped."""
        if not self.compile or self.vmap_failed or self.dim == 0:
            return None
        return self._compiled_for(z)

    def density_graph(self, z: torch.Tensor):
        """The FX graph (`z -> (grad, log_density)`, raw) that `compiled_for(z)` was
        traced from, or None: what a whole-transition compile (`mcmc/transition.py`)
        traces through, since `torch.export` cannot trace into TorchScript."""
        if self.compiled_for(z) is None:
            return None
        C = z.shape[0]
        if self.not_exportable(z) is not None:
            return None
        graph = self._graphs.get(C)
        if isinstance(graph, _Stored):  # loaded with its function from the disk cache
            graph = graph_cache.load_graph(graph.key)
            if graph is None:  # gone since: trace it again
                try:
                    self._compiled[C], graph = _compile(self._vmapped_fn(), z)
                except Exception:
                    graph = None
            self._graphs[C] = graph
        return graph

    def not_exportable(self, z: torch.Tensor) -> Optional[str]:
        """Why the compiled density at `z`'s chain count cannot be traced further (into a
        whole-transition package, an Inductor tick), or None: an `ode` solve is one
        Python operation of this process in it (`qvr.runtime.ode_op`)."""
        graph = self._graphs.get(z.shape[0])
        if graph is not None and not isinstance(graph, _Stored) and contains_ode(graph):
            return "an `ode` solve is one Python operation in the compiled density"
        return None

    def _compiled_for(self, z: torch.Tensor):
        C = z.shape[0]
        short = self._short_runs.get(C)
        if short is not None and (self.expected_evaluations is None
                                  or self.expected_evaluations > short):
            # left eager for a short run; a longer one (or one of unknown length) decides
            # again
            del self._short_runs[C], self._compiled[C]
            self.compile_notes.pop(C, None)
        if C not in self._compiled:
            key = None
            try:
                with torch.enable_grad():  # the first call also digests the function
                    if self.cache_graphs:
                        first, key = graph_cache.fingerprint(self._vmapped_fn(), z)
                    else:
                        self._vmapped_fn()(z.detach())
                # a function on disk is used whatever one evaluation costs: the eager
                # path is kept only to spare slow densities the tracing, paid already
                if key is not None and self._load_cached(C, key, z, first):
                    return self._compiled[C]
                t0 = time.process_time()  # CPU time: not fooled by a busy machine
                with torch.enable_grad():  # the second call is free of first-call costs
                    self._vmapped_fn()(z.detach())
            except Exception as exc:
                self._compiled[C] = None
                self.compile_notes[C] = f"eager evaluation failed: {type(exc).__name__}"
                return None
            eager_s = time.process_time() - t0
            ops = None
            if eager_s > self.compile_below_s:
                ops = _operations(self._vmapped_fn(), z)
                if ops > self.compile_max_ops:
                    self._compiled[C] = None
                    self.compile_notes[C] = "evaluated eagerly: one evaluation is slow " \
                        "enough that the interpreter's overhead does not matter"
                    return None
            n = self.expected_evaluations
            if n is not None and self.trace_s_per_op > 0 and n * eager_s < \
                    self.trace_s_per_op * (ops if ops is not None
                                           else _operations(self._vmapped_fn(), z)):
                self._compiled[C] = None
                self._short_runs[C] = n
                self.compile_notes[C] = (
                    f"evaluated eagerly: a short run (about {n} evaluations of "
                    f"{1000 * eager_s:.1f} ms) costs less than tracing the density")
                return None
            try:
                self._compiled[C], self._graphs[C] = _compile(self._vmapped_fn(), z)
                if key is not None and not contains_ode(self._graphs[C]) and \
                        graph_cache.store(key, self._graphs[C], self._compiled[C]):
                    # the graph as a later run will read it (reading re-traces its code):
                    # the same code, so the whole-transition package it keys is found
                    self._graphs[C] = _Stored(key)
                    self.graph_cache_notes[C] = "traced and stored in the disk cache"
            except _NotCompilable as exc:
                self._compiled[C] = None
                self.compile_notes[C] = str(exc)
            except Exception as exc:
                self._compiled[C] = None
                self.compile_notes[C] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return self._compiled[C]

    def _load_cached(self, C: int, key: str, z: torch.Tensor, at_z: tuple) -> bool:
        """Use the function stored under `key` (`graph_cache`) if it gives `at_z` (the
        program's `(grad, value)` at `z`); its FX graph is read only when
        `density_graph` asks for it."""
        fn = graph_cache.load_function(key)
        graph = None
        if fn is None:  # stored as an FX graph only (TorchScript could not trace it)
            graph = graph_cache.load_graph(key)
            if graph is None:
                return False
            fn = graph
        try:  # it passed both points when it was stored: one checks that it loaded right
            _check(self._vmapped_fn(), z, fn, at_z=at_z)
        except Exception:  # a stale file (or one that fails to run): traced afresh
            return False
        self._compiled[C] = fn
        self._graphs[C] = graph if graph is not None else _Stored(key)
        self.graph_cache_notes[C] = "loaded from the disk cache"
        return True

    #: the same program on its data with `drop` rows fewer, `resized(drop) -> (rows,
    #: ProgramTarget)` or None (set by the fit for a program whose sizes are read from
    #: the data): the probes of `transition_rows`, which compiles one transition for
    #: every row count
    resized: Optional[Callable] = None

    def operation_count(self, z: torch.Tensor) -> int:
        """The operations one batched evaluation at `z` dispatches (an eager evaluation)."""
        return _operations(self._vmapped_fn(), z)

    def _vmapped_fn(self):
        if self._batched is None:
            from torch.func import grad_and_value, vmap
            self._batched = vmap(grad_and_value(self.single), randomness="same")
        return self._batched


def vmap_note(exc: BaseException) -> str:
    """One line saying that the chains are evaluated one at a time, and why: the first
    sentence of the error vmap raised (whole, never cut mid-sentence)."""
    return (f"the chains' densities are evaluated one chain at a time (slower): "
            f"torch.func.vmap cannot run this model ({type(exc).__name__}: "
            f"{first_sentence(str(exc))})")


def first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence of `text` on one line; past `limit` characters, its words up
    to the limit and an ellipsis."""
    line = " ".join(text.split())
    for end in (". ", "! ", "? "):
        at = line.find(end)
        if 0 < at < limit:
            return line[:at + 1]
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."


def _operations(fn, z: torch.Tensor) -> int:
    """The operations PyTorch dispatches in one evaluation of `fn(z)` (one more eager
    evaluation, counted by a dispatch mode), an `ode` solve's own left out; a large
    number when they cannot be counted."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover - a PyTorch without dispatch modes
        return 1 << 62

    from qvr.runtime.ode_batch import solving

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # an `ode` solve's operations are not the trace's: it traces as one
            # operation (`qvr.runtime.ode_op`)
            if not solving():
                Count.n += 1
            return func(*args, **(kwargs or {}))

    try:
        with Count(), torch.enable_grad():
            fn(z.detach())
    except Exception:
        return 1 << 62
    return Count.n


class _NotCompilable(Exception):
    pass


def _compile(batched, z: torch.Tensor):
    """Trace `batched` (z -> (grad, value)) at `z` into a TorchScript (or FX) function:
    `(function, FX graph it came from)`."""
    import warnings as _w
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize
    from qvr.inference.mcmc.graph_opt import draws_random_numbers, simplify
    z = z.detach()
    validate = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)  # no .item() checks
    try:
        with torch.no_grad():
            try:  # a functional graph (no in-place operations) can be simplified
                gm = make_fx(functionalize(lambda zz: batched(zz)))(z)
            except Exception:
                gm = make_fx(lambda zz: batched(zz))(z)
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)
    if draws_random_numbers(gm):
        raise _NotCompilable("the density draws random numbers (a Monte-Carlo composite); "
                             "evaluated eagerly")
    gm.graph.eliminate_dead_code()
    gm.recompile()
    try:
        simplify(gm)
    except Exception:  # the simplifier is an optimisation: never fail the compile for it
        gm.graph.eliminate_dead_code()
        gm.recompile()
    candidates = []
    try:  # precompute everything that depends on the data only
        from torch.fx.experimental import const_fold
        with _w.catch_warnings():
            _w.simplefilter("ignore")
            folded = const_fold.split_const_subgraphs(gm)
            folded.run_folding()
        candidates.append(folded)
    except Exception:
        pass
    candidates.append(gm)
    return _finish(batched, z, candidates)


def _finish(batched, z: torch.Tensor, candidates: list):
    """The first of the `candidates` (FX graphs of `batched`) that TorchScript traces, as
    `(function, graph)`, checked against `batched` at `z` and at a perturbed point."""
    import warnings as _w
    z = z.detach()
    fn = None
    for graph in candidates:  # TorchScript runs the graph without Python per operation
        try:
            with _w.catch_warnings():
                _w.simplefilter("ignore")
                fn = torch.jit.trace(graph, (z,), check_trace=False)
            break
        except Exception:
            continue
    if fn is None:
        fn = graph = candidates[0]  # the FX graph still skips the interpreter
    _check(batched, z, fn)
    return fn, graph


class _Stored(NamedTuple):
    """A density graph left on disk (`graph_cache`) until it is asked for."""

    key: str


def _check(batched, z: torch.Tensor, fn, at_z: tuple = None) -> None:
    """Raise `_NotCompilable` unless `fn` gives `batched`'s values and gradients at `z`
    and at a perturbed point; given `at_z` (`batched(z)`, already evaluated), at `z`
    only (a stored function, which passed both when it was traced)."""
    z = z.detach()
    if at_z is not None:
        points = [(z, at_z)]
    else:
        gen = torch.Generator(device=z.device).manual_seed(12345)
        points = [(z, None), (z + 0.5 * torch.randn(z.shape, generator=gen, dtype=z.dtype,
                                                     device=z.device), None)]
    for point, ref in points:
        if ref is None:
            with torch.enable_grad():
                ref = batched(point)
        g_ref, v_ref = ref
        g, v = fn(point)
        if not (_close(v, v_ref) and _close(g, g_ref)):
            raise _NotCompilable("the compiled density differs from the program's "
                                 "(value-dependent control flow); evaluated eagerly")


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach(), b.detach()
    if a.shape != b.shape:
        return False
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not bool((fa == fb).all()):
        return False
    return bool(torch.allclose(a[fa], b[fb], rtol=1e-4, atol=1e-5))


def make_target(model, x=None, observations=None, *, vectorize: bool = True) -> Target:
    """A `Target` for a program (or a `Program` whose first export is one)."""
    if isinstance(model, Target):
        return model
    inner = model if hasattr(model, "log_joint") and hasattr(model, "execute") else \
        getattr(model, "morphism", None)
    if inner is None or not hasattr(inner, "execute"):
        raise TypeError(f"MCMC needs a program (MonadicProgram); got {type(model).__name__}")
    if x is None:
        x = torch.zeros(1, 1)
    return ProgramTarget(inner, x, observations, vectorize=vectorize)
