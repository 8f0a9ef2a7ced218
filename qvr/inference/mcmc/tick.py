"""One NUTS *tick*: a leapfrog step, its leaf bookkeeping and its U-turn checks, as one call.

The iterative NUTS loop (`nuts.py`) advances every chain by one leaf per tick.  A tick is
a fixed sequence of small tensor operations — kick and drift, the log-density and its
gradient, the closing kick, the leaf's weight and acceptance statistic, the progressive
proposal (the *leaf*, `leaf_function`), then the checkpoint store and the U-turn tests of
the sub-subtrees that end at this leaf.  Every tick object is called alike:

    tick(s: TickState, u, n) -> TickState

`TickState` is one named record of everything a tick reads and writes (positions,
momenta, the subtree's proposal and weight, the checkpoints, the running mask, ...);
`u` is the leaf's uniform draw `(C,)` (drawn by the caller, so every way of running a
tick consumes the random stream identically) and `n` the leaf's index in its subtree.
The checkpoints `ck_a` / `ck_v` / `ck_x` (what each holds depends on the U-turn
criterion: `ops.uturn_update`) live in the tick's own container
(`tick.checkpoints(K, z0)`).  The record is flattened to positional tensors in one place
only, where TorchScript and Inductor need it (*the positional boundary* below:
`CompiledLeaf`, `positional_tick`, `InductorTick`).

Three ways of running it, chosen per target and settings (`TickCache`):

* **eager** (`LeafTick`) — the model's density is not compiled: TorchScript pieces
  (`ops.fused`) around the target's own `log_density_and_grad`, checks in Python;
* **TorchScript** (`LeafTick`) — the density is compiled (`potential`): the leaf is one
  traced TorchScript graph; the checks run in Python on lists of checkpoints, testing
  only the `checkpoint_range(n)` slots;
* **Inductor** (`InductorTick`) — leaf *and* checks (`folded_function`: every slot of
  `(K, C, D)` checkpoint stacks, under the masks of `checkpoint_masks(n)`) compiled by
  PyTorch Inductor into one C++ kernel.  TorchScript costs a few microseconds per
  operation (a funnel leaf is about 85: ~0.25 ms, plus ~0.1 ms of Python checks); the
  C++ kernel does a small model's arithmetic in a few microseconds and the call costs
  about 40.  Compiling costs seconds (a C++ compiler runs; Inductor caches the result on
  disk), so ``compiler="auto"`` switches only when the rest of the run is long enough to
  win (`worth_compiling`), at fixed iterations (`is_probe`) from the run's own tick
  counts — never from a clock — so a seeded run is reproducible.  If Inductor or a C++
  compiler is missing, or the kernel disagrees with PyTorch on test inputs, the
  TorchScript leaf is kept (`TickCache.notes` says why).  An Inductor kernel that raises
  when called (at its first call or later) is dropped for the TorchScript leaf on the
  spot — the failing leaf is recomputed, so the fit goes on — and the reason is noted.

Compiled ticks (TorchScript and Inductor) run with autograd off (`NUTSKernel` builds the
tree under `torch.no_grad()`): they compute the gradient themselves, and a model with
trainable parameters would otherwise record an autograd graph through every leaf (and
Inductor's `out=` kernels refuse to run under autograd).

The eager and TorchScript ticks give the same draws (the arithmetic of `ops`).  The
Inductor kernel evaluates the same formulas but may round differently (vectorised
transcendental functions, fused arithmetic), so a run that switched gives draws that
differ in the last bits from one that did not — the same law, a different stream.
"""
from __future__ import annotations

import math
import operator
import os
import warnings
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from qvr.inference.mcmc import ops

#: `compiler` settings of `NUTSKernel`
COMPILERS = ("auto", "torchscript", "inductor", "transition")
#: environment override of the ``"auto"`` setting (e.g. ``QVR_MCMC_COMPILER=torchscript``
#: keeps test suites free of C++ compilations)
ENV_VAR = "QVR_MCMC_COMPILER"

