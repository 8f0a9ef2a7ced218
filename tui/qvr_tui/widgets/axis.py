"""`SafeNumericFormatter`: textual-plot's numeric axis formatter, safe on a degenerate
range.  textual-plot's tick labels take the logarithm of the tick spacing, which is zero
when an axis spans a few ulps (one point, a constant parameter, a flat loss): the widget
then raises `ValueError: math domain error` while rendering and the app stops.  This
formatter widens such a range to ±1 around its value (±1e-6 relative for large values)."""
from __future__ import annotations

from textual_plot.axis_formatter import NumericAxisFormatter


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
