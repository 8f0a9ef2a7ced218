"""The predictive checks, PSIS-LOO and run comparison in the dashboard (issue 25), under
Pilot at 80x24 on finished records faked on disk: copies of the recorded NUTS and SVI runs
of tiny.qvr (tests/tui/fixtures/runs) given ``loo.json`` and ``ppc.json`` computed by
`qvr.inference.criticism.checks` from made-up pointwise terms (numpy), and run.json's
``data_sha256`` and ``pointwise`` entries.

Results: ``p`` shows the checks (the statistics' p-values, red where extreme, the groups,
the LOO-PIT verdict, the LOO headline and the high-k rows), ← → the next site, ``p`` again
the method's view; a record without checks says so in one line; the key works from the
app's tab bar.  Runs: ``C`` with two marked runs shows the comparison table and verdict
(computed in a worker); runs on different data get the refusal.  Plus the view models on
odd or partial files, two SVG snapshots, and no torch in the UI process."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from textual.widgets import ContentSwitcher, DataTable

from qvr.runs import open_run
from qvr_tui.predictive_model import (NO_CHECKS, comparison_view, fmt_p, load_predictive,
                                      loo_view, predictive_view)
from qvr_tui.screens.results import ResultsPane
from qvr_tui.screens.runs import RunsPane
from qvr_tui.widgets.compare_table import CompareTable
from qvr_tui.widgets.loo_panel import LooPanel
from qvr_tui.widgets.predictive import PredictiveView
from qvr_tui.widgets.runs_table import RunsTable

from conftest import Harness, ResultsHarness
from results_fixtures import copy_runs

HERE = Path(__file__).resolve().parent
C, S, B = 2, 100, 40  # chains, draws per chain, data rows of the fake records


def fake_checks(run_dir: Path, sha: str = "sha-A", scale: float = 1.0, seed: int = 0):
    """Give the finished record `run_dir` a ``loo.json`` and a ``ppc.json`` (computed by
    `qvr.inference.criticism.checks` from made-up terms) and run.json's ``data_sha256`` and
    ``pointwise``: a continuous site ``y`` far wider than its replicates, with an outlier
    in row 7 whose log-likelihood swings (a high Pareto k), and a count site ``n`` with
    too many zeros; a grouping index ``g`` (4 groups).  Returns (loo, ppc)."""
    from qvr.inference.criticism import checks
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 3, size=B)
    y[7] = 14.0
    n = rng.poisson(3, size=B)
    n[::3] = 0
    g = np.arange(B) % 4
    y_rep = rng.normal(0, 1, size=(C, S, B)).astype(np.float32)
    n_rep = rng.poisson(3, size=(C, S, B)).astype(np.float32)
    mu = rng.normal(0, 0.1 * scale, size=(C, S, 1))
    ll_y = -0.5 * (y - mu) ** 2 - 0.919
    ll_y[:, :, 7] += 8 * rng.standard_normal((C, S))
    ll_n = -3.0 + 0.1 * scale * rng.standard_normal((C, S, B))
    meta = {"kind": "posterior", "chains": C, "draws": S, "log_lik": {"y": [B], "n": [B]},
            "y_rep": {"y": [B], "n": [B]}, "rows": {"y": "local", "n": "local"},
            "importance": False}
    log_lik = {"y": ll_y.astype(np.float32), "n": ll_n.astype(np.float32)}
    loo = checks.loo(log_lik, meta)
    ppc = checks.ppc({"y": y, "n": n, "group.g": g}, {"y": y_rep, "n": n_rep}, log_lik,
                     None, meta)
    meta_path = run_dir / "run.json"
    rj = json.loads(meta_path.read_text())
    rj.update(data_sha256=sha, pointwise=meta, run_id=run_dir.name)
    meta_path.write_text(json.dumps(rj))
    (run_dir / "loo.json").write_text(json.dumps(loo))
    (run_dir / "ppc.json").write_text(json.dumps(ppc))
    return loo, ppc


@pytest.fixture
def records(tmp_path, monkeypatch):
    """(runs_dir, program, loo, ppc): the fixture runs, ``nuts`` with checks; the working
    folder is `tmp_path` (the footer shows ``runs/nuts``: snapshots do not see tmp)."""
    monkeypatch.chdir(tmp_path)
    runs, program = copy_runs(tmp_path)
    loo, ppc = fake_checks(runs / "nuts")
    return runs, program, loo, ppc


class RunsHarness(Harness):
    def __init__(self, *widgets) -> None:
        super().__init__(*widgets)
        self.compared: asyncio.Queue = asyncio.Queue()

    def on_runs_pane_compared(self, event) -> None:
        self.compared.put_nowait(event.comparison)


def text(widget) -> str:
    return str(widget.render())


def cell(table: DataTable, row: str, column: int):
    return table.get_row(row)[column]


def is_red(style) -> bool:
    """The style's foreground is a red (``#d62728``, ``red``, ...)."""
    from rich.style import Style
    colour = Style.parse(str(style)).color
    if colour is None:
        return False
    r, g, b = colour.get_truecolor()
    return r > 150 and g < 100 and b < 100


