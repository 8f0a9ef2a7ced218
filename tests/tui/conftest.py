"""Shared pieces of the dashboard tests: the examples folder and a tiny harness App that
composes one widget and records the messages the tests wait on (no sleeps)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.app import App

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


class Harness(App):
    """Composes the given widgets; ProgramChanged messages land in `changes`."""

    def __init__(self, *widgets) -> None:
        super().__init__()
        self._widgets = widgets
        self.changes: asyncio.Queue = asyncio.Queue()

    def compose(self):
        yield from self._widgets

    def on_program_pane_program_changed(self, event) -> None:
        self.changes.put_nowait(event.model)


@pytest.fixture
def transformer_path() -> Path:
    return EXAMPLES / "transformer_lm.qvr"
