"""`PatternMap`: an attention pattern (queries x keys) with the positions' labels.

Unlike `Heatmap` (two matrix rows per cell, index labels), a pattern is small (a sequence
of T positions) and its axes are words: every query position gets a whole terminal line,
labelled by its position and token on the left, and every key position `cw` cells (1 to
4, as the width allows).  When the queries do not fit one per line they go two per line
(half blocks: ``▀`` with the upper query's colour over the lower one's, labelled by both
positions and tokens), and only past that are blocks averaged.  The column header shows the tokens (their first ``cw - 1``
characters) when a column is at least 3 cells wide, else the position numbers every few
columns.  A pattern larger than the widget is reduced by block means (the labels then
name the first position of each block, and the legend says so).

Colours are sequential from 0 (light) to the largest weight shown (dark blue): attention
weights are probabilities, and a fixed 0..1 scale would leave a pattern spread over 16
positions (weights near 1/16) almost white.  Masked (causal) weights are exactly 0, the
lightest colour.  The first line holds the title and the legend (0, a colour bar, max).
Only numpy and rich; `Heatmap`'s colour and downsampling functions are reused.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from qvr_tui.widgets.heatmap import LEGEND_CELLS, colour, downsample

__all__ = ["PatternMap", "MAX_CELL", "MAX_LABEL"]

MAX_CELL = 4    # terminal cells per key position at most
MAX_LABEL = 12  # row label width at most (position, a space, the token cut to fit)


class PatternMap(Widget):
    """See the module docstring.  `set_pattern(matrix, labels, title)` shows a (T, T)
    pattern; `message` (with no matrix) shows a line of text instead."""

    DEFAULT_CSS = """
    PatternMap { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, name=None, id=None, classes=None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.matrix: Optional[np.ndarray] = None
        self.labels: tuple = ()
        self.title = ""
        self.message = ""
        self.grid = np.zeros((0, 0))
        self.factors = (1, 1)
        self.cell = 1
        self.label_w = 0
        self.half = False  # two query rows per line
        self._layout_key = None
        self._limit = 0.0

    def set_pattern(self, matrix, labels: Sequence[str] = (), title: str = "") -> None:
        m = np.asarray(matrix, dtype=float)
        if m.ndim != 2:
            raise ValueError(f"PatternMap needs a 2-D array, got shape {m.shape}")
        self.matrix = m
        finite = m[np.isfinite(m)]
        self._limit = float(finite.max()) if finite.size else 0.0
        n = max(m.shape)
        self.labels = tuple(labels) if len(labels) >= n else tuple(str(i) for i in range(n))
        self.title = title
        self.message = ""
        self._layout_key = None
        self.refresh(layout=True)

    def show_message(self, text: str) -> None:
        self.matrix, self.message, self._layout_key, self._limit = None, text, None, 0.0
        self.refresh(layout=True)

    # ------------------------------------------------------------ sizing
    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 if self.matrix is None else 2 + self.matrix.shape[0]  # one query a line

    @property
    def limit(self) -> float:
        """The largest finite weight of the whole pattern (the dark end of the scale),
        computed once per pattern (`set_pattern`), not per cell drawn."""
        return self._limit

    def row_label(self, pos: int, half: bool = False) -> str:
        """``"3 cat"`` (position and token), or ``"3"`` when the token is the position;
        with `half`, the line of positions `pos` and `pos + 1`: ``"2,3 on cat"``."""
        n = self.matrix.shape[0] if self.matrix is not None else 0

        def tok(i):
            return self.labels[i] if i < len(self.labels) else str(i)
        if half and pos + 1 < n:
            pair = f"{pos},{pos + 1}"
            if tok(pos) == str(pos):
                return pair
            return f"{pair} {tok(pos)} {tok(pos + 1)}"
        return str(pos) if tok(pos) == str(pos) else f"{pos} {tok(pos)}"

    def _layout(self) -> None:
        key = (self.size, id(self.matrix))
        if key == self._layout_key or self.matrix is None:
            return
        self._layout_key = key
        w, h = self.size
        rows, cols = self.matrix.shape
        body = max(h - 2, 1)
        self.half = rows > body
        want = max((len(self.row_label(i, self.half))
                    for i in range(0, rows, 2 if self.half else 1)), default=1)
        self.label_w = min(want, MAX_LABEL, max(w // 3, 2)) + 1
        avail = max(w - self.label_w, 1)
        self.grid, fr, fc = downsample(self.matrix, 2 * body if self.half else body, avail)
        self.factors = (fr, fc)
        self.cell = max(1, min(MAX_CELL, avail // max(self.grid.shape[1], 1)))

    def cell_colour(self, row: int, col: int) -> tuple:
        """RGB of grid cell (row, col) (after any block means)."""
        self._layout()
        return colour(self.grid[row, col], 0.0, self.limit, diverging=False)

    # ------------------------------------------------------------ drawing
    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.size.width
        if self.matrix is None:
            if y == 0 and self.message:
                return Strip([Segment(self.message, base + Style(dim=True))]).adjust_cell_length(
                    width, base)
            return Strip.blank(width, base)
        self._layout()
        if y == 0:
            return self._legend(width, base)
        if y == 1:
            return self._header(width, base)
        step = 2 if self.half else 1
        r = (y - 2) * step
        if r >= self.grid.shape[0]:
            return Strip.blank(width, base)
        first = r * self.factors[0]
        label = self.row_label(first, self.half and self.factors[0] == 1)[: self.label_w - 1]
        segs = [Segment(f"{label:<{self.label_w - 1}} ", base + Style(dim=True))]
        for j in range(self.grid.shape[1]):
            rgb = self.cell_colour(r, j)
            if not self.half:
                segs.append(Segment(" " * self.cell, base + Style(bgcolor=Color.from_rgb(*rgb))))
                continue
            lower = self.cell_colour(r + 1, j) if r + 1 < self.grid.shape[0] else None
            segs.append(Segment("▀" * self.cell, base + Style(
                color=Color.from_rgb(*rgb),
                bgcolor=Color.from_rgb(*lower) if lower is not None else None)))
        return Strip(segs).adjust_cell_length(width, base)

    def _legend(self, width: int, base: Style) -> Strip:
        hi = self.limit
        segs = []
        if self.title:
            segs.append(Segment(self.title + "  ", base + Style(bold=True)))
        segs.append(Segment("0 ", base))
        for k in range(LEGEND_CELLS):
            v = hi * k / (LEGEND_CELLS - 1)
            segs.append(Segment(" ", base + Style(bgcolor=Color.from_rgb(
                *colour(v, 0.0, hi, diverging=False)))))
        segs.append(Segment(f" {hi:.2f}", base))
        fr, fc = self.factors
        if fr > 1 or fc > 1:
            segs.append(Segment(f"  {fr}x{fc} means", base + Style(dim=True)))
        return Strip(segs).adjust_cell_length(width, base)

    def header_text(self) -> str:
        """The column header after the label gutter: tokens or position numbers."""
        self._layout()
        cols, cw, fc = self.grid.shape[1], self.cell, self.factors[1]
        if cw >= 3 and fc == 1:
            return "".join(f"{self.labels[j][: cw - 1]:<{cw}}" for j in range(cols))
        line = [" "] * (cols * cw)
        j = 0
        while j < cols:
            text = str(j * fc)
            if j * cw + len(text) > len(line):
                break
            line[j * cw: j * cw + len(text)] = text
            j += max(1, math.ceil((len(text) + 1) / cw), 5 // cw if cw < 5 else 1)
        return "".join(line)

    def _header(self, width: int, base: Style) -> Strip:
        text = " " * self.label_w + self.header_text()
        return Strip([Segment(text, base + Style(dim=True))]).adjust_cell_length(width, base)
