"""The table of past runs (`qvr_tui.runs_model.RunRow`): mark, status, method (with
the pretrained LM an SMC run steered: `method_cell`), start time, the run's key number
(final loss / max R-hat / log Z), a stale mark and the folder.

Status colours: finished green, failed red, cancelled and interrupted yellow, running
cyan.  Row keys are the run folders (str).  `toggle_mark()` marks or unmarks the row
under the cursor (``●`` in the first column); `marked` lists the marked folders in the
order they were marked.
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional, Sequence

from rich.text import Text
from textual.widgets import DataTable

from qvr_tui.runs_model import RunRow

__all__ = ["RunsTable", "STATUS_STYLE", "short_folder", "short_started", "method_cell"]

STATUS_STYLE = {"finished": "green", "failed": "bold red", "cancelled": "yellow",
                "interrupted": "yellow", "running": "bold cyan", "unreadable": "red"}
COLUMNS = ("", "status", "method", "started (UTC)", "result", "", "folder")


FOLDER_WIDTH = 16  # the folder column at most: with the others it fits 80 columns
LM_WIDTH = 10  # an SMC run's language model in the method column, at most


def short_folder(name: str, width: int = FOLDER_WIDTH) -> str:
    """A run folder's name in at most `width` characters, keeping what tells runs apart:
    of ``NAME-YYYYmmdd-HHMMSS[-N]`` (`qvr.runs.new_run_dir`) the time (the date is in the
    started column), with NAME shortened (``transformer_lm-20261124-204145`` ->
    ``transfor…-204145``); another long name keeps its start and end.  (Cut at the
    right, same-day runs all read ``transformer_lm-20261124``.)  The full path is the
    line under the table."""
    if len(name) <= width:
        return name
    m = re.match(r"^(.*?)-\d{8}(-\d{6}(?:-\d+)?)$", name)
    if m and len(m.group(2)) < width - 1:
        head, stamp = m.groups()
        return head[:width - len(stamp) - 1] + "…" + stamp
    half = (width - 1) // 2
    return name[:half] + "…" + name[-(width - 1 - half):]


def short_started(started: str, year: Optional[str] = None) -> str:
    """``2026-11-24 13:45:01`` without the year when it is this year (room at 80
    columns)."""
    year = year or time.strftime("%Y", time.gmtime())
    return started[5:] if started.startswith(year + "-") else started


def method_cell(r: RunRow, width: int = LM_WIDTH) -> str:
    """The method, and the pretrained LM an SMC run steered (``smc tiny_lm``): the
    model's last name part, at most `width` characters."""
    if not r.lm:
        return r.method
    name = r.lm.rstrip("/").rsplit("/", 1)[-1] or r.lm
    return f"{r.method} {name if len(name) <= width else name[:width - 1] + '…'}"


class RunsTable(DataTable):
    """See the module docstring."""

    DEFAULT_CSS = """
    RunsTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.runs: list[RunRow] = []
        self.marked: list[Path] = []

    def on_mount(self) -> None:
        if not self.columns:
            self.add_columns(*COLUMNS)

    def set_runs(self, runs: Sequence[RunRow]) -> None:
        keep = self.run_at_cursor()
        self.runs = list(runs)
        present = {r.path for r in self.runs}
        self.marked = [p for p in self.marked if p in present]
        self.clear()
        if not self.columns:
            self.add_columns(*COLUMNS)
        for r in self.runs:
            self.add_row(*self.cells(r), key=str(r.path))
        if keep is not None and keep.path in present:
            self.move_cursor(row=[r.path for r in self.runs].index(keep.path))

    def cells(self, r: RunRow) -> list:
        mark = "●" if r.path in self.marked else " "
        return [mark, Text(r.status, style=STATUS_STYLE.get(r.status, "")), method_cell(r),
                short_started(r.started), r.key_text,
                Text("stale", style="yellow") if r.stale else "",
                short_folder(r.name)]

    def run_at_cursor(self) -> Optional[RunRow]:
        if not self.runs or not (0 <= self.cursor_row < len(self.runs)):
            return None
        return self.runs[self.cursor_row]

    def toggle_mark(self) -> None:
        r = self.run_at_cursor()
        if r is None:
            return
        if r.path in self.marked:
            self.marked.remove(r.path)
        else:
            self.marked.append(r.path)
        self.update_cell(str(r.path), self.ordered_columns[0].key,
                         "●" if r.path in self.marked else " ")
