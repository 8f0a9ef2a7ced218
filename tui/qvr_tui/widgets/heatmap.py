"""A half-block heatmap of a matrix: two matrix rows per terminal cell, truecolor.

Each cell is `▀` with the upper row's colour as foreground and the lower row's as
background, so a cell is close to two square pixels.  The colour map is diverging around 0
(blue - near white - red, symmetric in the larger of |min| and |max|: a weight matrix's
sign is visible at a glance) or sequential (light to dark blue, min to max: for standard
deviations).  NaN shows grey.  The first line holds the title and a legend (min, a colour
bar, max); row and column labels (0-based indices of the original matrix) are drawn when
there is room.  A matrix larger than the widget is reduced by block means (NaN ignored),
so every value still counts.  With ``max_zoom`` > 1 a small matrix is drawn larger
instead: every entry a z x z block of pixels (z <= max_zoom, as the widget's size
allows; default 1: one pixel per entry).  Only numpy; the colour and downsampling
functions are pure and tested on their own.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

__all__ = ["Heatmap", "colour", "downsample", "NEGATIVE", "MIDDLE", "POSITIVE", "SEQ_LOW", "SEQ_HIGH", "NAN"]

NEGATIVE = (33, 102, 172)  # ColorBrewer RdBu ends and middle
MIDDLE = (247, 247, 247)
POSITIVE = (178, 24, 43)
SEQ_LOW = (239, 243, 255)  # ColorBrewer Blues
SEQ_HIGH = (8, 48, 107)
NAN = (128, 128, 128)
HALF = "▀"
LEGEND_CELLS = 10


def _mix(a: tuple, b: tuple, t: float) -> tuple[int, int, int]:
    return tuple(math.floor(x + (y - x) * t + 0.5) for x, y in zip(a, b))  # halves round up


def colour(value: float, lo: float, hi: float, diverging: bool = True) -> tuple[int, int, int]:
    """RGB of `value` on the scale [lo, hi].

    Diverging: 0 is `MIDDLE`, -L is `NEGATIVE` and +L is `POSITIVE` with L = max(|lo|, |hi|).
    Sequential: lo is `SEQ_LOW`, hi is `SEQ_HIGH`.  Linear in RGB; NaN is `NAN`.

    >>> colour(-2.0, -2.0, 1.0), colour(0.0, -2.0, 1.0), colour(1.0, -2.0, 1.0)
    ((33, 102, 172), (247, 247, 247), (213, 136, 145))
    """
    if value != value:  # NaN
        return NAN
    if diverging:
        limit = max(abs(lo), abs(hi))
        if limit == 0 or not math.isfinite(limit):
            return MIDDLE
        t = max(-1.0, min(1.0, value / limit))
        return _mix(MIDDLE, POSITIVE, t) if t >= 0 else _mix(MIDDLE, NEGATIVE, -t)
    span = hi - lo
    t = 0.5 if span == 0 or not math.isfinite(span) else max(0.0, min(1.0, (value - lo) / span))
    return _mix(SEQ_LOW, SEQ_HIGH, t)


def downsample(matrix: np.ndarray, max_rows: int, max_cols: int) -> tuple[np.ndarray, int, int]:
    """Block means of `matrix` so that it has at most `max_rows` x `max_cols` entries.

    Returns (reduced matrix, row factor, column factor): entry (i, j) is the mean of rows
    [i*fr, (i+1)*fr) and columns [j*fc, (j+1)*fc) (the last blocks may be partial; NaN are
    ignored).  A matrix that fits is returned as it is with factors 1.

    >>> downsample(np.arange(16.0).reshape(4, 4), 2, 2)[0]
    array([[ 2.5,  4.5],
           [10.5, 12.5]])
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    rows, cols = m.shape
    fr = max(1, math.ceil(rows / max(max_rows, 1)))
    fc = max(1, math.ceil(cols / max(max_cols, 1)))
    if fr == 1 and fc == 1:
        return m, 1, 1
    out_r, out_c = math.ceil(rows / fr), math.ceil(cols / fc)
    padded = np.full((out_r * fr, out_c * fc), np.nan)
    padded[:rows, :cols] = m
    blocks = padded.reshape(out_r, fr, out_c, fc)
    with np.errstate(invalid="ignore"):
        counts = np.sum(~np.isnan(blocks), axis=(1, 3))
        sums = np.nansum(blocks, axis=(1, 3))
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return means, fr, fc


