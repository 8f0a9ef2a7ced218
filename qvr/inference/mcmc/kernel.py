"""The kernel interface and the machinery HMC and NUTS share (runtime spec 6.6.3).

A kernel is the *algorithm*: given an `HMCState` for `C` chains and a target it returns
the next state, adapting during warmup.  It knows nothing of loops, events, progress or
result objects: that is the driver's job (`qvr.inference.mcmc.driver`).  Kernels expose
what they know through the state (`accept_prob`, `step_size`, `tree_depth`, `diverging`,
...) and `diagnostics(state)`.

The kernel protocol (`MCMCKernel`; the driver uses nothing else):

* ``init(target, z0, num_warmup, num_samples) -> state`` — a fresh state for the chains
  of `z0` `(C, D)`.  The driver always passes the run's plan: `num_warmup` adaptation
  iterations then `num_samples` draws.  A kernel may use it to plan (NUTS decides from it
  whether compiling its steps pays off); every kernel takes both.
* ``sample(state, target) -> state`` — one iteration.
* ``sample_block(state, target, max_n) -> (state, Steps)`` — between 1 and `max_n`
  iterations (never past the end of warmup when `max_n` stops there), with what each
  recorded (`Steps`); the driver calls this one.  The default is one `sample`; NUTS runs
  up to 64 iterations in one compiled call (`transition.py`).
* ``diagnostics(state) -> dict`` — per-chain statistics of the last iteration.
* ``prepare(state, target, note, should_stop)`` — once after `init`, before the first
  iteration (NUTS compiles its whole transition there, or starts compiling it in the
  background, saying so through `note(message, path=...)`
  when the compile is not on disk, and gives it up when `should_stop()` turns true);
  optional, a no-op by default.
* ``compiler_used(target) -> str`` and ``compiler_notes(target) -> list[str]`` — how the
  kernel ran its steps on `target` (NUTS: ``"transition"`` — the whole transition
  compiled —, ``"inductor"``, ``"torchscript"`` or ``"eager"``, and sentences saying why, e.g. that Inductor failed and the steps ran on
  TorchScript); ``""`` and ``[]`` for kernels with nothing to say (HMC).  Read-only.

Whatever a kernel caches between iterations or runs (NUTS: its compiled steps per
target) it keeps on itself, keyed weakly by the target — never on the target, and the
driver never reads it.

`HMCBase` implements everything but the transition itself:

* state initialisation (mass matrix = identity, adaptation reset — per run, hence per chain);
* dual-averaging step-size adaptation toward `target_accept`;
* mass-matrix adaptation, one of
  ``"fisher"`` (the default; nutpie's: the diagonal metric starts at `1/|grad|` of the
  initial point and is re-estimated from the accepted draws *and their gradients*,
  `sqrt(var x / var g)`, on overlapping windows of 10 draws early and 80, 120, ... later,
  fixed for the last 15 % of warmup; `adaptation.FisherDiag`), ``"windowed"`` (Stan's
  schedule: slow windows end with a mass-matrix update, a fresh step-size search and a
  restart of dual averaging) or ``"end"`` (the spec's legacy rule: one update from every
  warmup position at the end of warmup, step size not re-tuned).  A dense metric under
  ``"fisher"`` is `adaptation.FisherDense` (the geometric mean of the draws' and the
  inverse of the gradients' covariances) on the same windows;
* after warmup the averaged step size `eps-bar`; with `num_warmup = 0` the initial one;
* with `find_step_size` (and at least 20 warmup iterations), a heuristic search for a
  step size whose one-step acceptance is about 0.8 (Hoffman & Gelman's Algorithm 4) at
  the start of warmup and after each windowed mass-matrix update (``"fisher"``: after
  the first metric update only, dual averaging then runs to the end of warmup).

Decision (issue 24): runtime spec 6.6.3 keeps the identity metric for the whole warmup and
never re-tunes the step size after the metric changes; that is wrong for any posterior
whose scales differ (`earnings-logearn_height` spent 344 s in warmup at tree depth 10).
Issue 24 made Stan's windowed adaptation the default; issue 37 made nutpie's Fisher
adaptation the default (``--adapt fisher``; Stan's stays as ``--adapt stan``), measured
in `bench/warmup.py`.  The spec's text is to be changed to it.

Subclasses implement `_transition(state, target) -> Transition`.

Target protocol: `target.log_density_and_grad(z (C, D)) -> (log_density (C,), grad (C, D))`
with non-finite values already mapped to `-inf` / zero gradients.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import torch

from qvr.inference.mcmc.adaptation import (DualAveraging, DualAveragingState, FisherDense,
                                           FisherDiag, Welford, initial_inverse_metric,
                                           mass_update_points, warmup_schedule)
from qvr.inference.mcmc.integrator import MassMatrix, leapfrog


@dataclass
class HMCState:
    """The state of `C` chains after `i` iterations.

    Attributes:
      i: iterations done (warmup included).
      num_warmup: warmup length of this run.
      z: `(C, D)` unconstrained positions.
      log_density: `(C,)` log density at `z` (Jacobian included).
      grad: `(C, D)` its gradient.
      step_size: `(C,)` step size the next iteration uses.
      mass: the inverse mass matrices.
      accept_prob: `(C,)` acceptance statistic of the last iteration (HMC: `min(1, e^-dH)`;
        NUTS: mean over the leaves built).
      accepted: `(C,)` whether the last iteration moved.
      diverging: `(C,)` whether the last iteration diverged.
      num_steps: `(C,)` leapfrog steps of the last iteration.
      tree_depth: `(C,)` NUTS tree depth of the last iteration (0 for HMC).
      energy: `(C,)` Hamiltonian at the new state.
      da: dual-averaging state (None when step sizes are not adapted).
      welford: the running position covariance (None when the mass matrix is fixed or
        adapted by `fisher`).
      fisher: the draws-and-gradients estimator of the ``"fisher"`` schedule (None
        otherwise).
      mass_updates: warmup iterations after which the mass matrix is updated (a compiled
        block of transitions never runs past one).
      slow_range: inclusive `(start, end)` of the iterations folded into the covariance.
      num_samples: draws after warmup in this run: with `num_warmup` the run's length,
        which a kernel may use to plan (NUTS: whether compiling pays).
    """

    i: int
    num_warmup: int
    z: torch.Tensor
    log_density: torch.Tensor
    grad: torch.Tensor
    step_size: torch.Tensor
    mass: MassMatrix
    accept_prob: torch.Tensor
    accepted: torch.Tensor
    diverging: torch.Tensor
    num_steps: torch.Tensor
    tree_depth: torch.Tensor
    energy: torch.Tensor
    da: Optional[DualAveragingState] = None
    welford: Optional[Welford] = None
    fisher: Optional[FisherDiag] = None
    mass_updates: frozenset = frozenset()
    slow_range: tuple = (0, -1)
    num_samples: int = 0

    @property
    def warming_up(self) -> bool:
        return self.i < self.num_warmup


@dataclass
class Transition:
    """What one transition produced, per chain."""

    z: torch.Tensor
    log_density: torch.Tensor
    grad: torch.Tensor
    accept_prob: torch.Tensor
    accepted: torch.Tensor
    diverging: torch.Tensor
    num_steps: torch.Tensor
    tree_depth: torch.Tensor
    energy: torch.Tensor


@dataclass
class Steps:
    """What `k` consecutive iterations recorded, per iteration and chain: `z` `(k, C, D)`,
    the rest `(k, C)` (`accepted`: the position moved; `tree_depth` 0 for HMC)."""

    z: torch.Tensor
    log_density: torch.Tensor
    accept_prob: torch.Tensor
    accepted: torch.Tensor
    diverging: torch.Tensor
    num_steps: torch.Tensor
    tree_depth: torch.Tensor
    energy: torch.Tensor

    def __len__(self) -> int:
        return self.z.shape[0]

    @staticmethod
    def of(state) -> "Steps":
        """The last iteration of `state` as a block of one."""
        return Steps(*(getattr(state, k).unsqueeze(0) for k in (
            "z", "log_density", "accept_prob", "accepted", "diverging", "num_steps",
            "tree_depth", "energy")))


class MCMCKernel:
    """Base of MCMC kernels: `init` a state, `sample` the next one (the protocol in the
    module docstring)."""

    def init(self, target, z0: torch.Tensor, num_warmup: int,
             num_samples: int):  # pragma: no cover
        raise NotImplementedError

    def sample(self, state, target):  # pragma: no cover
        raise NotImplementedError

    def sample_block(self, state, target, max_n: int):
        """`(state, Steps)` after between 1 and `max_n` iterations (default: one)."""
        state = self.sample(state, target)
        return state, Steps.of(state)

    def diagnostics(self, state) -> dict:
        return {}

    def prepare(self, state, target, note=None, should_stop=None) -> None:
        """Work the kernel does once before the first iteration (NUTS: compile its whole
        transition), told to the user through `note(message)` when it will take a while,
        and cut short when `should_stop()` turns true (the run is being cancelled).
        Optional: the default does nothing."""

    def compiler_used(self, target) -> str:
        """How the steps on `target` were run (``""``: nothing to report)."""
        return ""

    def compiler_notes(self, target) -> list:
        """Why they were run so, as sentences (none by default)."""
        return []


_MASS_KINDS = ("identity", "diagonal", "dense")
_SCHEDULES = ("fisher", "windowed", "end")


class HMCBase(MCMCKernel):
    """Shared parameters and adaptation of `HMCKernel` and `NUTSKernel`."""

    method = "hmc"

    def __init__(self, step_size: float, mass_matrix: str, target_accept: float,
                 divergence_threshold: float, adapt_step_size: bool, adapt_mass_matrix: bool,
                 warmup_schedule: str = "fisher", find_step_size: bool = True,
                 step_size_jitter: float = 0.0):
        if not (isinstance(step_size, (int, float)) and step_size > 0):
            raise ValueError(f"step_size must be positive, got {step_size}")
        if not 0 < target_accept < 1:
            raise ValueError(f"target_accept must be in (0, 1), got {target_accept}")
        if mass_matrix not in _MASS_KINDS:
            raise ValueError(f"mass_matrix must be one of {_MASS_KINDS}, got {mass_matrix!r}")
        if warmup_schedule not in _SCHEDULES:
            raise ValueError(f"warmup_schedule must be one of {_SCHEDULES}, "
                             f"got {warmup_schedule!r}")
        if not 0 <= step_size_jitter < 1:
            raise ValueError(f"step_size_jitter must be in [0, 1), got {step_size_jitter}")
        self.step_size = float(step_size)
        self.mass_matrix = mass_matrix
        self.target_accept = float(target_accept)
        self.divergence_threshold = float(divergence_threshold)
        self.adapt_step_size = bool(adapt_step_size)
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        self.warmup_schedule = warmup_schedule
        self.find_step_size = bool(find_step_size)
        self.step_size_jitter = float(step_size_jitter)
        self.dual_averaging = DualAveraging(self.target_accept)

    # ------------------------------------------------------------------ config
    #: density evaluations of a run besides its iterations' (the step-size search,
    #: the starting point's)
    EXTRA_EVALUATIONS = 30

    def expected_evaluations(self, num_warmup: int, num_samples: int):
        """About how many density evaluations a run of this kernel makes (the target
        traces its density only when that pays: `ProgramTarget.expected_evaluations`),
        or None when the kernel needs the compiled density whatever the run's length."""
        return None

    def config(self) -> dict:
        return {"step_size": self.step_size, "mass_matrix": self.mass_matrix,
                "target_accept": self.target_accept,
                "divergence_threshold": self.divergence_threshold,
                "adapt_step_size": self.adapt_step_size,
                "adapt_mass_matrix": self.adapt_mass_matrix,
                "warmup_schedule": self.warmup_schedule,
                "step_size_jitter": self.step_size_jitter}

    def _jittered(self, eps):
        """This iteration's step sizes: `eps * (1 + jitter * U(-1, 1))`, one draw per
        chain (`eps` itself without jitter; dual averaging adapts the unjittered step)."""
        if self.step_size_jitter > 0:
            return eps * (1 + self.step_size_jitter * (2 * torch.rand_like(eps) - 1))
        return eps

    @property
    def _adapts_mass(self) -> bool:
        return self.adapt_mass_matrix and self.mass_matrix != "identity"

    #: what restarts for the Fisher schedule's fixed-metric window: ``"full"`` (dual
    #: averaging from `mu = log(10 eps)`, as Stan after each window) or ``"average"``
    #: (only the average the step size after warmup is taken from:
    #: `DualAveraging.restart_average`; NUTS).  Static HMC keeps the full restart: with
    #: a fixed number of steps its acceptance falls off a cliff at the leapfrog's
    #: stability limit, and on a normal-normal model (8 steps, jitter 0.5, 4 x (300 +
    #: 800)) the undisturbed iterate's average landed past it on two chains of four
    #: (eps 1.40-1.48, 116 divergences), where the full restart's stayed at 0.81-1.04
    final_restart = "full"

    #: a diagonal inverse metric `(D,)` or `(C, D)` to start warmup from (a diagonal
    #: mass matrix only; `qvr.inference.methods.mcmc`: ``--init pathfinder``), None for
    #: the usual start (identity, or nutpie's `1 / |g0|` under the Fisher schedule)
    initial_inv_metric = None

    # ------------------------------------------------------------------ init
    def init(self, target, z0: torch.Tensor, num_warmup: int,
             num_samples: int) -> HMCState:
        """Fresh state at `z0` `(C, D)` for a run of `num_warmup` + `num_samples`
        iterations: identity mass matrix (or `initial_inv_metric`), adaptation reset."""
        C, D = z0.shape
        logp, grad = target.log_density_and_grad(z0)
        mass = MassMatrix.identity(self.mass_matrix, C, D, z0.dtype, z0.device)
        given = self.initial_inv_metric  # e.g. Pathfinder's inverse-Hessian diagonal
        if given is not None and self.mass_matrix == "diagonal":
            given = torch.as_tensor(given, dtype=z0.dtype, device=z0.device).expand(C, D)
            mass = MassMatrix("diagonal", given.clamp(1e-10, 1e10).clone())
        step = torch.full((C,), self.step_size, dtype=z0.dtype, device=z0.device)
        zeros = torch.zeros(C, dtype=z0.dtype, device=z0.device)
        false = torch.zeros(C, dtype=torch.bool, device=z0.device)
        izeros = torch.zeros(C, dtype=torch.long, device=z0.device)
        state = HMCState(0, int(num_warmup), z0, logp, grad, step, mass, zeros, false, false,
                         izeros, izeros, -logp, num_samples=int(num_samples))
        fisher = (self.warmup_schedule == "fisher" and self._adapts_mass and num_warmup >= 20
                  and D > 0)
        if fisher:  # the metric from the first gradient, before the step-size search
            dense = self.mass_matrix == "dense"
            if dense:
                first = initial_inverse_metric(grad)
                state.mass = MassMatrix("dense", torch.diag_embed(first),
                                        torch.diag_embed(torch.sqrt(first)))
            else:
                state.mass = mass if given is not None \
                    else MassMatrix("diagonal", initial_inverse_metric(grad))
            state.fisher = (FisherDense if dense else FisherDiag)(C, D, num_warmup,
                                                                  z0.dtype, z0.device)
            state.fisher.add(z0.unsqueeze(0), grad.unsqueeze(0),
                             torch.isfinite(logp).unsqueeze(0))
            state.mass_updates = state.fisher.update_points
        if num_warmup > 0 and self.adapt_step_size:
            # below 20 warmup iterations (no adaptation windows) keep the given step size
            # as the starting point: too few iterations to recover from a poor search
            if self.find_step_size and D > 0 and num_warmup >= 20:
                state.step_size = self._reasonable_step_size(state, target)
            state.da = self.dual_averaging.init(state.step_size)
        if num_warmup > 0 and self._adapts_mass and self.warmup_schedule != "fisher":
            state.welford = Welford(C, D, dense=self.mass_matrix == "dense", dtype=z0.dtype,
                                    device=z0.device)
            if self.warmup_schedule == "windowed":
                state.mass_updates = frozenset(mass_update_points(num_warmup))
                if state.mass_updates:
                    state.slow_range = (warmup_schedule(num_warmup)[1][0],
                                        max(state.mass_updates))
            else:
                state.mass_updates = frozenset({num_warmup - 1})
                state.slow_range = (0, num_warmup - 1)
        return state

    # ------------------------------------------------------------------ one iteration
    def sample(self, state: HMCState, target) -> HMCState:
        t = self._transition(state, target)
        new = replace(state, i=state.i + 1, z=t.z, log_density=t.log_density, grad=t.grad,
                      accept_prob=t.accept_prob, accepted=t.accepted, diverging=t.diverging,
                      num_steps=t.num_steps, tree_depth=t.tree_depth, energy=t.energy)
        if state.warming_up:
            new = self._adapt(new, target, state.i)
        return new

    def _transition(self, state: HMCState, target) -> Transition:  # pragma: no cover
        raise NotImplementedError

    def diagnostics(self, state: HMCState) -> dict:
        return {"accept_prob": state.accept_prob, "step_size": state.step_size,
                "tree_depth": state.tree_depth, "num_steps": state.num_steps,
                "diverging": state.diverging}

    # ------------------------------------------------------------------ adaptation
    def _adapt(self, state: HMCState, target, i: int) -> HMCState:
        """Adaptation after warmup iteration `i` (0-based)."""
        if state.da is not None:
            state.da = self.dual_averaging.update(state.da, state.accept_prob)
            state.step_size = torch.exp(state.da.log_step)
        lo, hi = state.slow_range
        if state.welford is not None and lo <= i <= hi:
            state.welford.update(state.z)
        if state.fisher is not None:
            state.fisher.add(state.z.unsqueeze(0), state.grad.unsqueeze(0),
                             state.accepted.unsqueeze(0))
        return self._adapt_window(state, target, i)

    def _adapt_window(self, state: HMCState, target, i: int) -> HMCState:
        """What warmup iteration `i` ends, after its dual-averaging and Welford updates
        (`_adapt`, or a compiled block that made them): a slow window (a new metric, a
        step-size search, dual averaging restarted) and the warmup itself (the averaged
        step size)."""
        last = i == state.num_warmup - 1
        if state.fisher is not None:
            # nutpie: the metric after every update point, one fresh step-size search
            # after the first (dual averaging restarted there only)
            inv = state.fisher.after(i, state.mass.inv)
            if inv is not state.mass.inv:
                state.mass = MassMatrix("dense", inv, torch.linalg.cholesky(inv)) \
                    if state.mass.dense else MassMatrix("diagonal", inv)
            if i == state.fisher.first_update and state.da is not None:
                if self.find_step_size:
                    state.step_size = self._reasonable_step_size(state, target)
                state.da = self.dual_averaging.init(state.step_size)
            elif i == state.fisher.restart_at and state.da is not None:
                # the metric is final from here: the step size after warmup averages
                # this window only (`FisherDiag`'s docstring says why)
                if self.final_restart == "average":
                    state.da = self.dual_averaging.restart_average(state.da)
                else:
                    state.da = self.dual_averaging.init(state.step_size)
        lo, hi = state.slow_range
        if state.welford is not None and lo <= i <= hi:
            if i in state.mass_updates and state.welford.n >= 2:
                state.mass = self._mass_from(state.welford)
                state.welford = Welford(*state.z.shape, dense=state.welford.dense,
                                        dtype=state.z.dtype, device=state.z.device)
                if state.da is not None and self.warmup_schedule == "windowed":
                    if self.find_step_size:
                        state.step_size = self._reasonable_step_size(state, target)
                    state.da = self.dual_averaging.init(state.step_size)
        if last and state.da is not None:
            state.step_size = torch.exp(state.da.log_step_avg)
        return state

    def _mass_from(self, welford: Welford) -> MassMatrix:
        cov = welford.regularized()
        if self.mass_matrix == "diagonal":
            return MassMatrix("diagonal", cov)
        chol = torch.linalg.cholesky(cov)
        return MassMatrix("dense", cov, chol)

    def _reasonable_step_size(self, state: HMCState, target) -> torch.Tensor:
        """Hoffman & Gelman (2014) Algorithm 4, per chain: double or halve `eps` until the
        one-step acceptance ratio crosses 0.8."""
        z, logp, grad, mass = state.z, state.log_density, state.grad, state.mass
        eps = state.step_size.clone()
        active = torch.isfinite(logp)
        last_dir = torch.zeros_like(eps)
        log_target = math.log(0.8)
        tiny, huge = 1e-8, 1e8
        for _ in range(60):
            if not bool(active.any()):
                break
            p = mass.sample_momentum(z)
            h0 = -logp + mass.kinetic(p)
            _, p1, lp1, _ = leapfrog(z, p, grad, eps, mass, target.log_density_and_grad)
            h1 = -lp1 + mass.kinetic(p1)
            d = h0 - h1
            direction = torch.where(d > log_target, 1.0, -1.0)
            done = (last_dir != 0) & (direction != last_dir)
            done |= ((eps <= tiny) & (direction < 0)) | ((eps >= huge) & (direction > 0))
            active = active & ~done
            eps = torch.where(active, eps * torch.pow(2.0, direction), eps)
            last_dir = direction
        return eps.clamp(tiny, huge)
