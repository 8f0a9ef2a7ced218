"""HMC and NUTS behind `fit`: the `MCMC` driver with an `HMCKernel` or a `NUTSKernel` built
from the config; a `start_from` run gives the initial positions: its posterior means, an
SVI run's guide locations, or (``start_at="draws"``) the last draws of its chains, chain c
at the run's chain ``c mod C_run`` (`qvr.inference.front.start`), passed to the driver as
`MCMC.run(initial=...)`."""
from __future__ import annotations

import contextlib

from qvr.inference.methods.fit_result import FitContext, FitResult


def kernel_of(config):
    from qvr.inference.mcmc.hmc import HMCKernel
    from qvr.inference.mcmc.nuts import NUTSKernel
    kw = {"step_size": config.step_size,
          "warmup_schedule": {"fisher": "fisher", "stan": "windowed"}[config.adapt]}
    if config.target_accept is not None:
        kw["target_accept"] = config.target_accept
    if config.mass_matrix is not None:
        kw["mass_matrix"] = config.mass_matrix
    if config.step_jitter is not None:
        kw["step_size_jitter"] = config.step_jitter
    if config.method == "hmc":
        return HMCKernel(num_steps=config.num_steps, **kw)
    return NUTSKernel(max_tree_depth=config.max_tree_depth, uturn=config.uturn, **kw)


#: the intra-op threads HMC/NUTS sample with when neither `FitConfig.threads` nor
#: ``OMP_NUM_THREADS`` says: one.  A step's kernels (the compiled transition, a leaf, the
#: eager density of a small model) are microseconds of arithmetic on a few hundred
#: numbers; a second thread adds a hand-off, and on a busy machine it waits for a core.
#: Measured 2026-12-06 on the 2-core VM (issue 37.1), one thread against torch's default
#: (two): the eager Lotka-Volterra density and gradient (4 chains, an `ode` model: no
#: compiled transition) 12.6 vs 15.1 ms idle, 32.5 vs 35.2 ms beside two busy processes;
#: kid_scores 4 x (1000 + 1000) from the caches (compiled transition, `bench/threads.py`)
#: 13.4 vs 12.6 s idle and 18.6 vs 18.5 s beside two busy processes — the compiled loop
#: does not care, the eager path gains 8-19 %.  Cores are used through chains
#: (``chain_method="parallel"`` / ``"distributed"``), each process on one thread.
SAMPLING_THREADS = 1


@contextlib.contextmanager
def sampling_threads(threads=None):
    """torch's intra-op threads set to `threads` (or ``OMP_NUM_THREADS`` when the user set
    it, else `SAMPLING_THREADS`) while sampling; restored after."""
    import os

    import torch
    if threads is None:
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        threads = int(env) if env.isdigit() and int(env) > 0 else SAMPLING_THREADS
    before = torch.get_num_threads()
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _probes(resize):
    """`ProgramTarget.resized`: `resize(drop)`'s program and data as a target."""
    from qvr.inference.mcmc.potential import make_target

    def resized(drop: int):
        got = resize(drop)
        if got is None:
            return None
        n, model, x, observations = got
        return n, make_target(model, x, observations)

    return resized


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.mcmc.driver import MCMC
    from qvr.inference.mcmc.potential import make_target
    config = ctx.config
    target = make_target(ctx.model, ctx.x, ctx.observations)
    if target.dim == 0:
        return _nothing_to_sample(ctx, target)
    if ctx.resize is not None and hasattr(target, "operation_count"):
        target.resized = _probes(ctx.resize)
    from qvr.inference.criticism.recorded import for_mcmc
    for_mcmc(ctx, target)  # `record v = e`: draws chunks and samples carry `recorded.v` too
    init, guide, initial = config.init_strategy, None, None
    kernel = kernel_of(config)
    if init == "pathfinder" and ctx.start is None:
        initial, kernel.initial_inv_metric = pathfinder_init(ctx, target)
        init = "prior"  # not used: `initial` is given
    elif init == "pathfinder":
        init = "prior"
    if ctx.start is not None and ctx.start.draws:
        initial = ctx.start.initial_positions(target, config.num_chains)
    elif ctx.start is not None:
        guide = ctx.start.init_guide(ctx.model, ctx.x, ctx.observations)
        if guide is not None:
            init = "guide"
    mc = MCMC(kernel, num_warmup=config.num_warmup,
              num_samples=config.num_samples, num_chains=config.num_chains,
              init_strategy=init, chain_method=config.chain_method,
              progress_interval=config.progress_interval)
    with sampling_threads(config.threads) as threads:
        res = mc.run(ctx.model, ctx.x, ctx.observations, guide, on_event=ctx.report,
                     should_stop=ctx.stop, target=target, initial=initial)
    out = FitResult(config.method, status="cancelled" if res.cancelled else "finished",
                    mcmc=res, elapsed=res.total_time, step=config.num_warmup + res.num_samples)
    correlated = _dense_metric_hint(ctx, kernel, target, res)
    out.samples = {k: v.detach().cpu().numpy() for k, v in res.samples.items()}
    out.params = {f"model.{n}": p.detach().cpu().numpy()
                  for n, p in ctx.model.named_parameters()}
    out.summary = res.summary()
    if ctx.start is not None:  # MCMC never moves the weights: fitted only when started
        from qvr.inference.methods.circuits import record_circuits
        out.circuits = record_circuits(ctx.model, ctx.x, vocab=ctx.vocab)
    depths = res.tree_depths.float()
    out.stats = {"mean_acceptance": res.mean_acceptance, "threads": threads,
                 "total_divergences": res.total_divergences,
                 "acceptance_rates": res.acceptance_rates.tolist(),
                 "moved_rates": (res.moved_rates.tolist() if res.moved_rates is not None
                                 else None),
                 "divergence_counts": res.divergence_counts.tolist(),
                 "step_sizes": res.step_sizes.tolist(), "num_samples": res.num_samples,
                 "num_chains": res.num_chains,
                 "warmup_time": res.warmup_time, "sampling_time": res.sampling_time,
                 "mean_tree_depth": float(depths.mean()) if depths.numel() else float("nan"),
                 "adapt": config.adapt,
                 "warmup_leapfrogs": _total(res.warmup_num_steps),
                 "leapfrogs": _total(res.num_steps),
                 "max_tree_depth": config.max_tree_depth if config.method == "nuts" else None,
                 "max_depth_hits": int((res.tree_depths >= config.max_tree_depth).sum())
                 if config.method == "nuts" else 0,
                 "e_bfmi": e_bfmi(res), "compiler": res.compiler,
                 "compiler_notes": list(getattr(res, "compiler_notes", []) or []),
                 "compile_fallback": compile_fallback(res),
                 **out.summary.worst()}
    if correlated is not None:
        out.stats["correlated"] = list(correlated)
    return out


