"""What the parameter plots and heatmaps of the Results pane draw: a coordinate's
per-chain traces, rank histograms and pooled histogram (`param_series` -> `ParamSeries`)
and the posterior mean/sd of a 2-D site as a matrix (`site_matrix`).  Torch-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from qvr_tui.results_data import Results, parse_label

__all__ = ["ParamSeries", "param_series", "site_matrix"]


@dataclass(frozen=True)
class ParamSeries:
    """What the parameter detail plots: per-chain trace, rank histograms, pooled histogram."""

    label: str
    traces: tuple            # one float array per chain (draw index = x)
    rank_counts: np.ndarray  # (chains, bins): counts of each chain's draws in rank bins
    rank_edges: np.ndarray   # (bins + 1,) rank bin edges (ranks 1..N pooled)
    hist_counts: np.ndarray  # (bins,) pooled histogram of the draws
    hist_edges: np.ndarray   # (bins + 1,)
    divergent: tuple         # per chain: int array of divergent draw indices



def _coord_draws(res: Results, site: str, index: tuple) -> Optional[np.ndarray]:
    a = res.draws.get(site)
    if a is None:
        return None
    a = np.asarray(a, dtype=float)
    if a.ndim == 2:
        return a
    flat = a.reshape(a.shape[0], a.shape[1], -1)
    if not index:
        return flat[..., 0]
    k = int(np.ravel_multi_index(index, a.shape[2:]))
    return flat[..., k]


def param_series(res: Results, label: str, bins: int = 20) -> Optional[ParamSeries]:
    """Trace, rank plot and histogram data of coordinate `label` ("probs[0,1]", "mu"), or
    None when the record holds no draws for it."""
    site, index = parse_label(label)
    x = _coord_draws(res, site, index)
    if x is None or x.size == 0:
        return None
    C, N = x.shape
    flat = x.reshape(-1)
    ranks = np.argsort(np.argsort(flat, kind="stable"), kind="stable").reshape(C, N) + 1
    nb = max(1, min(bins, N // 5 if N >= 10 else 1))
    rank_edges = np.linspace(0.5, C * N + 0.5, nb + 1)
    rank_counts = np.stack([np.histogram(r, bins=rank_edges)[0] for r in ranks])
    finite = flat[np.isfinite(flat)]
    hb = max(1, min(bins, int(math.sqrt(max(finite.size, 1)))))
    if finite.size:
        hist_counts, hist_edges = np.histogram(finite, bins=hb)
    else:
        hist_counts, hist_edges = np.zeros(1, int), np.array([0.0, 1.0])
    div = res.sample_stats.get("diverging")
    if div is not None:
        d = np.asarray(div).astype(bool)[:, :N]
        divergent = tuple(np.flatnonzero(row) for row in d)
    else:
        divergent = tuple(np.zeros(0, int) for _ in range(C))
    return ParamSeries(label=label, traces=tuple(x[c] for c in range(C)),
                       rank_counts=rank_counts, rank_edges=rank_edges,
                       hist_counts=hist_counts, hist_edges=hist_edges, divergent=divergent)


def site_matrix(res: Results, site: str, stat: str = "mean") -> Optional[np.ndarray]:
    """Posterior mean or sd (`stat`) of a 2-D site as a matrix (MCMC: over all draws, or
    from the summary rows when draws are missing; SVI: the guide's loc or scale)."""
    if res.method == "svi":
        g = next((g for g in res.guide if g.site == site), None)
        if g is None:
            return None
        return g.matrix("loc" if stat == "mean" else "scale")
    a = res.draws.get(site)
    if a is not None and np.asarray(a).ndim == 4:
        a = np.asarray(a, dtype=float)
        pooled = a.reshape(-1, *a.shape[2:])
        if stat == "mean":
            return pooled.mean(axis=0)
        return pooled.std(axis=0, ddof=1) if pooled.shape[0] > 1 else np.full(a.shape[2:], np.nan)
    row = res.site(site)
    if row is None or len(row.shape) != 2:
        return None
    m = np.full(row.shape, np.nan)
    for c in row.coords:
        m[c.index] = c.get("mean" if stat == "mean" else "sd")
    return m
