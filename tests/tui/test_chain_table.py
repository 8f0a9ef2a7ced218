"""The chain table keeps every cell readable as the values grow: a column widens when a
later update is longer than anything shown before (a chain moving from `warmup` to
`sampling`, draws/s passing 100).  Regression: updates in place kept the first width, so
at 80 columns the table showed `sampli` and `550.`."""
import math

import pytest
from textual.app import App, ComposeResult

from qvr_tui.live_rows import ChainRow
from qvr_tui.state import RunState
from qvr_tui.widgets.chain_table import COLUMNS, ChainTable


class TableApp(App):
    def compose(self) -> ComposeResult:
        yield ChainTable()


def state_with(rows, method="nuts") -> RunState:
    state = RunState()
    state.method = method
    state.chains = {r.chain: r for r in rows}
    return state


@pytest.mark.asyncio
async def test_columns_widen_when_an_updated_cell_is_longer():
    app = TableApp()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ChainTable)
        first = [ChainRow(chain=c, phase="warmup", step=5, total=500, draws_per_s=9.5,
                          accept=0.8, step_size=0.1, tree_depth=3) for c in range(2)]
        table.show(state_with(first))
        await pilot.pause()
        later = [ChainRow(chain=c, phase="sampling", step=120, total=500,
                          draws_per_s=550.25, accept=0.912, step_size=0.0123, tree_depth=4,
                          divergences=3, first_divergence=17, eta=12.0) for c in range(2)]
        table.show(state_with(later))
        await pilot.pause()
        widths = {str(k.value): col.content_width for k, col in table.columns.items()}
        cells = dict(zip(COLUMNS, table.cells(later[0], state_with(later))))
        for name in ("phase", "progress", "it/s", "diverg."):
            assert widths[name] >= len(cells[name]), (name, widths[name], cells[name])
        assert cells["phase"] == "sampling" and cells["it/s"] == "550.2"
        row = [str(v) for v in table.get_row("0")]
        assert row[1] == "sampling" and row[3] == "550.2" and row[8] == "3 @17"
        assert not math.isnan(later[0].accept)


def drawn_colours(table, y) -> set:
    """The foreground colour names of the text drawn on line `y` of the table."""
    return {seg.style.color.name for seg in table.render_line(y)
            if seg.text.strip() and seg.style and seg.style.color}


@pytest.mark.asyncio
async def test_a_divergent_chain_on_the_first_row_is_drawn_red():
    """Regression: the row cursor (row 0) painted its highlight over the red."""
    app = TableApp()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ChainTable)
        rows = [ChainRow(chain=c, phase="sampling", step=10, total=30,
                         divergences=1 if c == 0 else 0,
                         first_divergence=3 if c == 0 else None) for c in range(2)]
        table.show(state_with(rows))
        await pilot.pause()
        assert table.red_rows() == [0]
        assert drawn_colours(table, 1) == {"red"}  # line 0 is the header
        assert "red" not in drawn_colours(table, 2)
