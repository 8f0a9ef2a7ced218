"""The hover panel: the type and doc comment of the name under the source cursor.

`HoverPanel.show(info)` draws a `ProgramModel.hover_at` result (signature in bold, the
facts line dimmed, then the `##` doc comment); `show(None)` shows a hint.  The last shown
record is kept in `.info` for tests and callers.
"""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widgets import Static

from qvr_tui.program_model import HoverInfo

__all__ = ["HoverPanel"]


class HoverPanel(Static):
    DEFAULT_CSS = """
    HoverPanel { height: auto; max-height: 5; padding: 0 1; background: $panel; color: $foreground; }
    """

    def __init__(self, *, id=None, classes=None) -> None:
        super().__init__("", id=id, classes=classes)
        self.info: Optional[HoverInfo] = None

    def show(self, info: Optional[HoverInfo]) -> None:
        self.info = info
        if info is None:
            self.update(Text("move the cursor onto a name to see its type", style="dim"))
            return
        text = Text(info.signature, style="bold")
        if info.facts:
            text.append("  " + info.facts, style="dim")
        if info.doc:
            text.append("\n" + info.doc, style="italic")
        self.update(text)
