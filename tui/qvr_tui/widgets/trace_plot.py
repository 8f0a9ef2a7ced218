"""`TracePlot`: one line per chain (or one series) on a common x axis, with markers.

A `textual_plot.PlotWidget`.  `show(series, title=..., vlines=...)` plots a mapping
``{label: Series}`` decimated to about twice the plot's width, each label in its own
colour, plus vertical lines (the end of warmup, SMC resampling steps).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

from textual_plot import HiResMode, PlotWidget

from qvr_tui.widgets.axis import flat_limits, make_safe, set_axis_labels

__all__ = ["TracePlot", "PALETTE"]

PALETTE = ("dodger_blue1", "dark_orange", "green3", "magenta", "gold1", "cyan", "red1",
           "medium_purple1")


class TracePlot(PlotWidget):
    DEFAULT_CSS = "TracePlot { height: 1fr; min-height: 6; }"

    def __init__(self, **kw) -> None:
        super().__init__(allow_pan_and_zoom=False, **kw)
        make_safe(self)  # a flat trace must not stop the app (see widgets/axis.py)
        self.plotted: dict[str, int] = {}  # label -> points plotted (for tests)
        self.title = ""

    def show(self, series: Mapping[str, object], title: str = "", xlabel: str = "",
             vlines: Iterable[float] = (), max_vlines: int = 40,
             ylimits: Optional[tuple] = None) -> None:
        n = max(20, 2 * (self.size.width or 60))
        self.clear()
        self.title = title
        set_axis_labels(self, title, xlabel)
        if ylimits is None:  # a flat line: a readable axis
            ylimits = flat_limits(v for s in series.values() for v in s.y)
        self.set_ylimits(*(ylimits or (None, None)))
        self.plotted = {}
        for i, (label, s) in enumerate(series.items()):
            x, y = s.decimated(n)
            if x:
                self.plot(x, y, line_style=PALETTE[i % len(PALETTE)],
                          hires_mode=HiResMode.BRAILLE)
            self.plotted[label] = len(x)
        vl = list(vlines)
        if len(vl) > max_vlines:  # too many to draw: keep an even sample
            step = len(vl) / max_vlines
            vl = [vl[int(i * step)] for i in range(max_vlines)]
        for v in vl:
            self.add_v_line(v, line_style="grey42")