#: TorchScript's cost per graph operation, the U-turn checks' cost per tick in Python
#: and an Inductor tick's (seconds), measured on a 2-vCPU x86 VM (a funnel leaf of 85
#: operations: 0.21-0.33 ms; eight schools' 107: ~0.4 ms)
TS_COST_PER_OP_S = 3.3e-6
PY_CHECKS_S = 30e-6
INDUCTOR_TICK_S = 45e-6
#: what compiling a tick costs in a fresh process: ~4 s of Inductor imports and CPU
#: probing plus 6-8 s of code generation and C++ compiling.  A constant on purpose: the
#: real cost depends on caches (1 s when Inductor has compiled this model before, 25 s
#: on a machine where it never ran), and a decision that depended on them would make a
#: seeded run's draws depend on what ran before it.
COMPILE_COST_S = 11.0
#: ... plus this per operation of the leaf: Inductor's code generation and the C++
#: compile grow with the graph.  Measured cold (fresh caches, 2-vCPU VM, one thread;
#: ``QVR_MCMC_COMPILER=inductor`` against ``torchscript``, time to the first draw):
#: eight schools 107 operations 13 s, kid_scores 104: 13 s, garch 2,937: 40 s,
#: hmm_forward 1,488: 50 s.  With the base alone ``auto`` compiled garch's leaf at
#: iteration 50 of a 2 x (150 + 150) run and took 59 s where TorchScript took 27 s.
COMPILE_COST_PER_OP_S = 0.025
#: compile only when the estimated saving exceeds the cost by this factor
MARGIN = 1.2
#: the first probe iteration
PROBE_START = 50


def checkpoint_range(n: int) -> tuple[int, int]:
    """`(idx_min, idx_max)` of the checkpoints whose sub-subtrees end at leaf `n`.

    A checkpoint is stored at every even leaf in slot `idx_max`; at an odd leaf the
    subtrees of sizes 2, 4, ... that end there start at the checkpoints
    `idx_min..idx_max` (an empty range when `idx_min > idx_max`).

      >>> checkpoint_range(3)
      (0, 1)
    """
    idx_max = bin(n >> 1).count("1")
    num_subtrees = bin((~n & (n + 1)) - 1).count("1")
    return idx_max - num_subtrees + 1, idx_max


def checkpoint_masks(n: int, K: int, device=None) -> tuple:
    """`(store, check)`: boolean masks of shapes `(K, 1, 1)` and `(K, 1)` (ready to
    broadcast against `(K, C, D)` and `(K, C)`) for leaf `n` of a subtree: the slot this
    leaf is stored in (none at odd leaves) and the slots whose sub-subtrees end here."""
    lo, hi = checkpoint_range(n)
    store = torch.zeros(K, 1, 1, dtype=torch.bool, device=device)
    if n % 2 == 0:
        store[hi] = True
    check = torch.zeros(K, 1, dtype=torch.bool, device=device)
    if lo <= hi:
        check[lo:hi + 1] = True
    return store, check


class TickState(NamedTuple):
    """Everything a tick reads and writes, for `C` chains, as one named record.

    The first `NUM_CARRIED` fields change at every tick; the last four are fixed through a
    subtree.  `ck_a` / `ck_v` / `ck_x` are in the tick's container (`tick.checkpoints`: a
    list of `K` (`3K` for `ck_x`) tensors `(C, D)` for `LeafTick`, `(K, C, D)` (`(3K, C,
    D)`) stacks for `InductorTick`; `ck_x` as `ops.uturn_update` says).
    """

    z: Tensor  # (C, D) position of the last leaf
    p: Tensor  # (C, D) its momentum
    lp: Tensor  # (C,) its log density (an output: not read by the leaf)
    g: Tensor  # (C, D) its gradient
    sum_acc: Tensor  # (C,) acceptance statistics summed over the leaves built
    n_leaves: Tensor  # (C,) long: leaves built
    diverged: Tensor  # (C,) bool: a leaf of this iteration diverged
    sub_w: Tensor  # (C,) log weight of the subtree (relative to H0)
    sz: Tensor  # (C, D) the subtree's proposal: position,
    sg: Tensor  # (C, D) gradient,
    slp: Tensor  # (C,) log density
    sh: Tensor  # (C,) and energy
    psum: Tensor  # (C, D) momenta summed over the subtree's leaves
    ck_a: object  # checkpoints: positions (or momentum sums) ...
    ck_v: object  # ... and momenta (or velocities)
    ck_x: object  # rows about the checkpoints' last checked leaves (`ops.uturn_update`)
    running: Tensor  # (C,) bool: the chain's subtree is still being built
    eps: Tensor  # (C, 1) signed step size of the subtree
    inv: Tensor  # (C, D) or (C, D, D) inverse mass matrix
    h0: Tensor  # (C,) energy at the start of the iteration
    direction: Tensor  # (C, 1) +1 forward, -1 backward


