"""The Circuits view of the Results pane under Pilot, on the recorded SVI fit of
fixtures/attention_lm.qvr (tests/tui/recorded/svi_attention, made by make_recorded.py):
``c`` shows it, ←/→ change the head (the heatmaps then hold exactly the recorded QK/OV
circuits of that head), ,/. the sequence (the pattern is the recorded one, its rows
labelled with the vocabulary's words); the same key from the tab bar of the whole app;
a run without circuits says so; and an SVG snapshot at 80x24.  No torch."""
from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from textual.widgets import ContentSwitcher, DataTable, Static

from qvr.runs import open_run
from qvr_tui.app import QvrDash
from qvr_tui.circuits_model import load_circuits, token_labels
from qvr_tui.screens.results import ResultsPane
from qvr_tui.widgets.circuits import CircuitsView
from qvr_tui.widgets.heatmap import Heatmap
from qvr_tui.widgets.pattern import PatternMap

from conftest import ResultsHarness, ROOT

RECORDED = Path(__file__).parent / "recorded"
VOCAB = json.loads((ROOT / "tests/tui/fixtures/data/attention_lm.vocab.json").read_text())


@pytest.fixture
def attention_run(tmp_path, monkeypatch):
    """A copy of the recorded run; the working folder is the repository root, where the
    record's relative program path (and so the vocabulary beside it) resolves."""
    monkeypatch.chdir(ROOT)
    dst = tmp_path / "svi_attention"
    shutil.copytree(RECORDED / "svi_attention", dst)
    return dst


def bar(view: CircuitsView) -> str:
    return str(view.query_one("#circuits-bar", Static).render())


@pytest.mark.asyncio
async def test_heads_and_sequences_show_the_recorded_arrays(attention_run):
    circ, pats = open_run(attention_run).circuits(), open_run(attention_run).patterns()
    qk, ov, pattern = circ["qk/attn"], circ["ov/attn"], pats["pattern/attn"]
    assert qk.shape == (2, 8, 8) and ov.shape == (2, 8, 8) and pattern.shape == (8, 2, 12, 12)
    pane = ResultsPane(attention_run)
    app = ResultsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        res = await app.loaded.get()
        assert res.circuits is not None and [l.name for l in res.circuits.layers] == ["attn"]
        assert "c: circuits" in str(pane.query_one("#results-footer", Static).render())
        pane.query_one("#guide-table", DataTable).focus()
        await pilot.press("c")
        switcher = pane.query_one("#results-switcher", ContentSwitcher)
        assert switcher.current == "circuits"
        view = pane.query_one(CircuitsView)
        assert app.focused is view
        q, o = view.query_one("#qk-heatmap", Heatmap), view.query_one("#ov-heatmap", Heatmap)
        pm = view.query_one("#pattern-map", PatternMap)
        assert bar(view).startswith("layer attn 1/1 · head 0 of 2 · seq 1/8")
        np.testing.assert_array_equal(q.matrix, qk[0])
        np.testing.assert_array_equal(o.matrix, ov[0])
        assert q.diverging and o.diverging  # the legend is centred at 0
        np.testing.assert_array_equal(pm.matrix, pattern[0, 0])
        words = [VOCAB[t] for t in pats["inputs"][0]]
        assert pm.labels == tuple(words)
        assert pm.row_label(3) == f"3 {words[3]}"
        # → : the next head; the heatmaps hold that head's circuits
        await pilot.press("right")
        assert bar(view).startswith("layer attn 1/1 · head 1 of 2 · seq 1/8")
        np.testing.assert_array_equal(q.matrix, qk[1])
        np.testing.assert_array_equal(o.matrix, ov[1])
        np.testing.assert_array_equal(pm.matrix, pattern[0, 1])
        assert not np.array_equal(qk[0], qk[1])
        # . : the next sequence (the head is kept); its tokens label the axes
        await pilot.press("full_stop")
        assert bar(view).startswith("layer attn 1/1 · head 1 of 2 · seq 2/8")
        np.testing.assert_array_equal(pm.matrix, pattern[1, 1])
        assert pm.labels == tuple(VOCAB[t] for t in pats["inputs"][1])
        assert pm.labels != tuple(words)
        # , twice wraps to the last sequence; → wraps to head 0; ↓ stays on the one layer
        await pilot.press("comma", "comma", "right", "down")
        assert bar(view).startswith("layer attn 1/1 · head 0 of 2 · seq 8/8")
        np.testing.assert_array_equal(pm.matrix, pattern[7, 0])
        np.testing.assert_array_equal(q.matrix, qk[0])
        # the pattern is drawn with one line per query at this size, darker = more weight
        assert not pm.half and pm.grid.shape == (12, 12) and pm.factors == (1, 1)
        i, j = np.unravel_index(np.argmax(pattern[7, 0]), (12, 12))
        assert pm.cell_colour(i, j) == (8, 48, 107)  # the largest weight: the dark end
        assert pm.cell_colour(0, 11) == (239, 243, 255)  # masked (causal): weight 0
        # c again: back to the SVI view
        await pilot.press("c")
        assert switcher.current == "svi" and not pane.circuits_on


