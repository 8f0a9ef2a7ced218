"""After a NUTS or HMC run on a diagonal metric: the most correlated pair of unconstrained
coordinates, when it is strong enough that a dense metric would sample the posterior
with far fewer leapfrogs (`--mass-matrix dense`, `qvr.inference.mcmc.adaptation.FisherDense`).

A diagonal metric rescales each coordinate but cannot undo a correlation: the step size is
set by the narrow direction and the trajectory's length by the long one.  kid_scores
(intercept and slope correlated at -0.98 in the draws), 4 x (1000 + 1000), seed 1: 80
leapfrogs per effective draw on the diagonal metric, 1.8 on the dense one.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

#: |correlation| from which the note is given
STRONG = 0.9
#: coordinates above which no note is given (a dense metric costs D x D per leapfrog)
MAX_DIM = 500


def strongest_pair(draws, labels: list) -> Optional[tuple]:
    """``(label_i, label_j, r)`` for the most correlated pair of the pooled draws
    `(chains, draws, D)` if ``|r| >= STRONG``, else None (also for fewer than 2 or more
    than `MAX_DIM` coordinates, fewer than 10 draws, or constant coordinates)."""
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim != 3 or not 2 <= x.shape[-1] <= MAX_DIM:
        return None
    x = x.reshape(-1, x.shape[-1])
    x = x[np.isfinite(x).all(-1)]
    if x.shape[0] < 10:
        return None
    sd = x.std(0)
    if not (sd > 0).all():
        return None
    r = np.corrcoef(x, rowvar=False)
    np.fill_diagonal(r, 0.0)
    i, j = np.unravel_index(np.argmax(np.abs(r)), r.shape)
    if abs(r[i, j]) < STRONG:
        return None
    i, j = sorted((int(i), int(j)))
    return labels[i], labels[j], float(r[i, j])


def dense_metric_note(pair: tuple) -> str:
    a, b, r = pair
    return (f"`{a}` and `{b}` are correlated ({r:+.2f}) in the unconstrained draws: a "
            f"diagonal metric cannot undo that, --mass-matrix dense would sample this "
            f"posterior with fewer leapfrogs")


def recorded_note(stats) -> str:
    """The note of a recorded run (its ``stats["correlated"]``), or ""."""
    pair = (stats or {}).get("correlated")
    if not isinstance(pair, (list, tuple)) or len(pair) != 3:
        return ""
    try:
        return dense_metric_note((str(pair[0]), str(pair[1]), float(pair[2])))
    except (TypeError, ValueError):
        return ""
