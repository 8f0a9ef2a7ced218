"""`SafeNumericFormatter`: textual-plot's numeric axis formatter, safe on a degenerate
range.  textual-plot's tick labels take the logarithm of the tick spacing, which is zero
when an axis spans a few ulps (one point, a constant parameter, a flat loss): the widget
then raises `ValueError: math domain error` while rendering and the app stops.  This
formatter widens such a range to ±1 around its value (±1e-6 relative for large values).

`set_axis_labels`: textual-plot writes the y-axis title into its ``#margin-top`` canvas
without clearing it, so a shorter title left the end of the longer one behind
("step sizee" after "acceptance", "loslossog)" after the log-scale toggle).  Every plot of
ours sets its titles through this one function, which clears that canvas (the public
`Canvas.reset`) when the title changes; the plot's next render writes the new title on a
blank margin.  (The x title's canvas is cleared by textual-plot itself: it redraws the
x ticks there first.)"""
from __future__ import annotations

import math
from typing import Iterable, Optional

from textual_plot.axis_formatter import NumericAxisFormatter


def flat_limits(values: Iterable[float]) -> Optional[tuple[float, float]]:
    """Axis limits `(v - 1, v + 1)` when the finite `values` are one point or a flat line
    (then the plot picks no readable range of its own), else None (let the plot choose)."""
    vs = [v for v in values if math.isfinite(v)]
    if vs and max(vs) - min(vs) <= 1e-9 * max(1.0, abs(max(vs))):
        return min(vs) - 1.0, max(vs) + 1.0
    return None


class SafeNumericFormatter(NumericAxisFormatter):
    def get_ticks_and_labels(self, min_, max_, max_ticks: int = 8):
        if min_ is not None and max_ is not None and \
                abs(max_ - min_) <= 1e-9 * max(1.0, abs(max_), abs(min_)):
            pad = max(1.0, 1e-6 * abs(max_))
            min_, max_ = min_ - pad, max_ + pad
        return super().get_ticks_and_labels(min_, max_, max_ticks)


def set_axis_labels(plot, ylabel: str, xlabel: str) -> None:
    """Set `plot`'s axis titles; a changed y title clears the old one first (see above).

    Call it with the plot's `clear()` or a replot (as every `show` here does): those
    schedule the render that writes the title."""
    if getattr(plot, "_qvr_ylabel", None) != ylabel:
        from textual.css.query import NoMatches
        from textual_hires_canvas import Canvas
        try:
            plot.query_one("#margin-top", Canvas).reset()
        except NoMatches:  # not composed yet: nothing drawn to clear
            pass
        plot._qvr_ylabel = ylabel
    plot.set_ylabel(ylabel)
    plot.set_xlabel(xlabel)


def make_safe(plot) -> None:
    """Give a PlotWidget safe numeric formatters on both axes."""
    plot.set_x_formatter(SafeNumericFormatter())
    plot.set_y_formatter(SafeNumericFormatter())