@pytest.mark.asyncio
async def test_c_from_the_tab_bar_of_the_app_at_120x40(attention_run):
    app = QvrDash(run=str(attention_run), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.ready.wait()
        await pilot.press("4")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("c")
        pane = app.query_one(ResultsPane)
        assert pane.circuits_on
        assert pane.query_one("#results-switcher", ContentSwitcher).current == "circuits"
        await pilot.press("right")
        qk = open_run(attention_run).circuits()["qk/attn"][1]
        hm = pane.query_one("#qk-heatmap", Heatmap)
        np.testing.assert_array_equal(hm.matrix, qk)
        # room to spare at 120x40: every entry drawn as 2x2 pixels (one line, two cells)
        hm._layout()
        assert hm.zoom == 2 and hm.factors == (1, 1)
        np.testing.assert_array_equal(hm.grid, np.repeat(np.repeat(qk, 2, 0), 2, 1))


@pytest.mark.asyncio
async def test_run_without_circuits(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    dst = tmp_path / "svi_regression"
    shutil.copytree(RECORDED / "svi_regression", dst)
    pane = ResultsPane(dst)
    app = ResultsHarness(pane)
    async with app.run_test(size=(80, 24)) as pilot:
        res = await app.loaded.get()
        assert res.circuits is None
        assert "c: circuits" not in str(pane.query_one("#results-footer", Static).render())
        pane.query_one("#guide-table", DataTable).focus()
        await pilot.press("c")
        assert pane.query_one("#results-switcher", ContentSwitcher).current == "svi"
        assert not pane.circuits_on


def test_model_labels_real_inputs_by_position_and_reads_the_note(tmp_path):
    """A record of real-valued inputs labels positions by number; a record whose patterns
    were left out keeps its circuits and the reason."""
    import numpy as np
    from qvr.runs import RunWriter
    w = RunWriter(tmp_path / "r", {"program": {"path": None}, "method": "svi"})
    w.save_arrays("circuits.npz", {"qk/a#0": np.ones((1, 3, 3)), "ov/a#0": np.ones((1, 2, 3)),
                                   "qk/a#1": np.zeros((1, 3, 3)), "ov/a#1": np.zeros((1, 2, 3))})
    w.save_arrays("patterns.npz", {"inputs": np.zeros((2, 4, 3)), "draws": np.array(8),
                                   "tokens": np.array(0),
                                   "pattern/a#0": np.full((2, 1, 4, 4), 0.25),
                                   "pattern/a#1": np.full((2, 1, 5, 5), 0.2)})  # wrong T
    w.close()
    c = load_circuits(open_run(tmp_path / "r"))
    assert [l.name for l in c.layers] == ["a#0", "a#1"]
    assert c.layers[0].pattern.shape == (2, 1, 4, 4) and c.layers[1].pattern is None
    assert not c.tokens and c.labels == (("0", "1", "2", "3"),) * 2 and c.draws == 8
    assert token_labels([0, 9], ["x", "a b"]) == ("x", "#9")
    assert token_labels([1], ["x", "a b"]) == ("a·b",)
    (tmp_path / "r" / "patterns.npz").unlink()
    w2 = np.load(tmp_path / "r" / "circuits.npz")
    arrays = {k: w2[k] for k in w2.files}
    arrays["note"] = np.array("no attention patterns: the forward run failed: X")
    np.savez(tmp_path / "r" / "circuits.npz", **arrays)
    c = load_circuits(open_run(tmp_path / "r"))
    assert c.note.endswith("failed: X") and not c.has_patterns and len(c.layers) == 2


def test_circuits_snapshot(snap_compare, attention_run):
    app = ResultsHarness(ResultsPane(attention_run))

    async def show(pilot):
        await pilot.app.loaded.get()
        await pilot.pause()
        pilot.app.query_one(ResultsPane).action_toggle_circuits()
        await pilot.press("right", "full_stop")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=show)


def test_reading_circuits_is_torch_free(attention_run):
    """The UI process reads the circuits and builds the view's data without torch."""
    import subprocess
    import sys
    code = ("import sys; from qvr.runs import open_run; "
            "from qvr_tui.results_model import load_results; "
            "import qvr_tui.widgets.circuits; "
            f"r = load_results(open_run({str(attention_run)!r})); "
            "print(len(r.circuits.layers), r.circuits.labels[0][0], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    assert out == ["1", "the", "False"]
