"""A plotted series (`Series`: points appended in order, stored as C doubles) and
`decimate`, which thins a long series for plotting (min/max per bucket, so spikes
survive).  Used by `qvr_tui.state.RunState` and the plots."""
from __future__ import annotations

from array import array
from typing import Optional, Sequence

__all__ = ["Series", "decimate"]


class Series:
    """Points ``(x, y)`` appended in order, stored as C doubles (`array('d')`: 16 bytes a
    point, so a 100k-step fit costs megabytes, not tens of them)."""

    __slots__ = ("x", "y")

    def __init__(self) -> None:
        self.x = array("d")
        self.y = array("d")

    def append(self, x: float, y: float) -> None:
        self.x.append(float(x))
        self.y.append(float(y))

    def __len__(self) -> int:
        return len(self.x)

    @property
    def last(self) -> Optional[float]:
        return self.y[-1] if self.y else None

    def decimated(self, points: int) -> tuple[list[float], list[float]]:
        return decimate(self.x, self.y, points)


def decimate(x: Sequence[float], y: Sequence[float],
             points: int) -> tuple[list[float], list[float]]:
    """At most `points` points of ``(x, y)``: the minimum and maximum of each of about
    ``points // 2`` equal buckets, in x order (so a single spike is never dropped).
    A bucket with no finite value keeps its first point (the plot drops it).  Vectorised
    (numpy): cheap enough for every repaint of a long series."""
    n = len(x)
    if n <= points or points < 2:
        return list(x), list(y)
    import numpy as np
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    k = -(-n // (points // 2))  # bucket size
    buckets = -(-n // k)
    pad = buckets * k - n
    yv = np.where(np.isfinite(ys), ys, np.nan)
    if pad:
        yv = np.concatenate([yv, np.full(pad, np.nan)])
    rows = yv.reshape(buckets, k)
    nan = np.isnan(rows)
    i_min = np.where(nan, np.inf, rows).argmin(axis=1)  # 0 for a bucket with no finite value
    i_max = np.where(nan, -np.inf, rows).argmax(axis=1)
    base = np.arange(buckets) * k
    first = base + np.minimum(i_min, i_max)
    second = base + np.maximum(i_min, i_max)
    idx = np.stack([first, second], axis=1).reshape(-1)
    keep = np.ones(idx.shape[0], dtype=bool)
    keep[1::2] = second != first  # one point when min and max are the same point
    idx = idx[keep]
    return xs[idx].tolist(), ys[idx].tolist()
