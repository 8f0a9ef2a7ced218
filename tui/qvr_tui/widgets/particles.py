"""`ParticlesTable`: the latest SMC particles, heaviest first: normalised weight drawn as
a bar, done or not (`done_mark`: ended by the end token, or cut at the maximum length),
and the text (a pretrained LM's continuation as the worker detokenised it; else through
the vocabulary, or token ids when none is known)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

__all__ = ["ParticlesTable", "weight_bar", "done_mark"]

BAR_WIDTH = 10
_PARTS = " ▏▎▍▌▋▊▉█"


def weight_bar(w: float, width: int = BAR_WIDTH) -> str:
    """`w` in [0, 1] as a bar of `width` cells with eighth-cell resolution."""
    w = min(1.0, max(0.0, w))
    eighths = round(w * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + (_PARTS[part] if part else "")
    return s.ljust(width)


def done_mark(p) -> str:
    """The "done" cell: ``✓`` ended by the end token, ``max`` cut at the maximum length."""
    return "max" if p.truncated else "✓" if p.finished else ""


class ParticlesTable(DataTable):
    DEFAULT_CSS = "ParticlesTable { height: 1fr; }"

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", **kw)
        self.shown: list[tuple] = []

    def on_mount(self) -> None:
        self.add_columns("#", "weight", "", "done", "sequence")

    def show(self, state) -> None:
        rows = [(str(i + 1), weight_bar(p.weight), f"{p.weight:.3f}", done_mark(p), p.text)
                for i, p in enumerate(state.particles)]
        if rows == self.shown:
            return
        self.clear()
        for r in rows:
            self.add_row(r[0], Text(r[1], style="dodger_blue1"), r[2], r[3], r[4])
        self.shown = rows
