"""Checks of a fitted model against its data, from the pointwise terms of a run record:
PSIS-LOO (``loo.json``), posterior (or prior) predictive checks with LOO-PIT
(``ppc.json``), and the comparison of runs on the same data (`compare`, ``qvr compare``).

Torch-free: numpy, scipy and ArviZ's statistics (`arviz_stats`, imported inside the
functions: importing it takes seconds); the dashboard's UI process imports this module.

The inputs are what `qvr.runs.Run` reads from a record (`qvr.runs.layout`, "After the
fit"): ``log_lik`` and ``y_rep`` ``{site: (chains, draws, *shape)}``, ``observed``
``{site: shape}`` with grouping indices ``group.NAME`` (one integer per data row), the
``pointwise`` entry of ``run.json`` (``meta``: ``kind``, ``rows``...) and, for SVI,
``importance`` ``{"log_p", "log_q"}`` per draw.

Public functions
----------------

* `loo(log_lik, meta, importance=None, *, posterior=None, reff=None)` -> the ``loo.json``
  dict;
* `ppc(observed, y_rep, log_lik, groups, meta, *, importance=None, posterior=None,
  reff=None)` -> the ``ppc.json`` dict;
* `write_checks(run_dir)` -> ``(loo, ppc)``: computes both from the record and writes
  ``loo.json`` and ``ppc.json`` atomically (LOO is skipped for a ``prior`` run); a
  statistical failure becomes ``{"error": message}`` in the file, never an exception;
* `loo_of_run(run)`, `ppc_of_run(run)`: the same from a `Run`, nothing written; None when
  the record has no pointwise terms (`Run.loo()` / `Run.ppc()` call them when the files
  are missing);
* `compare(runs)` -> the comparison dict of ``qvr compare``; `CompareError` when the runs
  cannot be compared.

Rows of LOO
-----------

When every log-likelihood site has the same leading size B and ``meta["rows"][site]`` is
``local``, ``enumerated`` or ``marginalized``, a row is a data row: the sites' terms are
summed per row (every element of the row) and LOO leaves one row out (``"rows": "row"``;
row i is labelled ``VAR[i]``).  Otherwise every element of every site is an observation
(``"rows": "element"``; labels ``site[i,j]``, ``site`` for a scalar, listed in ``labels``).

``loo.json``
------------

``elpd_loo``, ``se`` (its standard error over rows), ``p_loo`` (effective number of
parameters), ``n_rows``, ``n_draws`` (chains x draws), ``good_k`` (arviz's sample-size
dependent Pareto-k threshold ``min(1 - 1/log10(S), 0.7)``), ``pareto_k`` and ``elpd_i``
(lists, one per row), ``high_k`` (``{"row", "label", "k"}`` for rows above ``good_k``, k
descending, at most `HIGH_K_LISTED`), ``n_high_k`` (all of them), ``warning`` (a row above
``good_k``), ``method`` (``psis``, or ``psis-guide`` for draws from an SVI guide: PSIS of
the importance ratios ``p/q`` times the LOO ratios, arviz's ``loo_approximate_posterior``),
``reff`` (relative efficiency used for the Pareto tails: ``ess_mean / S`` averaged over the
posterior's coordinates, as arviz does by default; 1 for one chain or guide draws; from the
rows' log-likelihood when no posterior draws of the same shape are given), ``var`` (the
site name, or names joined by ``+``), ``kind`` (posterior / guide), ``rows`` (``row`` or
``element``), ``labels`` (element rows only), ``n_constant`` (rows whose term is equal at
every draw, such as a missing value's exact zero: they get equal weights, k = 0 and
``elpd_i`` equal to the term; arviz's PSIS refuses them).

``ppc.json``
------------

``kind`` (posterior / prior / guide), ``draws`` (replicates used), ``replicates`` (the
record's ``pointwise.replicates``, how they were drawn, when it says), ``sites``:
``{site: {...}}`` with, per observed site:

* ``shape``, ``n`` (finite observed elements: NaN marks a missing value and is left out),
  ``discrete`` (every observed value an integer), ``count`` (discrete and non-negative);
* ``stats``: ``{name: {"observed": T(y), "replicated": {"mean", "sd", "q5", "q50",
  "q95"}, "p_value", "extreme"}}`` for ``mean``, ``sd``, ``min``, ``max`` and, for count
  data, ``zeros`` (the share of zeros).  ``p_value`` is the posterior predictive p-value
  ``Pr(T(y_rep) > T(y)) + Pr(T(y_rep) = T(y)) / 2`` (ties count half); ``extreme`` when it
  is below 0.025 or above 0.975; ``extreme`` (the site's) lists the extreme statistics;
* ``groups`` (when a grouping index has one entry per row of the site): ``{NAME:
  {"n_groups", "n_extreme", "groups": [{"group", "n", "observed", "q5", "q95",
  "p_value", "extreme"}], "truncated"}}`` — the mean of each group's elements, observed
  and replicated (its 5% and 95% quantiles over at most `GROUP_DRAWS` draws), at most
  `GROUPS_LISTED` groups listed (``truncated``), every group counted in ``n_extreme``;
* ``hist``: ``edges`` (bins: for discrete data one bar per integer value, or integer-wide
  runs of values, at most `HIST_DISCRETE_BINS`; for continuous data `HIST_BINS` equal-width
  bins over the observed values and the replicates' 0.5%..99.5% range; values beyond the
  edges count in the end bins), ``observed`` counts, ``replicated_mean``,
  ``replicated_q5``, ``replicated_q95`` (the replicates' counts per bin over at most
  `HIST_DRAWS` draws), ``draws``;
* ``loo_pit`` (a posterior or guide run with log-likelihood terms): ``values`` (LOO-PIT of
  each element, PSIS-weighted ``Pr(y_rep_i <= y_i | y_-i)``; randomized between
  ``Pr(<)`` and ``Pr(<=)`` at ties, i.e. for discrete data — arviz's ``loo_pit`` formula,
  vectorised), ``weights`` (``element``: each element left out by itself; ``row``: its
  data row left out, for terms summed per row such as enumerated sites), ``randomized``,
  and the uniformity test of Säilynoja, Bürkner & Vehtari (2022): ``x`` (evaluation points
  of the ECDF), ``ecdf``, ``band_lower``, ``band_upper`` (the simultaneous
  `PIT_BAND_PROB` band of the ECDF of uniform values, arviz's simulation method),
  ``prob``, ``p_value`` (the share of simulated uniform samples whose ECDF strays at least
  as far: the same statistic as the band), ``outside`` (the ECDF leaves the band);
  ``loo_pit_note`` says why it is missing otherwise;
* ``error`` instead of the above when the site could not be checked.

`compare`
---------

``{"runs": [row, ...] (best first), "n_rows", "data_sha256", "method": "stacking",
"verdict"}``, a row ``{"rank", "name", "run_id", "path", "program", "export",
"elpd_loo", "se", "elpd_diff", "dse", "p_loo", "weight", "warning", "n_high_k",
"good_k"}`` (``elpd_diff`` and ``dse``, the standard error of the difference from the
paired per-row terms, are taken against the best run; weights are arviz's stacking
weights).
"""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from qvr.inference.criticism.khat import degenerate_rows

