"""The MCMC summary as a table grouped by site (`qvr_tui.table_model.table_rows`).

A site row shows the site's shape and the worst of its coordinates (mean range, largest
sd, smallest 5 %, largest 95 %, smallest bulk/tail ESS, largest R-hat, largest MCSE); an
expanded site (``▾``) is followed by one row per coordinate.  R-hat above the threshold
and ESS below it are drawn in the error colour.  Row keys are the `TableRow.key`s (site
name or coordinate label); `row_at_cursor()` gives the `TableRow` under the cursor.
Sorting, filtering and expansion are the pane's state: it calls `show(rows)` again.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from rich.text import Text
from textual.widgets import DataTable

from qvr_tui.mcmc_checks import ESS_PER_CHAIN, RHAT_MAX
from qvr_tui.results_data import SiteRow
from qvr_tui.table_model import TableRow

__all__ = ["SummaryTable", "COLUMNS", "fmt"]

COLUMNS = ("parameter", "shape", "mean", "sd", "5%", "50%", "95%", "ESS bulk", "tail",
           "R-hat", "MCSE")


def fmt(v: Optional[float], digits: int = 3) -> str:
    """A number in at most `digits` significant digits ("" for None, "nan" for NaN)."""
    if v is None:
        return ""
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return f"{v:.{digits}g}"


class SummaryTable(DataTable):
    """See the module docstring."""

    DEFAULT_CSS = """
    SummaryTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.rows_shown: list[TableRow] = []
        self.num_chains = 1
        self.expanded: set = set()

    def on_mount(self) -> None:
        if not self.columns:
            self.add_columns(*COLUMNS)

    def row_at_cursor(self) -> Optional[TableRow]:
        if not self.rows_shown or self.cursor_row < 0 or self.cursor_row >= len(self.rows_shown):
            return None
        return self.rows_shown[self.cursor_row]

    def show(self, rows: Sequence[TableRow], num_chains: int = 1,
             expanded: frozenset | set = frozenset()) -> None:
        """Replace the rows, keeping the cursor on the same key when it is still shown."""
        keep = self.row_at_cursor()
        self.rows_shown = list(rows)
        self.num_chains = max(1, int(num_chains))
        self.expanded = set(expanded)
        self.clear()
        if not self.columns:
            self.add_columns(*COLUMNS)
        for r in self.rows_shown:
            self.add_row(*self.cells(r), key=r.key)
        if keep is not None:
            keys = [r.key for r in self.rows_shown]
            if keep.key in keys:
                self.move_cursor(row=keys.index(keep.key))

    def _rhat(self, v: float) -> Text:
        bad = math.isnan(v) or v > RHAT_MAX
        return Text(fmt(v), style="bold red" if bad else "", justify="right")

    def _ess(self, v: float) -> Text:
        bad = math.isnan(v) or v < ESS_PER_CHAIN * self.num_chains
        return Text(fmt(v, 3) if v < 1e3 else f"{v:.0f}", style="red" if bad else "",
                    justify="right")

    @staticmethod
    def _num(v: Optional[float]) -> Text:
        return Text(fmt(v), justify="right")

    def cells(self, r: TableRow) -> list:
        s: SiteRow = r.row
        if r.coord is not None:
            c = r.coord
            name = "  " + c.label
            return [name, "", self._num(c.get("mean")), self._num(c.get("sd")),
                    self._num(c.get("q5")), self._num(c.get("q50")), self._num(c.get("q95")),
                    self._ess(c.get("ess_bulk")), self._ess(c.get("ess_tail")),
                    self._rhat(c.get("r_hat")), self._num(c.get("mcse_mean"))]
        if not s.shape and len(s.coords) == 1:
            c = s.coords[0]
            return [s.site, s.shape_text, self._num(c.get("mean")), self._num(c.get("sd")),
                    self._num(c.get("q5")), self._num(c.get("q50")), self._num(c.get("q95")),
                    self._ess(c.get("ess_bulk")), self._ess(c.get("ess_tail")),
                    self._rhat(c.get("r_hat")), self._num(c.get("mcse_mean"))]
        lo, hi = s.mean_range
        mark = "▾ " if (s.site in self.expanded or any(x.site == s.site and x.coord
                                                       for x in self.rows_shown)) else "▸ "
        q5 = min((c.get("q5") for c in s.coords), default=float("nan"))
        q95 = max((c.get("q95") for c in s.coords), default=float("nan"))
        return [mark + s.site, s.shape_text, Text(f"{fmt(lo, 3)}..{fmt(hi, 3)}", justify="right"),
                self._num(s.max_sd), self._num(q5), Text(""), self._num(q95),
                self._ess(s.min_ess_bulk), self._ess(s.min_ess_tail),
                self._rhat(s.worst_r_hat), self._num(s.max_mcse)]
