"""`LooPanel`: PSIS-LOO of one run (`qvr_tui.predictive_model.LooView`).

A headline (``elpd_loo -123.4 ± 5.6 · p_loo 3.2 · 100 rows × 400 draws · psis``), a warning
line when rows have a Pareto k above the threshold (the estimate is then unreliable for
them), and side by side the Pareto-k scatter plot (k per row, the rows above the
threshold red ``x``, the threshold a red line) and the high-k rows listed (label, row, k;
largest k first).  A record without LOO, or one whose LOO failed, says so in one line.
`plotted` records what the plot drew (for tests).  Nothing here reads files.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static
from textual_plot import HiResMode, PlotWidget

from qvr_tui.predictive_model import LooView, fmt_num
from qvr_tui.widgets.axis import set_axis_labels
from qvr_tui.widgets.param_plots import CHAIN_COLOURS, decimate, make_plot

__all__ = ["LooPanel", "HIGH_SHOWN", "BAD_STYLE"]

HIGH_SHOWN = 8        # high-k rows listed (the count of the rest follows)
BAD_STYLE = "bold #d62728"
MAX_SCATTER = 1500    # points of the k plot at most (decimated by row, envelope kept)


class LooPanel(Vertical):
    """See the module docstring."""

    DEFAULT_CSS = """
    LooPanel { height: auto; }
    LooPanel > #loo-head { height: auto; padding: 0 1; }
    LooPanel > #loo-body { height: 10; }
    LooPanel #loo-k { width: 1fr; height: 1fr; border: round $border; border-title-color: $foreground; }
    LooPanel #loo-high { width: 1fr; max-width: 44; height: 1fr; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.loo: Optional[LooView] = None
        self.plotted: list[tuple[str, int]] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="loo-head")
        with Horizontal(id="loo-body"):
            yield make_plot("loo-k", "Pareto k")
            yield Static("", id="loo-high")

    def show(self, loo: Optional[LooView], none_note: str = "") -> None:
        """Show `loo` (None: `none_note`, or that the record has none)."""
        self.loo = loo
        head = self.query_one("#loo-head", Static)
        body = self.query_one("#loo-body")
        plot = self.query_one("#loo-k", PlotWidget)
        plot.clear()
        self.plotted = []
        if loo is None:
            head.update(Text(f"PSIS-LOO: {none_note or 'none in this record'}", style="italic"))
            body.display = False
            return
        if loo.error:
            head.update(Text(loo.headline, style="red"))
            body.display = False
            return
        t = Text()
        t.append("PSIS-LOO ", style="bold")
        t.append(loo.headline)
        if loo.var or loo.kind:
            t.append(f" · {' '.join(x for x in (loo.kind, loo.var) if x)}", style="dim")
        n_high = loo.n_high
        if n_high or loo.warning:
            thr = f" > {fmt_num(loo.good_k, 3)}" if loo.good_k is not None else ""
            t.append(f"\n⚠ {n_high} row{'s' if n_high != 1 else ''} with Pareto k{thr}: "
                     "the LOO estimate is unreliable there (outliers, or rows the fit bends "
                     "to)", style=BAD_STYLE)
        head.update(t)
        body.display = True
        self._plot(plot, loo)
        self.query_one("#loo-high", Static).update(self._high_text(loo))

    def _plot(self, plot: PlotWidget, loo: LooView) -> None:
        k = loo.pareto_k
        set_axis_labels(plot, "k", "row")
        if k is None or not len(k):
            plot.border_title = "Pareto k: not recorded"
            return
        rows = np.arange(len(k), dtype=float)
        last = max(1.0, float(len(k) - 1))
        plot.set_xlimits(-0.02 * last, 1.02 * last)  # the threshold line ends inside
        good = loo.good_k
        high = np.isfinite(k) & (k > good) if good is not None else np.zeros(len(k), bool)
        x, y = rows[~high], k[~high]
        if len(x) > MAX_SCATTER:
            x, y = decimate(x, y, MAX_SCATTER)
        if len(x):
            plot.scatter(x, y, marker="•", marker_style=CHAIN_COLOURS[0], label="k")
            self.plotted.append(("k", len(x)))
        if high.any():
            plot.scatter(rows[high], k[high], marker="x", marker_style=BAD_STYLE,
                         label="high k")
            self.plotted.append(("high", int(high.sum())))
        if good is not None:
            plot.plot([0.0, last], [good, good], line_style="#d62728",
                      hires_mode=HiResMode.BRAILLE, label=f"k = {fmt_num(good, 3)}")
            self.plotted.append(("threshold", 2))
        finite = k[np.isfinite(k)]
        top = max([float(finite.max()) if len(finite) else 0.0, good or 0.0, 1.0])
        plot.set_ylimits(min(0.0, float(finite.min()) if len(finite) else 0.0), top * 1.05)
        plot.border_title = (f"Pareto k (threshold {fmt_num(good, 3)})"
                             if good is not None else "Pareto k")

    @staticmethod
    def _high_text(loo: LooView) -> Text:
        t = Text()
        if not loo.high_k:
            t.append("no row above the Pareto-k threshold" if loo.good_k is not None
                     else "", style="green")
            return t
        t.append("rows with high k", style="bold")
        t.append(" (largest first):\n")
        for h in loo.high_k[:HIGH_SHOWN]:
            label = h.label if h.label != str(h.row) else f"row {h.row}"
            t.append(f"  {label}", style=BAD_STYLE)
            if h.label != str(h.row):
                t.append(f"  row {h.row}", style="dim")
            t.append(f"  k {fmt_num(h.k, 3)}\n")
        rest = len(loo.high_k) - HIGH_SHOWN
        if rest > 0:
            t.append(f"  … {rest} more\n", style="dim")
        t.rstrip()
        return t
