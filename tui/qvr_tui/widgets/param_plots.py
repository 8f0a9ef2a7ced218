"""Per-parameter plots of MCMC draws: per-chain trace, rank plot and histogram
(`qvr_tui.plots_model.ParamSeries`), side by side, with `textual_plot.PlotWidget`.

* trace — one line per chain (draw index → value), divergent draws marked ``x`` in red;
* rank plot — for each chain, the count of its draws in each bin of the pooled ranks,
  drawn as a step line per chain (flat lines around the expected count when chains mix;
  a chain sitting high or low in the ranks stands out), with the expected count dotted;
* histogram — the pooled draws as bars.

Series longer than about twice the plot's width are decimated before plotting, keeping
each bucket's lowest and highest point (`decimate`).  The plots do not take focus (the arrow
keys stay with the summary table); the mouse still zooms and pans them.
`plotted` records what each plot drew (dataset kind and length) for tests and callers.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual_plot import HiResMode, PlotWidget

from qvr_tui.widgets.axis import make_safe

from qvr_tui.plots_model import ParamSeries

__all__ = ["ParamPlots", "CHAIN_COLOURS", "MAX_POINTS", "decimate", "make_plot", "points_for"]

# readable on light and dark backgrounds (Tableau 10)
CHAIN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                 "#17becf", "#bcbd22")
DIVERGENT = "bold #d62728"
MAX_POINTS = 400


def decimate(x: np.ndarray, y: np.ndarray, limit: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most about `limit` points of a series, keeping its envelope: the series is cut
    into limit/2 buckets and each gives its lowest and highest point (in index order), so
    a spike or a stuck stretch of a trace stays visible.  Short series come back as they
    are; NaNs are dropped first."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(y)
    if not keep.all():
        x, y = x[keep], y[keep]
    n = len(x)
    if n <= limit:
        return x, y
    buckets = max(1, limit // 2)
    edges = np.linspace(0, n, buckets + 1).astype(int)
    idx = []
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        seg = y[a:b]
        lo, hi = a + int(np.argmin(seg)), a + int(np.argmax(seg))
        idx.extend(sorted({lo, hi}))
    idx = np.asarray(idx)
    return x[idx], y[idx]


def points_for(plot, floor: int = 40) -> int:
    """About twice the plot's width in points (its braille resolution), at least `floor`;
    a plot not laid out yet (just switched to) counts as wide as the terminal."""
    width = int(plot.size.width or 0)
    if not width:
        try:
            width = int(plot.app.size.width)
        except Exception:  # no app (not mounted)
            width = 0
    return max(floor, 2 * width)


def make_plot(id: str, title: str) -> PlotWidget:
    """A PlotWidget that leaves the keyboard focus alone."""
    p = PlotWidget(id=id, classes="param-plot")
    make_safe(p)  # a constant parameter must not stop the app (see widgets/axis.py)
    p.can_focus = False
    p.border_title = title
    # before mounting: no watcher may run yet (on_mount applies the margins)
    p.set_reactive(PlotWidget.margin_top, 0)
    p.set_reactive(PlotWidget.margin_bottom, 1)
    p.set_reactive(PlotWidget.margin_left, 7)
    return p


class ParamPlots(Horizontal):
    """Trace, rank plot and histogram of one coordinate; `show(series)` redraws them."""

    DEFAULT_CSS = """
    ParamPlots { height: 1fr; }
    ParamPlots > PlotWidget { width: 1fr; height: 1fr; border: round $border; border-title-color: $foreground; }
    ParamPlots > #plot-trace { width: 2fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: Optional[ParamSeries] = None
        self.plotted: dict[str, list[tuple[str, int]]] = {"trace": [], "rank": [], "hist": []}

    def compose(self) -> ComposeResult:
        yield make_plot("plot-trace", "trace")
        yield make_plot("plot-rank", "rank")
        yield make_plot("plot-hist", "histogram")

    def clear(self) -> None:
        self.series = None
        self.plotted = {"trace": [], "rank": [], "hist": []}
        for p in self.query(PlotWidget):
            p.clear()

    def show(self, s: ParamSeries) -> None:
        self.clear()
        self.series = s
        trace = self.query_one("#plot-trace", PlotWidget)
        rank = self.query_one("#plot-rank", PlotWidget)
        hist = self.query_one("#plot-hist", PlotWidget)
        trace.border_title = f"trace {s.label}"
        ndiv = sum(len(d) for d in s.divergent)
        if ndiv:
            trace.border_title += f" (x {ndiv} divergent)"
        for c, y in enumerate(s.traces):
            x = np.arange(len(y), dtype=float)
            xd, yd = decimate(x, np.asarray(y, dtype=float), points_for(trace))
            trace.plot(xd, yd, line_style=CHAIN_COLOURS[c % len(CHAIN_COLOURS)],
                       hires_mode=HiResMode.BRAILLE, label=f"chain {c}")
            self.plotted["trace"].append(("line", len(xd)))
        for c, idx in enumerate(s.divergent):
            if len(idx):
                y = np.asarray(s.traces[c], dtype=float)[idx]
                trace.scatter(np.asarray(idx, dtype=float), y, marker="x",
                              marker_style=DIVERGENT, label="divergent")
                self.plotted["trace"].append(("divergent", len(idx)))
        # rank plot: a step line per chain over the rank bins
        edges = np.asarray(s.rank_edges, dtype=float)
        for c, counts in enumerate(np.asarray(s.rank_counts)):
            xs = np.repeat(edges, 2)[1:-1]
            ys = np.repeat(counts.astype(float), 2)
            rank.plot(xs, ys, line_style=CHAIN_COLOURS[c % len(CHAIN_COLOURS)],
                      hires_mode=HiResMode.BRAILLE, label=f"chain {c}")
            self.plotted["rank"].append(("line", len(counts)))
        if len(s.rank_counts):
            expected = float(np.asarray(s.rank_counts).sum(axis=1).mean()) / max(1, len(edges) - 1)
            rank.plot([edges[0], edges[-1]], [expected, expected], line_style="grey50",
                      hires_mode=HiResMode.BRAILLE, label="uniform")
            rank.set_ylimits(0, None)
            rank.set_xticks([1.0, float(np.asarray(s.rank_counts).sum())])
        centres = (np.asarray(s.hist_edges[:-1]) + np.asarray(s.hist_edges[1:])) / 2
        width = float(np.diff(s.hist_edges).min()) * 0.9 if len(s.hist_edges) > 1 else 1.0
        hist.bar(centres, np.asarray(s.hist_counts, dtype=float), width=width,
                 bar_style=CHAIN_COLOURS[0])
        self.plotted["hist"].append(("bar", len(s.hist_counts)))
        hist.set_xticks([float(centres[0]), float(centres[-1])] if len(centres) > 1
                        else [float(centres[0])])
