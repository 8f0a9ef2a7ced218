"""``--method svi --guide map`` and ``--guide laplace``: the mode of the posterior and the
Laplace approximation around it (`qvr.inference.vi.laplace`, Stan's ``optimize`` and
``laplace``), run behind `qvr.inference.methods.svi.run` (the record's method stays
``"svi"``, `FitConfig.guide` says which).

The search runs in float64 whatever `FitConfig.dtype` (the model, input and data are cast
for it and back; the guide is kept in the fit's dtype): an accurate mode and Hessian need
it.  Progress reports each L-BFGS iteration (throttled; phase ``"optimization"``, loss =
-log density); `FitNote`s say how the search went and what the Hessian is.  A Laplace
fit records the PSIS k-hat of its draws (`qvr.inference.criticism.khat`); a MAP fit is a
point estimate: its summary holds the mode (sd NaN), and it has no k-hat, no LOO and no
predictive checks.  ``--resample psis`` (Laplace only; refused with map by
`FitConfig.errors`): the Laplace draws resampled by their PSIS weights when k-hat < 0.7
(`qvr.inference.methods.guide_resample`); ``--resample amis``: adaptive importance
sampling from the Laplace approximation, its draws resampled when their k-hat < 0.7
(`qvr.inference.methods.guide_amis`).

Failures end the fit with status ``"failed"`` and one line (``stats["error_type"]``):
no finite start (``NonFiniteDensity``), a search running off to infinity or still rising
where it stalled (``NoMode``), a Hessian that is not negative definite at the mode
(``NotNegativeDefinite``), Laplace's search at its iteration limit (``NotConverged``;
MAP keeps the point and warns).  Refused
up front (`DataError`): minibatches, several ranks, a Laplace dimension above
`vi.mode_search.MAX_DIM`, a density that draws random numbers (a Monte-Carlo composite).
"""
from __future__ import annotations

import contextlib
import time

import torch

