"""`PredictiveView`: the Results pane's ``p`` view — the predictive checks of a finished
run (`qvr_tui.predictive_model.Predictive`) and its PSIS-LOO (`LooPanel`).

Layout (a vertical scroll: works from 80x24 up; ↑ ↓ / PgUp PgDn scroll it), per observed
site, one at a time (← → or [ ] step through the sites):

* a bar: the kind of check (posterior / prior / posterior from the guide), the draws, the
  site shown and how many sites there are;
* the observed distribution against its replicates: counts (a discrete site with few
  values) as the observed bars, each with the replicated mean a dot on the replicates'
  q5–q95 whisker; continuous data (or many values) as step lines over common bins: the
  observed histogram bold blue, the replicated mean orange, its q5 and q95 grey;
* beside it the test statistics (mean, sd, min, max, zeros for counts): observed, the
  replicates' 90 % interval, the p-value (red where extreme);
* the LOO-PIT: the ECDF of the PIT values minus the uniform's, inside its band when the
  predictive distribution is calibrated (the band in grey, the verdict in the title, red
  when it leaves the band); beside it the per-group summary of each grouping index (how
  many groups are extreme, the worst few with their observed value, 90 % interval, p);
* the `LooPanel`.

A record without checks shows one line saying why (`Results.predictive_note`;
`predictive_model.NO_CHECKS`).  Data: `show(predictive, loo, note)`; nothing here reads
files.  `plotted` records what the plots drew (for tests).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static
from textual_plot import HiResMode, PlotWidget

from qvr_tui.predictive_model import (NO_CHECKS, LooView, Predictive, SiteChecks, fmt_num,
                                      fmt_p)
from qvr_tui.widgets.axis import set_axis_labels
from qvr_tui.widgets.loo_panel import BAD_STYLE, LooPanel
from qvr_tui.widgets.param_plots import CHAIN_COLOURS, make_plot

__all__ = ["PredictiveView", "OBSERVED_STYLE", "REPLICATED_STYLE", "BAND_STYLE"]

OBSERVED_STYLE = CHAIN_COLOURS[0]    # blue
REPLICATED_STYLE = CHAIN_COLOURS[1]  # orange
BAND_STYLE = "grey50"


def _interval(lo: Optional[float], hi: Optional[float], digits: int = 4) -> str:
    """``[lo, hi]`` (a minus sign inside a dash-joined range reads badly)."""
    if lo is None and hi is None:
        return ""
    return f"[{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def _bars(plot: PlotWidget, x: np.ndarray, y: np.ndarray, width: float, style: str,
          label: str) -> int:
    """Bars of the nonzero finite heights (textual-plot draws a zero-height bar as a cell
    row); the number drawn."""
    keep = np.isfinite(y) & (y > 0)
    if keep.any():
        plot.bar(x[keep], y[keep], width=width, bar_style=style,
                 label=label)
    return int(keep.sum())


class PredictiveView(VerticalScroll, can_focus=True):
    """See the module docstring."""

    DEFAULT_CSS = """
    PredictiveView { height: 1fr; }
    PredictiveView:focus { background-tint: $foreground 0%; }
    PredictiveView > #ppc-bar { height: 1; padding: 0 1; background: $boost; }
    PredictiveView > #ppc-note { height: auto; padding: 0 1; }
    PredictiveView > #ppc-top { height: 12; }
    PredictiveView #ppc-plot { width: 1fr; height: 1fr; border: round $border; border-title-color: $foreground; }
    PredictiveView #ppc-stats { width: auto; height: auto; max-height: 100%; overflow: hidden hidden; }
    PredictiveView > #ppc-mid { height: 10; }
    PredictiveView #ppc-pit { width: 1fr; height: 1fr; border: round $border; border-title-color: $foreground; }
    PredictiveView #ppc-pit.-outside { border-title-color: $text-error; }
    PredictiveView #ppc-groups { width: 1fr; height: 1fr; padding: 0 1; }
    """

    BINDINGS = [
        Binding("right", "site(1)", "Next site"),
        Binding("left", "site(-1)", "Prev site", show=False),
        Binding("right_square_bracket", "site(1)", "Next site", show=False),
        Binding("left_square_bracket", "site(-1)", "Prev site", show=False),
    ]

    def __init__(self, *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.predictive: Optional[Predictive] = None
        self.loo: Optional[LooView] = None
        self.note = ""
        self.site_index = 0
        self.plotted: dict[str, list[tuple[str, int]]] = {"hist": [], "pit": []}

    def compose(self) -> ComposeResult:
        yield Static("", id="ppc-bar")
        yield Static("", id="ppc-note")
        with Horizontal(id="ppc-top"):
            yield make_plot("ppc-plot", "observed vs replicated")
            yield DataTable(id="ppc-stats", cursor_type="none", zebra_stripes=True)
        with Horizontal(id="ppc-mid"):
            yield make_plot("ppc-pit", "LOO-PIT")
            yield Static("", id="ppc-groups")
        yield LooPanel(id="loo-panel")

    def on_mount(self) -> None:
        self.query_one("#ppc-stats", DataTable).can_focus = False
        self._redraw()

    # ------------------------------------------------------------ data
    @property
    def site(self) -> Optional[SiteChecks]:
        p = self.predictive
        if p is None or not p.sites:
            return None
        return p.sites[self.site_index % len(p.sites)]

    def show(self, predictive: Optional[Predictive], loo: Optional[LooView], note: str = "",
             keep: bool = False) -> None:
        """Show these checks (`keep`: the same run read again: keep the site shown)."""
        name = self.site.site if keep and self.site is not None else None
        self.predictive, self.loo, self.note = predictive, loo, note
        self.site_index = 0
        if name is not None and predictive is not None:
            names = [s.site for s in predictive.sites]
            self.site_index = names.index(name) if name in names else 0
        if self.is_mounted:
            self._redraw()

    def on_resize(self) -> None:
        # bars or step lines depend on the plot's width: decide again once laid out
        site = self.site
        if site is not None and site.discrete and not site.error:
            self.call_after_refresh(self._draw_hist, site)

    def action_site(self, step: int) -> None:
        p = self.predictive
        if p is None or len(p.sites) < 2:
            return
        self.site_index = (self.site_index + step) % len(p.sites)
        self._redraw()

    # ------------------------------------------------------------ drawing
    def _redraw(self) -> None:
        p, loo = self.predictive, self.loo
        bar = self.query_one("#ppc-bar", Static)
        note = self.query_one("#ppc-note", Static)
        top, mid = self.query_one("#ppc-top"), self.query_one("#ppc-mid")
        panel = self.query_one("#loo-panel", LooPanel)
        self.plotted = {"hist": [], "pit": []}
        if p is None and loo is None:
            bar.update(Text("Predictive checks", style="bold"))
            note.update(Text(self.note or NO_CHECKS, style="italic"))
            note.display = True
            top.display = mid.display = panel.display = False
            return
        panel.display = True
        panel.show(loo, "none for a prior predictive run (no posterior to leave rows out "
                        "of)" if p is not None and p.kind == "prior" else "")
        site = self.site
        t = Text()
        t.append(p.title if p is not None else "Predictive checks", style="bold")
        if p is not None and p.draws is not None:
            t.append(f" · {p.draws} draws")
        if site is not None:
            t.append(f" · site {site.site}", style="bold")
            t.append(f" {self.site_index + 1}/{len(p.sites)}")
            if len(p.sites) > 1:
                t.append(" (← →)", style="dim")
        bar.update(t)
        msgs = []
        if p is None:
            msgs.append("no predictive checks in this record (PSIS-LOO only)")
        elif p.error:
            msgs.append(f"predictive checks failed: {p.error}")
        elif not p.sites:
            msgs.append("no observed site was checked")
        if site is not None and site.error:
            msgs.append(f"site {site.site} could not be checked: {site.error}")
        if self.note:
            msgs.append(self.note)
        note.update(Text("\n".join(msgs), style="italic"))
        note.display = bool(msgs)
        top.display = mid.display = site is not None and not site.error
        if site is None or site.error:
            return
        self._fill_stats(site)
        self._draw_hist(site)
        self._draw_pit(site)
        self.query_one("#ppc-groups", Static).update(self._groups_text(site))

    def _fill_stats(self, site: SiteChecks) -> None:
        table = self.query_one("#ppc-stats", DataTable)
        table.clear(columns=True)
        table.add_columns("stat", "observed", "replicated 90%", "p")
        for s in site.stats:
            style = BAD_STYLE if s.extreme else ""
            table.add_row(Text(s.name, style=style), fmt_num(s.observed),
                          _interval(s.q5, s.q95, 3), Text(fmt_p(s.p_value), style=style),
                          key=s.name)
        if not site.stats:
            table.add_row("", "no statistic recorded", "", "")

    def _draw_hist(self, site: SiteChecks) -> None:
        plot = self.query_one("#ppc-plot", PlotWidget)
        plot.clear()
        self.plotted["hist"] = []
        h = site.hist
        set_axis_labels(plot, "count", site.site)
        if h is None:
            plot.border_title = f"{site.site}: no histogram recorded"
            return
        c, w = h.centres, h.width
        obs = h.observed
        cells = max(1, int(plot.size.width or self.app.size.width // 2) - 10)  # the canvas
        e = h.edges if len(h.edges) == len(c) + 1 else None
        if site.discrete and len(c) * 3 <= cells:
            # bayesplot's ppc_bars: the observed bars, the replicated mean a dot on its
            # q5-q95 whisker drawn over each bar
            _bars(plot, c, obs, 0.6 * w, OBSERVED_STYLE, "observed")
            self.plotted["hist"].append(("observed", len(obs)))
            if h.rep_q5 is not None and h.rep_q95 is not None \
                    and len(h.rep_q5) == len(h.rep_q95) == len(c):
                mid = (h.rep_q5 + h.rep_q95) / 2
                plot.errorbar(c, mid, yerr=(h.rep_q95 - h.rep_q5) / 2,
                              marker_style=REPLICATED_STYLE, label="q5–q95")
                self.plotted["hist"].append(("interval", len(c)))
            if h.rep_mean is not None and len(h.rep_mean) == len(c):
                plot.scatter(c, h.rep_mean, marker="●",
                             marker_style=f"bold {REPLICATED_STYLE}", label="replicated mean")
                self.plotted["hist"].append(("replicated", len(c)))
            plot.set_xlimits(float(c[0] - 0.6 * w), float(c[-1] + 0.6 * w))
        else:
            # step lines over the bins (a bar under a line loses the cells the line
            # crosses): the observed counts bold, the replicated mean and its q5, q95
            for name, ys, style in (("q5", h.rep_q5, BAND_STYLE), ("q95", h.rep_q95, BAND_STYLE),
                                    ("replicated", h.rep_mean, REPLICATED_STYLE),
                                    ("observed", obs, f"bold {OBSERVED_STYLE}")):
                if ys is None or len(ys) != len(c):
                    continue
                if e is not None:
                    xs, yv = np.repeat(e, 2), np.concatenate([[0.0], np.repeat(ys, 2), [0.0]])
                else:
                    xs, yv = c, ys
                plot.plot(xs, yv, line_style=style, hires_mode=HiResMode.BRAILLE,
                          label={"replicated": "replicated mean"}.get(name, name))
                self.plotted["hist"].append((name, len(ys)))
        plot.border_title = f"{site.site}: observed vs replicates"
        top = [float(np.nanmax(a)) for a in (obs, h.rep_q95, h.rep_mean)
               if a is not None and len(a) and np.isfinite(a).any()]
        plot.set_ylimits(0.0, max(top + [1.0]) * 1.05)

    def _draw_pit(self, site: SiteChecks) -> None:
        plot = self.query_one("#ppc-pit", PlotWidget)
        plot.clear()
        self.plotted["pit"] = []
        set_axis_labels(plot, "ECDF diff", "PIT")
        pit = site.pit
        plot.remove_class("-outside")
        if pit is None:
            plot.border_title = f"LOO-PIT: {site.pit_note or 'not recorded'}"
            return
        x = pit.x
        if pit.band_lower is not None and pit.band_upper is not None:
            plot.plot(x, pit.band_lower, line_style=BAND_STYLE, hires_mode=HiResMode.BRAILLE,
                      label="band")
            plot.plot(x, pit.band_upper, line_style=BAND_STYLE, hires_mode=HiResMode.BRAILLE)
            self.plotted["pit"].append(("band", len(x)))
        plot.plot([0.0, 1.0], [0.0, 0.0], line_style="grey35", hires_mode=HiResMode.BRAILLE)
        plot.plot(x, pit.diff, line_style=BAD_STYLE if pit.outside else f"bold {OBSERVED_STYLE}",
                  hires_mode=HiResMode.BRAILLE, label="ECDF − uniform")
        self.plotted["pit"].append(("ecdf", len(x)))
        plot.set_xlimits(0.0, 1.0)
        arrays = [a for a in (pit.diff, pit.band_lower, pit.band_upper) if a is not None]
        m = max([float(np.nanmax(np.abs(a))) for a in arrays if np.isfinite(a).any()] + [0.05])
        plot.set_ylimits(-1.1 * m, 1.1 * m)
        plot.border_title = pit.verdict
        plot.set_class(bool(pit.outside), "-outside")

    @staticmethod
    def _groups_text(site: SiteChecks) -> Text:
        t = Text()
        if not site.groups:
            t.append("no per-group checks (the data has no grouping index)", style="dim")
            return t
        for gi, g in enumerate(site.groups):
            if gi:
                t.append("\n")
            t.append(f"by {g.name}: ", style="bold")
            style = BAD_STYLE if g.extreme else "green"
            t.append(f"{g.extreme} of {g.n_groups} groups extreme", style=style)
            if g.truncated:
                t.append(" (the worst among those listed)", style="dim")
            if g.worst:
                t.append("\n  group mean, replicated 90%, p:", style="dim")
            for r in g.worst:
                t.append(f"\n  {g.name}={r.group}", style=BAD_STYLE if r.extreme else "")
                t.append(f" {fmt_num(r.observed, 3)} {_interval(r.q5, r.q95, 3)}"
                         f" p {fmt_p(r.p_value)}")
        return t