#: the fields every tick updates (the first ones of `TickState`)
NUM_CARRIED = 17
#: the fields a leaf writes: the first ones of `TickState`
_NUM_LEAF_WRITES = 12


def leaf_function(density: Callable, raw: bool, dense: bool, thr: float) -> Callable:
    """A leaf as a function of the record around `density`: kick and drift, the
    density, the closing kick and the leaf's bookkeeping (`ops.nuts_leaf`):

        leaf(s: TickState, u) -> (s', v, div)

    where `s'` has the fields `z` ... `sh` updated, `v` is the new velocity `M^-1 p` and
    `div` the chains whose leaf diverged.  `density(z)` returns `(grad, log_density)` with
    non-finite values as they come when `raw` (a compiled density: mapped here) or
    `(log_density, grad)` already cleaned (`Target.log_density_and_grad`) otherwise.  With
    `raw` the arithmetic is `ops`'s Python functions (for tracing); otherwise the
    TorchScript-compiled `ops.fused`.
    """
    f = ops if raw else ops.fused

    def leaf(s: TickState, u):
        z, p_half = f.kick_drift(s.z, s.p, s.g, s.eps, s.inv, dense)
        if raw:
            g, lp = density(z)
            # a non-finite log-density -> -inf (the leaf diverges and is never used, so
            # its gradient needs no masking); non-finite gradient entries -> 0
            lp = torch.nan_to_num(lp, nan=-math.inf, posinf=-math.inf)
            g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
        else:
            lp, g = density(z)
        log_u = torch.log(u)
        (p, v, sum_acc, n_leaves, diverged, div, sub_w, sz, sg, slp,
         sh) = f.nuts_leaf(z, p_half, lp, g, s.eps, s.inv, dense, s.h0, thr, s.running,
                           s.sum_acc, s.n_leaves, s.diverged, s.sub_w, s.sz, s.sg, s.slp,
                           s.sh, log_u)
        return s._replace(z=z, p=p, lp=lp, g=g, sum_acc=sum_acc, n_leaves=n_leaves,
                          diverged=diverged, sub_w=sub_w, sz=sz, sg=sg, slp=slp,
                          sh=sh), v, div

    return leaf


def folded_function(leaf: Callable, uturn: str) -> Callable:
    """The whole tick as one function of the record, the checks done on checkpoint
    stacks under masks: `tick(s, u, store, check) -> s'` (`leaf`, then
    `ops.uturn_update`; `store`, `check` from `checkpoint_masks`)."""

    def tick(s: TickState, u, store, check) -> TickState:
        s, v, div = leaf(s, u)
        psum, ck_a, ck_v, ck_x, running = ops.uturn_update(
            s.z, s.p, v, div, s.running, s.psum, s.ck_a, s.ck_v, s.ck_x, store, check,
            s.direction, uturn)
        return s._replace(psum=psum, ck_a=ck_a, ck_v=ck_v, ck_x=ck_x, running=running)

    return tick


# ---------------------------------------------------------------- the positional boundary
# TorchScript and Inductor compile functions of tensors, so the record is flattened here
# and nowhere else: a traced leaf takes the fields it reads (`_LEAF_READS`) and `u` and
# returns the fields it writes, `v` and `div`; the Inductor tick takes every field of the
# record, `u`, `store` and `check` and returns the `NUM_CARRIED` fields it updates.

