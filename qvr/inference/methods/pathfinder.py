"""``--method pathfinder`` behind `fit`: multi-path Pathfinder (`qvr.inference.vi.pathfinder`)
on the program's unconstrained target (the MCMC target, `qvr.inference.mcmc.potential`).

The run's draws are the PSIS-resampled draws (``psis_draws`` of them; one path: its
``path_draws``) as constrained site values ``{site: (1, R, *shape)}``, like one
chain of posterior draws: the summary (mean, sd, quantiles; no R-hat, no ESS), the
recorded quantities (``record v = e``), and after the fit the pointwise terms, LOO and
predictive checks treat them as posterior draws.  `stats`: paths, failed paths, L-BFGS
iterations and gradient evaluations per path, density evaluations, ELBO per path, and the
PSIS k-hat of the pooled draws' log ratios (`qvr.inference.criticism.khat`; a warning
above 0.7).  Progress: one row per path (``chain`` = the path), phase ``optimization``:
the loss ``-log p~`` while L-BFGS climbs, then the ELBO of each iterate's normal.

``--resample psis`` (`FitConfig.resample`, `qvr.inference.methods.guide_resample`) is
refused here (one line, exit 2): Pathfinder resamples its pooled draws by their PSIS
weights always (with several paths), so it would change nothing.  ``--resample amis``
(`qvr.inference.methods.guide_amis`) starts adaptive importance sampling from the Normal
with the mean and covariance of those weighted pooled draws, and when its k-hat is below
0.7 the run's ``psis_draws`` draws are drawn from its draws instead (``khat`` is then its
k-hat; ``pathfinder_khat`` Pathfinder's own).
"""
from __future__ import annotations

import math
import time

import torch

from qvr.events import FitNote, FitProgress, FitWarning, Throttle
from qvr.inference.methods.fit_result import FitContext, FitResult


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.criticism.diagnostics import summary
    from qvr.inference.criticism.khat import khat_record, khat_warning
    from qvr.inference.criticism.recorded import for_mcmc
    from qvr.inference.mcmc.potential import make_target
    from qvr.inference.vi.pathfinder import PathfinderError, pathfinder, settings_of
    config = ctx.config
    target = make_target(ctx.model, ctx.x, ctx.observations)
    result = FitResult("pathfinder")
    if target.dim == 0:
        return _nothing_to_approximate(ctx, target)
    for_mcmc(ctx, target)  # `record v = e`: `target.constrain` gives them too
    target.report_note = lambda message: ctx.report(FitNote(message))  # how it runs
    settings = settings_of(config)
    t0 = time.perf_counter()
    throttle = Throttle(config.progress_interval)
    last = {}

    def progress(path, phase, l, metrics):
        last[path] = (l, metrics)
        if throttle.due(l, settings.max_iters):
            _report(ctx, path, l, settings, metrics, t0)

    gen = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))
    dtype = torch.get_default_dtype()
    device = ctx.x.device if isinstance(ctx.x, torch.Tensor) else torch.device("cpu")
    try:
        res = pathfinder(target, settings, gen, dtype=dtype, device=device,
                         on_iteration=progress, should_stop=ctx.stop)
    except PathfinderError as exc:
        result.status = "failed" if not ctx.stop() else "cancelled"
        result.message = str(exc)
        result.elapsed = time.perf_counter() - t0
        result.stats = {"error_type": "PathfinderError", "elapsed": result.elapsed}
        return result
    for path, (l, metrics) in last.items():  # each path's last iteration
        _report(ctx, path, l, settings, metrics, t0)
    if ctx.stop():
        result.status = "cancelled"
    draws, amis_stats = res.draws, None
    if config.resample == "amis" and not ctx.stop():
        draws, amis_stats = _amis(ctx, target, res, settings, time.perf_counter() - t0,
                                  dtype, device)
    with torch.no_grad():
        values = target.constrain(draws.to(dtype=dtype, device=device))
    result.samples = {k: v.detach().cpu().numpy()[None] for k, v in values.items()}
    result.summary = summary(result.samples, columns=("mean", "sd", "q5", "q50", "q95"))
    result.elapsed = time.perf_counter() - t0
    paths = res.paths
    result.step = sum(p.iterations for p in paths)
    result.params = {f"model.{n}": p.detach().cpu().numpy()
                     for n, p in ctx.model.named_parameters()}
    result.params["pathfinder.inv_metric"] = res.inv_metric.numpy()
    result.stats = {
        "paths": len(paths), "failed_paths": res.failed,
        "failed_reasons": [p.message for p in paths if not p.ok],
        "iterations": [p.iterations for p in paths],
        "gradient_evaluations": sum(p.evaluations for p in paths),
        "density_evaluations": sum(p.density_evaluations for p in paths),
        "elbo": [p.elbo if p.ok else None for p in paths],
        "best_iteration": [p.best if p.ok else None for p in paths],
        "stopped": [p.reason for p in paths],
        "draws": int(res.draws.shape[0]), "resampled": len(paths) > 1,
        "elapsed": result.elapsed,
        **khat_record(res.log_ratios),
    }
    if amis_stats is not None:  # `khat`: the weights' behind the run's draws
        result.stats["pathfinder_khat"] = result.stats["khat"]
        result.stats.update(amis_stats)
        if not amis_stats.get("amis_resampled"):
            result.stats["khat"] = result.stats["pathfinder_khat"]
            result.stats["khat_draws"] = int(len(res.log_ratios))
    if res.failed:
        ctx.report(FitWarning(f"{res.failed} of {len(paths)} Pathfinder paths failed and were "
                              f"dropped: " + "; ".join(
                                  f"path {i + 1}: {p.message}" for i, p in enumerate(paths)
                                  if not p.ok)))
    message = khat_warning(result.stats["khat"], "pathfinder",
                           amis_tried=amis_stats is not None)
    if message:
        ctx.report(FitWarning(message))
    return result