def _dense_metric_hint(ctx: FitContext, kernel, target, res):
    """On a diagonal metric, the strongest correlated pair of unconstrained coordinates
    (`qvr.inference.criticism.correlation`), said in a `FitNote`; or None."""
    if res.cancelled or kernel.mass_matrix != "diagonal" or res.unconstrained is None \
            or target.registry is None:
        return None
    from qvr.events import FitNote
    from qvr.inference.criticism.correlation import dense_metric_note, strongest_pair
    try:
        pair = strongest_pair(res.unconstrained.detach().cpu().numpy(),
                              target.registry.coordinate_names())
    except Exception:  # advice never fails the fit
        return None
    if pair is not None:
        ctx.report(FitNote(dense_metric_note(pair)))
    return pair


def pathfinder_init(ctx: FitContext, target) -> tuple:
    """``--init pathfinder``: `(initial (C, D), inverse metric (D,))`: one distinct
    PSIS-resampled draw of a multi-path Pathfinder per chain (`qvr.inference.vi.pathfinder`,
    the config's Pathfinder settings), and the diagonal of the best path's inverse-Hessian
    estimate, from which warmup adapts the metric as usual.  Said in a `FitNote`."""
    import time

    import torch

    from qvr.events import FitNote
    from qvr.inference.vi.pathfinder import distinct_starts, pathfinder, settings_of
    config = ctx.config
    settings = settings_of(config)
    ctx.report(FitNote(f"init pathfinder: {settings.paths} L-BFGS paths"))
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))
    dtype = torch.get_default_dtype()
    device = ctx.x.device if isinstance(ctx.x, torch.Tensor) else torch.device("cpu")
    res = pathfinder(target, settings, gen, dtype=dtype, device=device, should_stop=ctx.stop)
    z0, note = distinct_starts(res, config.num_chains, gen)
    ctx.report(FitNote(
        f"init pathfinder: {len(res.ok_paths)} of {len(res.paths)} paths, "
        f"{sum(p.evaluations for p in res.paths)} gradient evaluations, "
        f"{time.perf_counter() - t0:.1f} s; the chains start at distinct draws and the "
        f"metric at the inverse-Hessian diagonal{note}"))
    return z0.to(dtype=dtype, device=device), res.inv_metric.to(dtype=dtype, device=device)


def _total(steps):
    """Leapfrog steps summed over chains (and draws), or None when not recorded."""
    return int(steps.sum()) if steps is not None else None


def compile_fallback(res):
    """The note saying that NUTS's transition did not compile and the run went on leaf by
    leaf (`nuts.fallback_note`), or None: the summary and `qvr show` repeat it."""
    from qvr.inference.mcmc.nuts import FALLBACK
    return next((n for n in getattr(res, "compiler_notes", None) or []
                 if str(n).endswith(FALLBACK)), None)


def e_bfmi(res) -> list:
    """E-BFMI per chain of an `MCMCResult` (`qvr.inference.criticism.diagnostics.e_bfmi`)."""
    from qvr.inference.criticism.diagnostics import e_bfmi as of_energies
    if res.energies is None:
        return [float("nan")] * res.num_chains
    return of_energies(res.energies.detach().cpu().double().numpy())


def _nothing_to_sample(ctx: FitContext, target) -> FitResult:
    """A program whose latents are all finite (summed out exactly) or absent has no
    coordinate to sample: the fit reports its log marginal likelihood instead of running
    chains that could not move."""
    import torch
    from qvr.events import FitWarning
    with torch.no_grad():
        lp, _ = target.log_density_and_grad(torch.zeros(1, 0))
    value = float(lp.reshape(-1)[0])
    morphism = getattr(ctx.model, "wrapped_morphism", None) is not None
    if morphism:  # an exported morphism: parameters, no latent site (morphism_fit)
        ctx.report(FitWarning("an exported morphism has parameters and no latent site: "
                              "HMC/NUTS have nothing to sample (fit its parameters with "
                              "SVI); the log-likelihood of the data at its current "
                              "parameters is reported instead"))
    else:
        ctx.report(FitWarning("no continuous latent site to sample (finite latents are "
                              "summed out exactly): the log marginal likelihood is reported "
                              "instead; recover the finite sites with qvr.inference."
                              "discrete.infer_discrete"))
    out = FitResult(ctx.config.method, status="finished", step=0)
    out.params = {f"model.{n}": p.detach().cpu().numpy()
                  for n, p in ctx.model.named_parameters()}
    out.stats = {"log_marginal_likelihood": value, "num_chains": 0, "num_samples": 0,
                 "note": "an exported morphism: no latent site, nothing to sample" if morphism
                 else "no continuous latent site: nothing to sample"}
    return out