_LEAF_READS = ("z", "p", "g", "eps", "inv", "h0", "running", "sum_acc", "n_leaves",
               "diverged", "sub_w", "sz", "sg", "slp", "sh")
_leaf_reads = operator.attrgetter(*_LEAF_READS)


def positional_leaf(leaf: Callable) -> Callable:
    """`leaf` (`leaf_function`) as `flat(*reads, u) -> (*writes, v, div)`, for tracing."""

    def flat(*args):
        s = TickState(**{**dict.fromkeys(TickState._fields), **dict(zip(_LEAF_READS, args))})
        s, v, div = leaf(s, args[-1])
        return (*s[:_NUM_LEAF_WRITES], v, div)

    return flat


class CompiledLeaf:
    """A compiled positional leaf (`positional_leaf`, traced) called with the record."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, s: TickState, u):
        out = self.fn(*_leaf_reads(s), u)
        return TickState(*out[:_NUM_LEAF_WRITES], *s[_NUM_LEAF_WRITES:]), out[-2], out[-1]

    def writes(self, s: TickState, u) -> tuple:
        """`(*written fields, v, div)` as the compiled function returns them: `LeafTick`
        builds the next record once from these (not once here and once there)."""
        return self.fn(*_leaf_reads(s), u)


def positional_tick(tick: Callable) -> Callable:
    """`tick` (`folded_function`) as `flat(*s, u, store, check) -> carried fields`."""
    n = len(TickState._fields)

    def flat(*args):
        return tuple(tick(TickState(*args[:n]), *args[n:])[:NUM_CARRIED])

    return flat


class LeafTick:
    """A tick from a leaf function (TorchScript or eager) with the U-turn checks of the
    sub-subtrees ending at the leaf done here, on lists of checkpoints: only the
    `checkpoint_range(n)` slots are tested, which in TorchScript or eager PyTorch is
    cheaper than testing every slot under a mask."""

    def __init__(self, leaf: Callable, uturn: str, backend: str, num_ops: int = 0):
        self.leaf = leaf  # leaf(s, u) -> (s', v, div)
        self.uturn = uturn  # `ops.UTURNS`
        self.backend = backend  # "torchscript" or "eager"
        self.num_ops = num_ops  # operations in the leaf's graph (0 if unknown)
        #: the eager leaf counts its density evaluations through the target
        self.counts_itself = backend == "eager"
        # a compiled leaf's raw outputs (`CompiledLeaf.writes`): one record built per tick
        self._writes = getattr(leaf, "writes", None)

    @staticmethod
    def checkpoints(K: int, z0: torch.Tensor) -> tuple:
        return [None] * K, [None] * K, [None] * (3 * K)

    def __call__(self, s: TickState, u, n: int) -> TickState:
        if self._writes is not None:
            out = self._writes(s, u)
            head, v, div = out[:_NUM_LEAF_WRITES], out[-2], out[-1]
            z, p = out[0], out[1]
        else:
            leaf_s, v, div = self.leaf(s, u)
            head, z, p = leaf_s[:_NUM_LEAF_WRITES], leaf_s.z, leaf_s.p
        lo, hi = checkpoint_range(n)
        stop = div
        psum, ck_a, ck_v, x = s.psum, s.ck_a, s.ck_v, s.ck_x
        if self.uturn == "displacement":
            # ck_a, ck_v: the checkpoint leaf's position and momentum; x: the position
            # and momentum of the last leaf the slot's sub-subtree was checked at
            K = len(ck_a)
            if n % 2 == 0:
                ck_a[hi], ck_v[hi] = z, p
            d = s.direction
            for k in range(lo, hi + 1):
                stop = stop | ops.fused.turning_dz((z - ck_a[k]) * d, ck_v[k], p)
                if k < hi:  # 4 leaves or more: the checks across its halves
                    stop = stop | ops.fused.turning_dz_across(
                        z, p, ck_a[k], ck_v[k], ck_a[k + 1], ck_v[k + 1], x[K + k],
                        x[2 * K + k], d)
                x[K + k], x[2 * K + k] = z, p
        elif self.uturn == "momentum":
            # ck_a holds the momentum sum *before* the checkpoint leaf, so the
            # sub-subtree from checkpoint k to leaf n sums to psum - ck_a[k]; x: the
            # checkpoint's momentum, and the momentum and velocity of the last leaf the
            # slot's sub-subtree was checked at (`ops.uturn_update`)
            K = len(ck_a)
            if n % 2 == 0:
                ck_a[hi], ck_v[hi], x[hi] = psum, v, p
            psum = psum + p
            for k in range(lo, hi + 1):
                stop = stop | ops.fused.turning_rho(v, psum - ck_a[k], ck_v[k])
                if k < hi:  # 4 leaves or more: the checks across its halves
                    stop = stop | ops.fused.turning_across(
                        v, psum, ck_a[k], ck_v[k], ck_a[k + 1], ck_v[k + 1], x[k + 1],
                        x[K + k], x[2 * K + k])
                x[K + k], x[2 * K + k] = p, v
        else:
            if n % 2 == 0:
                ck_a[hi], ck_v[hi] = z, v
            for k in range(lo, hi + 1):
                stop = stop | ops.fused.turning(z, v, ck_a[k], ck_v[k], s.direction)
        # the leaf's writes, then the U-turn fields (`running` and what follows the
        # carried fields are not written by the leaf): one record per tick, spelled out
        return TickState(*head, psum, ck_a, ck_v, x, s.running & ~stop, *s[NUM_CARRIED:])


class InductorTick:
    """The folded tick compiled by Inductor into one C++ kernel (`positional_tick`);
    called like `LeafTick` (it looks up the masks of leaf `n`).

    If the kernel raises when called, the tick hands over to `fallback` (the TorchScript
    `LeafTick` of the same settings) for good: the failing leaf is recomputed there, the
    checkpoint stacks becoming lists, and `on_failure(self, note)` is told why."""

    backend = "inductor"
    counts_itself = False

    def __init__(self, compiled, K: int, device, fallback=None, on_failure=None):
        self._compiled = compiled
        self._first = True
        self._K, self._device = K, device
        self._masks = {}
        self.fallback = fallback
        self.on_failure = on_failure
        self.failure = ""  # why the kernel was dropped ("" while it works)

    @staticmethod
    def checkpoints(K: int, z0: torch.Tensor) -> tuple:
        C, D = z0.shape
        return z0.new_zeros(K, C, D), z0.new_zeros(K, C, D), z0.new_zeros(3 * K, C, D)

    def masks(self, n: int) -> tuple:
        m = self._masks.get(n)
        if m is None:
            m = self._masks[n] = checkpoint_masks(n, self._K, self._device)
        return m

    def __call__(self, s: TickState, u, n: int) -> TickState:
        if self.failure:
            return self.fallback(_listed(s), u, n)
        store, check = self.masks(n)
        try:
            out = self._compiled([*s, u, store, check])
        except Exception as exc:
            if self.fallback is None:
                raise
            when = "at its first call" if self._first else "during the run"
            self.failure = (f"the Inductor kernel failed {when} ({type(exc).__name__}: "
                            f"{str(exc)[:200]}); the steps ran on TorchScript")
            if self.on_failure is not None:
                self.on_failure(self, self.failure)
            return self.fallback(_listed(s), u, n)
        if self._first:
            # after the first call (which closes Inductor's compile-time bookkeeping)
            # call the generated function itself: the wrapper costs ~10% of a small
            # model's tick
            self._first = False
            raw = getattr(self._compiled, "current_callable", None)
            if callable(raw):
                self._compiled = raw
        return TickState(*out, *s[NUM_CARRIED:])


def _listed(s: TickState) -> TickState:
    """`s` with checkpoint stacks as the lists `LeafTick` keeps (the same tensors)."""
    if isinstance(s.ck_a, torch.Tensor):
        s = s._replace(ck_a=list(s.ck_a.unbind(0)), ck_v=list(s.ck_v.unbind(0)),
                       ck_x=list(s.ck_x.unbind(0)))
    return s


def example_state(z0: torch.Tensor, g0: torch.Tensor, dense: bool, K: int) -> tuple:
    """`(TickState, u)`: representative tick inputs at `z0` (for tracing and for checking
    a compilation), with `(K, C, D)` checkpoint stacks."""
    C, D = z0.shape
    dtype, device = z0.dtype, z0.device
    gen = torch.Generator(device=device).manual_seed(7)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype, device=device)

    f = z0.new_zeros
    inv = (torch.eye(D, dtype=dtype, device=device).expand(C, D, D).clone() if dense
           else f(C, D) + 1)
    b = torch.zeros(C, dtype=torch.bool, device=device)
    u = torch.rand(C, generator=gen, dtype=dtype, device=device)
    p = rnd(C, D)
    psum, ck_a, ck_v, ck_x = rnd(C, D), rnd(K, C, D), rnd(K, C, D), rnd(3 * K, C, D)
    # no two inputs share storage: Inductor would specialise the kernel to the aliasing
    z0, g0 = z0.detach(), g0.detach()
    s = TickState(z=z0.clone(), p=p, lp=f(C), g=g0.clone(), sum_acc=f(C),
                  n_leaves=torch.zeros(C, dtype=torch.long, device=device),
                  diverged=b.clone(), sub_w=f(C) - math.inf, sz=z0.clone(), sg=g0.clone(),
                  slp=f(C), sh=f(C), psum=psum, ck_a=ck_a, ck_v=ck_v, ck_x=ck_x,
                  running=b | True,
                  eps=f(C, 1) + 0.05, inv=inv, h0=f(C) + 1.0, direction=f(C, 1) + 1)
    return s, u


def traced_leaf(density, z0: torch.Tensor, dense: bool, thr: float):
    """The leaf around a compiled `density` traced into one TorchScript graph (a
    `CompiledLeaf`), or None."""
    flat = positional_leaf(leaf_function(density, True, dense, thr))

    class Leaf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.density = density  # a submodule, so that tracing inlines it

        def forward(self, *args):
            return flat(*args)

    g0, _ = density(z0)
    s, u = example_state(z0, torch.nan_to_num(g0), dense, 1)
    state = torch.get_rng_state()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CompiledLeaf(torch.jit.trace(Leaf(), (*_leaf_reads(s), u),
                                                check_trace=False))
    except Exception:
        return None
    finally:
        torch.set_rng_state(state)


def inductor_tick(density, z0: torch.Tensor, dense: bool, thr: float, uturn: str,
                  K: int) -> tuple:
    """`(InductorTick, note)`: the folded tick around the compiled `density` compiled by
    Inductor, or `(None, why not)`.  The kernel is checked against the same function
    run by PyTorch on test inputs; any disagreement beyond float rounding rejects it."""
    wait_prewarm()
    try:
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx_inner
        from torch._inductor.decomposition import select_decomp_table
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
    except Exception as exc:  # a PyTorch without Inductor
        return None, f"Inductor is not available ({type(exc).__name__})"
    fn = positional_tick(folded_function(leaf_function(density, True, dense, thr), uturn))
    state = torch.get_rng_state()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            # trace and compile at inputs that depend on the model only: Inductor's
            # on-disk cache key includes the example inputs' values
            z_c = torch.full_like(z0, 0.1)
            example = _flat_example(z_c, torch.nan_to_num(density(z_c)[0]), dense, K)
            gm = make_fx(fn, decomposition_table=select_decomp_table())(*example)
            # the NUTS loop passes contiguous tensors of the traced shapes only, so the
            # kernel needs no size checks; a tracing context with a shape environment
            # lets Inductor cache the compiled graph on disk (the next run of the same
            # model skips code generation)
            with config.patch(size_asserts=False), \
                    tracing(TracingContext(FakeTensorMode(allow_non_fake_inputs=True,
                                                          shape_env=ShapeEnv()))):
                compiled = compile_fx_inner(gm, list(example))
            at_z0 = _flat_example(z0, torch.nan_to_num(density(z0)[0]), dense, K)
            for args in (example, at_z0, _perturbed(at_z0)):
                want, got = fn(*args), compiled(list(args))
                if not all(_agree(a, b) for a, b in zip(want, got)):
                    return None, "the Inductor kernel disagrees with PyTorch on test inputs"
    except Exception as exc:  # no C++ compiler, an unsupported operation, ...
        return None, f"Inductor failed: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        torch.set_rng_state(state)
    return InductorTick(compiled, K, z0.device), "compiled by Inductor"


def _flat_example(z0, g0, dense, K) -> tuple:
    """`example_state` flattened as the Inductor tick takes it (leaf 3's masks)."""
    s, u = example_state(z0, g0, dense, K)
    return (*s, u, *checkpoint_masks(3, K, z0.device))


def _perturbed(example: tuple) -> tuple:
    out = list(example)
    z = out[0]
    gen = torch.Generator(device=z.device).manual_seed(11)
    out[0] = z + 0.3 * torch.randn(z.shape, generator=gen, dtype=z.dtype, device=z.device)
    running = TickState._fields.index("running")
    out[running] = torch.arange(z.shape[0], device=z.device) % 3 != 1  # some chains finished
    return tuple(out)


def _agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == torch.bool or not a.is_floating_point():
        return bool(torch.equal(a, b))
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not bool(torch.equal(fa, fb)) or not bool(torch.equal(a[~fa], b[~fb])):
        return False
    return bool(torch.allclose(a[fa], b[fb], rtol=1e-4, atol=1e-5))


def resolve_compiler(setting: str) -> str:
    """The effective compiler for a kernel `setting` (``"auto"`` honours `ENV_VAR`)."""
    if setting == "auto":
        env = os.environ.get(ENV_VAR, "").strip().lower()
        if env in COMPILERS:
            return env
    return setting


def graph_ops(fn) -> int:
    """The number of operations in a TorchScript function's graph (0 if unknown)."""
    try:
        return sum(1 for n in fn.inlined_graph.nodes() if n.kind().startswith("aten::"))
    except Exception:
        return 0


def compile_cost(num_ops: int) -> float:
    """Seconds an Inductor compile of a leaf of `num_ops` operations is taken to cost in a
    fresh process (`COMPILE_COST_S` + `COMPILE_COST_PER_OP_S` per operation; the figures
    are at the constants)."""
    return COMPILE_COST_S + COMPILE_COST_PER_OP_S * max(num_ops, 0)


def worth_compiling(num_ops: int, ticks_left: float) -> bool:
    """Whether an Inductor compile pays for itself over `ticks_left` more ticks of a
    TorchScript leaf of `num_ops` operations (by `MARGIN`: the estimate of the ticks to
    come is rough).  A function of its arguments and constants only."""
    saving = num_ops * TS_COST_PER_OP_S + PY_CHECKS_S - INDUCTOR_TICK_S
    return num_ops > 0 and saving > 0 and \
        saving * ticks_left > MARGIN * compile_cost(num_ops)


def is_probe(i: int) -> bool:
    """The iterations at which ``compiler="auto"`` (re)considers Inductor: 50, 100, 200,
    400, ... (fixed, so the decision depends on the run's draws only)."""
    return i >= PROBE_START and i % PROBE_START == 0 and (i // PROBE_START) & \
        (i // PROBE_START - 1) == 0

_prewarm_thread = None


def prewarm() -> None:
    """Import Inductor and probe the CPU's vector instruction sets in a background
    thread (seconds spent mostly waiting on subprocesses), so that a later compile
    starts warm.  Idempotent; changes no result."""
    global _prewarm_thread
    if _prewarm_thread is not None:
        return
    import threading

    def work():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import importlib
                importlib.import_module("torch._inductor.compile_fx")
                from torch._inductor.cpu_vec_isa import valid_vec_isa_list
                valid_vec_isa_list()
        except Exception:  # only a head start: the compile reports any real failure
            pass

    _prewarm_thread = threading.Thread(target=work, name="qvr-inductor-prewarm",
                                       daemon=True)
    _prewarm_thread.start()


def prewarm_if_idle() -> None:
    """`prewarm` where a core is free for it (`qvr.inference.threads.busy_cores`: other
    processes keep less than half a core busy).  On a busy machine its thread takes the
    sampler's time for a compile that may never come: garch, 2 x (150 + 150), first run
    beside two busy processes, 41-42 s with it against 33-35 s without (idle: no
    difference).  Changes no result."""
    if _prewarm_thread is not None:
        return
    from qvr.inference.threads import BUSY_CORES, busy_cores
    load = busy_cores()
    if load is None or load < BUSY_CORES:
        prewarm()


def wait_prewarm() -> None:
    """Wait for `prewarm` (imports must not race with the compiling thread)."""
    if _prewarm_thread is not None:
        _prewarm_thread.join()


class TickCache:
    """The ticks of one target, per (chains, dtype, device, mass kind, threshold,
    criterion, K), and what became of the compiles.  A `NUTSKernel` holds one per target
    (`NUTSKernel.tick_cache`): every run of that kernel on that target reuses them.

    Attributes:
      notes: what happened, in order, as sentences (e.g. ``"compiled by Inductor"``, why
        Inductor was not used, why the density runs eagerly).
      probe: `(iteration, density evaluations)` at the last probe of ``"auto"``.
      last: the backend of the tick handed out last (``""`` before the first).
    """

    def __init__(self):
        self.ticks = {}  # key -> LeafTick or InductorTick
        self.transitions = {}  # key -> transition.CompiledTransition, or None (not used)
        # key -> (transition_cache.BackgroundCompile, note callback): compiling while
        # the run goes on leaf by leaf
        self.pending = {}
        self.densities = {}  # key -> the compiled density (None: evaluated eagerly)
        self.tried = set()  # keys whose Inductor compile was attempted
        self.notes = []
        self.probe = (0, 0)
        self.last = ""

    @staticmethod
    def key(z0, dense, thr, uturn, K) -> tuple:
        return (z0.shape[0], z0.dtype, z0.device, dense, thr, uturn, K)

    def get(self, target, z0, dense, thr, uturn, K, want_inductor=False):
        """The tick for these settings: TorchScript when the target's density compiles,
        eager otherwise; Inductor once asked for (`want_inductor`) and it compiles."""
        key = self.key(z0, dense, thr, uturn, K)
        tick = self.ticks.get(key)
        if tick is None:
            compiled_for = getattr(target, "compiled_for", None)
            density = compiled_for(z0) if compiled_for is not None else None
            leaf = traced_leaf(density, z0, dense, thr) if density is not None else None
            if leaf is not None:
                tick = LeafTick(leaf, uturn, "torchscript", graph_ops(leaf.fn))
            else:
                if density is not None:
                    self.notes.append("eager: the leaf around the compiled density did "
                                      "not trace")
                else:
                    why = getattr(target, "compile_notes", {}).get(z0.shape[0])
                    self.notes.append(f"eager: {why}" if why else
                                      "eager: the density is not compiled")
                density = None
                tick = LeafTick(leaf_function(target.log_density_and_grad, False, dense,
                                              thr), uturn, "eager")
            self.ticks[key], self.densities[key] = tick, density
        if want_inductor and tick.backend == "torchscript" and key not in self.tried:
            self.tried.add(key)
            opaque = getattr(target, "not_exportable", lambda z: None)(z0)
            if opaque is not None:  # Inductor would trace into it and fail
                self.notes.append(f"not compiled by Inductor: {opaque}")
                self.last = tick.backend
                return tick
            compiled, note = inductor_tick(self.densities[key], z0, dense, thr, uturn, K)
            self.notes.append(note)
            if compiled is not None:
                compiled.fallback, compiled.on_failure = tick, self._dropped
                tick = self.ticks[key] = compiled
        self.last = tick.backend
        return tick

    def _dropped(self, tick: InductorTick, note: str) -> None:
        """An Inductor tick failed when called: its TorchScript leaf takes over."""
        for key, t in self.ticks.items():
            if t is tick:
                self.ticks[key] = tick.fallback
        self.notes.append(note)
        self.last = tick.fallback.backend
