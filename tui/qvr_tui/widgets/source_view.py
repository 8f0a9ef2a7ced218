"""A read-only, scrollable QVR source view with a cursor (Textual Line API).

`SourceView` draws a `ProgramModel`: line numbers, a gutter mark on lines with
diagnostics (`●` error, `▲` warning), the semantic highlighting of `qvr.ide` and the
diagnostic ranges underlined.  The cursor moves with the arrows, PgUp/PgDn, Home/End,
Ctrl+Home/Ctrl+End and a mouse click; every move posts `SourceView.CursorMoved` with the
document offset.  All colours are component classes over the theme's variables, so the
view follows light and dark themes.  It does not edit text and knows nothing of hover or
outlines (the pane wires those); tabs and control characters show as one blank cell, and
double-width characters are not measured (QVR sources are ASCII in practice).
"""
from __future__ import annotations

from typing import Optional

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from qvr_tui.program_model import ProgramModel

__all__ = ["SourceView"]

_TOKEN_STYLES = ("keyword", "type", "family", "function", "builtin", "constant", "variable", "property",
                 "comment", "doc-comment", "string", "number", "operator")


class SourceView(ScrollView, can_focus=True):
    """Read-only code view of a `ProgramModel` with a cursor."""

    COMPONENT_CLASSES = {f"source-view--{n}" for n in _TOKEN_STYLES} | {
        "source-view--gutter", "source-view--gutter-cursor", "source-view--mark-error",
        "source-view--mark-warning", "source-view--error", "source-view--warning",
        "source-view--cursor", "source-view--cursor-line"}

    DEFAULT_CSS = """
    SourceView {
        background: $surface;
        color: $foreground;
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 1;
    }
    SourceView > .source-view--keyword { color: $text-primary; text-style: bold; }
    SourceView > .source-view--type { color: $text-accent; }
    SourceView > .source-view--family { color: $text-secondary; text-style: italic; }
    SourceView > .source-view--function { color: $text-secondary; }
    SourceView > .source-view--builtin { color: $text-secondary; text-style: italic; }
    SourceView > .source-view--constant { color: $text-warning; }
    SourceView > .source-view--variable { color: $foreground; }
    SourceView > .source-view--property { color: $text-accent; text-style: italic; }
    SourceView > .source-view--comment { color: $text-muted; text-style: italic; }
    SourceView > .source-view--doc-comment { color: $text-success; text-style: italic; }
    SourceView > .source-view--string { color: $text-success; }
    SourceView > .source-view--number { color: $text-warning; }
    SourceView > .source-view--operator { color: $text-muted; }
    SourceView > .source-view--gutter { color: $text-muted; background: $surface-darken-1; }
    SourceView > .source-view--gutter-cursor { color: $foreground; background: $surface-darken-1; }
    SourceView > .source-view--mark-error { color: $text-error; background: $surface-darken-1; }
    SourceView > .source-view--mark-warning { color: $text-warning; background: $surface-darken-1; }
    SourceView > .source-view--error { background: $error-muted; text-style: underline; }
    SourceView > .source-view--warning { background: $warning-muted; text-style: underline; }
    SourceView > .source-view--cursor-line { background: $boost; }
    SourceView > .source-view--cursor { background: $block-cursor-blurred-background;
                                        color: $block-cursor-blurred-foreground; }
    SourceView:focus > .source-view--cursor { background: $block-cursor-background;
                                              color: $block-cursor-foreground; text-style: bold; }
    """

    BINDINGS = [
        Binding("up", "cursor(-1, 0)", "Up", show=False),
        Binding("down", "cursor(1, 0)", "Down", show=False),
        Binding("left", "cursor(0, -1)", "Left", show=False),
        Binding("right", "cursor(0, 1)", "Right", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "line_edge(0)", "Line start", show=False),
        Binding("end", "line_edge(1)", "Line end", show=False),
        Binding("ctrl+home", "goto_offset(0)", "Top", show=False),
        Binding("ctrl+end", "document_end", "Bottom", show=False),
    ]

    class CursorMoved(Message):
        """The cursor moved (also sent when a new model keeps it in place)."""

        def __init__(self, view: "SourceView", offset: int, line: int, col: int) -> None:
            super().__init__()
            self.view = view
            self.offset = offset  # document offset
            self.line = line  # 0-based
            self.col = col  # 0-based

        @property
        def control(self) -> "SourceView":
            return self.view

    def __init__(self, model: Optional[ProgramModel] = None, *, name=None, id=None, classes=None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.model: Optional[ProgramModel] = None
        self.cursor_line = 0
        self.cursor_col = 0
        self._marks: dict[int, list] = {}  # 0-based line -> [(col0, col1, severity)]
        self._gutter_marks: dict[int, str] = {}
        if model is not None:
            self.set_model(model, announce=False)

    # ------------------------------------------------------------ data
    def set_model(self, model: ProgramModel, announce: bool = True) -> None:
        """Show `model`; the cursor keeps its line and column where they still exist."""
        self.model = model
        marks: dict[int, list] = {}
        gutter: dict[int, str] = {}
        for d in model.diagnostics:
            for ln in range(d.line - 1, d.end_line):
                if ln >= len(model.lines):
                    break
                a = d.col - 1 if ln == d.line - 1 else 0
                b = d.end_col - 1 if ln == d.end_line - 1 else len(model.lines[ln])
                if b <= a:  # an empty range: mark one cell
                    b = a + 1
                marks.setdefault(ln, []).append((a, b, d.severity))
            ln = d.line - 1
            if gutter.get(ln) != "error":
                gutter[ln] = d.severity
        self._marks, self._gutter_marks = marks, gutter
        width = max((len(s) for s in model.lines), default=0)
        self.virtual_size = Size(self.gutter_width + width + 1, len(model.lines))
        self.cursor_line = min(self.cursor_line, len(model.lines) - 1)
        self.cursor_col = min(self.cursor_col, len(model.lines[self.cursor_line]))
        self.refresh()
        if announce:
            self._announce()

    @property
    def gutter_width(self) -> int:
        n = len(self.model.lines) if self.model else 1
        return len(str(n)) + 3  # digits, space, mark, space

    @property
    def cursor_offset(self) -> int:
        return self.model.offset(self.cursor_line, self.cursor_col) if self.model else 0

    # ------------------------------------------------------------ cursor
    def move_cursor(self, line: int, col: int) -> None:
        """Put the cursor at 0-based (line, col) (clamped), scroll it into view, announce it."""
        if self.model is None:
            return
        line = max(0, min(line, len(self.model.lines) - 1))
        col = max(0, min(col, len(self.model.lines[line])))
        self.cursor_line, self.cursor_col = line, col
        self._scroll_to_cursor()
        self.refresh()
        self._announce()

    def goto_offset(self, offset: int) -> None:
        if self.model is not None:
            self.move_cursor(*self.model.position(offset))

    def _announce(self) -> None:
        self.post_message(self.CursorMoved(self, self.cursor_offset, self.cursor_line, self.cursor_col))

    def _scroll_to_cursor(self) -> None:
        region = self.scrollable_content_region
        h, w = max(region.height, 1), max(region.width - self.gutter_width, 1)
        x, y = self.scroll_offset
        if self.cursor_line < y:
            y = self.cursor_line
        elif self.cursor_line >= y + h:
            y = self.cursor_line - h + 1
        if self.cursor_col < x:
            x = self.cursor_col
        elif self.cursor_col >= x + w:
            x = self.cursor_col - w + 1
        self.scroll_to(x, y, animate=False, immediate=True)

    def action_cursor(self, dy: int, dx: int) -> None:
        if self.model is None:
            return
        line, col = self.cursor_line + dy, self.cursor_col + dx
        if dx < 0 and col < 0 and line > 0:
            line, col = line - 1, len(self.model.lines[line - 1])
        elif dx > 0 and col > len(self.model.lines[line]) and line + 1 < len(self.model.lines):
            line, col = line + 1, 0
        self.move_cursor(line, col)

    def action_page(self, direction: int) -> None:
        h = max(self.scrollable_content_region.height, 1)
        self.move_cursor(self.cursor_line + direction * h, self.cursor_col)

    def action_line_edge(self, end: int) -> None:
        if self.model is not None:
            self.move_cursor(self.cursor_line, len(self.model.lines[self.cursor_line]) if end else 0)

    def action_goto_offset(self, offset: int) -> None:
        self.goto_offset(offset)

    def action_document_end(self) -> None:
        if self.model is not None:
            self.move_cursor(len(self.model.lines) - 1, len(self.model.lines[-1]))

    def on_click(self, event: events.Click) -> None:
        if self.model is None:
            return
        at = event.get_content_offset(self)
        if at is None:
            return
        self.focus()
        x, y = self.scroll_offset
        self.move_cursor(y + at.y, max(x + at.x - self.gutter_width, 0))

    # ------------------------------------------------------------ drawing
    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"source-view--{name}", partial=True)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        line_no = scroll_y + y
        if self.model is None or line_no >= len(self.model.lines):
            return Strip.blank(width, base)
        gw = self.gutter_width
        is_cursor_line = line_no == self.cursor_line
        gstyle = base + self._style("gutter-cursor" if is_cursor_line else "gutter")
        mark = self._gutter_marks.get(line_no)
        segments = [Segment(f"{line_no + 1:>{gw - 3}} ", gstyle)]
        if mark is not None:
            segments.append(Segment("●" if mark == "error" else "▲", base + self._style(f"mark-{mark}")))
        else:
            segments.append(Segment(" ", gstyle))
        segments.append(Segment(" ", gstyle))
        code = self._code_segments(line_no, base, is_cursor_line)
        code_w = max(width - gw, 0)
        row_style = base + self._style("cursor-line") if is_cursor_line else base
        strip = Strip(code).crop_extend(scroll_x, scroll_x + code_w, row_style)
        return Strip.join([Strip(segments, gw), strip]).simplify()

    def _code_segments(self, line_no: int, base: Style, is_cursor_line: bool) -> list[Segment]:
        text = self.model.lines[line_no].replace("\t", " ").replace("\r", " ")
        n = len(text)
        row = base + self._style("cursor-line") if is_cursor_line else base
        styles: list[Style] = [row] * (n + 1)  # one cell past the end holds an end-of-line cursor
        for s in self.model.spans[line_no]:
            st = row + self._style(s.style)
            for i in range(s.start, min(s.end, n)):
                styles[i] = st
        for a, b, sev in self._marks.get(line_no, ()):
            st = self._style(sev)
            for i in range(a, min(b, n + 1)):
                styles[i] = styles[i] + st
        if is_cursor_line:
            c = min(self.cursor_col, n)
            styles[c] = styles[c] + self._style("cursor")
        text += " "
        out: list[Segment] = []
        start = 0
        for i in range(1, n + 2):
            if i == n + 1 or styles[i] != styles[start]:
                out.append(Segment(text[start:i], styles[start]))
                start = i
        return out
