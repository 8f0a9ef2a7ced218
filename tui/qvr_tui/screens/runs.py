"""The Runs pane (first version: messages and constructor; the table comes next)."""
from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

__all__ = ["RunsPane"]


class RunsPane(Vertical):
    """Past runs of one program under `runs_dir`."""

    class OpenRun(Message):
        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = Path(path)

    class Overlay(Message):
        def __init__(self, paths: list[Path]) -> None:
            super().__init__()
            self.paths = [Path(p) for p in paths]

    def __init__(self, program_path, runs_dir="runs", *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.program_path = Path(program_path)
        self.runs_dir = Path(runs_dir)

    def compose(self) -> ComposeResult:
        yield Static("Runs", id="runs-header")

    def refresh_runs(self) -> None:
        pass
