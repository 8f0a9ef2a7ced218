"""`ChainTable`: one row per MCMC chain (phase, progress, draws/s, acceptance, step size,
tree depth, max-depth hits, divergences, ETA); a chain's row turns red at its first
divergence in sampling.

`show(state)` updates the rows in place; an updated cell that is longer than its column
widens the column (`update_width=True`), so `sampling` and `550.2` are never cut.  The
table has no cursor (see `__init__`).  `rows_text()`
gives the rows as plain strings (tests, the tmux reader).
"""
from __future__ import annotations

import math

from rich.text import Text
from textual.widgets import DataTable

from qvr_tui.state import format_seconds

__all__ = ["ChainTable", "COLUMNS"]

COLUMNS = ("#", "phase", "progress", "it/s", "accept", "step", "depth", "hits", "diverg.",
           "ETA")
# "hits": NUTS trajectories that reached the maximum tree depth (this phase);
# "diverg.": divergent transitions in sampling, with the iteration of the first


def _num(v: float, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


class ChainTable(DataTable):
    DEFAULT_CSS = "ChainTable { height: auto; max-height: 10; }"

    def __init__(self, **kw) -> None:
        # No cursor: nothing selects a chain, and a row cursor's highlight painted over
        # the red of a divergent chain on its row (row 0 by default).
        super().__init__(cursor_type="none", zebra_stripes=False, **kw)
        self._rows: list[tuple] = []

    def on_mount(self) -> None:
        for c in COLUMNS:
            self.add_column(c, key=c)

    def cells(self, row, state) -> tuple:
        hits = row.max_depth_hits if row.phase == "sampling" else row.warmup_max_depth_hits
        depth = _num(row.tree_depth, ".0f") if state.method == "nuts" else \
            _num(row.num_steps, ".0f")
        div = str(row.divergences)
        if row.first_divergence is not None:
            div += f" @{row.first_divergence}"
        return (str(row.chain), row.phase, f"{row.step}/{row.total}",
                _num(row.draws_per_s, ".1f"), _num(row.accept, ".3f"),
                _num(row.step_size, ".3g"), depth,
                str(hits) if state.method == "nuts" else "-", div,
                format_seconds(row.eta) if row.eta is not None else "-")

    def show(self, state) -> None:
        rows = [(r.chain, self.cells(r, state), r.diverged)
                for r in sorted(state.chains.values(), key=lambda r: r.chain)]
        keys = [str(c) for c, _, _ in rows]
        if [str(k.value) for k in self.rows] != keys:
            self.clear()
            for c, cells, bad in rows:
                self.add_row(*self._styled(cells, bad), key=str(c))
        else:
            for c, cells, bad in rows:
                for col, v in zip(COLUMNS, self._styled(cells, bad)):
                    self.update_cell(str(c), col, v, update_width=True)
        self._rows = [cells for _, cells, _ in rows]
        self._bad = [bad for _, _, bad in rows]

    @staticmethod
    def _styled(cells, bad):
        return [Text(v, style="bold red") if bad else Text(v) for v in cells]

    def rows_text(self) -> list[str]:
        return [" | ".join(r) for r in self._rows]

    def red_rows(self) -> list[int]:
        return [i for i, b in enumerate(getattr(self, "_bad", [])) if b]
