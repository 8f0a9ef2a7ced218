"""`NUTSKernel`: the No-U-Turn Sampler, multinomial, iterative, chains batched (spec 6.6.5).

One iteration from `(z0, p0)`, `H0 = H(z0, p0)`, leaf weight `w = exp(-H(leaf))`:

1. The trajectory is `{(z0, p0)}`, the proposal `z0`, depth `j = 0`.
2. While not terminated and `j < max_tree_depth`: pick a direction uniformly; build a
   subtree of `2^j` leapfrog steps from that end of the trajectory.  A leaf whose energy
   error `H - H0` exceeds `divergence_threshold` (or is not finite) is divergent and
   terminates the subtree; so does a U-turn of any of its power-of-two sub-subtrees.  A
   subtree that did not terminate may replace the proposal and extends the trajectory;
   then the whole trajectory is checked for a U-turn.
3. The new state is the proposal; the acceptance statistic is the mean of
   `min(1, exp(H0 - H_leaf))` over all leaves built; the iteration *diverged* if any
   leaf did; it is *accepted* if the new position differs from `z0`.

Two choices, each with the spec's rule available:

* ``transition`` — how a finished subtree replaces the iteration's proposal.
  ``"biased"`` (default; Stan's and Pyro's biased progressive sampling): with probability
  `min(1, W_sub / W_current)`.  ``"uniform"`` (spec 6.6.5 verbatim): with probability
  `W_sub / (W_current + W_sub)`.
* ``uturn`` — the termination criterion.  ``"momentum"`` (default; Betancourt's
  generalised criterion, as Stan and Pyro): a (sub)tree whose momenta sum to `rho` turns
  when `v- . rho <= 0` or `v+ . rho <= 0` (`v = M^-1 p` at its two ends); and, as Stan
  since 2.23 and nutpie, at every merge of two halves (inside subtrees and of a subtree
  into the trajectory) the left half with the right half's first leaf and the left
  half's last leaf with the right half must not turn either (`ops.turning_across`).
  Without these (NumPyro's iterative checks, ours until 2026-12) a trajectory can run
  past its U-turn: an iid Normal in 10 dimensions at step 0.88 took 10.7 leapfrogs per
  draw against 4.8 with them (nutpie 4.76), and under adaptation 67.
  ``"displacement"`` (nutpie's trees): a span turns when `(z+ - z-) . p- <= 0` or
  `(z+ - z-) . p+ <= 0` (Hoffman and Gelman's test in the metric's own coordinates:
  momenta, not velocities, so any metric gives the test a standard Normal gets;
  `ops.turning_dz`), with the same checks across merges.  `z+ - z-` sums the half-step
  velocities, so against `rho` it carries a term in the end gradients that sees a stiff
  direction's oscillation: trees are shorter where the posterior has one.
  ``"position"`` (spec 6.6.5 verbatim): `(z+ - z-) . v- < 0` or `(z+ - z-) . v+ < 0`.

Decision (2026-12, issue 37; recorded here and in that stop's closing note): the default
stays ``"momentum"``. nutpie's trees are shorter than Stan's at the same step and metric
(a 2-D Gaussian with correlation 0.95 at nutpie's adapted step: 5.69 leapfrogs per draw
against 7.0 for a reference recursive Stan NUTS and for ours); the displacement test
reproduces nutpie's distribution of tree sizes (5.64; share of 1-leapfrog trees 0.146
against nutpie's 0.147, of 15-leapfrog trees 0.061 against 0.049). With it our warmup
leapfrogs fall to nutpie's (4 x (1000 + 1000): kid_scores 60.6-61.2k against 71.4-72.4k,
nutpie 59.3-59.9k; arK 81.9-84.0k against 89.0-93.2k, nutpie 81.1-82.0k; garch
28.7-29.1k against 32.9-34.1k, nutpie 29.4-29.5k; hmm 25.6-26.3k against 28.8-29.2k,
nutpie 25.7-25.8k; eight schools unchanged at 28.6-29.0k, nutpie 27.6-28.0k). But on
gp_pois_regr, whose step is set by a narrow neck, the minimum bulk ESS fell from 801,
713, 837, 624 (seeds 1-4) to 716, 265, 484, 173 (nutpie, seeds 1-6: 371-873, mean 611),
and using it for warmup only still gave 839, 351, 714, 265: the shorter warmup trees
adapt worse there. Its divergences are nutpie's, though (gp_pois_regr seed 1: 48 while
sampling against 156 with momentum, nutpie 37-46 over seeds 1-3, at the same metric to
two digits and like step sizes): the longer momentum trees spend more leapfrogs in the
neck, where the divergences are, and find more effective draws there. Over the other
five, leapfrogs per effective draw moved by -4 % to +13 % (seed noise of the same
order). A criterion that loses a third of the hardest posterior's effective draws to
save a tenth of the easy ones' warmup is not a default.

Re-measured 2026-12-07 with the step jitter on (`step_size_jitter`, 0.1, nutpie's; the
runs above had none, and part of displacement's loss on gp_pois_regr was a fixed
step's: nutpie with its jitter off gets ESS 32-37 in 2 of 8 seeds there).
gp_pois_regr, compiled, seeds 1-10: displacement min bulk ESS 447-874 but 65 (R-hat
1.051) on seed 9, 30-83 divergences (nutpie 37-55); momentum 358-921, none below,
120-182 divergences.  `bench/warmup.py --compare uturn`, seeds 1 and 2: momentum's
warmup leapfrogs 1.00-1.23x displacement's (kid_scores 1.19-1.23x), its effective draws
per leapfrog (warmup included) 0.79-1.11x on the five easy posteriors and 1.26-2.00x on
gp_pois_regr.  The default stays ``"momentum"``.  Displacement for warmup only, then
momentum (leaf by leaf; seeds 1-4 gp_pois_regr, 1-5 eight schools, 1-3 hmm, 1-2
kid_scores, 1 the others): warmup leapfrogs 0.97-1.05x nutpie's on all six; min bulk
ESS against momentum on the same seeds about even, with one outlier each way
(gp_pois_regr 739, 887, 763, 266 vs 683, 881, 861, 733; eight schools 1208, 2239, 1897,
2172, 2176 vs 1991, 2394, 2201, 2031, 2104; hmm 1772, 1380, 1404 vs 1284, 1459, 1303;
kid_scores 688, 838 vs 620, 780).  Built and measured on the compiled loop 2026-12-07
(a `warmup_uturn` option with one package per criterion, the second compiled in the
background; seeds 1-6 on all six, 4 x (1000 + 1000)), then removed: momentum's warmup
leapfrogs were 1.01-1.03x (eight schools), 1.16-1.20x (kid_scores), 1.08-1.11x (arK),
1.09-1.15x (garch), 1.13-1.16x (hmm) and 1.05-1.09x (gp_pois_regr) those of warmup-only
displacement, and its effective draws per leapfrog (warmup included) 0.84-1.26x on the
five easy posteriors (median about 0.92); but gp_pois_regr's min bulk ESS fell to 898,
233, 660, 821, 731, 650 against momentum's 612, 879, 575, 772, 975, 852, and to 537,
751, 471, 102, 424, 725 with displacement only while the metric adapts (momentum for the
final step-size window).  Where it gains it gains what ``uturn="displacement"`` gains,
and it loses on the hard posterior as that does: no niche for a third setting.

Decision (recorded here and in the closing note of issue 4): the spec keeps the legacy
uniform merge and position criterion "as in the legacy runtime", not because they are
better; both leave the posterior invariant, but on the benchmark models they give about
half the effective samples per draw of the Stan/Pyro rules (normal-normal: bulk ESS 754
vs 1569 from the same 4000 draws), and the issue asks for effective samples per second.
So the defaults are the Stan/Pyro rules and
`NUTSKernel(transition="uniform", uturn="position")` is the spec's algorithm exactly.

Implementation.  The subtree is built leaf by leaf (no recursion): the proposal inside it
is sampled progressively (leaf `n` replaces it with probability `w_n / W_sub`, which is
exactly the multinomial over the subtree's leaves that the recursive merge produces), and
the U-turn checks of the sub-subtrees ending at leaf `n` use checkpoints stored at even
leaves, indexed by bit counts of `n` (NumPyro's iterative scheme).  All `C` chains advance
in lockstep: leaf `n` of depth `j` is one batched gradient evaluation for every chain that
is still building; finished chains are masked.  A leaf is one compiled call (`tick.py`:
a TorchScript leaf with the U-turn checks in Python, or, on long runs, leaf and checks as
one Inductor C++ kernel), so the Python overhead per leaf is independent of the number of
chains.

References:
  Hoffman & Gelman (2014), The No-U-Turn Sampler, JMLR 15.
  Betancourt (2017), A Conceptual Introduction to Hamiltonian Monte Carlo, appendix A.
  Phan, Pradhan & Jankowiak (2019), Composable Effects ... in NumPyro (iterative NUTS).
"""
from __future__ import annotations

