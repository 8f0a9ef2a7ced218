"""SVI behind `fit`: the guide of `FitConfig.guide` (`qvr.inference.vi.guide_choice`:
mean-field `AutoNormalGuide`, fullrank, lowrank:K, flow) + `ELBO(elbo_particles)` + Adam on the model's and
guide's parameters (a `start_from` run initialises them: an SVI run's guide, an MCMC
run's posterior means, or with ``start_at="draws"`` the moments of its draws,
`qvr.inference.front.start`).  After the fit: the summary of `SUMMARY_DRAWS` guide draws
and the guide's PSIS k-hat; with ``FitConfig.resample == "psis"`` the draws resampled by
their importance weights when k-hat < 0.7 (`qvr.inference.methods.guide_resample`).
With `FitConfig.batch_size` (or several ranks of a launch) each
step scores a minibatch of rows (`qvr.inference.data.minibatch`; progress says the epoch), and
across ranks gradients are summed (`qvr.inference.distributed.world`).  Every step's loss is kept; progress (``loss``, and ``loss_mean`` over
the steps since the previous report) is throttled; a non-finite loss stops the fit with
status ``"failed"`` and a message naming the step."""
from __future__ import annotations

import math
import time

import torch

from qvr.inference.data.fit_data import DataError
from qvr.events import FitProgress, Throttle
from qvr.inference.methods.fit_result import FitContext, FitResult
from qvr.inference.methods.guide_results import guide_params as svi_params
from qvr.inference.methods.guide_results import guide_summary


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.vi.elbo import ELBO
    from qvr.inference.vi.guide_choice import GuideError, make_guide
    from qvr.inference.vi.svi import SVI, adam
    model, x, observations, config = ctx.model, ctx.x, ctx.observations, ctx.config
    try:
        guide = make_guide(config.guide, model, set(observations)).to(x.device)
    except GuideError as exc:
        raise DataError(str(exc)) from None
    if ctx.start is not None:
        ctx.start.apply_to_guide(guide, x, observations)
    params = list(model.parameters()) + list(guide.parameters())
    if not params:
        raise DataError("nothing to fit: the program has no parameters and no latent sites")
    world, batches = ctx.world, ctx.batches
    if world is not None and world.distributed:
        from qvr.inference.distributed.world import broadcast_parameters
        broadcast_parameters(world, params)  # every rank starts from rank 0's values
    optim = adam(params, config.lr)
    svi = SVI(model, guide, optim, ELBO(num_particles=config.elbo_particles),
              clip_norm=getattr(guide, "clip_norm", None))
    throttle = Throttle(config.progress_interval)
    result = FitResult("svi", guide=guide)
    t0 = time.perf_counter()
    window, since = 0.0, 0
    distributed = world is not None and world.distributed
    for step in range(1, config.steps + 1):
        # across ranks a stop request travels with the gradients: all stop after one step
        if not distributed and ctx.stop():
            result.status = "cancelled"
            break
        extra = {}
        stopping = False
        if batches is None:
            loss = svi.step(x, observations)
        else:
            epoch, epoch_step, rows, row_scale = batches.next()
            xb, ob = ctx.rows.take(rows)
            loss, stopping = _batch_step(svi, world, params, xb, ob, row_scale, step,
                                         ctx.stop)
            if not batches.full:
                extra = {"epoch": epoch, "epoch_step": epoch_step,
                         "steps_per_epoch": batches.steps_per_epoch, "rows": batches.n,
                         "batch_size": batches.batch_size}
            if world is not None and world.distributed:
                extra["world_size"] = world.size
        result.losses.append(loss)
        result.step = step
        window += loss
        since += 1
        finite = math.isfinite(loss)
        if not finite or throttle.due(step, config.steps):
            ctx.report(FitProgress(method="svi", phase="optimization", step=step,
                                   total=config.steps,
                                   metrics={"loss": loss, "loss_mean": window / since,
                                            **extra},
                                   elapsed=time.perf_counter() - t0))
            window, since = 0.0, 0
        if stopping and finite:
            result.status = "cancelled"
            break
        if not finite:
            result.status = "failed"
            result.message = (f"the loss is {loss} at step {step}: the model's log density "
                              f"or the guide's draws are not finite there (try a smaller "
                              f"learning rate, or check the data)")
            break
    result.elapsed = time.perf_counter() - t0
    result.params = svi_params(model, guide)
    if result.status != "failed":
        result.stats = {}
        if config.resample == "psis":  # the draws weighted towards the posterior
            from qvr.inference.methods.guide_resample import resampled_summary
            result.samples, result.summary = resampled_summary(ctx, result, guide,
                                                               guide_name=config.guide)
        else:
            result.samples, result.summary = guide_summary(guide, x, observations,
                                                           report=ctx.report)
            from qvr.inference.criticism.khat import record_guide_khat
            record_guide_khat(ctx, result, guide, guide_name=config.guide)
        from qvr.inference.methods.circuits import record_circuits
        result.circuits = record_circuits(model, x, vocab=ctx.vocab)
    result.stats = {**(result.stats or {}),
                    "final_loss": result.losses[-1] if result.losses else float("nan"),
                    "steps": len(result.losses), "elapsed": result.elapsed}
    if batches is not None and not batches.full:
        result.stats.update(batch_size=batches.batch_size, rows=batches.n,
                            epochs=round(len(result.losses) / batches.steps_per_epoch, 3))
    if world is not None and world.distributed:
        result.stats["world_size"] = world.size
    if result.status == "failed":
        result.stats["error_type"] = "NonFiniteLoss"
    return result


def _batch_step(svi, world, params, x, observations, row_scale: float, step: int,
                stop) -> tuple:
    """One minibatch step (`qvr.inference.data.minibatch`): ``(loss, stop)``.  With several
    ranks the loss is divided by their number and gradients and loss are summed over them
    before the optimiser's step (`qvr.inference.distributed.world.all_reduce_sum`), so every
    rank takes the one-process step of the global batch; a stop request of any rank
    (`stop()`, e.g. Ctrl-C) rides along, and every rank stops after this step."""
    if world is None or not world.distributed:
        return svi.step(x, observations, row_scale=row_scale), False
    from qvr.inference.distributed.world import RankLost, all_reduce_sum, lost_message
    asked = [False]

    def reduce(loss):
        try:
            value, asked[0] = all_reduce_sum(world, params, loss, stop=stop())
        except RuntimeError as exc:  # a rank died or failed: gloo's connection is gone
            raise RankLost(lost_message(world, f"at SVI step {step}", exc)) from None
        return value
    loss = svi.step(x, observations, row_scale=row_scale, loss_scale=1.0 / world.size,
                    reduce=reduce)
    return loss, asked[0]