#: ``meta["rows"]`` values whose terms are one per data row (summed per row for LOO)
ROW_KINDS = ("local", "enumerated", "marginalized")
HIGH_K_LISTED = 100
PPC_STATS = ("mean", "sd", "min", "max", "zeros")
HIST_BINS = 30
HIST_DISCRETE_BINS = 40
HIST_DRAWS = 500
GROUP_DRAWS = 1000
GROUPS_LISTED = 200
PIT_BAND_PROB = 0.95
PIT_GRID = 100  # at most this many ECDF evaluation intervals
PIT_SIMULATIONS = 2000
GROUP_PREFIX = "group."
_BLOCK = 1 << 22  # elements per block of draws x elements worked at once
_SEED = 214  # arviz's default seed for its random tie-breaking and band simulations


class CompareError(ValueError):
    """Runs that cannot be compared (different data, no pointwise terms, ...)."""


# ---------------------------------------------------------------------------- helpers


def _f(x) -> float:
    return float(x)


def _flat_draws(a, chains: int, draws: int) -> np.ndarray:
    """``(chains, draws, *shape)`` -> ``(chains * draws, n)``, float64."""
    a = np.asarray(a)
    return a.reshape(chains * draws, -1).astype(np.float64, copy=False)


def _labels_of(site: str, shape: tuple) -> list[str]:
    if not shape:
        return [site]
    out = []
    for idx in np.ndindex(*shape):
        out.append(f"{site}[{','.join(map(str, idx))}]")
    return out


def _row_matrix(log_lik: Mapping[str, Any], meta: Optional[Mapping]) \
        -> tuple[np.ndarray, str, Optional[list], str]:
    """``(ll (chains, draws, rows) float64, var, labels or None, "row" | "element")``."""
    if not log_lik:
        raise ValueError("no log-likelihood terms")
    rows_of = dict((meta or {}).get("rows") or {})
    sites = list(log_lik)
    arrays = {s: np.asarray(log_lik[s]) for s in sites}
    chains, draws = next(iter(arrays.values())).shape[:2]
    for s, a in arrays.items():
        if a.ndim < 2 or a.shape[:2] != (chains, draws):
            raise ValueError(f"log-likelihood {s!r} has shape {a.shape}, not "
                             f"({chains}, {draws}, ...)")
    var = "+".join(sites)
    leading = {a.shape[2] if a.ndim > 2 else None for a in arrays.values()}
    if len(leading) == 1 and None not in leading and \
            all(rows_of.get(s) in ROW_KINDS for s in sites):
        b = leading.pop()
        ll = np.zeros((chains, draws, b))
        for a in arrays.values():
            ll += a.reshape(chains, draws, b, -1).astype(np.float64).sum(axis=-1)
        return ll, var, None, "row"
    parts, labels = [], []
    for s, a in arrays.items():
        parts.append(a.reshape(chains, draws, -1).astype(np.float64))
        labels += _labels_of(s, tuple(a.shape[2:]))
    return np.concatenate(parts, axis=-1), var, labels, "element"


