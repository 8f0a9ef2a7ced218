"""``--resample amis``: the run's draws by adaptive multiple importance sampling
(`qvr.inference.vi.amis`) from a Normal approximation: Laplace's (``--guide laplace``) or
Pathfinder's (``--method pathfinder``: the moments of its pooled, PSIS-weighted draws).

Where ``--resample psis`` reweights the approximation's own draws, and can only when their
k-hat is already below 0.7, this moves the proposal towards the posterior first (rounds of
Student-t proposals at the weighted moments of all draws so far, widened) and weights all
the draws against the mixture of the proposals.  The run's k-hat is then that of these weights
(``khat``, ``khat_draws``: every draw of every round); when it is below 0.7, the run's
`SUMMARY_DRAWS` draws are drawn from them with replacement by their smoothed weights, and
are the run's posterior draws as ``--resample psis``'s are (summary, recorded quantities,
``samples.npz``, pointwise terms, LOO, predictive checks, `qvr predict`).  At 0.7 or above
the draws stay the approximation's own, with a `FitWarning`, and ``khat`` is theirs.

`result.stats`: ``resample_method`` (``"amis"``), ``amis_resampled`` (and, for Laplace,
``resampled``: `qvr.inference.criticism.khat.was_resampled`), ``resample_ess`` (``1 /
Σ w²`` of the smoothed weights), ``resample_draws`` (all draws weighted),
``amis_rounds``, ``amis_khat`` (the weights' k-hat, whether or not resampled),
``amis_seconds``, ``amis_stopped`` (why the rounds stopped early, where they did),
``resample_note`` (why not resampled).  Time: at most ``max(AMIS_SECONDS, the fit's own
time)`` (`qvr.inference.vi.amis`'s budget); progress is reported per round (phase
``"importance"``).
"""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch

from qvr.inference.methods.guide_results import SUMMARY_DRAWS

#: the least time the rounds may take (the fit's own time where that is longer)
AMIS_SECONDS = 10.0

__all__ = ["AMIS_SECONDS", "laplace_amis", "rows_density", "weigh"]


def weigh(ctx, stats: dict, elapsed: float, log_density: Callable, loc: torch.Tensor,
          scale_tril: torch.Tensor, *, method: str):
    """Run `amis` from ``N(loc, scale_tril scale_trilᵀ)`` on `log_density` (for at most
    ``max(AMIS_SECONDS, elapsed)``, the fit's own time) and record its facts in `stats`;
    returns ``(draws (n, D) float64, smoothed normalised weights (n,) numpy)`` when k-hat
    < 0.7 (the caller resamples), else None (a `FitWarning` has said why)."""
    from qvr.events import FitProgress
    from qvr.inference.methods.guide_resample import not_resampled
    from qvr.inference.criticism.khat import KHAT_WARN, pareto_khat
    from qvr.inference.vi.amis import amis
    from qvr.inference.vi.pathfinder import psis_weights
    t0 = time.perf_counter()
    budget = max(AMIS_SECONDS, float(elapsed or 0.0))
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, (1,))))  # the fit's seed

    def on_round(r: int, total: int, ess: float) -> None:
        ctx.report(FitProgress(method=method, phase="importance", step=r, total=total,
                               metrics={"ess": ess}, elapsed=time.perf_counter() - t0))
    out = amis(log_density, loc, scale_tril, budget_s=budget, generator=gen,
               should_stop=ctx.stop, on_round=on_round)
    k = pareto_khat(out.log_ratios)
    stats.update({"resample_method": "amis", "amis_rounds": out.rounds,
                  "amis_khat": None if math.isnan(k) else
                  (k if math.isfinite(k) else float("inf")),
                  "resample_draws": int(out.draws.shape[0]),
                  "amis_seconds": time.perf_counter() - t0})
    if out.stopped:
        stats["amis_stopped"] = out.stopped
    why = None
    if np.isfinite(out.log_ratios).sum() < 10:
        why = "fewer than 10 draws with a finite density"
    else:
        w, stats["resample_ess"] = psis_weights(out.log_ratios)
        if math.isnan(k):
            why = "k-hat not computable (no tail to fit)"
        elif not k < KHAT_WARN:
            why = f"k-hat {k:.2f} >= {KHAT_WARN} after {out.rounds} rounds"
    if why is not None:
        not_resampled(ctx, stats, why, option="amis", whose="the approximation's")
        return None
    stats["amis_resampled"] = True
    stats["khat"] = stats["amis_khat"]
    stats["khat_draws"] = int(out.draws.shape[0])
    return out.draws, w


def laplace_amis(ctx, result, guide) -> tuple:
    """``(samples, summary)`` of a Laplace run with ``--resample amis``: the proposal starts
    at the guide's ``N(ẑ, (-H)^-1)`` on the target ``log p~(z)`` (the Jacobian-adjusted
    density of `qvr.inference.vi.laplace.density`, draws vmapped where the program allows,
    else one by one); not resampled: the guide's own draws with their k-hat."""
    from qvr.inference.criticism.khat import record_guide_khat
    from qvr.inference.enumeration.enumerate import prepare
    from qvr.inference.methods.guide_resample import resample_indices
    from qvr.inference.methods.guide_results import draws_summary, guide_summary
    from qvr.inference.programs.sites import build_registry
    from qvr.inference.vi import laplace as lg
    model, x, obs = ctx.model, ctx.x, ctx.observations
    reg = build_registry(model, x, obs, observed_names=guide.observed_names | set(obs))
    prepare(model, x, obs)
    fn = lg.density(model, x, obs, reg, jacobian=True)
    mode = guide.flat_mode()
    log_density = rows_density(fn, mode.dtype, mode.device)
    picked = weigh(ctx, result.stats, result.elapsed, log_density, mode, guide.scale_tril,
                   method="svi")
    result.stats["resampled"] = picked is not None  # posterior draws (`was_resampled`)
    if picked is None:
        record_guide_khat(ctx, result, guide, method="laplace", amis_tried=True)
        return guide_summary(guide, x, obs, report=ctx.report)
    z, w = picked
    idx = torch.as_tensor(resample_indices(w, SUMMARY_DRAWS))
    with torch.no_grad():
        chosen = reg.constrain(z[idx].to(dtype=mode.dtype, device=mode.device))
    return draws_summary(guide, x, obs, chosen, report=ctx.report)


def rows_density(fn: Callable, dtype, device=None) -> Callable:
    """Rows ``(n, D)`` (float64, on the CPU) -> ``(n,)`` (float64, on the CPU) of a scalar
    density `fn` evaluated in `dtype` on `device`: vmapped, or row by row (each row's
    failure a -inf) where the program does not vmap."""
    from torch.func import vmap
    state = {"vmap": True}
    vfn = vmap(fn)

    def rows(z: torch.Tensor) -> torch.Tensor:
        z = z.to(device=device, dtype=dtype)
        if state["vmap"]:
            try:
                return vfn(z).to(device="cpu", dtype=torch.float64)
            except Exception:  # not vmappable, or one row fails inside: row by row
                pass
        out, failed = [], 0
        for row in z:
            try:
                out.append(torch.as_tensor(fn(row)).to(device="cpu", dtype=torch.float64)
                           .reshape(()))
            except (ValueError, RuntimeError):
                out.append(torch.tensor(-math.inf, dtype=torch.float64))
                failed += 1
        if not failed:  # every row ran alone: the program does not vmap
            state["vmap"] = False
        return torch.stack(out)
    return rows
