"""The Runs table's folder column keeps what tells runs apart at 80 columns: the time
stamp of ``NAME-YYYYmmdd-HHMMSS`` (cut at the right, same-day runs all read
``transformer_lm-20261124``), and the row fits 80 columns."""
from pathlib import Path

import pytest
from textual.app import App

from qvr_tui.runs_model import RunRow
from qvr_tui.widgets.runs_table import RunsTable, short_folder, short_started


@pytest.mark.parametrize("name, shown", [
    ("transformer_lm-20261124-204145", "transfor…-204145"),
    ("regression_plates-20261124-210329-2", "regres…-210329-2"),
    ("hmm-20261124-204145", "hmm…-204145"),
    ("a_run_named_by_hand_with_a_long_name", "a_run_n…ong_name"),
    ("short", "short"),
])
def test_short_folder(name, shown):
    assert short_folder(name) == shown
    assert len(shown) <= 16


def test_started_without_this_year():
    assert short_started("2026-11-24 20:26:57", year="2026") == "11-24 20:26:57"
    assert short_started("2025-11-24 20:26:57", year="2026") == "2025-11-24 20:26:57"


class TableApp(App):
    def compose(self):
        yield RunsTable()


@pytest.mark.asyncio
async def test_same_day_runs_differ_on_screen_at_80_columns(tmp_path):
    names = ["transformer_lm-20261124-202657", "transformer_lm-20261124-202937"]
    rows = [RunRow(path=tmp_path / n, name=n, status="interrupted", method="nuts",
                   started=f"2026-11-24 20:{n[-4:-2]}:{n[-2:]}", key_label="R-hat",
                   key_value=1.0042, stale=True) for n in names]
    app = TableApp()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(RunsTable)
        table.set_runs(rows)
        await pilot.pause()
        lines = [table.render_line(y).text for y in (1, 2)]
        assert "transfor…-202657" in lines[0] and "transfor…-202937" in lines[1], lines
        assert table.virtual_size.width <= 80  # no column beyond the screen