def _rgb_style(fg: Optional[tuple], bg: Optional[tuple], base: Style) -> Style:
    return base + Style(color=Color.from_rgb(*fg) if fg else None, bgcolor=Color.from_rgb(*bg) if bg else None)


class Heatmap(Widget):
    """Half-block heatmap of a 2-D array (see the module docstring)."""

    DEFAULT_CSS = """
    Heatmap { height: auto; width: 1fr; }
    """

    def __init__(self, matrix, title: str = "", diverging: bool = True, *, max_zoom: int = 1,
                 name=None, id=None, classes=None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.title = title
        self.diverging = diverging
        self.max_zoom = max(1, int(max_zoom))
        self.zoom = 1  # pixels per entry along each axis (see _layout)
        self.matrix = self._as_matrix(matrix)
        self.grid = self.matrix  # what is drawn (block means when it does not fit); see _layout
        self.factors = (1, 1)
        self._labels = (0, False)  # row-label width, column-label line shown
        self._layout_key = None  # (size, matrix identity, max_zoom) the grid was computed for
        self._limits: tuple = (None, (0.0, 0.0))  # (matrix they belong to, (min, max))

    @staticmethod
    def _as_matrix(matrix) -> np.ndarray:
        m = np.asarray(matrix, dtype=float)
        if m.ndim == 1:
            m = m[None, :]
        if m.ndim != 2:
            raise ValueError(f"Heatmap needs a 1-D or 2-D array, got shape {m.shape}")
        return m

    def set_matrix(self, matrix, title: Optional[str] = None) -> None:
        self.matrix = self._as_matrix(matrix)
        if title is not None:
            self.title = title
        self.refresh(layout=True)

    # ------------------------------------------------------------ sizing
    def get_content_width(self, container: Size, viewport: Size) -> int:
        return len(str(self.matrix.shape[0] - 1)) + 1 + self.matrix.shape[1]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 2 + math.ceil(self.matrix.shape[0] / 2)

    @property
    def limits(self) -> tuple[float, float]:
        """(min, max) of the finite values of the whole matrix (0, 0 when there are none)."""
        if self._limits[0] is not self.matrix:
            finite = self.matrix[np.isfinite(self.matrix)]
            self._limits = (self.matrix, (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0))
        return self._limits[1]

    def _frame(self) -> tuple[int, bool, int, int]:
        """`(label_w, col_labels, pixel_rows, pixel_cols)` the widget's size leaves for the
        matrix: row labels when at least 12 wide, a column-label line when at least 4 high,
        two pixels per text line below the legend."""
        w, h = self.size
        label_w = len(str(self.matrix.shape[0] - 1)) + 1 if w >= 12 else 0
        col_labels = h >= 4
        body = max(h - 1 - int(col_labels), 1)
        return label_w, col_labels, 2 * body, max(w - label_w, 1)

    def fit_zoom(self) -> int:
        """The largest zoom the widget's current size allows for the matrix (1 when it
        does not even fit at one pixel per entry), whatever `max_zoom` says."""
        rows, cols = self.matrix.shape
        _, _, pr, pc = self._frame()
        return max(1, min(pr // rows, pc // cols))

    def set_max_zoom(self, zoom: int) -> None:
        """Allow up to `zoom` pixels per entry (redrawn when it changes)."""
        zoom = max(1, int(zoom))
        if zoom != self.max_zoom:
            self.max_zoom = zoom
            self.refresh()

    def _layout(self) -> None:
        key = (self.size, id(self.matrix), self.max_zoom)
        if key == self._layout_key:
            return
        self._layout_key = key
        label_w, col_labels, pr, pc = self._frame()
        self.grid, fr, fc = downsample(self.matrix, pr, pc)
        self.factors = (fr, fc)
        self.zoom = 1
        if fr == fc == 1 and self.max_zoom > 1:
            self.zoom = min(self.max_zoom, self.fit_zoom())
            if self.zoom > 1:
                self.grid = np.repeat(np.repeat(self.matrix, self.zoom, 0), self.zoom, 1)
        self._labels = (label_w, col_labels)

    def cell_colours(self, cell_row: int, col: int) -> tuple[tuple, Optional[tuple]]:
        """(upper, lower) RGB drawn in the heat cell at (cell_row, col) of the grid; lower is
        None when the grid has an odd number of rows and this is the last cell row."""
        self._layout()
        lo, hi = self.limits
        upper = colour(self.grid[2 * cell_row, col], lo, hi, self.diverging)
        r = 2 * cell_row + 1
        lower = colour(self.grid[r, col], lo, hi, self.diverging) if r < self.grid.shape[0] else None
        return upper, lower

    # ------------------------------------------------------------ drawing
    def render_line(self, y: int) -> Strip:
        self._layout()
        width = self.size.width
        base = self.rich_style
        label_w, col_labels = self._labels
        if y == 0:
            return self._legend(width, base)
        if col_labels and y == 1:
            return self._column_labels(width, base, label_w)
        cell_row = y - 1 - int(col_labels)
        if cell_row >= math.ceil(self.grid.shape[0] / 2):
            return Strip.blank(width, base)
        segments = []
        if label_w:
            pixel = 2 * cell_row
            first = str(pixel * self.factors[0] // self.zoom) if pixel % self.zoom == 0 else ""
            segments.append(Segment(f"{first:>{label_w - 1}} ", base + Style(dim=True)))
        for j in range(self.grid.shape[1]):
            upper, lower = self.cell_colours(cell_row, j)
            segments.append(Segment(HALF, _rgb_style(upper, lower, base)))
        return Strip(segments).adjust_cell_length(width, base)

    def _legend(self, width: int, base: Style) -> Strip:
        lo, hi = self.limits
        segs = []
        if self.title:
            segs.append(Segment(self.title + "  ", base + Style(bold=True)))
        segs.append(Segment(f"min {lo:.3g} ", base))
        a, b = (-max(abs(lo), abs(hi)), max(abs(lo), abs(hi))) if self.diverging else (lo, hi)
        for k in range(LEGEND_CELLS):
            v = a + (b - a) * k / (LEGEND_CELLS - 1)
            segs.append(Segment(" ", base + Style(bgcolor=Color.from_rgb(*colour(v, lo, hi, self.diverging)))))
        segs.append(Segment(f" max {hi:.3g}", base))
        fr, fc = self.factors
        if fr > 1 or fc > 1:
            segs.append(Segment(f"  {fr}x{fc} means", base + Style(dim=True)))
        return Strip(segs).adjust_cell_length(width, base)

    def _column_labels(self, width: int, base: Style, label_w: int) -> Strip:
        cols, z = self.grid.shape[1], self.zoom
        line = [" "] * cols
        e = 0  # a label every 5 cells or so, at the first cell of an entry (of a block)
        while e * z < cols:
            text = str(e * self.factors[1])
            pos = e * z
            if pos + len(text) > cols:
                break
            line[pos:pos + len(text)] = text
            e += max(math.ceil(5 / z), math.ceil((len(text) + 1) / z), 1)
        return Strip([Segment(" " * label_w + "".join(line), base + Style(dim=True))]).adjust_cell_length(
            width, base)
