"""The dense-metric note on the dashboard's Results: a NUTS record whose stats name a
strongly correlated pair (`qvr.inference.criticism.correlation`) says so below the
header; one without (older records, a dense metric) shows no such line."""
from __future__ import annotations

import json

import pytest
from textual.widgets import Static

from qvr_tui.screens.results import ResultsPane

from conftest import ResultsHarness
from results_fixtures import copy_runs


def _with_pair(folder):
    path = folder / "summary.json"
    summary = json.loads(path.read_text())
    summary["stats"]["correlated"] = ["mu", "z[1]", -0.96]
    path.write_text(json.dumps(summary))


async def _notes(tmp_path, edit=None) -> str:
    runs_dir, program = copy_runs(tmp_path)
    if edit is not None:
        edit(runs_dir / "nuts")
    pane = ResultsPane(runs_dir / "nuts", program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(160, 40)) as pilot:
        await app.loaded.get()
        await pilot.pause()
        notes = pane.query_one("#results-notes", Static)
        return str(notes.render()) if notes.display else ""


@pytest.mark.asyncio
async def test_a_correlated_pair_gets_the_dense_metric_note(tmp_path):
    text = await _notes(tmp_path, _with_pair)
    assert ("ⓘ `mu` and `z[1]` are correlated (-0.96) in the unconstrained draws: a "
            "diagonal metric cannot undo that, --mass-matrix dense would sample this "
            "posterior with fewer leapfrogs") in text


@pytest.mark.asyncio
async def test_a_record_without_the_pair_shows_no_note(tmp_path):
    assert "--mass-matrix dense" not in await _notes(tmp_path)
