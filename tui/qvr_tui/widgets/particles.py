"""`ParticlesTable`: the latest SMC particles, heaviest first: normalised weight drawn as
a bar, finished or not, and the text (or token ids when no vocabulary is known)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

__all__ = ["ParticlesTable", "weight_bar"]

BAR_WIDTH = 10
_PARTS = " ▏▎▍▌▋▊▉█"


def weight_bar(w: float, width: int = BAR_WIDTH) -> str:
    """`w` in [0, 1] as a bar of `width` cells with eighth-cell resolution."""
    w = min(1.0, max(0.0, w))
    eighths = round(w * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + (_PARTS[part] if part else "")
    return s.ljust(width)


class ParticlesTable(DataTable):
    DEFAULT_CSS = "ParticlesTable { height: 1fr; }"

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", **kw)
        self.shown: list[tuple] = []

    def on_mount(self) -> None:
        self.add_columns("#", "weight", "", "done", "sequence")

    def show(self, state) -> None:
        rows = [(str(i + 1), weight_bar(p.weight), f"{p.weight:.3f}",
                 "✓" if p.finished else "", p.text)
                for i, p in enumerate(state.particles)]
        if rows == self.shown:
            return
        self.clear()
        for r in rows:
            self.add_row(r[0], Text(r[1], style="dodger_blue1"), r[2], r[3], r[4])
        self.shown = rows
