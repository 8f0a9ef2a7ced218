"""The Program pane: source, outline, hover and diagnostics of one QVR file, reloaded on save.

`ProgramPane(path)` is a container an app composes (it is not a Screen, so the app can
place it in a tab or a mode).  It checks the file once when built, draws it
(`SourceView`, `Outline`, `HoverPanel`, `DiagnosticsList`), and wires them: the hover
panel follows the source cursor, choosing an outline entry or a diagnostic moves the
cursor there.  A `watch.py` worker follows the file; each save that changes the text is
re-checked off the UI thread (sharing the check cache, so unchanged declarations are
reused) and the pane then shows the new model and posts `ProgramPane.ProgramChanged`.
Nothing here starts or stops fits: a running fit is not disturbed by a reload; callers
compare a run's recorded source hash with `is_stale(run_sha256)`.

Messages: `ProgramChanged(model)` after a reload; `ReloadFailed(message)` when the saved
file cannot be read.  `watch_ready` is set once the file watcher runs.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Static

from qvr_tui.program_model import ProgramModel, read_program
from qvr_tui.watch import watch_file
from qvr_tui.widgets.diagnostics_list import DiagnosticsList
from qvr_tui.widgets.hover_panel import HoverPanel
from qvr_tui.widgets.outline import Outline
from qvr_tui.widgets.source_view import SourceView

__all__ = ["ProgramPane"]


class ProgramPane(Vertical):
    """The Program view of one file (see the module docstring)."""

    DEFAULT_CSS = """
    ProgramPane { height: 1fr; }
    ProgramPane > #program-title { height: 1; padding: 0 1; background: $panel; color: $foreground; }
    ProgramPane > #program-title.-errors { color: $text-error; }
    ProgramPane > #program-main { height: 1fr; }
    ProgramPane #source { width: 1fr; }
    ProgramPane #outline { width: 34%; max-width: 48; border-left: vkey $border; }
    """

    class ProgramChanged(Message):
        """The file was saved with a new text and re-checked."""

        def __init__(self, pane: "ProgramPane", model: ProgramModel) -> None:
            super().__init__()
            self.pane = pane
            self.model = model

        @property
        def control(self) -> "ProgramPane":
            return self.pane

    class ReloadFailed(Message):
        """The saved file could not be read (the old model stays)."""

        def __init__(self, pane: "ProgramPane", message: str) -> None:
            super().__init__()
            self.pane = pane
            self.message = message

    def __init__(self, path, *, watch: bool = True, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.path = str(path)
        self.watch = watch
        self.watch_ready = asyncio.Event()
        self.load_error: Optional[str] = None
        try:
            self.model = ProgramModel.load(self.path)
        except UnicodeDecodeError as exc:
            self.load_error = f"{self.path}: cannot read file: not UTF-8 text ({exc.reason} at byte {exc.start})"
        except OSError as exc:
            self.load_error = f"{self.path}: cannot read file: {exc.strerror}"
        if self.load_error is not None:
            self.model = ProgramModel.from_text("", self.path)

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(Text(self._title()), id="program-title", classes="-errors" if self._blocked() else "")
        with Horizontal(id="program-main"):
            yield SourceView(self.model, id="source")
            yield Outline(self.model, id="outline")
        yield HoverPanel(id="hover")
        yield DiagnosticsList(self.model, id="diagnostics")

    def on_mount(self) -> None:
        self.query_one(HoverPanel).show(None)
        if self.load_error is not None:
            self.query_one(HoverPanel).update(Text(self.load_error))
        if self.watch:  # after the first paint: importing watchfiles (anyio) costs ~0.1 s
            self.call_after_refresh(self.run_worker, self._watch(), group="program-watch", exclusive=True,
                                    exit_on_error=False)

    def _blocked(self) -> bool:
        return self.load_error is not None or self.model.has_errors

    def _title(self) -> str:
        name = Path(self.path).name
        if self.load_error is not None:
            return f"{name} — cannot be read"
        n_err = len(self.model.errors)
        n_warn = len(self.model.diagnostics) - n_err
        if n_err:
            return f"{name} — {n_err} error{'s' if n_err != 1 else ''}: cannot be run (see the list below)"
        if n_warn:
            return f"{name} — checks with {n_warn} warning{'s' if n_warn != 1 else ''}"
        return f"{name} — checks clean"

    # ------------------------------------------------------------ public
    @property
    def source_view(self) -> SourceView:
        return self.query_one(SourceView)

    @property
    def can_run(self) -> bool:
        return not self._blocked()

    def run_blocker(self) -> Optional[str]:
        """Why the program cannot be run (first error with its line), or None."""
        if self.load_error is not None:
            return self.load_error
        errs = self.model.errors
        if not errs:
            return None
        d = errs[0]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return f"cannot run: {d.label(self.path)}{more}"

    def is_stale(self, run_sha256: str) -> bool:
        """Whether a run recorded with `run_sha256` was made from another text than the one shown."""
        return self.model.is_stale(run_sha256)

    def set_model(self, model: ProgramModel) -> None:
        """Show a new model (keeps the cursor's line and column)."""
        self.model = model
        self.load_error = None
        title = self.query_one("#program-title", Static)
        title.update(Text(self._title()))
        title.set_class(self._blocked(), "-errors")
        self.query_one(Outline).set_model(model)
        self.query_one(DiagnosticsList).set_model(model)
        self.source_view.set_model(model)  # announces the cursor: the hover panel follows

    async def reload(self, text: Optional[str] = None) -> ProgramModel:
        """Re-check the file (or `text`) off the UI thread, show it, post `ProgramChanged`."""
        if text is None:
            text = await asyncio.to_thread(read_program, self.path)
        model = await asyncio.to_thread(self.model.with_text, text)
        self.set_model(model)
        self.post_message(self.ProgramChanged(self, model))
        return model

    # ------------------------------------------------------------ wiring
    async def _watch(self) -> None:
        await watch_file(self.path, self.reload, on_ready=self.watch_ready.set,
                         initial_text=None if self.load_error else self.model.text,
                         on_error=lambda msg: self.post_message(self.ReloadFailed(self, msg)))

    def on_program_pane_reload_failed(self, event: "ProgramPane.ReloadFailed") -> None:
        self.notify(event.message, severity="error", timeout=6)

    def on_source_view_cursor_moved(self, event: SourceView.CursorMoved) -> None:
        info = self.model.hover_at(event.offset)
        panel = self.query_one(HoverPanel)
        if info is not None:
            panel.show(info)
            return
        here = [d for d in self.model.diagnostics if d.start <= event.offset <= max(d.end, d.start + 1)]
        if here:
            d = here[0]
            panel.info = None
            panel.update(Text(f"{d.severity}[{d.code}]: {d.message}"))
        else:
            panel.show(None)

    def on_outline_entry_selected(self, event: Outline.EntrySelected) -> None:
        self.source_view.goto_offset(event.entry.offset)
        self.source_view.focus()

    def on_diagnostics_list_diagnostic_selected(self, event: DiagnosticsList.DiagnosticSelected) -> None:
        self.source_view.goto_offset(event.diagnostic.start)
        self.source_view.focus()