from qvr.events import FitNote, FitProgress, FitWarning, Throttle
from qvr.inference.config import split_guide
from qvr.inference.data.fit_data import DataError
from qvr.inference.methods.fit_result import FitContext, FitResult
from qvr.inference.methods.guide_results import guide_params as _params
from qvr.inference.methods.guide_results import guide_summary as _summary


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.vi import laplace as lg
    from qvr.inference.vi import mode_search as ms
    model, config = ctx.model, ctx.config
    kind, _ = split_guide(config.guide)
    what = "MAP" if kind == "map" else "the Laplace approximation"
    if ctx.world is not None and getattr(ctx.world, "distributed", False):
        raise DataError(f"--guide {kind}: {what} runs in one process (not across ranks)")
    if ctx.batches is not None and not ctx.batches.full:
        raise DataError(f"--guide {kind}: {what} uses the whole data: drop --batch-size")
    result = FitResult("svi")
    t0 = time.perf_counter()
    fit_dtype = torch.get_default_dtype()
    throttle = Throttle(config.progress_interval)

    def on_iteration(i: int, log_density: float) -> None:
        result.losses.append(-log_density)
        result.step = i
        if throttle.due(i, config.steps):
            ctx.report(FitProgress(method="svi", phase="optimization", step=i,
                                   total=config.steps, metrics={"loss": -log_density},
                                   elapsed=time.perf_counter() - t0))

    def on_restart(why: str) -> None:
        ctx.report(FitNote(f"{what}: the search failed ({why[:200]}); starting again from "
                           f"a new random point"))

    guide = None
    with _working_precision(model, ctx.x, ctx.observations) as (x, obs):
        from qvr.inference.enumeration.enumerate import prepare
        from qvr.inference.programs.sites import build_registry
        reg = build_registry(model, x, obs)
        prepare(model, x, obs)
        D = reg.dim
        params = [p for p in model.parameters() if p.requires_grad]
        if D == 0 and not params:
            raise DataError("nothing to fit: the program has no parameters and no latent sites")
        if kind == "laplace" and D > ms.MAX_DIM:
            raise DataError(f"--guide laplace: the latent sites have {D:,} unconstrained "
                            f"coordinates, above the {ms.MAX_DIM:,} whose dense Hessian it "
                            f"computes; use --guide meanfield, lowrank:K, or NUTS")
        fn = lg.density(model, x, obs, reg, jacobian=(kind == "laplace"))
        z_probe = torch.zeros(D, dtype=torch.float64, device=_device(x))
        from qvr.runtime.combinators import composites
        if composites(model) or lg.is_stochastic(fn, z_probe):
            raise DataError(f"--guide {kind}: the program's log density is a Monte-Carlo "
                            f"estimate (a composite of stochastic maps, or a density that "
                            f"draws random numbers): {what} needs an exact density; use "
                            f"SVI (--guide meanfield) or NUTS")
        if params:
            ctx.report(FitNote(
                f"{what}: the program's parameters ({sum(p.numel() for p in params):,} "
                f"values) are optimised jointly with the latents"
                + ("" if kind == "map" else
                   ", then held at the mode: the Hessian is over the latents only")))
        names = reg.coordinate_names()
        z0 = _start_point(ctx, reg, x, obs)
        seed = config.seed
        tries = 2 if kind == "laplace" else 1  # a saddle is found by chance, a ridge is not
        for attempt in range(tries):
            try:
                mode = ms.find_mode(fn, D, params, seed=seed, max_iter=config.steps,
                                    device=_device(x), z0=z0 if attempt == 0 else None,
                                    on_iteration=on_iteration, should_stop=ctx.stop,
                                    names=names, on_restart=on_restart)
            except ms.Stopped:
                result.status = "cancelled"
                break
            except ms.ModeError as exc:
                _fail(result, str(exc), exc.error_type)
                break
            z, H = mode.z, None
            if D and D <= ms.MAX_DIM:  # Newton steps with the exact Hessian: the mode
                z = ms.newton_polish(fn, z)
                H = ms.hessian(fn, z)
            with torch.no_grad():
                log_density = float(fn(z))
            grad_max = _grad_max(fn, z, mode.max_grad)
            converged = mode.converged or \
                grad_max <= 10 * ms.GRAD_TOL * max(1.0, abs(log_density))
            stats = {"mode_log_density": log_density, "iterations": mode.iterations,
                     "converged": converged, "restarts": mode.restarts,
                     "max_gradient": grad_max, "dim": D}
            up = ms.rising(fn, z, H, names) if H is not None else None
            if kind == "map":
                if up:
                    ctx.report(FitWarning(
                        f"MAP: the log density still rises along {up} where the search "
                        f"stopped: its supremum lies at the edge of the support or at "
                        f"infinity, and the values shown are where the search stopped"))
                elif not converged:
                    ctx.report(_not_converged(mode.iterations, grad_max))
                elif H is not None:
                    try:
                        ms.precision_factor(H, names)
                    except ms.ModeError as exc:  # a flat direction or a saddle: say so
                        ctx.report(FitWarning(f"MAP: {exc}"[:-len("; try SVI or NUTS")]
                                              + ": the point found may not be a unique "
                                              "mode"))
                guide = lg.MapGuide(model, set(obs), reg.sites, z)
                ctx.report(FitNote(
                    "MAP: a point estimate, the mode of the density without the Jacobian "
                    "(as Stan's optimize); the summary's mean is the mode, its sd is not "
                    "defined (NaN) and it has no quantiles; no k-hat"))
                break
            try:
                if not converged and not mode.stalled and D:  # the iteration limit
                    raise ms.ModeError(
                        f"L-BFGS stopped at its limit of {mode.iterations} iterations before "
                        f"reaching the mode (largest gradient entry {grad_max:.3g}): raise "
                        f"--steps", "NotConverged")
                if up:
                    raise ms.ModeError(
                        f"the log density has no mode: it still rises along {up} where the "
                        f"search stopped (its supremum is at infinity or at the edge of a "
                        f"support: an improper posterior?); try SVI or NUTS", "NoMode")
                L, (lo, hi) = ms.precision_factor(H, names) if H is not None else (H, (0, 0))
            except ms.ModeError as exc:
                if attempt + 1 < tries and exc.error_type == "NotNegativeDefinite":
                    on_restart(str(exc))
                    seed = (seed if seed is not None else 0) + 7919
                    continue
                _fail(result, str(exc), exc.error_type)
                break
            if not converged:  # D = 0: the program's parameters only
                ctx.report(_not_converged(mode.iterations, grad_max))
            if D:
                cov = torch.cholesky_inverse(L)
                scale_tril = torch.linalg.cholesky(0.5 * (cov + cov.T))
                ctx.report(FitNote(
                    f"the Hessian of the log density at the mode: {D} x {D}, exact "
                    f"(autograd); -H is positive definite, eigenvalues {lo:.3g} to {hi:.3g}"))
                stats["log_det_neg_hessian"] = float(2 * torch.log(torch.diagonal(L)).sum())
            else:
                scale_tril = z.new_zeros((0, 0))
            guide = lg.LaplaceGuide(model, set(obs), reg.sites, z, scale_tril)
            break
        if guide is not None:
            guide = guide.to(dtype=fit_dtype)
            result.stats = stats
    result.elapsed = time.perf_counter() - t0
    result.guide = guide
    result.params = _params(model, guide)
    if guide is not None:
        x, obs = ctx.x, ctx.observations
        # the options weighting the draws record their k-hat themselves
        if kind == "laplace" and config.resample == "psis":  # weighted to the posterior
            from qvr.inference.methods.guide_resample import resampled_summary
            result.samples, result.summary = resampled_summary(ctx, result, guide,
                                                               method="laplace")
        elif kind == "laplace" and config.resample == "amis" and guide.dim:
            from qvr.inference.methods.guide_amis import laplace_amis
            result.samples, result.summary = laplace_amis(ctx, result, guide)
        else:
            result.samples, result.summary = _summary(guide, x, obs, report=ctx.report)
            if kind == "laplace":
                from qvr.inference.criticism.khat import record_guide_khat
                record_guide_khat(ctx, result, guide, method="laplace")
        from qvr.inference.methods.circuits import record_circuits
        result.circuits = record_circuits(model, x, vocab=ctx.vocab)
    result.stats = {**(result.stats or {}),
                    "final_loss": result.losses[-1] if result.losses else float("nan"),
                    "steps": len(result.losses), "elapsed": result.elapsed}
    if result.status == "cancelled":
        result.guide = None
    return result


