"""How good is an approximation: the PSIS Pareto k-hat of its draws against the model.

Yao, Vehtari, Simpson & Gelman (2018), "Yes, but did it work?: Evaluating variational
inference": draw `S` independent `z_s ~ q`, form the log ratios
`r_s = log p~(z_s) - log q(z_s)` (both on the same space: the constrained-space densities
of a guide and of the model's joint give the same ratios as the unconstrained ones, the
Jacobians cancel), and fit a generalized Pareto distribution to the largest ratios
(arviz-stats' `psislw`, Zhang & Stephens' estimator with the usual shrinkage).

* k-hat < 0.5: the draws are close to the posterior;
* 0.5-0.7: usable, with importance weights;
* > 0.7 (`KHAT_WARN`): the approximation is too far from the posterior for its means and
  spreads to be trusted.

`pareto_khat(log_ratios)` is the statistic; `guide_log_ratios(model, guide, x,
observations, n)` draws a fitted guide and scores its draws against the program
(`guide_draws_log_ratios`: with the draws, which ``--resample psis`` resamples);
`khat_record(...)` is what a run records (`result.stats["khat"]` and friends), and
`khat_warning(k, method)` the one-line warning with the usual advice.
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

#: above this the approximation's draws should not be trusted (the 2018 paper's threshold)
KHAT_WARN = 0.7
#: below this the draws are good (the 2018 paper's threshold)
KHAT_GOOD = 0.5
#: draws scored for the diagnostic (Pyro's and the paper's default)
KHAT_DRAWS = 1000
#: the diagnostic may take this long, or the fit's own time if longer, before it scores
#: fewer draws (at least 100; the record says how many): a 20-step demo fit of the seed
#: transformer (1.2 s) spent 3.9 s on 1,000 draws
KHAT_SECONDS = 3.0


def pareto_khat(log_ratios) -> float:
    """The PSIS k-hat of importance log ratios `log p - log q` (1-d, independent draws:
    relative efficiency 1).  Non-finite ratios: `-inf` (a draw outside the model's support)
    is a zero weight, kept; `+inf` or NaN gives `inf` (the ratios are unusable).  Fewer than
    ten finite ratios, or too few draws for a tail of five (about 25), give NaN (no tail
    to fit).  Equal largest ratios (an exact
    approximation: the ratios are the constant log normaliser, up to rounding) give 0.0:
    the weights are bounded, there is no heavy tail."""
    r = np.asarray(log_ratios, dtype=np.float64).reshape(-1)
    if np.isnan(r).any() or np.isposinf(r).any():
        return math.inf
    finite = r[np.isfinite(r)]
    if finite.size < 10:
        return math.nan
    if np.ptp(finite) == 0:
        return 0.0
    if degenerate_tail(finite):
        return math.inf
    r = np.where(np.isfinite(r), r, finite.min() - 1e3)  # zero weights, still in the tail
    from arviz_stats.base import array_stats
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        # psislw takes the negated log ratios (a log-likelihood, as LOO's `-ll`)
        try:
            _, k = array_stats.psislw(-(r - r.max()), r_eff=1.0, axis=-1)
        except ValueError as exc:
            if "same" in str(exc):  # "All tail values are the same": a flat tail
                return 0.0
            if "at least" in str(exc):  # "n_draws_tail must be at least 5": < ~25 draws
                return math.nan
            raise
    return float(k)


#: tail weights below this fraction of the largest do not count as tail points
TAIL_FLOOR = 1e-15
#: fewer tail points above `TAIL_FLOOR` than this: the weights are degenerate (k-hat inf)
TAIL_POINTS = 10


def degenerate_tail(log_ratios) -> bool:
    """True when the importance weights are degenerate: of the `M = ceil(min(0.2 S,
    3 sqrt(S)))` largest of `S` finite log ratios, fewer than ten (all, for a shorter
    tail) are within a factor `TAIL_FLOOR` of the largest weight (Pyro's rule; there
    k-hat is infinite).  A few draws then carry all the weight, and the generalized
    Pareto fit sees a tail of zeros and returns a k near 0 instead: an approximation
    thousands of nats from the posterior looked "good" (kid_scores' mean-field guide
    after 1,000 steps: log ratios with an sd of 2,000 nats, k-hat 0.05)."""
    r = np.asarray(log_ratios, dtype=np.float64).reshape(-1)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return True
    return bool(degenerate_rows(r[None])[0])


def degenerate_rows(log_ratios) -> np.ndarray:
    """`degenerate_tail` of each row of `(n, S)` log ratios (non-finite entries count as
    zero weights), vectorised: PSIS-LOO's rows (`checks._psis`)."""
    r = np.asarray(log_ratios, dtype=np.float64)
    r = np.where(np.isfinite(r), r, -np.inf)
    s = r.shape[1]
    m = max(1, int(math.ceil(min(0.2 * s, 3 * math.sqrt(s)))))
    top = -np.partition(-r, m - 1, axis=1)[:, :m]
    largest = top.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        count = (top >= largest + math.log(TAIL_FLOOR)).sum(axis=1)
    return count < min(TAIL_POINTS, m)


#: a guide's name in prose (`FitConfig.guide` spells it ``meanfield``)
_GUIDE_WORDS = {"meanfield": "mean-field", "fullrank": "full-rank", "laplace": "Laplace"}


def khat_warning(khat: float, method: str = "svi", guide: Optional[str] = None,
                 local_only: bool = False, amis_tried: bool = False) -> Optional[str]:
    """The warning for a k-hat above `KHAT_WARN` (None otherwise), with the usual advice.
    `local_only`: every latent of the program is local (one per row), and every guide
    covers those with its mean-field pairs: a richer guide would change nothing, so the
    advice is a longer fit or NUTS (the seed transformer's hidden states).  Laplace and
    Pathfinder are advised ``--resample amis`` (`qvr.inference.methods.guide_amis`)
    unless the run has tried it (`amis_tried`)."""
    if khat is None or not (isinstance(khat, float) or isinstance(khat, int)):
        return None
    if math.isnan(khat) or khat <= KHAT_WARN:
        return None
    what = f"the {_GUIDE_WORDS.get(guide, guide)} guide" if guide else {"pathfinder": "Pathfinder's approximation",
                                               "laplace": "the Laplace approximation"}.get(
        method, "the approximation")
    if method == "svi" and local_only:
        advice = ("its latents are all local (one per row), which every guide covers with "
                  "mean-field pairs: try more steps or ELBO particles (--steps, "
                  "--elbo-particles), or NUTS")
    elif method == "svi":
        amis = ("--resample amis (adaptive importance sampling from it), "
                if guide == "laplace" and not amis_tried else "")
        advice = (f"try {amis}a richer guide (--guide fullrank, lowrank:K or flow), "
                  f"Pathfinder (--method pathfinder), or NUTS")
    elif method in ("laplace", "pathfinder") and not amis_tried:
        advice = ("its means and sds are unreliable: try --resample amis (adaptive "
                  "importance sampling from it) or NUTS (--method nuts)")
    else:
        advice = "its means and sds are unreliable: try NUTS (--method nuts)"
    return (f"Pareto k-hat {khat:.2f} > {KHAT_WARN}: {what} is too far from the posterior "
            f"for its draws to be trusted; {advice}")


def guide_log_ratios(model, guide, x, observations: Optional[dict] = None,
                     n: int = KHAT_DRAWS, chunk: int = 250):
    """`(log_p - log_q)` of `n` independent draws of a fitted `guide` (a float64 numpy
    array), with `log_p` the program's joint density (finite latents summed out) and
    `log_q` the guide's, both at the constrained values.  Draws are scored `chunk` at a
    time, vmapped where the program allows it (else one by one)."""
    out = [r for _, r in _scored_chunks(model, guide, x, observations, n, chunk, False)]
    return np.concatenate(out) if out else np.zeros(0)


def guide_draws_log_ratios(model, guide, x, observations: Optional[dict] = None,
                           n: int = KHAT_DRAWS, chunk: int = 250) -> tuple:
    """`guide_log_ratios` with the draws scored: ``(draws, log_ratios)``, the draws
    ``{site: (n, *shape)}`` constrained values (torch tensors, as `guide.rsample` gives
    them) in the order of the ratios (`qvr.inference.methods.guide_resample` resamples
    them)."""
    draws, ratios = [], []
    for d, r in _scored_chunks(model, guide, x, observations, n, chunk, True):
        draws.append(d)
        ratios.append(r)
    return join_draws(draws), (np.concatenate(ratios) if ratios else np.zeros(0))


def join_draws(parts: list) -> dict:
    """Chunks of draws ``[{site: (m, *shape)}, ...]`` as one ``{site: (sum m, *shape)}``."""
    import torch
    if not parts:
        return {}
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def _scored_chunks(model, guide, x, observations, n: int, chunk: int, keep: bool):
    """``(draws or None, log_ratios)`` per chunk of `chunk` guide draws (`keep`: the
    draws too, detached)."""
    import torch

    from qvr.inference.enumeration.enumerate import enumerated_total, prepare
    observations = dict(observations or {})
    prepare(model, x, observations)
    with torch.no_grad():
        left = int(n)
        while left > 0:
            m = min(chunk, left)
            left -= m
            draws = guide.rsample(x, observations, sample_shape=(m,))
            log_q = guide.log_prob(x, draws, batch_ndims=1)
            log_p = _joint(model, x, observations, draws, m, enumerated_total)
            ratios = (log_p.double() - log_q.double()).reshape(-1).cpu().numpy()
            yield ({k: v.detach() for k, v in draws.items()} if keep else None), ratios


def _joint(model, x, observations, draws, m, total):
    import torch

    def one(values):
        return total(model, x, {**values, **observations})
    try:
        from torch.func import vmap
        return vmap(one, randomness="same")(draws)
    except Exception:
        vals = []
        for i in range(m):
            try:
                vals.append(one({k: v[i] for k, v in draws.items()}))
            except (ValueError, RuntimeError):  # outside the support: a zero weight
                vals.append(torch.tensor(-math.inf))
        return torch.stack([torch.as_tensor(v, dtype=torch.float64) for v in vals])


def khat_record(log_ratios) -> dict:
    """What a run records about its approximation: ``{"khat": k, "khat_draws": S}``."""
    r = np.asarray(log_ratios, dtype=np.float64).reshape(-1)
    k = pareto_khat(r)
    return {"khat": (None if math.isnan(k) else (k if math.isfinite(k) else float("inf"))),
            "khat_draws": int(r.size)}


def was_resampled(method: str, stats) -> bool:
    """Whether a run of `method` with `stats` (``summary.json``'s, or ``result.stats``) holds
    draws resampled by ``--resample psis``: an SVI run (``--guide laplace`` included)
    whose ``resampled`` is true.  Its draws are then posterior draws, saved in
    ``samples.npz``, and prediction (`qvr.inference.front.predict`) binds them instead of
    drawing from the guide.  Pathfinder's own ``resampled`` (its multi-path PSIS) is not
    this option's."""
    return method == "svi" and bool((stats or {}).get("resampled") is True)


def record_guide_khat(ctx, result, guide, *, method: str = "svi",
                      guide_name: Optional[str] = None, keep: int = 0,
                      amis_tried: bool = False):
    """Score `KHAT_DRAWS` draws of a fitted guide against the program and record k-hat in
    `result.stats` (``khat``, ``khat_draws``; ``khat_note`` when it could not be computed),
    warning (`FitWarning`) above `KHAT_WARN`.  The draws cost one joint evaluation each:
    where a first chunk says the whole would take longer than ``max(KHAT_SECONDS, the fit's own
    time)``, fewer are scored (at least 100) and the record says how many.

    `keep` > 0 (``--resample psis``): up to ``max(keep, KHAT_DRAWS)`` draws are scored,
    under the same time budget, and ``(draws, log_ratios)`` of every draw scored is
    returned (`guide_draws_log_ratios`); else, or when k-hat was not computed, None."""
    import time

    from qvr.events import FitWarning
    world = getattr(ctx, "world", None)
    if world is not None and getattr(world, "distributed", False):
        result.stats["khat_note"] = "not computed across ranks"
        return None
    if guide is None or not getattr(guide, "latent_names", None):
        return None
    target = max(KHAT_DRAWS, int(keep or 0))

    def score(n):
        if keep:
            return guide_draws_log_ratios(ctx.model, guide, ctx.x, ctx.observations, n=n)
        return None, guide_log_ratios(ctx.model, guide, ctx.x, ctx.observations, n=n)
    try:
        t0 = time.perf_counter()
        first_draws, first = score(100)
        cost = (time.perf_counter() - t0) / 100
        budget = max(KHAT_SECONDS, float(getattr(result, "elapsed", 0.0) or 0.0))
        n = int(min(target - 100, max(0, budget / max(cost, 1e-9) - 100)))
        rest_draws, rest = score(n) if n > 0 and not ctx.stop() else (None, np.zeros(0))
        ratios = np.concatenate([first, rest])
        draws = join_draws([d for d in (first_draws, rest_draws) if d]) if keep else None
    except Exception as exc:  # the diagnostic never fails the fit
        result.stats["khat_note"] = f"not computed: {type(exc).__name__}: {exc}"[:200]
        return None
    result.stats.update(khat_record(ratios))
    specs = getattr(guide, "specs", None) or ()
    local_only = bool(specs) and all(getattr(s, "kind", "") == "local" for s in specs)
    message = khat_warning(result.stats["khat"], method, guide_name, local_only=local_only,
                           amis_tried=amis_tried)
    if message:
        ctx.report(FitWarning(message))
    return (draws, ratios) if keep else None