def _report(ctx, path: int, l: int, settings, metrics: dict, t0: float) -> None:
    shown = {k: float(v) for k, v in metrics.items()
             if isinstance(v, (int, float)) and math.isfinite(v)}
    shown["path"] = path + 1
    ctx.report(FitProgress(method="pathfinder", phase="optimization", step=l,
                           total=settings.max_iters, chain=path, metrics=shown,
                           elapsed=time.perf_counter() - t0))


def _nothing_to_approximate(ctx: FitContext, target) -> FitResult:
    """No continuous latent (finite latents summed out, or none): the log marginal
    likelihood instead of an approximation, as HMC/NUTS report it."""
    with torch.no_grad():
        lp, _ = target.log_density_and_grad(torch.zeros(1, 0))
    ctx.report(FitWarning("no continuous latent site to approximate (finite latents are "
                          "summed out exactly): the log marginal likelihood is reported "
                          "instead"))
    out = FitResult("pathfinder", status="finished", step=0)
    out.params = {f"model.{n}": p.detach().cpu().numpy()
                  for n, p in ctx.model.named_parameters()}
    out.stats = {"log_marginal_likelihood": float(lp.reshape(-1)[0]), "num_chains": 0,
                 "num_samples": 0, "note": "no continuous latent site: nothing to approximate"}
    return out


def _amis(ctx, target, res, settings, elapsed: float, dtype, device) -> tuple:
    """``--resample amis`` after the paths: ``(the run's draws (R, D), stats)``, the draws
    drawn from the rounds' when their k-hat is below 0.7, else Pathfinder's own."""
    import numpy as np

    from qvr.inference.methods.guide_amis import rows_density, weigh
    from qvr.inference.methods.guide_resample import resample_indices
    from qvr.inference.vi.amis import cholesky_or_none, moments
    if res.psis_log_weights is not None:  # the weights Pathfinder resampled by
        loc, cov = moments(res.pooled, np.exp(res.psis_log_weights))
    else:  # one path: its own draws, equally weighted
        n = res.draws.shape[0]
        loc, cov = moments(res.draws, np.full(n, 1.0 / n))
    L = cholesky_or_none(cov)
    if L is None:
        ctx.report(FitWarning("--resample amis: the covariance of Pathfinder's draws is not "
                              "positive definite; the draws are Pathfinder's own"))
        return res.draws, {"resample_method": "amis", "amis_resampled": False,
                           "resample_note": "Pathfinder's draws have a singular covariance"}
    stats = {}
    fn = getattr(target, "single", None)
    log_density = rows_density(fn, dtype, device) if fn is not None else \
        (lambda z: target.log_density(z.to(device=device, dtype=dtype))
         .to(device="cpu", dtype=torch.float64))
    picked = weigh(ctx, stats, elapsed, log_density, loc, L, method="pathfinder")
    if picked is None:
        return res.draws, stats
    z, w = picked
    return z[torch.as_tensor(resample_indices(w, settings.psis_draws))], stats
