"""The Pareto k-hat of an approximation on the dashboard's Results (issue 39): the notes
below the header say its line (any method whose stats hold it) and, above 0.7, the run's
warning with its advice; a record without one (written before k-hat was recorded, or an
MCMC run) shows neither, and loads as before."""
from __future__ import annotations

import asyncio
import json

import pytest
from textual.widgets import Static

from qvr.runs import open_run
from qvr_tui.results_model import load_results
from qvr_tui.screens.results import ResultsPane

from conftest import ResultsHarness
from results_fixtures import copy_runs

WARNING = ("Pareto k-hat 0.98 > 0.7: the mean-field guide is too far from the posterior "
           "for its draws to be trusted; try a richer guide (--guide fullrank, lowrank:K "
           "or flow), Pathfinder (--method pathfinder), or NUTS")


def _with_khat(folder, khat, warning=None):
    """The fixture run `folder` as if its fit had recorded `khat` (and emitted `warning`)."""
    path = folder / "summary.json"
    summary = json.loads(path.read_text())
    summary["stats"].update(khat=khat, khat_draws=1000)
    path.write_text(json.dumps(summary))
    if warning is not None:
        events = folder / "events.jsonl"
        lines = events.read_text().splitlines()
        # before the terminal event, as a fit emits it
        lines.insert(len(lines) - 1, json.dumps({"type": "warning", "message": warning,
                                                 "step": None}))
        events.write_text("\n".join(lines) + "\n")


async def _notes(tmp_path, name: str, edit=None) -> tuple[str, object]:
    runs_dir, program = copy_runs(tmp_path)
    if edit is not None:
        edit(runs_dir / name)
    pane = ResultsPane(runs_dir / name, program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(120, 40)) as pilot:
        res = await app.loaded.get()
        await pilot.pause()
        notes = pane.query_one("#results-notes", Static)
        return (str(notes.render()) if notes.display else ""), res


@pytest.mark.asyncio
async def test_svi_results_show_a_good_khat(tmp_path):
    text, res = await _notes(tmp_path, "svi", lambda f: _with_khat(f, 0.31))
    assert text.splitlines() == ["ⓘ Pareto k-hat 0.31 (1000 draws): good (below 0.5)"]
    assert res.khat_warning == ""


@pytest.mark.asyncio
async def test_svi_results_show_an_unreliable_khat_and_the_runs_warning(tmp_path):
    text, res = await _notes(tmp_path, "svi", lambda f: _with_khat(f, 0.98, WARNING))
    assert text.splitlines()[:1] == ["ⓘ Pareto k-hat 0.98 (1000 draws): unreliable (above 0.7)"]
    # the warning wraps at the pane's width: compare without the line breaks
    assert " ".join(text.splitlines()[1:]) == f"⚠ {WARNING}"
    assert res.khat_warning == WARNING


@pytest.mark.asyncio
async def test_a_record_without_khat_shows_nothing_of_it(tmp_path):
    text, res = await _notes(tmp_path, "svi")
    assert "k-hat" not in text
    assert (res.khat, res.khat_warning) == ("", "")
    assert res.final_loss is not None and res.guide  # the rest loads as before


def test_any_method_whose_stats_hold_it_gets_the_line(tmp_path):
    """Not only SVI: a record of another method with ``khat`` in its stats (Laplace,
    Pathfinder); here the NUTS fixture, edited, with no warning event: made again."""
    runs_dir, _ = copy_runs(tmp_path)
    _with_khat(runs_dir / "nuts", 0.98)
    res = load_results(open_run(runs_dir / "nuts"))
    assert res.khat == "Pareto k-hat 0.98 (1000 draws): unreliable (above 0.7)"
    assert res.khat_warning == (
        "Pareto k-hat 0.98 > 0.7: the approximation is too far from the posterior for its "
        "draws to be trusted; its means and sds are unreliable: try NUTS (--method nuts)")
