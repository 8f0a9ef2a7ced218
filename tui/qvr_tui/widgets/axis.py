"""`SafeNumericFormatter`: textual-plot's numeric axis formatter, safe on a degenerate
range.  textual-plot's tick labels take the logarithm of the tick spacing, which is zero
when an axis spans a few ulps (one point, a constant parameter, a flat loss): the widget
then raises `ValueError: math domain error` while rendering and the app stops.  This
formatter widens such a range to ±1 around its value (±1e-6 relative for large values)."""
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


def make_safe(plot) -> None:
    """Give a PlotWidget safe numeric formatters on both axes."""
    plot.set_x_formatter(SafeNumericFormatter())
    plot.set_y_formatter(SafeNumericFormatter())
