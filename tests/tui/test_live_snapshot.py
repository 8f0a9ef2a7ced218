"""Snapshots of the Live pane at 80x24 from recorded runs (pytest-textual-snapshot; refresh
with `--snapshot-update` after a deliberate change and look at the SVG diff)."""
from pathlib import Path

import pytest

from qvr_tui.app import QvrDash

from conftest import EXAMPLES, ROOT

RECORDED = Path(__file__).parent / "recorded"


async def ready(pilot):
    await pilot.app.ready.wait()  # every tab mounted and the run opened
    await pilot.pause()


@pytest.mark.parametrize("name,program", [("nuts_regression", "regression_plates"),
                                          ("svi_regression", "regression_plates"),
                                          ("smc_recurrent", "recurrent_lm")])
def test_live_snapshot(snap_compare, monkeypatch, name, program):
    monkeypatch.chdir(ROOT)  # the record's path is shown relative to the working folder
    app = QvrDash(program=str(EXAMPLES / f"{program}.qvr"),
                  run=str(Path("tests/tui/recorded") / name), watch=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)
