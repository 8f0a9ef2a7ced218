"""The Results pane (first version: the run folder and its status; filled in next)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

__all__ = ["ResultsPane"]


class ResultsPane(Vertical):
    """Results of one run record; `show_run(path)` switches to another."""

    def __init__(self, run_path: Optional[Path] = None, *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.run_path = Path(run_path) if run_path is not None else None

    def compose(self) -> ComposeResult:
        yield Static(str(self.run_path or "No run open."), id="results-header")

    def show_run(self, path) -> None:
        self.run_path = Path(path) if path is not None else None
        self.query_one("#results-header", Static).update(str(self.run_path or "No run open."))
