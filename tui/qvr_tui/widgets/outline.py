"""The outline: a program's declarations with their types, one per line.

`Outline` is an `OptionList` of `ProgramModel.outline` entries (`name : type`, kind shown
as a short tag, program steps and replica members indented).  Choosing one (Enter or a
click) posts `Outline.EntrySelected`; the pane moves the source cursor there.  It reads
only the model's plain data.
"""
from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from qvr_tui.program_model import OutlineEntry, ProgramModel

__all__ = ["Outline"]

_TAGS = {"object": "obj", "morphism": "mor", "let": "let", "program": "prg", "deduction": "ded",
         "local": "   ", "rule": "rul"}


def entry_text(e: OutlineEntry) -> Text:
    text = Text("  " * e.depth)
    text.append(_TAGS.get(e.kind, e.kind[:3]), style="dim")
    text.append(" ")
    text.append(e.name, style="bold" if e.depth == 0 else "")
    if e.type_text:
        text.append(" : ", style="dim")
        text.append(e.type_text)
    return text


class Outline(OptionList):
    """Declarations of the program; selecting one posts `EntrySelected`."""

    DEFAULT_CSS = """
    Outline, Outline:focus { height: 1fr; border: none; padding: 0; text-wrap: nowrap;
                             text-overflow: ellipsis; background: $surface; }
    Outline:focus { background-tint: $foreground 4%; }
    """

    class EntrySelected(Message):
        def __init__(self, outline: "Outline", entry: OutlineEntry) -> None:
            super().__init__()
            self.outline = outline
            self.entry = entry

        @property
        def control(self) -> "Outline":
            return self.outline

    def __init__(self, model: ProgramModel | None = None, *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.entries: tuple[OutlineEntry, ...] = ()
        if model is not None:
            self.set_model(model)

    def set_model(self, model: ProgramModel) -> None:
        keep = self.highlighted
        self.entries = model.outline
        self.set_options(Option(entry_text(e)) for e in self.entries)
        if keep is not None and self.entries:
            self.highlighted = min(keep, len(self.entries) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list is not self:
            return
        event.stop()
        self.post_message(self.EntrySelected(self, self.entries[event.option_index]))