# ---------------------------------------------------------------- Results: p

@pytest.mark.asyncio
async def test_p_shows_the_checks_and_loo_at_80x24(records):
    runs, program, loo, ppc = records
    pane = ResultsPane(runs / "nuts", program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        res = await app.loaded.get()
        assert res.predictive is not None and res.loo is not None
        assert "p: predictive checks" in text(pane.query_one("#results-footer"))
        pane.query_one("#summary").focus()
        await pilot.press("p")
        await pilot.pause()
        switcher = pane.query_one("#results-switcher", ContentSwitcher)
        assert switcher.current == "predictive" and pane.predictive_on
        view = pane.query_one(PredictiveView)
        assert app.focused is view
        bar = text(view.query_one("#ppc-bar"))
        assert bar.startswith("Posterior predictive checks · 200 draws · site y 1/2")
        # the statistics: observed, the replicates' 90% interval, p; red where extreme
        stats = view.query_one("#ppc-stats", DataTable)
        y = ppc["sites"]["y"]["stats"]
        assert y["sd"]["extreme"] and not y["mean"]["extreme"]
        p_sd, p_mean = cell(stats, "sd", 3), cell(stats, "mean", 3)
        assert str(p_sd) == fmt_p(y["sd"]["p_value"]) == "<0.001"
        assert is_red(p_sd.style) and is_red(cell(stats, "sd", 0).style)
        assert str(p_mean) == fmt_p(y["mean"]["p_value"]) and not is_red(p_mean.style)
        assert str(cell(stats, "max", 1)) == "14"
        # the whole table is on the screen at 80 columns (p included)
        assert stats.region.right <= 80 and stats.region.width >= 30
        # continuous data: step lines of observed and replicated counts over the bins
        kinds = [k for k, _ in view.plotted["hist"]]
        assert set(kinds) == {"observed", "replicated", "q5", "q95"}
        # groups and LOO-PIT
        groups = text(view.query_one("#ppc-groups"))
        g = ppc["sites"]["y"]["groups"]["g"]
        assert f"by g: {g['n_extreme']} of 4 groups extreme" in groups
        pit = view.query_one("#ppc-pit")
        assert ppc["sites"]["y"]["loo_pit"]["outside"]
        assert pit.border_title.startswith("LOO-PIT outside band (p ") and \
            pit.has_class("-outside")
        assert ("ecdf", 39) in view.plotted["pit"] and ("band", 39) in view.plotted["pit"]
        # the LOO panel: headline, warning, the high-k row, the k plot with its threshold
        panel = view.query_one(LooPanel)
        head = text(panel.query_one("#loo-head"))
        assert head.startswith(f"PSIS-LOO elpd_loo {loo['elpd_loo']:.5g} ± {loo['se']:.4g}")
        assert f"p_loo {loo['p_loo']:.3g} · 40 rows × 200 draws · psis" in head
        assert "⚠ 1 row with Pareto k > 0.565" in head
        high = text(panel.query_one("#loo-high"))
        assert loo["high_k"][0]["row"] == 7
        assert loo["high_k"][0]["label"] in high and "row 7" in high
        assert f"k {loo['high_k'][0]['k']:.3g}" in high
        assert dict(panel.plotted) == {"k": 39, "high": 1, "threshold": 2}
        # → : the count site; its zeros statistic is extreme
        await pilot.press("right")
        assert "site n 2/2" in text(view.query_one("#ppc-bar"))
        z = cell(stats, "zeros", 3)
        assert ppc["sites"]["n"]["stats"]["zeros"]["extreme"] and is_red(z.style)
        # p again: back to the MCMC view, the table focused
        await pilot.press("p")
        assert switcher.current == "mcmc" and not pane.predictive_on
        assert app.focused is pane.query_one("#summary")


@pytest.mark.asyncio
async def test_a_run_without_checks_says_so_in_one_line(records):
    runs, program, _, _ = records
    pane = ResultsPane(runs / "svi", program_path=program)
    app = ResultsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        res = await app.loaded.get()
        assert res.predictive is None and res.loo is None
        assert res.predictive_note == NO_CHECKS
        pane.query_one("#guide-table").focus()
        await pilot.press("p")
        await pilot.pause()
        assert pane.query_one("#results-switcher", ContentSwitcher).current == "predictive"
        view = pane.query_one(PredictiveView)
        assert text(view.query_one("#ppc-note")) == (
            "this run has no predictive checks: fitted before qvr recorded them, or a "
            "method that does not record them")
        assert not view.query_one("#ppc-top").display
        assert not view.query_one(LooPanel).display
        # a failed run: no checks either, and the note says why
        pane.show_run(runs / "failed")
        res = await app.loaded.get()
        assert res.predictive_note.startswith("this run has no predictive checks") and \
            "(this one is failed)" in res.predictive_note


@pytest.mark.asyncio
async def test_p_from_the_tab_bar_of_the_app(records):
    from qvr_tui.app import QvrDash
    runs, program, _, _ = records
    app = QvrDash(program=str(program), run=str(runs / "nuts"), runs_dir=runs, watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.press("4")
        await app.workers.wait_for_complete()
        await pilot.pause()
        keys = {b.binding.description for b in app.screen.active_bindings.values()
                if b.binding.show}
        assert "Predictive" in keys
        await pilot.press("p")
        pane = app.query_one(ResultsPane)
        assert pane.predictive_on
        assert pane.query_one("#results-switcher", ContentSwitcher).current == "predictive"
        await pilot.press("right")  # the view took the focus: the next site
        assert "site n 2/2" in text(pane.query_one("#ppc-bar"))


# ---------------------------------------------------------------- Runs: C

async def _mark_and_compare(pilot, pane, names):
    table = pane.query_one(RunsTable)
    table.focus()
    for name in names:
        table.move_cursor(row=[r.name for r in table.runs].index(name))
        await pilot.press("space")
    await pilot.press("C")


@pytest.mark.asyncio
async def test_compare_two_marked_runs(records):
    from qvr.inference.criticism import checks
    runs, program, _, _ = records
    fake_checks(runs / "svi", sha="sha-A", scale=3.0, seed=1)
    expected = checks.compare([open_run(runs / "nuts"), open_run(runs / "svi")])
    pane = RunsPane(program, runs)
    app = RunsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await _mark_and_compare(pilot, pane, ["nuts", "svi"])
        result = await app.compared.get()  # from the worker thread
        await pilot.pause()
        assert not result.error and [r.name for r in result.rows] == ["nuts", "svi"]
        box = pane.query_one("#runs-compare")
        assert box.has_class("-shown") and box.region.height > 0
        table = pane.query_one("#compare-table", CompareTable)
        assert table.row_count == 2
        for row in expected["runs"]:
            cells = [str(c) for c in table.get_row(row["path"])]
            assert cells[:4] == [str(row["rank"]), row["name"], f"{row['elpd_loo']:.1f}",
                                 f"{row['se']:.1f}"]
            assert cells[4:8] == [f"{row['elpd_diff']:.1f}", f"{row['dse']:.1f}",
                                  f"{row['p_loo']:.1f}", f"{row['weight']:.2f}"]
            assert cells[8].startswith("⚠ k") == row["warning"]
        assert text(pane.query_one("#compare-verdict")) == expected["verdict"]
        assert text(pane.query_one("#runs-message")) == \
            "high Pareto k in nuts, svi: their LOO is unreliable"
        assert expected["verdict"].startswith("no clear difference between nuts and svi")
        # the table fits 80 columns
        assert table.virtual_size.width <= 80


@pytest.mark.asyncio
async def test_compare_refuses_runs_on_different_data(records):
    runs, program, _, _ = records
    fake_checks(runs / "svi", sha="sha-B", seed=1)
    pane = RunsPane(program, runs)
    app = RunsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await _mark_and_compare(pilot, pane, ["nuts", "svi"])
        result = await app.compared.get()
        await pilot.pause()
        assert result.rows == ()
        msg = text(pane.query_one("#runs-message"))
        assert msg == result.error
        assert msg.startswith("runs nuts and svi were fitted to different data "
                              "(data_sha256 sha-A vs sha-B)")
        assert not pane.query_one("#runs-compare").has_class("-shown")


@pytest.mark.asyncio
async def test_compare_needs_two_marked_runs_and_records_with_terms(records):
    runs, program, _, _ = records
    pane = RunsPane(program, runs)
    app = RunsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await _mark_and_compare(pilot, pane, ["nuts"])
        assert text(pane.query_one("#runs-message")) == \
            "Mark two or more runs with space, then press C to compare them."
        assert app.compared.empty()
        # a second run recorded before the checks: refused, with the reason
        await _mark_and_compare(pilot, pane, ["interrupted"])
        result = await app.compared.get()
        assert "has no pointwise log-likelihood terms" in result.error


# ---------------------------------------------------------------- the view models

def test_models_take_partial_and_odd_files():
    p = predictive_view({"kind": "guide", "sites": {"y": {
        "stats": {"mean": {"observed": 1.0, "replicated": {"q5": 0.0, "q95": 2.0},
                           "p_value": 0.01}},
        "groups": {"g": {"groups": [{"group": 1, "p_value": 0.5},
                                    {"group": 2, "p_value": 0.999}]}},
        "loo_pit": {"ecdf": [[0.25, 0.5], [0.5, 0.5], [0.75, 1.0]]}},
        "z": {"error": "no observed value"}}})
    assert p.title == "Posterior (guide) predictive checks" and p.draws is None
    y, z = p.sites
    assert y.stats[0].extreme and y.stats[0].sd is None  # no flag: from the p-value
    g = y.groups[0]
    assert g.n_groups == 2 and g.extreme == 1 and g.worst[0].group == "2"
    assert y.hist is None and y.pit.outside is None
    np.testing.assert_allclose(y.pit.diff, [0.25, 0.0, 0.25])  # the ECDF minus x
    assert z.error == "no observed value" and z.stats == ()
    assert predictive_view(None) is None
    assert predictive_view({"error": "boom"}).error == "boom"
    lv = loo_view({"elpd_loo": -10.0, "pareto_k": [0.1, 0.9, 0.8], "good_k": 0.7})
    assert [(h.row, h.k) for h in lv.high_k] == [(1, 0.9), (2, 0.8)] and lv.n_high == 2
    assert lv.headline == "elpd_loo -10"
    assert loo_view({"error": "PSIS failed"}).headline == "PSIS-LOO: PSIS failed"
    cmp = comparison_view({"rows": [{"run_id": "b", "rank": 2}, {"run_id": "a", "rank": 1}],
                           "verdict": "v"})
    assert [r.name for r in cmp.rows] == ["a", "b"] and cmp.verdict == "v"


def test_load_predictive_of_records(records):
    runs, _, loo, _ = records
    ppc, lv, note = load_predictive(open_run(runs / "nuts"))
    assert note == "" and lv.elpd_loo == loo["elpd_loo"] and len(ppc.sites) == 2
    assert load_predictive(open_run(runs / "svi")) == (None, None, NO_CHECKS)
    (runs / "nuts" / "ppc.json").write_text("{not json")
    ppc, lv, note = load_predictive(open_run(runs / "nuts"))
    assert ppc is None and lv is not None and note.startswith("predictive checks unreadable")


# ---------------------------------------------------------------- snapshots, torch

def test_predictive_view_snapshot(snap_compare, records):
    runs, program, _, _ = records
    app = ResultsHarness(ResultsPane(runs / "nuts", program_path=program))

    async def show(pilot):
        await pilot.app.loaded.get()
        await pilot.pause()
        pilot.app.query_one(ResultsPane).action_toggle_predictive()
        await pilot.pause()
        await pilot.press("right")  # the count site
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=show)


def test_compare_table_snapshot(snap_compare, records, monkeypatch):
    from qvr_tui.widgets import runs_table
    # the start times without their year whatever the year is now
    monkeypatch.setattr(runs_table, "short_started", lambda started, year=None: started[5:])
    runs, program, _, _ = records
    fake_checks(runs / "svi", sha="sha-A", scale=3.0, seed=1)
    app = RunsHarness(RunsPane(program, runs))

    async def compare(pilot):
        await pilot.pause()
        await _mark_and_compare(pilot, pilot.app.query_one(RunsPane), ["nuts", "svi"])
        await pilot.app.compared.get()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=compare)


SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from conftest import Harness
    from qvr_tui.screens.results import ResultsPane
    from qvr_tui.screens.runs import RunsPane

    async def main():
        runs = Path({runs!r})
        res, lst = ResultsPane(runs / "nuts"), RunsPane(Path({program!r}), runs)
        app = Harness(res, lst)
        async with app.run_test(size=(100, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            res.action_toggle_predictive()
            await pilot.pause()
            assert res.results.predictive is not None
            lst.compare([runs / "nuts", runs / "svi"])
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert lst.comparison is not None and lst.comparison.rows, lst.comparison
        bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        print("TORCH" if bad else "CLEAN", bad[:5])

    asyncio.run(main())
""")


def test_checks_and_comparison_never_import_torch(records):
    """Reading the checks, drawing them and comparing runs (arviz-stats) stay torch-free."""
    runs, program, _, _ = records
    fake_checks(runs / "svi", sha="sha-A", scale=3.0, seed=1)
    code = SCRIPT.format(here=str(HERE), runs=str(runs), program=str(program))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "CLEAN []"
