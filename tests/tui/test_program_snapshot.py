"""Snapshot of the Program pane on examples/transformer_lm.qvr at 100x30 (pytest-textual-snapshot;
refresh with `--snapshot-update` after a deliberate change and look at the SVG diff)."""
from qvr_tui.screens.program import ProgramPane

from conftest import EXAMPLES, Harness


def test_program_pane_snapshot(snap_compare):
    app = Harness(ProgramPane(EXAMPLES / "transformer_lm.qvr", watch=False))
    # the cursor onto `backbone` (line 22), so the snapshot also shows the hover panel
    assert snap_compare(app, terminal_size=(100, 30), press=["ctrl+end", *["up"] * 9, "home",
                                                               *["right"] * 4])
