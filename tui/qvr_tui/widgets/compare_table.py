"""`CompareTable`: runs compared by PSIS-LOO (`qvr_tui.predictive_model.Comparison`, from
`qvr.inference.criticism.checks.compare`), best first.

Columns: rank, run (the comparison's name for it: the export, the program or the run
folder), elpd_loo, its SE, the elpd difference from the best run and the SE of that
difference, p_loo, the stacking weight, and ``⚠ k`` when the run's LOO has rows with a
high Pareto k (its estimate is then unreliable).  The best run's row is bold; a
difference larger than twice its SE is red (the run predicts clearly worse).  The
verdict is the line under the table (the pane shows it).  Fits in 80 columns.
"""
from __future__ import annotations

import math
from typing import Optional

from rich.text import Text
from textual.widgets import DataTable

from qvr_tui.predictive_model import Comparison, CompareRow, fmt_num
from qvr_tui.widgets.runs_table import short_folder

__all__ = ["CompareTable", "COLUMNS", "NAME_WIDTH"]

COLUMNS = ("#", "run", "elpd_loo", "se", "Δelpd", "Δse", "p_loo", "weight", "")
NAME_WIDTH = 16


def _f(v: Optional[float], fmt: str) -> str:
    if v is None:
        return ""
    if not math.isfinite(v):
        return fmt_num(v)
    return format(v, fmt)


class CompareTable(DataTable):
    """See the module docstring."""

    DEFAULT_CSS = """
    CompareTable { height: auto; max-height: 10; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.comparison: Optional[Comparison] = None

    def on_mount(self) -> None:
        if not self.columns:
            self.add_columns(*COLUMNS)

    def show(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.clear()
        if not self.columns:
            self.add_columns(*COLUMNS)
        for i, r in enumerate(comparison.rows):
            self.add_row(*self.cells(r, best=i == 0), key=r.path or r.run_id or str(i))

    @staticmethod
    def cells(r: CompareRow, best: bool = False) -> list:
        bold = "bold" if best else ""
        clear = (r.elpd_diff is not None and r.dse is not None and r.dse > 0
                 and r.elpd_diff > 2 * r.dse)
        warn = ""
        if r.warning:
            warn = Text(f"⚠ k{'' if r.n_high_k is None else f' {r.n_high_k}'}",
                        style="bold red")
        return [str(r.rank) if r.rank is not None else "",
                Text(short_folder(r.name or r.run_id, NAME_WIDTH), style=bold),
                Text(_f(r.elpd_loo, ".1f"), style=bold), _f(r.se, ".1f"),
                Text(_f(r.elpd_diff, ".1f"), style="red" if clear else ""), _f(r.dse, ".1f"),
                _f(r.p_loo, ".1f"), _f(r.weight, ".2f"), warn]
