"""The list of a program's diagnostics: `file:line:col: severity[code]: message`.

`DiagnosticsList` is an `OptionList` over `ProgramModel.diagnostics` (errors in the
theme's error colour, warnings in its warning colour; "no problems" when there are none).
Choosing one posts `DiagnosticsList.DiagnosticSelected`; the pane jumps the source cursor
to its start.  It reads only the model's plain data.
"""
from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from qvr_tui.program_model import DiagnosticEntry, ProgramModel

__all__ = ["DiagnosticsList"]


class DiagnosticsList(OptionList):
    """Diagnostics of the program; selecting one posts `DiagnosticSelected`."""

    MAX_ROWS = 5  # rows shown before the list scrolls
    COMPONENT_CLASSES = {"diagnostics-list--error", "diagnostics-list--warning"}
    DEFAULT_CSS = """
    DiagnosticsList, DiagnosticsList:focus { height: 1; border: none; padding: 0;
                                             text-wrap: nowrap; text-overflow: ellipsis;
                                             background: $surface; }
    DiagnosticsList:focus { background-tint: $foreground 4%; }
    DiagnosticsList > .diagnostics-list--error { color: $text-error; text-style: bold; }
    DiagnosticsList > .diagnostics-list--warning { color: $text-warning; text-style: bold; }
    """

    class DiagnosticSelected(Message):
        def __init__(self, diagnostics_list: "DiagnosticsList", diagnostic: DiagnosticEntry) -> None:
            super().__init__()
            self.diagnostics_list = diagnostics_list
            self.diagnostic = diagnostic

        @property
        def control(self) -> "DiagnosticsList":
            return self.diagnostics_list

    def __init__(self, model: ProgramModel | None = None, *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.entries: tuple[DiagnosticEntry, ...] = ()
        self.path = ""
        self._model = model
        self._ready = False

    def on_mount(self) -> None:
        self._ready = True  # component styles (theme colours) can be read from now on
        if self._model is not None:
            self.set_model(self._model)

    def lines(self) -> list[str]:
        """The listed lines as plain text (what the user reads)."""
        if not self.entries:
            return ["no problems"]
        return [d.label(self.path) for d in self.entries]

    def set_model(self, model: ProgramModel) -> None:
        self._model = model
        self.entries = model.diagnostics
        self.path = Path(model.path).name
        self.styles.height = min(max(len(self.entries), 1), self.MAX_ROWS)
        if not self._ready:
            return
        if not self.entries:
            self.set_options([Option(Text("no problems", style="dim"), disabled=True)])
            return
        opts = []
        for d in self.entries:
            sev = self.get_component_rich_style(f"diagnostics-list--{d.severity}", partial=True)
            text = Text(f"{self.path}:{d.line}:{d.col}: ")
            text.append(f"{d.severity}[{d.code}]", style=sev)
            text.append(f": {d.message}")
            opts.append(Option(text))
        self.set_options(opts)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list is not self:
            return
        event.stop()
        if self.entries:
            self.post_message(self.DiagnosticSelected(self, self.entries[event.option_index]))