def _reff(posterior: Optional[Mapping], chains: int, draws: int,
          fallback: Optional[np.ndarray] = None) -> float:
    """arviz's default relative efficiency: the mean over the posterior's coordinates of
    ``ess(method="mean") / (chains * draws)``; 1 for one chain.  Without posterior draws
    of shape ``(chains, draws, ...)`` the `fallback` arrays (the rows' log-likelihood)
    stand for them.  At most 2,000 coordinates, evenly spaced, are used."""
    if chains <= 1:
        return 1.0
    from arviz_stats.base import array_stats
    cols = []
    for v in (posterior or {}).values():
        a = np.asarray(v)
        if a.ndim >= 2 and a.shape[:2] == (chains, draws) and a.dtype.kind in "fiub":
            cols.append(a.reshape(chains, draws, -1).astype(np.float64))
    if not cols and fallback is not None:
        cols = [np.asarray(fallback, dtype=np.float64).reshape(chains, draws, -1)]
    if not cols:
        return 1.0
    x = np.concatenate(cols, axis=-1)
    if x.shape[-1] > 2000:
        x = x[..., np.linspace(0, x.shape[-1] - 1, 2000).astype(int)]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ess = np.asarray(array_stats.ess(np.moveaxis(x, -1, 0), chain_axis=-2, draw_axis=-1,
                                         method="mean"), dtype=np.float64)
    ess = ess[np.isfinite(ess)]
    if not ess.size:
        return 1.0
    return float(ess.mean() / (chains * draws))


def _importance_correction(importance: Optional[Mapping], chains: int, draws: int) \
        -> Optional[np.ndarray]:
    """``log_p - log_q`` per draw ``(chains * draws,)`` when the draws come from a guide."""
    if not importance or "log_p" not in importance or "log_q" not in importance:
        return None
    lp = np.asarray(importance["log_p"], dtype=np.float64).reshape(-1)
    lq = np.asarray(importance["log_q"], dtype=np.float64).reshape(-1)
    if lp.size != chains * draws or lq.size != chains * draws:
        raise ValueError(f"importance terms hold {lp.size} draws, the log-likelihood "
                         f"{chains * draws}")
    return lp - lq


