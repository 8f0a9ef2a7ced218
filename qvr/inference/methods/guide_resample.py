"""``--resample psis``: a fitted guide's draws corrected by Pareto-smoothed importance
weights (Yao, Vehtari, Simpson & Gelman 2018, "Yes, but did it work?"), for SVI with
every guide family (meanfield, fullrank, lowrank:K, flow) and ``--guide laplace``.

After the fit, `RESAMPLE_DRAWS` independent guide draws are scored against the program
(`qvr.inference.criticism.khat.record_guide_khat` with ``keep``: the same k-hat the run
records without the option, over these draws, under the same time budget).  When k-hat
is below `KHAT_WARN` (0.7), the run's `SUMMARY_DRAWS` draws are drawn from them with
replacement in proportion to their Pareto-smoothed weights (Pathfinder's
`qvr.inference.vi.pathfinder.psis_log_weights`, the one PSIS of the project); the
summary, the recorded quantities (``record v = e``), ``samples.npz`` and, after the fit,
the pointwise terms, LOO and predictive checks are all made of those draws, as posterior
draws (`qvr.inference.criticism.pointwise` reads them as it reads Pathfinder's; no
``log_q`` correction on top), and so are predictions at new data (`qvr predict`,
`qvr.inference.front.predict`, which binds the saved draws as it binds MCMC's:
`qvr.inference.criticism.khat.was_resampled`).  At 0.7 or above, or when k-hat could not
be computed (across ranks, a failure while scoring, no tail to fit), the draws stay the guide's own
and a `FitWarning` says so.

`result.stats`: ``resampled`` (true/false), ``resample_ess`` (the importance-sampling
ESS ``1 / sum w²`` of the normalised smoothed weights, whenever they were computed),
``resample_draws`` (the draws weighted), ``resample_note`` (why not resampled).

The time budget (`record_guide_khat`): the draws are scored until ``max(KHAT_SECONDS, the
fit's own time)`` is spent, at least 100.  When that budget allows fewer than
`SUMMARY_DRAWS` draws, the run's `SUMMARY_DRAWS` draws are still drawn (with replacement)
from the fewer ones scored: they repeat more, and the ESS (at most the draws scored)
says how many independent draws they are worth.

A MAP fit is one point: the option is refused with ``--guide map`` (`FitConfig.errors`).
Pathfinder resamples its own pooled draws always (with several paths): the option is
SVI's only, and ``--method pathfinder --resample psis`` is refused as an option of
another method.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from qvr.inference.methods.guide_results import SUMMARY_DRAWS, draws_summary, guide_summary

#: guide draws weighted for the resampling (Pathfinder's 4 paths x 1000 draws' worth):
#: the run's draws are `SUMMARY_DRAWS` of them
RESAMPLE_DRAWS = 4 * SUMMARY_DRAWS

__all__ = ["RESAMPLE_DRAWS", "not_resampled", "resampled_summary", "resample_indices"]


def resampled_summary(ctx, result, guide, *, method: str = "svi",
                      guide_name: Optional[str] = None) -> tuple:
    """``(samples, summary)`` of the run: its k-hat recorded (`record_guide_khat`), and the
    draws resampled by their PSIS weights when k-hat < 0.7, else the guide's own
    (`guide_summary`); the facts in `result.stats` (module docstring)."""
    from qvr.inference.criticism.khat import KHAT_WARN, record_guide_khat
    scored = record_guide_khat(ctx, result, guide, method=method, guide_name=guide_name,
                               keep=RESAMPLE_DRAWS)
    stats = result.stats
    k = stats.get("khat")
    why = None
    if scored is None or "khat" not in stats:
        why = f"no k-hat: {stats.get('khat_note') or 'no guide draws'}"
    elif k is None or (isinstance(k, float) and math.isnan(k)):
        why = "k-hat not computable (no tail to fit)"
    if why is None:
        draws, ratios = scored
        from qvr.inference.vi.pathfinder import psis_weights
        if np.isfinite(ratios).sum() >= 10:  # else k-hat is inf: no weights to show
            w, stats["resample_ess"] = psis_weights(ratios)
            stats["resample_draws"] = int(w.size)
        if not k < KHAT_WARN:
            why = f"k-hat {k:.2f} >= {KHAT_WARN}"
    if why is not None:
        not_resampled(ctx, stats, why, option="psis", whose="the guide's")
        return guide_summary(guide, ctx.x, ctx.observations, report=ctx.report)
    idx = torch.as_tensor(resample_indices(w, SUMMARY_DRAWS))
    chosen = {name: v[idx.to(v.device)] for name, v in draws.items()}
    stats["resampled"] = True
    return draws_summary(guide, ctx.x, ctx.observations, chosen, report=ctx.report)


def not_resampled(ctx, stats: dict, why: str, *, option: str, whose: str) -> None:
    """Record and say why ``--resample OPTION`` left the draws as they were: ``resampled``
    (psis) or ``amis_resampled`` (amis) false, ``resample_note``, a `FitWarning`."""
    from qvr.events import FitWarning
    stats["amis_resampled" if option == "amis" else "resampled"] = False
    stats["resample_note"] = why
    ctx.report(FitWarning(f"--resample {option}: the draws were not resampled ({why}): the "
                          f"summary and checks use {whose} own draws"))


def resample_indices(weights, n: int) -> np.ndarray:
    """`n` indices drawn with replacement in proportion to `weights` (normalised here),
    from a numpy generator seeded by torch's (so ``FitConfig.seed`` fixes them)."""
    w = np.asarray(weights, dtype=np.float64)
    rng = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,))))
    return rng.choice(w.size, size=int(n), replace=True, p=w / w.sum())