import functools
import math
import weakref
from dataclasses import replace

import torch

from qvr.events import STEPS_COMPILED, STEPS_LEAF_BY_LEAF
from qvr.inference.mcmc import ops
from qvr.inference.mcmc import tick as ticks
from qvr.inference.mcmc import transition as transitions
from qvr.inference.mcmc import transition_cache, transition_rows
from qvr.inference.mcmc.adaptation import DualAveragingState, Welford
from qvr.inference.mcmc.ops import fused
from qvr.inference.mcmc.kernel import HMCBase, HMCState, Steps, Transition

#: the end of the note (a `FitNote`, and a compiler note of the run) that says a run goes
#: on without the compiled transition it tried to build
FALLBACK = "NUTS goes on without it, leaf by leaf (slower)"


def fallback_note(why: str) -> str:
    """What a run says when its transition did not compile: `why` (`compile_transition`'s
    reason) and that the run goes on leaf by leaf."""
    return f"{why}; {FALLBACK}"


class NUTSKernel(HMCBase):
    """The No-U-Turn Sampler.

    Args:
      step_size: initial step size (> 0).
      max_tree_depth: at most `2^max_tree_depth - 1` leapfrog steps per iteration (>= 1).
      mass_matrix: ``"diagonal"`` (default), ``"identity"`` or ``"dense"``.
      target_accept: dual-averaging target in (0, 1) (default 0.8).
      divergence_threshold: energy error above which a leaf is divergent.
      adapt_step_size, adapt_mass_matrix: warmup adaptation switches.
      warmup_schedule: ``"fisher"`` (nutpie's, the default), ``"windowed"`` (Stan) or
        ``"end"`` (one update at the end); see `kernel`.
      transition: how a finished subtree replaces the iteration's proposal:
        ``"biased"`` (default: Stan's and Pyro's biased progressive sampling, probability
        `min(1, W_sub / W_current)`, which favours the far end of the trajectory and gives
        more effective samples per draw) or ``"uniform"`` (the spec's unbiased
        multinomial merge, probability `W_sub / (W_current + W_sub)`).  Both leave the
        posterior invariant.
      uturn: termination criterion: ``"momentum"`` (default: the generalised criterion
        on summed momenta, as Stan and Pyro), ``"displacement"`` (`(z+ - z-) . p`,
        nutpie's shorter trees) or ``"position"`` (the spec's `(z+ - z-) . M^-1 p`
        test).  See the module docstring for the decisions.
      compiler: how a leaf is run when the model's density compiles (`tick.py`):
        ``"auto"`` (default: TorchScript, switching to an Inductor C++ kernel at
        iteration 50, 100, 200, 400, ... once the rest of the run is long enough for the
        compile to pay; the environment variable ``QVR_MCMC_COMPILER`` may override it),
        ``"torchscript"`` (never Inductor) or ``"inductor"`` (from the first iteration).
        Inductor falls back to TorchScript when it or a C++ compiler is unavailable,
        when its kernel disagrees with PyTorch, or when the kernel raises at run time
        (the leaf is then recomputed by TorchScript): never does it fail the fit.
        With ``"auto"``, a whole transition not yet on disk is compiled in a background
        thread while the first iterations run leaf by leaf; the compiled loop takes over
        at the first block boundary after it is ready (`compiler_notes` says at which
        iteration).  `background_compile=False` waits for it instead (as
        ``"transition"`` always does: where the loop takes over depends on the compile's
        duration, so only those runs are reproducible from a seed on a first run).
        `compiler_used(target)` / `compiler_notes(target)` (in the result:
        `MCMCResult.compiler` / `compiler_notes`) say how the steps ran and why.
      step_size_jitter: each iteration steps by `eps * (1 + jitter * U(-1, 1))`, one
        draw per chain, in warmup and sampling alike; dual averaging adapts the
        unjittered `eps`.  Default 0.1, nutpie's (Stan's is 0).  Measured on
        gp_pois_regr, 4 x (1000 + 1000): without it a chain sometimes stays for hundreds
        of draws at large `alpha` and `rho`, diverging (R-hat 1.14-2.0, min bulk ESS
        17-30, 363-581 divergences, in 4 of 14 runs over seeds 1-8 and both compilers;
        nutpie with its jitter off: R-hat 1.09, ESS 32-37 in 2 of 8 seeds); with it, 1
        in 18 (seeds 1-10 compiled: R-hat <= 1.009, min ESS 358-921; seeds 1-8 leaf by
        leaf: seed 5 R-hat 1.34, ESS 31, the others <= 1.011 and 464-881; nutpie with
        its jitter, seeds 1-8: none, 371-873).  Short warmups stay fragile there, as
        nutpie's: 4 x (250 + 250) left a chain unadapted in 2 of 10 seeds (nutpie 2 of 8).

    Example:
      >>> kernel = NUTSKernel(step_size=0.1, max_tree_depth=3, target_accept=0.8)
    """

    #: the fixed-metric window restarts only dual averaging's average (`HMCBase`)
    final_restart = "average"
    method = "nuts"

    def __init__(self, step_size: float = 0.1, max_tree_depth: int = 10,
                 mass_matrix: str = "diagonal", target_accept: float = 0.8,
                 divergence_threshold: float = 1000.0, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, warmup_schedule: str = "fisher",
                 find_step_size: bool = True, transition: str = "biased",
                 uturn: str = "momentum", compiler: str = "auto",
                 background_compile: bool = True, step_size_jitter: float = 0.1):
        super().__init__(step_size, mass_matrix, target_accept, divergence_threshold,
                         adapt_step_size, adapt_mass_matrix, warmup_schedule, find_step_size,
                         step_size_jitter)
        if not (isinstance(max_tree_depth, int) and max_tree_depth >= 1):
            raise ValueError(f"max_tree_depth must be an integer >= 1, got {max_tree_depth}")
        if transition not in ("uniform", "biased"):
            raise ValueError(f"transition must be 'uniform' or 'biased', got {transition!r}")
        if uturn not in ops.UTURNS:
            raise ValueError(f"uturn must be one of {ops.UTURNS}, got {uturn!r}")
        if compiler not in ticks.COMPILERS:
            raise ValueError(f"compiler must be one of {ticks.COMPILERS}, got {compiler!r}")
        self.max_tree_depth = max_tree_depth
        self.transition = transition
        self.uturn = uturn
        self.compiler = compiler
        self.background_compile = background_compile
        self._tick_caches = {}  # id(target) -> (weak reference, tick.TickCache)

    def config(self) -> dict:
        return {**super().config(), "max_tree_depth": self.max_tree_depth,
                "transition": self.transition, "uturn": self.uturn, "compiler": self.compiler}

    #: leapfrogs per iteration a run is reckoned at when it decides whether to trace the
    #: density: the tree of depth 5, a typical adapted one (eight schools ~7, kid_scores
    #: ~31), not `max_tree_depth`'s bound
    TYPICAL_LEAPFROGS = 31

    def expected_evaluations(self, num_warmup: int, num_samples: int):
        """`HMCBase.expected_evaluations`: None when the leaves or the whole transition
        are to be compiled, which needs the traced density (``"inductor"``,
        ``"transition"``, and ``"auto"`` on a run long enough for the transition:
        `_whole_transition`'s rule)."""
        setting = ticks.resolve_compiler(self.compiler)
        if setting in ("inductor", "transition") or (
                setting == "auto" and num_warmup + num_samples >=
                transitions.AUTO_MIN_ITERATIONS):
            return None
        per = min(self.TYPICAL_LEAPFROGS, 2 ** self.max_tree_depth - 1)
        return (num_warmup + num_samples) * per + self.EXTRA_EVALUATIONS

    # ------------------------------------------------------------------ ticks
    def tick_cache(self, target) -> ticks.TickCache:
        """This kernel's ticks for `target` (`tick.TickCache`), made on first use and
        forgotten with the target.  Held here, never on the target."""
        entry = self._tick_caches.get(id(target))
        if entry is not None and entry[0]() is target:
            return entry[1]
        cache = ticks.TickCache()
        try:
            ref = weakref.ref(target, functools.partial(_forget, self._tick_caches,
                                                        id(target)))
        except TypeError:  # not weakly referable: kept as long as the kernel
            ref = functools.partial(_same, target)
        self._tick_caches[id(target)] = (ref, cache)
        return cache

    def _known_cache(self, target):
        entry = self._tick_caches.get(id(target))
        return entry[1] if entry is not None and entry[0]() is target else None

    def compiler_used(self, target) -> str:
        """How the last iteration on `target` ran its leaves: ``"inductor"``,
        ``"torchscript"`` or ``"eager"`` (``""`` before any)."""
        cache = self._known_cache(target)
        return cache.last if cache is not None else ""

    def compiler_notes(self, target) -> list:
        """What became of compiling the leaves on `target`, in order (a new list of
        sentences: ``"compiled by Inductor"``, why Inductor was not used or was dropped
        for TorchScript, why the density runs eagerly)."""
        cache = self._known_cache(target)
        if cache is None:
            return []
        waiting = ["the C++ compile started in the background had not finished when the "
                   "run ended: its steps ran leaf by leaf"] if cache.pending else []
        return list(cache.notes) + waiting

    def _tick(self, state: HMCState, target, z0: torch.Tensor, dense: bool, K: int):
        """The tick (`tick.py`) for this iteration."""
        uturn = self.uturn
        thr = self.divergence_threshold
        setting = ticks.resolve_compiler(self.compiler)
        cache = self.tick_cache(target)
        tick = cache.get(target, z0, dense, thr, uturn, K)
        want = setting == "inductor"
        if setting == "auto" and not cache.pending:  # (no leaf compile beside the loop's)
            # reconsidered at fixed iterations from the ticks taken since the last
            # probe (never from a clock: a seeded run stays reproducible)
            if state.i == 0:
                cache.probe = (0, target.num_evals)
            elif ticks.is_probe(state.i) and tick.backend == "torchscript":
                i0, evals0 = cache.probe
                cache.probe = (state.i, target.num_evals)
                per_iter = (target.num_evals - evals0) / max(state.i - i0, 1)
                left = per_iter * (state.num_warmup + state.num_samples - state.i)
                want = ticks.worth_compiling(tick.num_ops, left)
                if not want and ticks.worth_compiling(tick.num_ops, 3 * left):
                    ticks.prewarm_if_idle()  # a head start for a compile that may come
        if want and tick.backend == "torchscript":
            tick = cache.get(target, z0, dense, thr, uturn, K, want_inductor=True)
        return tick

    def prepare(self, state: HMCState, target, note=None, should_stop=None) -> None:
        """Compile (or load) the whole transition before the first iteration, when this
        run will use it, saying so through `note` when it is not on disk; a compile
        gives up as soon as `should_stop()` is true (the run is being cancelled)."""
        z0 = state.z.contiguous()
        self._whole_transition(state, target, z0, state.mass.dense, self.max_tree_depth,
                               note, should_stop)

    def _whole_transition(self, state: HMCState, target, z0, dense: bool, K: int,
                          note=None, should_stop=None):
        """The compiled whole transition (`transition.py`) for this run, or None (the
        leaves then run as ticks).  ``"transition"`` always asks for it; ``"auto"`` when
        the run has at least `transitions.AUTO_MIN_ITERATIONS` iterations (a rule on the
        run's length only, decided the same way whatever the disk cache holds, so that a
        seeded run's draws do not depend on what ran before it)."""
        setting = ticks.resolve_compiler(self.compiler)
        if setting not in ("auto", "transition"):
            return None
        if setting == "auto" and state.num_warmup + state.num_samples < \
                transitions.AUTO_MIN_ITERATIONS:
            return None
        cache = self.tick_cache(target)
        T = transitions.block_size(*z0.shape, K)
        key = ("transition", *cache.key(z0, dense, self.divergence_threshold,
                                        self.uturn, K), self.transition, T)
        job = cache.pending.get(key)
        if job is not None:
            if not job[0].done():
                return None  # still compiling: this block runs leaf by leaf
            del cache.pending[key]
            compiled, said = job[0].result()
            if compiled is None:
                said = fallback_note(said)
            else:
                said = (f"the whole NUTS transition, compiled in the background (a C++ "
                        f"loop of up to {T} transitions a call), took over from the "
                        f"leaf-by-leaf steps at iteration {state.i}")
            if job[1] is not None:
                job[1](said, path=STEPS_COMPILED if compiled is not None else "")
            cache.notes.append(said)
            cache.transitions[key] = compiled
        if key not in cache.transitions:
            cache.transitions[key] = None
            graph_for = getattr(target, "density_graph", None)
            graph = graph_for(z0) if graph_for is not None else None
            if graph is None:
                opaque = getattr(target, "not_exportable", lambda z: None)(z0)
                why = getattr(target, "compile_notes", {}).get(z0.shape[0])
                cache.notes.append("the whole transition was not compiled: " + (
                    opaque if opaque is not None else "the density is "
                    + (f"not compiled ({why})" if why else "not compiled")))
            else:
                cached = transition_cache.is_cached(
                    graph, z0, dense, self.divergence_threshold,
                    self.uturn, K, self.transition == "biased", T)
                job = None
                if not cached and setting == "auto" and self.background_compile:
                    settings = (graph, z0, dense, self.divergence_threshold, self.uturn,
                                K, self.transition == "biased", T)
                    # issue 37.3: the package built for another row count of this program
                    # runs this one from the first iteration (~1.15x a package of its
                    # own); that one is compiled in the background for later runs
                    generic, said = transition_rows.load(*settings)
                    if said is not None:
                        cache.notes.append(said)
                    if generic is not None:
                        if note is not None:
                            note(said, path=STEPS_COMPILED)
                        try:
                            transition_cache.BackgroundCompile(*settings)
                        except Exception:  # later runs use the generic package as well
                            pass
                        cache.transitions[key] = generic
                        cache.last = "transition"
                        return generic
                    # issue 37.4: no wait for the compiler; the steps run leaf by leaf
                    # until the package is ready (a seeded run is reproducible only with
                    # an explicit compiler: where the compiled loop takes over depends
                    # on how long the compile takes).  With probes at other row counts,
                    # the worker then builds one package for every row count
                    try:
                        job = transition_cache.BackgroundCompile(
                            *settings, rows=transition_rows.probes(target, graph, z0))
                    except Exception as exc:  # no worker (the graph does not pickle, ...)
                        cache.notes.append(f"no background compile ({type(exc).__name__}: "
                                           f"{str(exc)[:200]}); compiling before the "
                                           f"first iteration instead")
                if job is not None:
                    if note is not None:
                        note("compiling NUTS to C++ in the background (once per model: "
                             "tens of seconds); sampling leaf by leaf meanwhile",
                             path=STEPS_LEAF_BY_LEAF)
                    cache.pending[key] = (job, note)
                    return None
                if note is not None and not cached:
                    note("compiling NUTS to C++ (once per model: tens of seconds)")
                compiled, said = transition_cache.compile_transition(
                    graph, z0, dense, self.divergence_threshold, self.uturn,
                    K, self.transition == "biased", T, should_stop=should_stop)
                if said == transition_cache.STOPPED:  # cancelled: a later run compiles again
                    cache.notes.append(said)
                    del cache.transitions[key]
                    return None
                if compiled is None:  # said where the user looks: console, record, dashboard
                    said = fallback_note(said)
                    if note is not None:
                        note(said)
                cache.notes.append(said)
                cache.transitions[key] = compiled
        compiled = cache.transitions[key]
        if compiled is not None:
            cache.last = "transition"
        return compiled

    # ------------------------------------------------------------------ compiled blocks
    def sample(self, state: HMCState, target) -> HMCState:
        """One iteration: a block of one when the whole transition is compiled."""
        compiled = self._whole_transition(state, target, state.z.contiguous(),
                                          state.mass.dense, self.max_tree_depth)
        if compiled is not None:
            done = self._run_block(compiled, state, target, 1)
            if done is not None:
                return done[0]
        return super().sample(state, target)

    def sample_block(self, state: HMCState, target, max_n: int):
        """Up to `max_n` iterations as one compiled call (`transition.block_function`:
        momenta and uniforms drawn here, dual averaging and the Welford window inside the
        loop), cut at the end of warmup and at each of the state's `mass_updates` (a slow
        window's end, a Fisher update point), whose new metric and step-size search follow
        in Python (`_adapt_window`).  Without a compiled
        transition: one iteration."""
        compiled = self._whole_transition(state, target, state.z.contiguous(),
                                          state.mass.dense, self.max_tree_depth)
        if compiled is not None:
            k = min(int(max_n), compiled.T)
            if state.warming_up:
                k = min(k, state.num_warmup - state.i)
                ends = [m for m in state.mass_updates if m >= state.i]
                if ends:
                    k = min(k, min(ends) - state.i + 1)
            done = self._run_block(compiled, state, target, max(k, 1))
            if done is not None:
                return done
        return super().sample_block(state, target, max_n)

    def _run_block(self, compiled, state: HMCState, target, k: int):
        """`(state, Steps)` after `k` iterations by the compiled block, or None if it
        raised (it is then dropped for good, the reason noted, and the steps run as
        ticks)."""
        z0, lp0, g0 = (t.contiguous() for t in (state.z, state.log_density, state.grad))
        C, D = z0.shape
        T = compiled.T
        dtype, device = z0.dtype, z0.device
        mass = state.mass
        inv = mass.as_tensor(z0).contiguous()
        P = torch.zeros(T, C, D, dtype=dtype, device=device)
        P[:k] = mass.sample_momentum(P[:k])
        U = torch.empty(T, C, transitions.table_width(self.max_tree_depth), dtype=dtype,
                        device=device)
        U[:k].uniform_()
        U[k:].zero_()
        warm = state.warming_up
        da = state.da if warm else None
        welford = state.welford if warm else None
        args = transitions.idle_adaptation(C, D, mass.dense, dtype, device)
        if da is not None:
            args[0] = torch.stack([da.log_step, da.log_step_avg, da.h_bar, da.mu,
                                   torch.full_like(da.log_step, float(da.t)),
                                   torch.full_like(da.log_step, float(da.t_avg))], -1)
        lo, hi = state.slow_range if welford is not None else (0, -1)
        if welford is not None:
            args[1] = torch.cat([welford.mean, welford.m2.reshape(C, -1)], -1)
            args[2] = torch.full((C,), float(welford.n), dtype=dtype, device=device)
        args[3] = torch.tensor([state.i, state.num_warmup if da is not None else 0, lo, hi],
                               dtype=torch.long, device=device)
        d = self.dual_averaging
        args[4] = torch.tensor([d.target, d.gamma, d.t0, d.kappa, self.step_size_jitter],
                               dtype=dtype, device=device)
        limit = torch.tensor(k, dtype=torch.long, device=device)
        try:
            with torch.no_grad():
                out = compiled(z0, lp0, g0, inv, state.step_size.contiguous(), P, U, limit,
                               *args)
        except Exception as exc:
            cache = self.tick_cache(target)
            for key, value in cache.transitions.items():
                if value is compiled:
                    cache.transitions[key] = None
            cache.notes.append(f"the compiled transition failed during the run "
                               f"({type(exc).__name__}: {str(exc)[:200]}); the steps ran "
                               f"on ticks")
            return None
        target.num_evals += int(out.passes)
        rec = out.rec[:k]
        z = rec[..., :D]
        before = torch.cat([z0.unsqueeze(0), z[:-1]], 0)
        steps = Steps(z, rec[..., D], rec[..., D + 1], (z != before).any(-1),
                      rec[..., D + 3] != 0, rec[..., D + 4].to(torch.long),
                      rec[..., D + 5].to(torch.long), rec[..., D + 2])
        new = replace(state, i=state.i + k, z=out.z, log_density=out.log_density,
                      grad=out.grad, accept_prob=steps.accept_prob[-1],
                      accepted=steps.accepted[-1], diverging=steps.diverging[-1],
                      num_steps=steps.num_steps[-1], tree_depth=steps.tree_depth[-1],
                      energy=steps.energy[-1])
        if da is not None:
            new.step_size = out.eps
            new.da = DualAveragingState(out.da[:, 0], out.da[:, 1], out.da[:, 2],
                                        out.da[:, 3], int(out.da[0, 4]), int(out.da[0, 5]))
        if warm and state.fisher is not None:
            new.fisher.add(z, rec[..., D + len(transitions.REC_COLUMNS):], steps.accepted)
        if welford is not None:
            w = Welford(C, D, dense=welford.dense, dtype=dtype, device=device)
            w.n = int(out.welford_n[0])  # the block counts what it folded in
            w.mean = out.welford[:, :D]
            w.m2 = out.welford[:, D:].reshape(welford.m2.shape)
            new.welford = w
        if warm:
            new = self._adapt_window(new, target, state.i + k - 1)
        return new, steps

    def _transition(self, state: HMCState, target) -> Transition:
        mass = state.mass
        # contiguous, as a compiled tick assumes (a no-op for the tensors NUTS makes)
        z0, logp0, grad0 = (t.contiguous() for t in (state.z, state.log_density, state.grad))
        p0 = mass.sample_momentum(z0)
        eps = self._jittered(state.step_size)
        K = self.max_tree_depth
        inv, dense = mass.as_tensor(z0).contiguous(), mass.dense
        h0 = -logp0 + mass.kinetic(p0)
        tick = self._tick(state, target, z0, dense, K)
        # a compiled tick computes gradients itself: no autograd graph through the leaves
        # (a model with trainable parameters would record one; Inductor's out= kernels
        # refuse to run under autograd)
        if tick.backend == "eager":  # the target's own evaluation: autograd as it likes
            return self._build(state, target, tick, K, z0, logp0, grad0, p0, h0, inv,
                               self.uturn, eps)
        # the public function form of `set_grad_enabled` (0.6 us a call here; the
        # `torch.no_grad()` context 1.2 us; the private `torch._C` setter 0.25 us: once per
        # iteration, the difference is below a thousandth of the smallest bench model's)
        grad_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        try:
            return self._build(state, target, tick, K, z0, logp0, grad0, p0, h0, inv,
                               self.uturn, eps)
        finally:
            torch.set_grad_enabled(grad_mode)

    def _build(self, state, target, tick, K, z0, logp0, grad0, p0, h0, inv, uturn,
               eps=None):
        """One transition leaf by leaf; `eps` the iteration's (jittered) step sizes, the
        state's when None."""
        mass = state.mass
        C = z0.shape[0]
        dtype, device = z0.dtype, z0.device
        eps = state.step_size if eps is None else eps
        neg_inf = torch.full((C,), -math.inf, dtype=dtype, device=device)
        # trajectory ends (left = backward end, right = forward end)
        zl, pl, gl = z0, p0, grad0
        zr, pr, gr = z0, p0, grad0
        # proposal of the trajectory; log-weights relative to H0
        zp, lpp, gp, hp = z0, logp0, grad0, h0
        log_w = torch.zeros(C, dtype=dtype, device=device)
        active = torch.isfinite(h0)
        depth = torch.zeros(C, dtype=torch.long, device=device)
        rho = p0  # momenta summed over the trajectory (generalised U-turn criterion)
        # what the ticks carry from one subtree to the next (the acceptance statistics,
        # leaf counts and divergence flags of the whole iteration; checkpoint slots are
        # written before they are read within a subtree)
        ck_a, ck_v, ck_x = tick.checkpoints(K, z0)
        s = ticks.TickState(
            z=z0, p=p0, lp=logp0, g=grad0, sum_acc=torch.zeros(C, dtype=dtype, device=device),
            n_leaves=torch.zeros(C, dtype=torch.long, device=device),
            diverged=torch.zeros(C, dtype=torch.bool, device=device), sub_w=neg_inf,
            sz=zp, sg=gp, slp=lpp, sh=hp, psum=torch.zeros_like(z0), ck_a=ck_a, ck_v=ck_v,
            ck_x=ck_x, running=active, eps=eps.unsqueeze(-1), inv=inv, h0=h0,
            direction=torch.ones(C, 1, dtype=dtype, device=device))

        for j in range(self.max_tree_depth):
            if not bool(active.any()):
                break
            direction = torch.where(torch.rand(C, dtype=dtype, device=device) < 0.5,
                                    -1.0, 1.0).to(dtype)
            fwd = direction > 0
            fwd_col = fwd.unsqueeze(-1)
            step = eps * direction
            # a subtree from the chosen end, with its own proposal and weight (the
            # record spelled out: cheaper than _replace, once per subtree)
            s = ticks.TickState(
                torch.where(fwd_col, zr, zl), torch.where(fwd_col, pr, pl), s.lp,
                torch.where(fwd_col, gr, gl), s.sum_acc, s.n_leaves, s.diverged, neg_inf,
                zp, gp, lpp, hp, torch.zeros_like(z0), s.ck_a, s.ck_v, s.ck_x, active.clone(),
                step.unsqueeze(-1), s.inv, s.h0, direction.unsqueeze(-1))
            for n in range(2 ** j):
                u = torch.rand(C, dtype=dtype, device=device)
                if not tick.counts_itself:
                    target._count()  # num_evals, and the driver's progress heartbeat
                s = tick(s, u, n)
                if n + 1 < 2 ** j and not bool(s.running.any()):
                    break
            completed = s.running  # still running after its last leaf: not terminated
            # merge the subtree into the trajectory
            sub_w = s.sub_w
            new_log_w = torch.logaddexp(log_w, sub_w)
            u = torch.rand(C, dtype=dtype, device=device)
            if self.transition == "biased":
                take = completed & (torch.log(u) < sub_w - log_w)
            else:
                take = completed & (torch.log(u) < sub_w - new_log_w)
            tcol = take.unsqueeze(-1)
            zp = torch.where(tcol, s.sz, zp)
            gp = torch.where(tcol, s.sg, gp)
            lpp = torch.where(take, s.slp, lpp)
            hp = torch.where(take, s.sh, hp)
            log_w = torch.where(completed, new_log_w, log_w)
            if uturn != "position":  # the old trajectory's end beside the subtree, and
                p_near = torch.where(fwd_col, pr, pl)  # its other end
                p_far = torch.where(fwd_col, pl, pr)
                z_near = torch.where(fwd_col, zr, zl)
                z_far = torch.where(fwd_col, zl, zr)
            right = (completed & fwd).unsqueeze(-1)
            left = (completed & ~fwd).unsqueeze(-1)
            z, p, g = s.z, s.p, s.g
            zr, pr, gr = torch.where(right, z, zr), torch.where(right, p, pr), \
                torch.where(right, g, gr)
            zl, pl, gl = torch.where(left, z, zl), torch.where(left, p, pl), \
                torch.where(left, g, gl)
            depth = torch.where(active, torch.full_like(depth, j + 1), depth)
            if uturn == "displacement":
                # the whole trajectory, then Stan's checks across the merge: the old
                # trajectory with the subtree's first leaf (checkpoint slot 0), and the old
                # trajectory's end beside it with the subtree
                d = direction.unsqueeze(-1)
                turned = fused.turning_dz(zr - zl, pl, pr) \
                    | fused.turning_dz((s.ck_a[0] - z_far) * d, p_far, s.ck_v[0]) \
                    | fused.turning_dz((s.z - z_near) * d, p_near, s.p)
            elif uturn == "momentum":  # as above, on summed momenta
                p_first = s.ck_x[0]
                turned = fused.turning_rho(mass.velocity(pr), rho + s.psum,
                                           mass.velocity(pl)) \
                    | fused.turning_rho(mass.velocity(p_first), rho + p_first,
                                        mass.velocity(p_far)) \
                    | fused.turning_rho(mass.velocity(s.p), s.psum + p_near,
                                        mass.velocity(p_near))
                rho = torch.where(completed.unsqueeze(-1), rho + s.psum, rho)
            else:
                dz = zr - zl
                turned = ((dz * mass.velocity(pl)).sum(-1) < 0) | \
                    ((dz * mass.velocity(pr)).sum(-1) < 0)
            active = completed & ~turned

        n_leaves = s.n_leaves
        accept_prob = s.sum_acc / n_leaves.clamp(min=1).to(dtype)
        accepted = (zp != z0).any(-1)
        return Transition(zp, lpp, gp, accept_prob, accepted, s.diverged, n_leaves, depth,
                          hp)


def _forget(caches: dict, key: int, ref) -> None:
    """Drop a kernel's tick cache when its target goes away."""
    entry = caches.get(key)
    if entry is not None and entry[0] is ref:
        del caches[key]


def _same(target):
    return target