def _psis(ll_cols: np.ndarray, reff: float, corr: Optional[np.ndarray]) \
        -> tuple[np.ndarray, np.ndarray]:
    """PSIS log weights ``(n, S)`` and Pareto k ``(n,)`` of leaving out each column of
    ``ll_cols (S, n)``: the log ratios ``-ll`` (``-ll + log p - log q`` for guide draws,
    as arviz's ``loo_approximate_posterior``), smoothed by arviz's ``psislw``."""
    from arviz_stats.base import array_stats
    s, n = ll_cols.shape
    bad = np.isnan(ll_cols).any(axis=0)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} of {n} log-likelihood terms are NaN at some "
                         f"draw (the first: column {int(np.argmax(bad))})")
    lw = np.empty((n, s))
    k = np.empty(n)
    step = max(1, _BLOCK // max(s, 1))
    for i in range(0, n, step):
        block = ll_cols[:, i:i + step].T
        if corr is not None:
            c = corr - corr.max()
            block = block - c[None, :]
            block = block + (-block).max(axis=1, keepdims=True)  # arviz's shift
            r = 1.0
        else:
            r = reff
        # a term equal at every draw (a missing value's exact zero) leaves the posterior
        # as it is: equal weights, k = 0 (arviz's psislw refuses a constant tail)
        flat = np.ptp(block, axis=1) == 0
        w = np.full(block.shape, -np.log(s))
        kk = np.zeros(block.shape[0])
        if not flat.all():
            w[~flat], kk[~flat] = array_stats.psislw(block[~flat], r_eff=r, axis=-1)
        # a few draws carrying all the weight (log ratios `-block`): k-hat is infinite,
        # not the near-zero k a tail of zeros gives (`khat.degenerate_tail`)
        kk[~flat & degenerate_rows(-block)] = np.inf
        lw[i:i + step] = w
        k[i:i + step] = kk
    return lw, k


# ---------------------------------------------------------------------------- LOO


def loo(log_lik: Mapping[str, Any], meta: Optional[Mapping] = None,
        importance: Optional[Mapping] = None, *, posterior: Optional[Mapping] = None,
        reff: Optional[float] = None) -> dict:
    """PSIS-LOO of the pointwise log-likelihood (the ``loo.json`` dict: module docstring).

    `log_lik`: ``{site: (chains, draws, *shape)}``; `meta`: the record's ``pointwise``
    entry (``rows``, ``kind``); `importance`: ``{"log_p", "log_q"}`` per draw for draws of
    an SVI guide; `posterior`: ``{site: (chains, draws, ...)}`` draws for arviz's relative
    efficiency; `reff` overrides it."""
    return _loo(log_lik, meta, importance, posterior=posterior, reff=reff)[0]


def _loo(log_lik, meta, importance=None, *, posterior=None, reff=None):
    """`loo`'s dict and the PSIS log weights ``(rows, S)`` it used (reused by LOO-PIT)."""
    import arviz_base
    import arviz_stats
    import xarray as xr
    meta = dict(meta or {})
    ll, var, labels, mode = _row_matrix(log_lik, meta)
    chains, draws, n_rows = ll.shape
    s = chains * draws
    corr = _importance_correction(importance, chains, draws)
    dt = arviz_base.from_dict({"log_likelihood": {"ll": ll}})
    if corr is not None:
        method, r = "psis-guide", 1.0
    else:
        method = "psis"
        r = float(reff) if reff is not None else \
            _reff(posterior, chains, draws, fallback=ll if chains > 1 else None)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        # the PSIS weights once (arviz would smooth twice), handed to arviz's loo: for
        # guide draws the ratios hold log p - log q, as in its loo_approximate_posterior
        lw, k = _psis(ll.reshape(s, n_rows), r, corr)
        lw_da = xr.DataArray(lw.T.reshape(chains, draws, n_rows),
                             dims=("chain", "draw", "ll_dim_0"))
        k_da = xr.DataArray(k, dims=("ll_dim_0",))
        res = arviz_stats.loo(dt, pointwise=True, var_name="ll", reff=r,
                              log_weights=lw_da, pareto_k=k_da)
    pareto_k = np.asarray(res.pareto_k, dtype=np.float64).reshape(-1)
    elpd_i = np.asarray(res.elpd_i, dtype=np.float64).reshape(-1)
    good_k = _f(res.good_k)

    def label(i):
        return labels[i] if labels is not None else f"{var}[{i}]"
    high = [i for i in np.argsort(-np.nan_to_num(pareto_k, nan=-np.inf), kind="stable")
            if pareto_k[i] > good_k]
    out = {"elpd_loo": _f(res.elpd), "se": _f(res.se), "p_loo": _f(res.p),
           "n_rows": int(n_rows), "n_draws": int(s), "good_k": good_k,
           "pareto_k": pareto_k.tolist(), "elpd_i": elpd_i.tolist(),
           "high_k": [{"row": int(i), "label": label(int(i)), "k": _f(pareto_k[i])}
                      for i in high[:HIGH_K_LISTED]],
           "n_high_k": len(high), "warning": bool(res.warning), "method": method,
           "reff": _f(r), "var": var, "kind": meta.get("kind", "posterior"), "rows": mode,
           "n_constant": int(np.sum(np.ptp(ll, axis=(0, 1)) == 0))}
    if labels is not None:
        out["labels"] = labels
    return out, lw


# ---------------------------------------------------------------------------- PPC


def _p_value(t_rep: np.ndarray, t_obs: float) -> float:
    t_rep = t_rep[np.isfinite(t_rep)] if np.isfinite(t_obs) else t_rep
    if not t_rep.size:
        return float("nan")
    return _f(np.mean(t_rep > t_obs) + 0.5 * np.mean(t_rep == t_obs))


def _extreme(p: float) -> bool:
    return bool(p < 0.025 or p > 0.975)


def _summ(t: np.ndarray) -> dict:
    t = t[np.isfinite(t)]
    if not t.size:
        return {k: float("nan") for k in ("mean", "sd", "q5", "q50", "q95")}
    q5, q50, q95 = np.quantile(t, [0.05, 0.5, 0.95])
    return {"mean": _f(t.mean()), "sd": _f(t.std(ddof=1)) if t.size > 1 else 0.0,
            "q5": _f(q5), "q50": _f(q50), "q95": _f(q95)}


def _stat_rows(yr: np.ndarray, names: tuple) -> dict:
    """Test statistics of each replicate (rows of ``yr``), blockwise in float64."""
    s, n = yr.shape
    out = {k: np.empty(s) for k in names}
    step = max(1, _BLOCK // max(n, 1))
    for i in range(0, s, step):
        b = yr[i:i + step].astype(np.float64)
        if "mean" in out:
            out["mean"][i:i + step] = b.mean(axis=1)
        if "sd" in out:
            out["sd"][i:i + step] = b.std(axis=1, ddof=1) if n > 1 else 0.0
        if "min" in out:
            out["min"][i:i + step] = b.min(axis=1)
        if "max" in out:
            out["max"][i:i + step] = b.max(axis=1)
        if "zeros" in out:
            out["zeros"][i:i + step] = (b == 0).mean(axis=1)
    return out


def _stat_obs(y: np.ndarray, name: str) -> float:
    if name == "mean":
        return _f(y.mean())
    if name == "sd":
        return _f(y.std(ddof=1)) if y.size > 1 else 0.0
    if name == "min":
        return _f(y.min())
    if name == "max":
        return _f(y.max())
    return _f((y == 0).mean())


def _thin(s: int, k: int) -> np.ndarray:
    return np.arange(s) if s <= k else np.linspace(0, s - 1, k).astype(int)


def _draw_blocks(rows: np.ndarray, n: int):
    """Index blocks of `rows` (draws) holding at most `_BLOCK` values of `n` each."""
    step = max(1, _BLOCK // max(n, 1))
    for i in range(0, len(rows), step):
        yield rows[i:i + step]


def _hist(y: np.ndarray, yr: np.ndarray, discrete: bool) -> dict:
    rows = _thin(len(yr), HIST_DRAWS)
    n = yr.shape[1]
    # the replicates' 0.5%..99.5% range, from at most about a million of their values
    sample = yr[rows[:: max(1, len(rows) * n // (1 << 20))]].astype(np.float64)
    fin = sample[np.isfinite(sample)]
    lo_r, hi_r = (np.quantile(fin, [0.005, 0.995]) if fin.size else (y.min(), y.max()))
    lo, hi = min(y.min(), lo_r), max(y.max(), hi_r)
    if discrete:
        lo, hi = math.floor(lo), math.ceil(hi)
        span = int(hi - lo + 1)
        width = max(1, math.ceil(span / HIST_DISCRETE_BINS))
        nb = math.ceil(span / width)
        edges = lo - 0.5 + width * np.arange(nb + 1)
    else:
        if not hi > lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, HIST_BINS + 1)
    nb = len(edges) - 1

    def idx(v):
        return np.clip(np.searchsorted(edges, v, side="right") - 1, 0, nb - 1)
    obs = np.bincount(idx(y), minlength=nb)
    parts = []
    for block in _draw_blocks(rows, n):
        sub = yr[block].astype(np.float64)
        d = len(sub)
        finite = np.isfinite(sub)
        ii = idx(np.where(finite, sub, edges[0]))
        parts.append(np.bincount((ii + nb * np.arange(d)[:, None]).reshape(-1),
                                 weights=finite.reshape(-1).astype(np.float64),  # NaN: none
                                 minlength=nb * d).reshape(d, nb))
    counts = np.concatenate(parts)
    q5, q95 = np.quantile(counts, [0.05, 0.95], axis=0)
    return {"edges": edges.tolist(), "observed": obs.astype(int).tolist(),
            "replicated_mean": counts.mean(axis=0).tolist(), "replicated_q5": q5.tolist(),
            "replicated_q95": q95.tolist(), "draws": int(len(rows))}


def _groups(y: np.ndarray, yr: np.ndarray, g_elem: np.ndarray) -> dict:
    rows = _thin(len(yr), GROUP_DRAWS)
    order = np.argsort(g_elem, kind="stable")
    gs = g_elem[order]
    keys, starts, counts = np.unique(gs, return_index=True, return_counts=True)
    obs = np.add.reduceat(y[order], starts) / counts
    rep = np.concatenate([np.add.reduceat(yr[block][:, order].astype(np.float64), starts,
                                          axis=1)
                          for block in _draw_blocks(rows, yr.shape[1])]) / counts[None, :]
    p = np.mean(rep > obs[None, :], axis=0) + 0.5 * np.mean(rep == obs[None, :], axis=0)
    q5, q95 = np.quantile(rep, [0.05, 0.95], axis=0)
    ext = (p < 0.025) | (p > 0.975)
    listed = [{"group": int(keys[j]), "n": int(counts[j]), "observed": _f(obs[j]),
               "q5": _f(q5[j]), "q95": _f(q95[j]), "p_value": _f(p[j]),
               "extreme": bool(ext[j])} for j in range(min(len(keys), GROUPS_LISTED))]
    return {"n_groups": int(len(keys)), "n_extreme": int(ext.sum()), "groups": listed,
            "truncated": bool(len(keys) > GROUPS_LISTED), "draws": int(len(rows))}


def _pit(yr: np.ndarray, y: np.ndarray, lw: np.ndarray, rng) -> np.ndarray:
    """LOO-PIT of each element: arviz's ``_loo_pit`` (``Pr(<)`` under the normalised
    weights, uniform between ``Pr(<)`` and ``Pr(<=)`` at ties), vectorised over elements.
    `yr` ``(S, n)``, `y` ``(n,)``, `lw` ``(n, S)``."""
    from scipy.special import logsumexp
    n = y.size
    out = np.empty(n)
    s = yr.shape[0]
    step = max(1, _BLOCK // max(s, 1))
    for i in range(0, n, step):
        w = lw[i:i + step]
        w = np.exp(w - logsumexp(w, axis=1, keepdims=True))
        r = yr[:, i:i + step].T.astype(np.float64)
        yo = y[i:i + step, None]
        below = np.sum(w * (r < yo), axis=1)
        at = np.sum(w * (r == yo), axis=1)
        u = rng.uniform(size=below.shape)
        out[i:i + step] = np.where(at > 0, below + u * at, below)
    return np.clip(out, 0.0, 1.0)


def _gamma(counts: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """arviz's simultaneous-band statistic of ECDF counts at `z` (last axis)."""
    from scipy.special import bdtr
    counts = np.asarray(counts, dtype=np.int64)
    cols = np.arange(len(z))
    if (n + 1) < counts.size // max(len(z), 1):  # a table of every count is cheaper
        cdf = bdtr(np.arange(n + 1)[:, None], n, z[None, :])  # Pr(count <= c) at z
        below = cdf[counts, cols]
        above = np.where(counts > 0, 1 - cdf[np.maximum(counts - 1, 0), cols], 1.0)
    else:
        below = bdtr(counts, n, z)
        # Pr(count >= c); 1 at c = 0 (scipy's bdtr is NaN at -1)
        above = np.where(counts > 0, 1 - bdtr(np.maximum(counts - 1, 0), n, z), 1.0)
    return 1 - 2 * np.minimum(np.min(below, axis=-1), np.min(above, axis=-1))


def uniformity(pit: np.ndarray, prob: float = PIT_BAND_PROB, rng=None) -> dict:
    """The ECDF of `pit` against the uniform distribution, with the simultaneous `prob`
    band of Säilynoja et al. (2022) by arviz's simulation method (the uniform samples'
    ECDF counts at the evaluation points drawn at once as multinomial counts) and its
    p-value: ``{"x", "ecdf", "band_lower", "band_upper", "prob", "p_value", "outside",
    "n"}``."""
    from arviz_stats.ecdf_utils import compute_ecdf, get_pointwise_confidence_band
    rng = np.random.default_rng(_SEED) if rng is None else rng
    pit = np.asarray(pit, dtype=np.float64)
    n = pit.size
    if n < 2:
        return {"n": int(n), "x": [], "ecdf": [], "band_lower": [], "band_upper": [],
                "prob": prob, "p_value": float("nan"), "outside": False}
    k = min(n, PIT_GRID)
    z = np.arange(1, k) / k
    ecdf = compute_ecdf(pit, z)
    g_obs = _gamma(np.round(ecdf * n), n, z)
    sims = np.cumsum(rng.multinomial(n, np.full(k, 1.0 / k), size=PIT_SIMULATIONS),
                     axis=1)[:, :-1]
    g_sim = _gamma(sims, n, z)
    level = float(np.quantile(g_sim, prob))
    lower, upper = get_pointwise_confidence_band(level, n, z)
    outside = bool(np.any(ecdf < lower) or np.any(ecdf > upper))
    return {"n": int(n), "x": z.tolist(), "ecdf": ecdf.tolist(),
            "band_lower": np.asarray(lower).tolist(), "band_upper": np.asarray(upper).tolist(),
            "prob": prob, "p_value": _f(np.mean(g_sim >= g_obs - 1e-12)),
            "outside": outside}


def _pit_weights(site: str, shape: tuple, log_lik: Mapping, meta: Mapping, corr, reff,
                 chains: int, draws: int, cached: Optional[Mapping]):
    """``(lw (n, S), "element" | "row")`` for the site's elements, or ``(None, note)``."""
    n = int(np.prod(shape)) if shape else 1
    if cached is not None and site in cached:
        return cached[site], "element"
    a = log_lik.get(site)
    if a is not None and tuple(np.shape(a)[2:]) == tuple(shape):
        lw, _ = _psis(_flat_draws(a, chains, draws), reff, corr)
        return lw, "element"
    if shape:
        b = shape[0]
        for key, a in log_lik.items():
            a = np.asarray(a)
            if site in key.split("+") and a.ndim > 2 and a.shape[2] == b:
                rows = a.reshape(chains * draws, b, -1).astype(np.float64).sum(axis=-1)
                lw, _ = _psis(rows, reff, corr)
                return np.repeat(lw, n // b, axis=0), "row"
    return None, f"no log-likelihood term of {site!r} by element or by row"


def ppc(observed: Mapping[str, Any], y_rep: Mapping[str, Any],
        log_lik: Optional[Mapping[str, Any]] = None, groups: Optional[Mapping] = None,
        meta: Optional[Mapping] = None, *, importance: Optional[Mapping] = None,
        posterior: Optional[Mapping] = None, reff: Optional[float] = None,
        _weights: Optional[Mapping] = None) -> dict:
    """Predictive checks of every observed site that has replicates (the ``ppc.json``
    dict: module docstring).  `observed` may hold the ``group.NAME`` indices itself (as
    ``observed.npz`` does); `groups` adds to them."""
    meta = dict(meta or {})
    kind = meta.get("kind", "posterior")
    log_lik = dict(log_lik or {})
    grp = {k[len(GROUP_PREFIX):]: np.asarray(v) for k, v in observed.items()
           if k.startswith(GROUP_PREFIX)}
    grp.update({k: np.asarray(v) for k, v in (groups or {}).items()})
    obs = {k: v for k, v in observed.items() if not k.startswith(GROUP_PREFIX)}
    sites = [s for s in y_rep if s in obs]
    out: dict = {"kind": kind, "draws": 0, "sites": {}}
    if meta.get("replicates"):
        out["replicates"] = meta["replicates"]
    if not sites:
        return out
    chains, draws = np.shape(y_rep[sites[0]])[:2]
    out["draws"] = int(chains * draws)
    corr = None
    r = 1.0
    use_pit = kind != "prior" and bool(log_lik)
    if use_pit:
        lchains, ldraws = np.shape(next(iter(log_lik.values())))[:2]
        if (lchains, ldraws) != (chains, draws):
            use_pit = False
        else:
            corr = _importance_correction(importance, chains, draws)
            if corr is None:
                r = float(reff) if reff is not None else _reff(posterior, chains, draws)
    for site in sites:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                out["sites"][site] = _site_ppc(
                    site, np.asarray(obs[site]), np.asarray(y_rep[site]), grp,
                    log_lik if use_pit else None, meta, corr, r, _weights)
        except Exception as exc:  # a statistical failure is reported, never raised
            out["sites"][site] = {"error": f"{type(exc).__name__}: {exc}"}
    if kind == "prior":
        for v in out["sites"].values():
            v.setdefault("loo_pit_note", "a prior predictive run has no LOO-PIT")
    return out


def _site_ppc(site, y_full, yrep_full, grp, log_lik, meta, corr, reff, cached) -> dict:
    chains, draws = yrep_full.shape[:2]
    shape = tuple(yrep_full.shape[2:])
    if tuple(y_full.shape) != shape:
        raise ValueError(f"observed shape {tuple(y_full.shape)} differs from the "
                         f"replicates' {shape}")
    y_all = y_full.reshape(-1).astype(np.float64)
    yr_all = yrep_full.reshape(chains * draws, -1)
    mask = np.isfinite(y_all)
    y = y_all[mask]
    yr = yr_all if mask.all() else yr_all[:, mask]
    if not y.size:
        return {"shape": list(shape), "n": 0, "error": "no observed value"}
    discrete = bool(y_full.dtype.kind in "iub" or np.all(y == np.round(y)))
    count = discrete and bool(y.min() >= 0)
    names = tuple(k for k in PPC_STATS if k != "zeros" or count)
    t_rep = _stat_rows(yr, names)
    stats = {}
    for k in names:
        t_obs = _stat_obs(y, k)
        p = _p_value(t_rep[k], t_obs)
        stats[k] = {"observed": t_obs, "replicated": _summ(t_rep[k]), "p_value": p,
                    "extreme": _extreme(p)}
    res: dict = {"shape": list(shape), "n": int(y.size), "discrete": discrete,
                 "count": count, "stats": stats,
                 "extreme": [k for k in names if stats[k]["extreme"]]}
    # groups: one index per data row of the site
    if shape and grp:
        b = shape[0]
        per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        gres = {}
        for name, g in grp.items():
            g = np.asarray(g).reshape(-1)
            if g.size != b or g.dtype.kind not in "iu":
                continue
            g_elem = np.repeat(g, per_row)[mask]
            gres[name] = _groups(y, yr, g_elem)
        if gres:
            res["groups"] = gres
    res["hist"] = _hist(y, yr, discrete)
    if log_lik is not None:
        try:
            lw, how = _pit_weights(site, shape, log_lik, meta, corr, reff, chains, draws,
                                   cached)
        except Exception as exc:  # PSIS failed (e.g. constant terms): the rest stands
            lw, how = None, f"LOO-PIT failed: {type(exc).__name__}: {exc}"
        if lw is None:
            res["loo_pit_note"] = how
        else:
            rng = np.random.default_rng(_SEED)
            pit = _pit(yr, y, lw[mask], rng)
            res["loo_pit"] = {"values": pit.tolist(), "weights": how,
                              "randomized": discrete, **uniformity(pit, rng=rng)}
    elif meta.get("kind", "posterior") != "prior":
        res["loo_pit_note"] = "no log-likelihood terms"
    return res


# ---------------------------------------------------------------------------- records


def _open(run):
    from qvr.runs import open_run
    from qvr.runs.reader import Run
    return run if isinstance(run, Run) else open_run(run)


def _posterior_of(run) -> dict:
    """The run's posterior draws for arviz's relative efficiency (``samples.npz``, else the
    draws chunks); {} when unreadable."""
    try:
        samples = run.samples()
        post = {k: v for k, v in samples.items() if not k.startswith("sample_stats.")}
        return post or run.draws()
    except Exception:
        return {}


def _error(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"}


def _loo_of_run(run):
    ll = run.log_likelihood()
    if not ll:
        return None, None
    meta = run.pointwise_meta or {}
    if meta.get("kind") == "prior":
        return None, None
    imp = run.importance() if meta.get("importance") or meta.get("kind") == "guide" else {}
    try:
        post = {} if imp else _posterior_of(run)
        return _loo(ll, meta, imp or None, posterior=post)
    except Exception as exc:
        return _error(exc), None


def loo_of_run(run) -> Optional[dict]:
    """PSIS-LOO of a record (`Run` or folder), computed, not written; None without
    pointwise log-likelihood terms or for a prior run; ``{"error"}`` when it fails."""
    return _loo_of_run(_open(run))[0]


def _single_site_weights(run_loo, lw, log_lik, y_rep) -> Optional[dict]:
    """LOO's weights handed to LOO-PIT when its rows are one site's elements."""
    if lw is None or not run_loo or "error" in run_loo or len(log_lik) != 1:
        return None
    site = next(iter(log_lik))
    if site not in y_rep or tuple(np.shape(log_lik[site])) != tuple(np.shape(y_rep[site])):
        return None
    n = int(np.prod(np.shape(y_rep[site])[2:]))
    return {site: lw} if lw.shape[0] == n else None


def _ppc_of_run(run, run_loo=None, lw=None):
    y_rep = run.predictive()
    if not y_rep:
        return None
    meta = run.pointwise_meta or {}
    try:
        log_lik = run.log_likelihood() if meta.get("kind") != "prior" else {}
        imp = run.importance() if meta.get("importance") or meta.get("kind") == "guide" \
            else {}
        reff = run_loo.get("reff") if run_loo and "error" not in run_loo else None
        post = {} if (imp or reff is not None) else _posterior_of(run)
        return ppc(run.observed(), y_rep, log_lik, None, meta, importance=imp or None,
                   posterior=post, reff=reff,
                   _weights=_single_site_weights(run_loo, lw, log_lik, y_rep))
    except Exception as exc:
        return _error(exc)


def ppc_of_run(run) -> Optional[dict]:
    """The predictive checks of a record (`Run` or folder), computed, not written; None
    without replicates; ``{"error"}`` when they fail."""
    return _ppc_of_run(_open(run))


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, allow_nan=True, separators=(",", ":")) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def write_checks(run_dir) -> tuple[Optional[dict], Optional[dict]]:
    """Compute LOO (not for a prior run) and the predictive checks of the record in
    `run_dir` and write ``loo.json`` / ``ppc.json`` (temp file + rename).  A failure
    becomes ``{"error": message}`` in the file; nothing is raised but an unwritable
    folder's `OSError`."""
    from qvr.runs import layout
    try:
        run = _open(run_dir)
    except Exception as exc:
        err = _error(exc)
        return err, err
    try:
        run_loo, lw = _loo_of_run(run)
    except Exception as exc:
        run_loo, lw = _error(exc), None
    try:
        run_ppc = _ppc_of_run(run, run_loo, lw)
    except Exception as exc:
        run_ppc = _error(exc)
    if run_loo is not None:
        _write_json(run.path / layout.LOO, run_loo)
    if run_ppc is not None:
        _write_json(run.path / layout.PPC, run_ppc)
    return run_loo, run_ppc


# ---------------------------------------------------------------------------- compare


def _display_names(runs) -> list[str]:
    names = []
    for r in runs:
        prog = r.program
        export = prog.get("export")
        stem = Path(prog.get("path") or r.run_id).stem
        names.append(export or stem)
    if len(set(names)) < len(names):
        names = [r.run_id for r in runs]
    if len(set(names)) < len(names):
        names = [str(r.path) for r in runs]
    if len(set(names)) < len(names):
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    return names


def compare(runs) -> dict:
    """Compare runs (`Run` objects or folders) fitted to the same data by PSIS-LOO
    (module docstring); `CompareError` when they cannot be compared."""
    runs = [_open(r) for r in runs]
    if len(runs) < 2:
        raise CompareError("compare needs two or more runs")
    loos = []
    for r in runs:
        meta = r.pointwise_meta
        if meta and meta.get("kind") == "prior":
            raise CompareError(f"run {r.run_id} is a prior predictive run: it has no LOO "
                               f"to compare")
        if not meta or not meta.get("log_lik"):
            raise CompareError(
                f"run {r.run_id} ({r.path}) has no pointwise log-likelihood terms (it was "
                f"recorded by an older qvr, or by a method that does not write them): "
                f"re-run it with this qvr")
        if meta.get("kind") == "prior":
            raise CompareError(f"run {r.run_id} is a prior predictive run: it has no LOO "
                               f"to compare")
        found = r.loo()
        if found is None:
            raise CompareError(f"run {r.run_id} ({r.path}) has no pointwise "
                               f"log-likelihood terms: re-run it with this qvr")
        if "error" in found:
            raise CompareError(f"LOO of run {r.run_id} failed: {found['error']}")
        if not found.get("elpd_i"):
            raise CompareError(f"the LOO of run {r.run_id} ({r.path / 'loo.json'}) has no "
                               f"per-row terms: delete loo.json to recompute it")
        loos.append(found)
    first = runs[0]
    for r in runs:
        if not r.data_sha256:
            raise CompareError(f"run {r.run_id} records no data hash (data_sha256): "
                               f"re-run it with this qvr")
    for r in runs[1:]:
        if r.data_sha256 != first.data_sha256:
            raise CompareError(
                f"runs {first.run_id} and {r.run_id} were fitted to different data "
                f"(data_sha256 {first.data_sha256} vs {r.data_sha256}): LOO compares "
                f"models on the same data only")
    for r, lo in zip(runs[1:], loos[1:]):
        if lo["n_rows"] != loos[0]["n_rows"]:
            raise CompareError(
                f"runs {first.run_id} and {r.run_id} have different LOO rows "
                f"({loos[0]['n_rows']} vs {lo['n_rows']}: {loos[0].get('var')} by "
                f"{loos[0].get('rows')} vs {lo.get('var')} by {lo.get('rows')})")
    import arviz_stats
    import xarray as xr
    names = _display_names(runs)
    elpds = {}
    for name, lo in zip(names, loos):
        elpds[name] = arviz_stats.ELPDData(
            "loo", lo["elpd_loo"], lo["se"], lo["p_loo"], lo["n_draws"], lo["n_rows"],
            "log", bool(lo.get("warning")), lo.get("good_k", 0.7),
            xr.DataArray(np.asarray(lo["elpd_i"], dtype=np.float64), dims=("row",)),
            xr.DataArray(np.asarray(lo["pareto_k"], dtype=np.float64), dims=("row",)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = arviz_stats.compare(elpds, method="stacking")
    by_name = {n: (r, lo) for n, r, lo in zip(names, runs, loos)}
    rows = []
    for name, row in table.iterrows():
        r, lo = by_name[name]
        rows.append({"rank": int(row["rank"]) + 1, "name": name, "run_id": r.run_id,
                     "path": str(r.path), "program": r.program.get("path"),
                     "export": r.program.get("export"), "elpd_loo": _f(row["elpd"]),
                     "se": _f(row["se"]), "elpd_diff": _f(row["elpd_diff"]),
                     "dse": _f(row["dse"]), "p_loo": _f(row["p"]),
                     "weight": _f(row["weight"]), "warning": bool(row["warning"]),
                     "n_high_k": int(lo.get("n_high_k", len(lo.get("high_k", [])))),
                     "good_k": _f(lo.get("good_k", 0.7)), "method": lo.get("method")})
    rows.sort(key=lambda x: x["rank"])
    return {"runs": rows, "n_rows": int(loos[0]["n_rows"]),
            "data_sha256": first.data_sha256, "method": "stacking",
            "verdict": verdict(rows)}


def verdict(rows: list) -> str:
    """One line on the best two rows of a comparison: which predicts better, by how much
    (elpd difference ± its SE), or that the difference is within 2 SE."""
    if len(rows) < 2:
        return ""
    best, second = rows[0], rows[1]
    diff, dse = second["elpd_diff"], second["dse"]
    if dse > 0 and diff > 2 * dse:
        return (f"{best['name']} predicts better than {second['name']} by "
                f"{diff:.3g} ± {dse:.2g} ({diff / dse:.1f} SE)")
    return (f"no clear difference between {best['name']} and {second['name']} "
            f"(elpd_diff {diff:.3g} ± {dse:.2g}, < 2 SE)")
