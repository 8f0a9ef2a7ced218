"""The Program pane under Pilot: highlighting drawn, diagnostics listed and jumped to, hover
after moving the cursor, outline selection, mouse clicks and reload on save (waiting on
the ProgramChanged message, never on a sleep)."""
import asyncio
import os

import pytest

from qvr_tui.screens.program import ProgramPane
from qvr_tui.widgets.diagnostics_list import DiagnosticsList
from qvr_tui.widgets.hover_panel import HoverPanel
from qvr_tui.widgets.outline import Outline
from qvr_tui.widgets.source_view import SourceView

from conftest import Harness
from test_program_model import BROKEN, SNIPPET

pytestmark = pytest.mark.asyncio

WAIT = 120  # seconds: a safety limit on waiting for a message, not a timing assertion


def write(path, text):
    path.write_text(text, encoding="utf-8", newline="")


async def test_source_view_draws_highlighting_and_gutter(transformer_path):
    app = Harness(ProgramPane(transformer_path, watch=False))
    async with app.run_test(size=(100, 30)) as pilot:
        view = app.query_one(SourceView)
        strip = view.render_line(6)  # "object Token : FinSet 32"
        text = "".join(s.text for s in strip)
        assert text.startswith(" 7   object Token : FinSet 32")
        by_text = {s.text: s.style for s in strip}
        keyword = view.get_component_rich_style("source-view--keyword", partial=True)
        assert by_text["object"].color == keyword.color and by_text["object"].bold
        number = view.get_component_rich_style("source-view--number", partial=True)
        assert by_text["32"].color == number.color
        assert keyword.color != number.color


async def test_errors_listed_with_lines_and_the_run_blocked(tmp_path):
    f = tmp_path / "toy.qvr"
    write(f, BROKEN)
    app = Harness(ProgramPane(f, watch=False))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ProgramPane)
        listed = app.query_one(DiagnosticsList)
        assert listed.lines() == [
            "toy.qvr:3:10: warning[QVR714]: `emit` is never used, but `emitt` is referenced and undefined; "
            "is one of them misspelled?",
            "toy.qvr:5:17: error[QVR108]: unknown morphism or distribution family `emitt`; did you mean `emit`?"]
        assert listed.option_count == 2
        assert not pane.can_run
        assert pane.run_blocker() == (f"cannot run: {f}:5:17: error[QVR108]: unknown morphism or distribution "
                                      "family `emitt`; did you mean `emit`?")
        view = app.query_one(SourceView)
        assert "".join(s.text for s in view.render_line(4))[:4] == "5 ● "  # the gutter mark
        assert "".join(s.text for s in view.render_line(2))[:4] == "3 ▲ "
        listed.focus()
        listed.highlighted = 1
        await pilot.press("enter")
        await pilot.pause()
        assert (view.cursor_line, view.cursor_col) == (4, 16)
        assert app.focused is view
        assert str(app.query_one(HoverPanel).render()).startswith("error[QVR108]: unknown morphism")


async def test_hover_follows_the_cursor_keys_and_mouse(tmp_path):
    f = tmp_path / "toy.qvr"
    write(f, SNIPPET)
    app = Harness(ProgramPane(f, watch=False))
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(SourceView)
        panel = app.query_one(HoverPanel)
        view.focus()
        await pilot.press("down", *["right"] * 8)  # line 2, column 8: `Sym` of `object Sym`
        await pilot.pause()
        assert (view.cursor_line, view.cursor_col) == (1, 8)
        assert (panel.info.signature, panel.info.doc) == ("Sym : FinSet 4", "Symbols of the toy language.")
        await pilot.press("down", "end", "pagedown", "home")
        assert (view.cursor_line, view.cursor_col) == (len(view.model.lines) - 1, 0)
        # a click on `emit` in line 3 ("morphism emit ..."): the gutter is 4 cells wide here
        assert await pilot.click(SourceView, offset=(view.gutter_width + 10, 2))
        await pilot.pause()
        assert (view.cursor_line, view.cursor_col) == (2, 10)
        assert panel.info.signature == "emit : Sym -> Sym"


async def test_outline_selection_moves_the_cursor(transformer_path):
    app = Harness(ProgramPane(transformer_path, watch=False))
    async with app.run_test(size=(80, 24)) as pilot:
        outline = app.query_one(Outline)
        names = [e.name for e in outline.entries]
        outline.focus()
        outline.highlighted = names.index("backbone")
        await pilot.press("enter")
        await pilot.pause()
        view = app.query_one(SourceView)
        assert (view.cursor_line, view.cursor_col) == (21, 4)
        assert app.query_one(HoverPanel).info.signature == "backbone : Token -> Latent"
        assert view.scroll_offset.y <= 21 < view.scroll_offset.y + view.scrollable_content_region.height


@pytest.mark.parametrize("by_rename", [False, True], ids=["in-place", "rename"])
async def test_reload_on_save(tmp_path, by_rename):
    f = tmp_path / "toy.qvr"
    write(f, SNIPPET)
    app = Harness(ProgramPane(f))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ProgramPane)
        old = pane.model.sha256
        await asyncio.wait_for(pane.watch_ready.wait(), WAIT)
        if by_rename:  # as vim and many IDEs save: a new file renamed over the old one
            tmp = tmp_path / ".toy.qvr.swp"
            write(tmp, BROKEN)
            os.replace(tmp, f)
        else:
            write(f, BROKEN)
        model = await asyncio.wait_for(app.changes.get(), WAIT)
        await pilot.pause()
        assert model is pane.model and model.has_errors
        assert pane.is_stale(old) and not pane.is_stale(model.sha256)
        assert app.query_one(DiagnosticsList).option_count == 2
        assert not pane.can_run
        write(f, SNIPPET)
        model = await asyncio.wait_for(app.changes.get(), WAIT)
        assert model.sha256 == old and pane.can_run
