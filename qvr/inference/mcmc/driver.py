"""`MCMC`: the driver that runs a kernel over chains and collects an `MCMCResult`
(runtime spec 6.6.2).

The driver owns everything around the algorithm: the target (`potential.make_target`),
initial positions, the warmup and sampling loops, recording, progress events, cancellation
and the result.  Kernels (`hmc.py`, `nuts.py`) only map a state to the next one.

Chains.  ``chain_method="vectorized"`` (default) runs all chains as one batch: every
gradient evaluation serves every chain (the program is mapped over the chain axis with
vmap, see `potential.py`), and chains stay independent (own momenta, own adaptation
state, own mass matrices).  ``"sequential"`` runs them one after the other, as the spec
describes; ``"parallel"`` splits them over processes, each batch vectorised
(`parallel.py`); ``"distributed"`` splits them over the ranks of a torch.distributed launch
(``torchrun --nproc-per-node N``), every rank ending with every chain's draws
(`distributed.py`; without a launch it runs as ``"vectorized"``).  All target the same
posterior with the same per-chain algorithm.

Blocks.  The loop asks the kernel for blocks of iterations (`kernel.sample_block`, never
across the end of warmup): one at a time for HMC and for NUTS on ticks, up to 64 in one
call for NUTS's compiled transition (`transition.py`); a stop request, progress events
and draws chunks are handled between blocks, every iteration of a block is recorded.

Initial positions (spec 6.6.2): ``"prior"`` -> `0.1 N(0, I)` from a private generator
seeded with the chain index (the global RNG is untouched); ``"zero"``; ``"guide"`` ->
`T^-1` of one `guide.rsample` draw.  `run(..., initial=z0)` gives the positions
themselves (`(num_chains, D)`, unconstrained, in the target's registry order), replacing
the strategy: a fit started from an MCMC run's draws continues its chains that way
(`qvr.inference.front.start.StartState.initial_positions`).  Everything else (momenta,
acceptance, directions) uses the global torch RNG, so `torch.manual_seed` makes a run reproducible.

Events (`qvr.events`): throttled `FitProgress` per chain with ``accept_prob``
(running mean of the acceptance statistic in the phase), ``step_size``, ``tree_depth``,
``num_steps``, ``divergences`` (cumulative in the phase), ``max_depth_hits`` (cumulative
in the phase, NUTS), ``log_density`` and, in sampling once a chain has diverged,
``first_divergence`` (the 1-based draw of its first divergence); `DrawsChunk`s of
constrained draws during sampling.  The start and the end of a fit (`FitStarted`, and one of `FitFinished`,
`FitFailed`, `FitCancelled`) are reported by `qvr.inference.fit` alone; `run` returns a
partial result with ``cancelled=True`` when `should_stop` turned true, and raises on
errors.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from qvr.events import (DrawsChunk, Emitter, EventCallback, FitNote, FitProgress,
                        Throttle, never)
from qvr.inference.mcmc.potential import Target, make_target

_INIT = ("prior", "zero", "guide", "optimize")
#: while one block of iterations runs (a NUTS iteration of many slow gradients), a
#: progress event per chain at least this often (seconds): where the chains stand, and
#: how many gradients the running iteration has taken (``gradients_in_iteration``)
HEARTBEAT_S = 5.0
#: the driver's clock (progress throttle and heartbeat)
_clock = time.monotonic
_CHAIN_METHODS = ("vectorized", "sequential", "parallel", "distributed")


@dataclass
class MCMCResult:
    """Draws and sampler statistics (spec 6.6.2 fields first, then extras).

    Attributes:
      samples: `{site: (num_chains, num_samples, *site_shape)}` constrained draws (a
        scalar global site has site shape `(1,)`).
      log_densities: `(num_chains, num_samples)` `log p~(z)` at each draw.
      acceptance_rates: `(num_chains,)` post-warmup acceptance rate: the mean of the
        acceptance statistic (`accept_probs`), what Stan, nutpie and ArviZ report under
        that name.  Decision (issue 37.3): runtime spec 6.6.3 defines NUTS's rate as
        the share of iterations that moved (kept as `moved_rates`), which reads 0.997
        where the statistic is 0.93 and says nothing about the step size; the spec's
        text is to be changed to the statistic.
      divergence_counts: `(num_chains,)` post-warmup divergent iterations.
      r_hat, ess: `{site: site_shape}` split-R-hat and ESS (spec formulas).
      num_warmup, num_samples: as configured (`num_samples` is the number recorded when a
        run was cancelled).
      step_sizes: `(num_chains,)` step size after warmup.
      accept_probs: `(num_chains, num_samples)` acceptance statistic per iteration.
      diverging: `(num_chains, num_samples)` bool.
      tree_depths, num_steps: `(num_chains, num_samples)` NUTS depth / leapfrog steps.
      warmup_divergences: `(num_chains,)` divergent warmup iterations.
      warmup_num_steps: `(num_chains,)` leapfrog steps taken in warmup.
      inverse_mass_matrix: `(num_chains, D)` (diagonal) or `(num_chains, D, D)` or None.
      unconstrained: `(num_chains, num_samples, D)` draws in unconstrained space.
      warmup_time, sampling_time: seconds (all chains).
      num_grad_evals: batched gradient evaluations.
      cancelled: the run was stopped by `should_stop`.
      energies: `(num_chains, num_samples)` Hamiltonian at each draw (for E-BFMI).
      compiler: how NUTS ran its steps at the end of the run (``"transition"``: the
        whole transition compiled, `mcmc/transition.py`; ``"inductor"``,
        ``"torchscript"`` or ``"eager"``: leaf by leaf, `mcmc/tick.py`; ``""`` for other
        kernels).
      compiler_notes: why, as sentences (`kernel.compiler_notes`): e.g. that Inductor
        failed (compiling or running) and the steps ran on TorchScript.
      moved_rates: `(num_chains,)` share of post-warmup iterations whose draw differs
        from the one before (HMC: accepted proposals / iterations).
    """

    samples: dict
    log_densities: torch.Tensor
    acceptance_rates: torch.Tensor
    divergence_counts: torch.Tensor
    r_hat: dict
    ess: dict
    num_warmup: int
    num_samples: int
    step_sizes: torch.Tensor = None
    accept_probs: torch.Tensor = None
    diverging: torch.Tensor = None
    tree_depths: torch.Tensor = None
    num_steps: torch.Tensor = None
    warmup_divergences: torch.Tensor = None
    warmup_num_steps: torch.Tensor = None
    inverse_mass_matrix: Optional[torch.Tensor] = None
    unconstrained: Optional[torch.Tensor] = None
    warmup_time: float = 0.0
    sampling_time: float = 0.0
    num_grad_evals: int = 0
    cancelled: bool = False
    method: str = ""
    energies: Optional[torch.Tensor] = None
    compiler: str = ""
    compiler_notes: list = field(default_factory=list)
    moved_rates: Optional[torch.Tensor] = None

    @property
    def num_chains(self) -> int:
        return int(self.log_densities.shape[0])

    @property
    def mean_acceptance(self) -> float:
        return float(self.acceptance_rates.mean()) if self.acceptance_rates.numel() else \
            float("nan")

    @property
    def total_divergences(self) -> int:
        return int(self.divergence_counts.sum())

    @property
    def total_time(self) -> float:
        return self.warmup_time + self.sampling_time

    def summary(self, max_coordinates: Optional[int] = None):
        """Mean, sd, quantiles, MCSE, bulk/tail ESS and rank-normalised R-hat per
        coordinate, and per site over all its coordinates
        (`qvr.inference.criticism.diagnostics.Summary`); every coordinate unless `max_coordinates`
        caps the rows (what a fit records is complete: a site's worst R-hat must be
        taken over the whole site)."""
        from qvr.inference.criticism.diagnostics import summary
        return summary(self.samples, max_coordinates)

    def print_summary(self, max_coordinates: Optional[int] = 200) -> None:
        """Print the first `max_coordinates` rows (a terminal's worth), then the
        acceptance, divergences and step sizes."""
        print(self.summary(max_coordinates))
        print(f"acceptance {self.mean_acceptance:.3f}, divergences {self.total_divergences}, "
              f"step sizes {[round(float(s), 4) for s in self.step_sizes]}")

    def to_arviz(self):
        from qvr.inference.criticism.diagnostics import to_arviz
        return to_arviz(self)


class MCMC:
    """Runs an MCMC kernel on the posterior of a program.

    Args:
      kernel: an `HMCKernel` or `NUTSKernel`.
      num_warmup: adaptation iterations (>= 0).
      num_samples: recorded iterations per chain (>= 1).
      num_chains: independent chains (>= 1).
      init_strategy: ``"prior"``, ``"zero"``, ``"guide"`` or ``"optimize"`` (`init_search`).
      chain_method: ``"vectorized"`` (default), ``"sequential"``, ``"parallel"``
        (chains split over `num_workers` processes, each batch vectorised; see
        `qvr.inference.mcmc.parallel`) or ``"distributed"`` (chains split over the ranks
        of a torch.distributed launch, every rank running the same `run`, rank 0's
        callback receiving every chain's events and every rank the whole result; a
        process not launched runs ``"vectorized"``; see
        `qvr.inference.mcmc.distributed`).
      num_workers: processes for ``"parallel"`` (default: the CPU count, at most one
        per chain).
      on_event, should_stop: fit events callback and cancellation poll (also accepted
        by `run`).
      progress_interval: minimum seconds between progress events.
      draws_chunk: emit a `DrawsChunk` every this many draws (and at least every second
        while draws come, and at the end).

    Example:
      >>> mc = MCMC(NUTSKernel(), num_warmup=500, num_samples=500, num_chains=4)  # doctest: +SKIP
      >>> result = mc.run(model, x, observations)                                  # doctest: +SKIP
    """

    def __init__(self, kernel, num_warmup: int, num_samples: int, num_chains: int = 4,
                 init_strategy: str = "prior", chain_method: str = "vectorized",
                 on_event: Optional[EventCallback] = None,
                 should_stop: Optional[Callable[[], bool]] = None,
                 progress_interval: float = 0.1, draws_chunk: int = 100,
                 num_workers: Optional[int] = None):
        if not (isinstance(num_warmup, int) and num_warmup >= 0):
            raise ValueError(f"num_warmup must be an integer >= 0, got {num_warmup}")
        if not (isinstance(num_samples, int) and num_samples >= 1):
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples}")
        if not (isinstance(num_chains, int) and num_chains >= 1):
            raise ValueError(f"num_chains must be an integer >= 1, got {num_chains}")
        if init_strategy not in _INIT:
            raise ValueError(f"init_strategy must be one of {_INIT}, got {init_strategy!r}")
        if chain_method not in _CHAIN_METHODS:
            raise ValueError(f"chain_method must be one of {_CHAIN_METHODS}, "
                             f"got {chain_method!r}")
        self.kernel = kernel
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.init_strategy = init_strategy
        self.chain_method = chain_method
        self.on_event = on_event
        self.should_stop = should_stop
        self.progress_interval = progress_interval
        self.draws_chunk = max(1, int(draws_chunk))
        if num_workers is not None and not (isinstance(num_workers, int) and num_workers >= 1):
            raise ValueError(f"num_workers must be an integer >= 1, got {num_workers}")
        self.num_workers = num_workers

    def config(self) -> dict:
        return {"method": getattr(self.kernel, "method", "mcmc"), "num_warmup": self.num_warmup,
                "num_samples": self.num_samples, "num_chains": self.num_chains,
                "init_strategy": self.init_strategy, "chain_method": self.chain_method,
                **(self.kernel.config() if hasattr(self.kernel, "config") else {})}

    # ------------------------------------------------------------------ entry
    def run(self, model, x=None, observations=None, guide=None, *,
            on_event: Optional[EventCallback] = None,
            should_stop: Optional[Callable[[], bool]] = None,
            target: Optional[Target] = None,
            initial: Optional[torch.Tensor] = None) -> MCMCResult:
        """Sample the posterior of `model`'s latent sites given `observations`.

        `target` may replace the program (a `potential.Target`, e.g. a plain log-density);
        then `model` may be None.  `initial`: the chains' initial positions, a
        `(num_chains, D)` tensor in the unconstrained space (the target's coordinates);
        given, it replaces `init_strategy` (which is then not used).
        """
        emit = Emitter(on_event if on_event is not None else self.on_event)
        stop = should_stop or self.should_stop or never
        if target is None:
            target = make_target(model, x, observations)
        if hasattr(target, "expected_evaluations"):  # trace the density only if it pays
            expect = getattr(self.kernel, "expected_evaluations", lambda w, s: None)
            target.expected_evaluations = expect(self.num_warmup, self.num_samples)
        self.init_note = None
        if self.init_strategy == "optimize" and initial is None:  # seconds before warmup
            from qvr.inference.mcmc.init_search import ROUNDS, STEPS
            emit(FitNote(f"init optimize: climbing {STEPS} steps from "
                         f"{ROUNDS * self.num_chains} starts"))
        z0 = self._initial_positions(target, model, x, observations, guide, initial)
        if self.init_note is not None:
            emit(FitNote(self.init_note))
        return _Run(self, target, emit, stop).loop(z0)

    def _initial_positions(self, target, model, x, observations, guide,
                           initial: Optional[torch.Tensor] = None) -> torch.Tensor:
        C, D = self.num_chains, target.dim
        dtype = torch.get_default_dtype()
        device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
        if initial is not None:
            initial = torch.as_tensor(initial)
            if tuple(initial.shape) != (C, D):
                raise ValueError(f"initial positions must have shape (num_chains, D) = "
                                 f"({C}, {D}), got {tuple(initial.shape)}")
            if not bool(torch.isfinite(initial).all()):
                raise ValueError("initial positions must be finite")
            return initial.detach().to(device=device, dtype=dtype).clone()
        if self.init_strategy == "zero":
            return torch.zeros(C, D, dtype=dtype, device=device)
        if self.init_strategy == "optimize":  # the run's seed decides the starts
            from qvr.inference.mcmc.init_search import optimized_starts
            g = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))
            z0, self.init_note = optimized_starts(target, C, dtype, device, g)
            return z0
        if self.init_strategy == "guide":
            if guide is None:
                raise ValueError('init_strategy="guide" needs a guide: run(..., guide=guide)')
            if target.registry is None:
                raise ValueError('init_strategy="guide" needs a program target')
            rows = []
            with torch.no_grad():
                for _ in range(C):
                    draw = guide.rsample(x, observations)
                    rows.append(target.registry.unconstrain(draw).to(dtype))
            return torch.stack(rows).to(device)
        rows = []
        for c in range(C):
            g = torch.Generator(device=device)
            g.manual_seed(c)
            rows.append(0.1 * torch.randn(D, generator=g, dtype=dtype, device=device))
        return torch.stack(rows) if rows else torch.zeros(C, D, dtype=dtype, device=device)


class _Run:
    """The loop of one `MCMC.run` (not exported): chains, recording, events."""

    def __init__(self, mc: MCMC, target: Target, emit: Emitter, stop: Callable[[], bool]):
        self.mc = mc
        self.kernel = mc.kernel
        self.target = target
        self.emit = emit
        self.stop = stop
        self.method = getattr(mc.kernel, "method", "mcmc")
        self.iteration = 0
        self.throttle = Throttle(mc.progress_interval, clock=lambda: _clock())
        self._running = None  # (group, phase, step, total, evals before the block)
        self._said = {}  # chain -> the divergence counts of its last progress event

    def loop(self, z0: torch.Tensor) -> MCMCResult:
        if self.mc.chain_method == "parallel":
            from qvr.inference.mcmc.parallel import run_parallel
            raw = run_parallel(self, z0)
        elif self.mc.chain_method == "distributed":
            from qvr.inference.mcmc.distributed import run_distributed
            raw = run_distributed(self, z0)
        else:
            raw = self.collect(z0)
        return self._result(**raw)

    def collect(self, z0: torch.Tensor, chain_ids=None, pump=None) -> dict:
        """Run the chains of `z0` (global ids `chain_ids`, default `0..C-1`) and return the
        raw recordings that `_result` turns into an `MCMCResult` (chain axis first, so
        the recordings of several processes concatenate).  `pump` is called after every
        iteration (the parallel driver forwards its workers' events there)."""
        mc = self.mc
        C, D = z0.shape
        S, W = mc.num_samples, mc.num_warmup
        ids = list(range(C)) if chain_ids is None else list(chain_ids)
        self.chain_ids = ids
        groups = [list(range(C))] if mc.chain_method != "sequential" else \
            [[c] for c in range(C)]
        dtype, device = z0.dtype, z0.device
        evals0 = self.target.num_evals
        self.throttle.quiet_for(0.0)  # the heartbeat counts from the start of the run
        hooks = (getattr(self.target, "on_evaluation", None),
                 getattr(self.target, "report_note", None))
        self.target.on_evaluation = self._heartbeat
        if hasattr(self.target, "report_note"):  # how the density runs: a note
            self.target.report_note = lambda message: self.emit(FitNote(message))
        try:
            return self._collect(z0, ids, groups, S, W, dtype, device, evals0, pump)
        finally:
            self.target.on_evaluation = hooks[0]
            if hasattr(self.target, "report_note"):
                self.target.report_note = hooks[1]

    def _collect(self, z0, ids, groups, S, W, dtype, device, evals0, pump) -> dict:
        """`collect`'s loop, while the target reports to this run (`_heartbeat`, notes)."""
        C, D = z0.shape
        mc = self.mc
        zs = torch.zeros(C, S, D, dtype=dtype, device=device)
        rec = {k: torch.zeros(C, S, dtype=dtype, device=device)
               for k in ("log_density", "accept_prob", "energy")}
        # tree depths of every iteration, warmup included (the max-depth hits of a phase
        # are counted from it when progress is reported, not per iteration)
        depths = torch.zeros(C, W + S, dtype=torch.long, device=device)
        rec_l = {"tree_depth": depths[:, W:],
                 "num_steps": torch.zeros(C, S, dtype=torch.long, device=device)}
        rec_b = {k: torch.zeros(C, S, dtype=torch.bool, device=device)
                 for k in ("diverging", "accepted")}
        warm_div = torch.zeros(C, device=device)
        warm_steps = torch.zeros(C, dtype=torch.long, device=device)
        step_sizes = torch.zeros(C, dtype=dtype, device=device)
        inv_mass = None
        done = [0] * C  # draws recorded per chain
        t_warm = t_samp = 0.0
        cancelled = False
        for group in groups:
            idx = torch.tensor(group, device=device)
            t0 = time.perf_counter()
            self._running = (group, "warmup" if W else "sampling", 0, W if W else S,
                             self.target.num_evals)
            state = self.kernel.init(self.target, z0[idx], W, S)
            prepare = getattr(self.kernel, "prepare", None)
            if prepare is not None:
                prepare(state, self.target,
                        lambda message, path="": self.emit(FitNote(message, path)),
                        self.stop)
            acc_sum = torch.zeros(len(group), dtype=dtype, device=device)
            div_sum = torch.zeros(len(group), dtype=dtype, device=device)
            max_depth = getattr(self.kernel, "max_tree_depth", None)
            emitted = 0
            last_chunk = time.perf_counter()
            it = 0
            while it < W + S:
                if self.stop():
                    cancelled = True
                    break
                warm = it < W
                if it == W:
                    acc_sum.zero_()
                    div_sum.zero_()
                # a block of iterations (NUTS compiled: up to 64; else one), never
                # across the end of warmup
                self._running = (group, "warmup" if warm else "sampling",
                                 it if warm else it - W, W if warm else S,
                                 self.target.num_evals)
                state, steps = self.kernel.sample_block(state, self.target,
                                                        (W if warm else W + S) - it)
                k = len(steps)
                self.iteration = it + k
                acc_sum += steps.accept_prob.sum(0)
                div_sum += steps.diverging.to(dtype).sum(0)
                depths[idx, it:it + k] = steps.tree_depth.t()
                if warm:
                    warm_div[idx] += steps.diverging.to(warm_div.dtype).sum(0)
                    warm_steps[idx] += steps.num_steps.sum(0)
                    step, total = it + k, W
                else:
                    s = it - W
                    zs[idx, s:s + k] = steps.z.transpose(0, 1)
                    rec["log_density"][idx, s:s + k] = steps.log_density.t()
                    rec["accept_prob"][idx, s:s + k] = steps.accept_prob.t()
                    rec["energy"][idx, s:s + k] = steps.energy.t()
                    rec_l["num_steps"][idx, s:s + k] = steps.num_steps.t()
                    rec_b["diverging"][idx, s:s + k] = steps.diverging.t()
                    rec_b["accepted"][idx, s:s + k] = steps.accepted.t()
                    for c in group:
                        done[c] = s + k
                    step, total = s + k, S
                it += k
                now = time.perf_counter()
                if warm:
                    t_warm += now - t0
                else:
                    t_samp += now - t0
                t0 = now
                # the first block of a phase always reports (as its first step would)
                due = self.throttle.due(1 if step == k else step, total)
                if due:
                    hits = None if max_depth is None else \
                        (depths[idx, it - step:it] >= max_depth).sum(1)
                    # the draw (1-based) of each chain's first divergence in sampling,
                    # 0 if none: exact, whatever the blocks and the throttle
                    first = None if warm else torch.where(
                        div_sum > 0, rec_b["diverging"][idx, :step].to(torch.int8)
                        .argmax(1) + 1, 0)
                    self._progress(group, "warmup" if warm else "sampling", step, total,
                                   acc_sum / step, state, div_sum, hits, first)
                # draws go out every `draws_chunk` draws, or after a second (a live view's
                # running diagnostics), not with every progress event: a run record keeps
                # one file per chunk
                if not warm and (step - emitted >= mc.draws_chunk or
                                 (step > emitted and now - last_chunk >= 1.0)):
                    emitted = self._draws(group, zs, emitted, step)
                    last_chunk = now
                if pump is not None:
                    pump()
            self._running = None
            if done[group[0]] > emitted:
                emitted = self._draws(group, zs, emitted, done[group[0]])
            step_sizes[idx] = state.step_size
            if state.mass.inv is not None:
                if inv_mass is None:
                    inv_mass = torch.zeros(C, *state.mass.inv.shape[1:], dtype=dtype,
                                           device=device)
                inv_mass[idx] = state.mass.inv
            if cancelled:
                break
        return dict(zs=zs, rec=rec, rec_l=rec_l, rec_b=rec_b, warm_div=warm_div,
                    warm_steps=warm_steps, step_sizes=step_sizes, inv_mass=inv_mass, done=done, t_warm=t_warm,
                    t_samp=t_samp, cancelled=cancelled, evals=self.target.num_evals - evals0)

    # ------------------------------------------------------------------ events
    def _heartbeat(self) -> None:
        """Before each gradient evaluation: when no progress went out for `HEARTBEAT_S`
        seconds (one slow iteration, or the first), a progress event per chain of the
        running block: its phase and the iterations done, the divergences counted so far
        and ``gradients_in_iteration``, the gradients the block has taken."""
        if self._running is None or not self.throttle.quiet_for(HEARTBEAT_S):
            return
        group, phase, step, total, evals0 = self._running
        n = float(self.target.num_evals - evals0)
        for c in (self.chain_ids[g] for g in group):
            metrics = dict(self._said.get((c, phase), {}))
            metrics["gradients_in_iteration"] = n
            self.emit(FitProgress(method=self.method, phase=phase, step=step, total=total,
                                  chain=c, metrics=metrics, elapsed=self.emit.elapsed))

    def _progress(self, group, phase, step, total, acc_mean, state, div_sum, hits,
                  first=None) -> None:
        acc_mean, eps, depth = acc_mean.tolist(), state.step_size.tolist(), \
            state.tree_depth.tolist()
        nsteps, divs, lp = state.num_steps.tolist(), div_sum.tolist(), \
            state.log_density.tolist()
        hits = hits.tolist() if hits is not None else None
        first = first.tolist() if first is not None else None
        for k, c in enumerate(self.chain_ids[g] for g in group):
            metrics = {"accept_prob": float(acc_mean[k]), "step_size": float(eps[k]),
                       "tree_depth": float(depth[k]), "num_steps": float(nsteps[k]),
                       "divergences": float(divs[k]), "log_density": float(lp[k])}
            if hits is not None:
                metrics["max_depth_hits"] = float(hits[k])
            if first is not None and first[k]:
                metrics["first_divergence"] = float(first[k])
            # what a heartbeat repeats (a consumer reads a missing count as 0)
            self._said[(c, phase)] = {k: v for k, v in metrics.items() if k in (
                "divergences", "max_depth_hits", "first_divergence")}
            self.emit(FitProgress(method=self.method, phase=phase, step=step, total=total,
                                  chain=c, metrics=metrics, elapsed=self.emit.elapsed))

    def _draws(self, group, zs, start: int, end: int) -> int:
        if self.emit.on_event is None or end <= start:
            return end
        idx = torch.tensor(group, device=zs.device)
        values = self.target.constrain(zs[idx, start:end])
        for k, c in enumerate(self.chain_ids[g] for g in group):
            draws = {n: v[k].detach().cpu().numpy() for n, v in values.items()}
            self.emit(DrawsChunk(chain=c, start=start, draws=draws))
        return end

    # ------------------------------------------------------------------ result
    def _result(self, zs, rec, rec_l, rec_b, warm_div, warm_steps, step_sizes, inv_mass,
                done, t_warm, t_samp, cancelled, evals) -> MCMCResult:
        mc = self.mc
        S = mc.num_samples
        C = zs.shape[0]
        keep = list(range(C))
        n = S
        if cancelled:
            full = [c for c in range(C) if done[c] == S]
            if full:
                keep, n = full, S
            else:
                n = max(done) if done else 0
                # every chain when none has drawn (shapes (C, 0): the run had C chains)
                keep = [c for c in range(C) if done[c] == n] if n else list(range(C))
        idx = torch.tensor(keep, device=zs.device)
        zs = zs[idx, :n]
        samples = self.target.constrain(zs)
        samples = {k: (v.unsqueeze(-1) if v.dim() == 2 else v) for k, v in samples.items()}
        div = rec_b["diverging"][idx, :n]
        acc = rec_b["accepted"][idx, :n]
        moved = acc.to(zs.dtype).sum(1) / max(n, 1)  # accepted (HMC) / moved (NUTS)
        probs = rec["accept_prob"][idx, :n].to(zs.dtype)
        rates = probs.nan_to_num(0.0).mean(1) if n else torch.full_like(moved, float("nan"))
        from qvr.inference.criticism.diagnostics import ess_basic, split_rhat_basic
        r_hat, ess = {}, {}
        for k, v in samples.items():
            arr = v.detach().cpu().double().numpy()
            shape = tuple(v.shape[2:])
            if n == 0:  # cancelled before the first draw
                r_hat[k] = torch.full(shape, float("nan"), dtype=zs.dtype)
                ess[k] = torch.full(shape, float("nan"), dtype=zs.dtype)
                continue
            r_hat[k] = torch.as_tensor(np.asarray(split_rhat_basic(arr)).reshape(shape),
                                       dtype=zs.dtype)
            ess[k] = torch.as_tensor(np.asarray(ess_basic(arr)).reshape(shape), dtype=zs.dtype)
        return MCMCResult(
            samples=samples, log_densities=rec["log_density"][idx, :n],
            acceptance_rates=rates, divergence_counts=div.to(zs.dtype).sum(1),
            r_hat=r_hat, ess=ess, num_warmup=mc.num_warmup, num_samples=n,
            energies=rec["energy"][idx, :n],
            step_sizes=step_sizes[idx], accept_probs=rec["accept_prob"][idx, :n],
            diverging=div, tree_depths=rec_l["tree_depth"][idx, :n],
            num_steps=rec_l["num_steps"][idx, :n], warmup_divergences=warm_div[idx],
            warmup_num_steps=warm_steps[idx],
            inverse_mass_matrix=inv_mass[idx] if inv_mass is not None else None,
            unconstrained=zs, warmup_time=t_warm, sampling_time=t_samp,
            num_grad_evals=evals, cancelled=cancelled, method=self.method,
            compiler=self.kernel.compiler_used(self.target),
            compiler_notes=self.kernel.compiler_notes(self.target), moved_rates=moved)
