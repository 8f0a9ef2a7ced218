"""`Confirm`: a small yes/no modal (quitting while a fit runs)."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["Confirm"]


class Confirm(ModalScreen[bool]):
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Vertical { width: 60; max-width: 90%; height: auto; border: thick $warning;
                         background: $surface; padding: 1 2; }
    Confirm .keys { color: $text-muted; margin-top: 1; }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question))
            yield Static("y: yes   n / Esc: no", classes="keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