def _grad_max(fn, z, fallback: float) -> float:
    """The largest gradient entry of `fn` at `z` (the latents'), `fallback` without any."""
    if not z.shape[0]:
        return fallback
    from torch.func import grad
    try:
        return float(grad(fn)(z.detach()).detach().abs().max())
    except Exception:
        return fallback


def _not_converged(iterations: int, grad_max: float) -> FitWarning:
    return FitWarning(f"L-BFGS stopped after {iterations} iterations without converging "
                      f"(largest gradient entry {grad_max:.3g}): raise --steps")


def _fail(result: FitResult, message: str, error_type: str) -> None:
    result.status = "failed"
    result.message = message
    result.stats = {**(result.stats or {}), "error_type": error_type}


def _device(x):
    return x.device if isinstance(x, torch.Tensor) else None


@contextlib.contextmanager
def _working_precision(model, x, observations: dict):
    """Run the block in float64: the default dtype, the model's parameters and buffers,
    and floating `x`/`observations` (yielded) cast; everything restored afterwards
    (enumeration structures built meanwhile are dropped: they hold float64 tensors)."""
    old = torch.get_default_dtype()
    if old == torch.float64:
        yield x, observations
        return

    def cast(v):
        return v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
    enum = dict(model.__dict__.get("_qvr_enum_cache", {}))
    torch.set_default_dtype(torch.float64)
    model.to(dtype=torch.float64)
    try:
        yield cast(x), {k: cast(v) for k, v in observations.items()}
    finally:
        model.to(dtype=old)
        torch.set_default_dtype(old)
        if "_qvr_enum_cache" in model.__dict__:
            model.__dict__["_qvr_enum_cache"] = enum


def _start_point(ctx, reg, x, obs):
    """The first start from ``start_from`` (a previous run's guide locations or posterior
    means, through a mean-field guide: `qvr.inference.front.start`), or None (Stan's
    random start)."""
    if ctx.start is None or not reg.dim:
        return None
    try:
        from qvr.inference.vi.guides import AutoNormalGuide
        g = AutoNormalGuide(ctx.model, observed_names=set(obs)).to(_device(x))
        ctx.start.apply_to_guide(g, x, obs)
        parts = []
        for s in reg.sites:
            parts.append(g.loc(s.name).detach().expand(s.unconstrained_shape).reshape(-1))
        z = torch.cat(parts).double()
        return z if z.shape[0] == reg.dim and bool(torch.isfinite(z).all()) else None
    except Exception as exc:  # a start is a help, never a failure
        ctx.report(FitWarning(f"the start from the run was not used ({type(exc).__name__}: "
                              f"{exc}); starting from a random point"[:300]))
        return None
