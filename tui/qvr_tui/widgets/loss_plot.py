"""`LossPlot`: the SVI loss, raw (faint) and smoothed (debiased EMA), with a log-scale toggle.

A `textual_plot.PlotWidget`.  `show(state)` plots `state.loss` and `state.smooth`
decimated to about twice the plot's width.  With `log_scale` on, the plotted values are
``log10(loss)`` and the y axis is labelled with the losses themselves (`LogFormatter`);
a loss that reaches zero or below is plotted as ``log10(loss - min + 1)`` and the axis
label says so.
"""
from __future__ import annotations

import math
from typing import Sequence

from textual_plot import HiResMode, PlotWidget

from qvr_tui.widgets.axis import SafeNumericFormatter, flat_limits, set_axis_labels

__all__ = ["LossPlot", "LogFormatter", "RAW_STYLE", "SMOOTH_STYLE"]

RAW_STYLE = "grey50"
SMOOTH_STYLE = "bold dodger_blue1"


class LogFormatter(SafeNumericFormatter):
    """Ticks placed on log10 values, labelled with the values (``1e+03``, ``250``)."""

    def __init__(self, shift: float = 0.0) -> None:
        super().__init__()
        self.shift = shift

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [_fmt(10.0 ** t - self.shift) for t in ticks]


def _fmt(v: float) -> str:
    a = abs(v)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        return f"{v:.0e}"
    return f"{v:.3g}"


class LossPlot(PlotWidget):
    DEFAULT_CSS = "LossPlot { height: 1fr; min-height: 8; }"

    def __init__(self, **kw) -> None:
        super().__init__(allow_pan_and_zoom=False, **kw)
        self.set_x_formatter(SafeNumericFormatter())
        self.log_scale = False
        self.plotted_points = (0, 0)  # (raw, smooth) after decimation: for tests
        self.ylabel = "loss"

    def target_points(self) -> int:
        w = self.size.width or 80
        return max(20, 2 * w)

    def show(self, state) -> None:
        n = self.target_points()
        rx, ry = state.loss.decimated(n)
        sx, sy = state.smooth.decimated(n)
        shift = 0.0
        if self.log_scale:
            finite = [v for v in ry + sy if math.isfinite(v)]
            low = min(finite) if finite else 1.0
            if low <= 0:
                shift = 1.0 - low
            ry = [math.log10(v + shift) if math.isfinite(v) and v + shift > 0 else math.nan
                  for v in ry]
            sy = [math.log10(v + shift) if v + shift > 0 else math.nan for v in sy]
            self.set_y_formatter(LogFormatter(shift))
            self.ylabel = "loss (log)" if not shift else f"log10(loss + {shift:.3g})"
        else:
            self.set_y_formatter(SafeNumericFormatter())
            self.ylabel = "loss"
        self.clear()
        set_axis_labels(self, self.ylabel, "step")
        # one point, or a flat line: give the axis a range (textual-plot's tick labels
        # fail on an empty one)
        self.set_ylimits(*(flat_limits(ry + sy) or (None, None)))
        self.set_xlimits(*(flat_limits(rx + sx) or (None, None)))
        if rx:
            self.plot(rx, ry, line_style=RAW_STYLE, hires_mode=HiResMode.BRAILLE)
        if sx:
            self.plot(sx, sy, line_style=SMOOTH_STYLE, hires_mode=HiResMode.BRAILLE)
        self.plotted_points = (len(rx), len(sx))
