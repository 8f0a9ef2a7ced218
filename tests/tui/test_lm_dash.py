"""The dashboard steering a pretrained causal LM (issue 40): Setup's LM field checked in
place without torch (`qvr_tui.lm_source`), the run at 80x24 under Pilot (pick SMC, type
`examples/tiny_lm`, a prompt and a forbidden word, `r`), its particles as text in Live
(`ParticleRow.text` from the worker's `ParticlesSnapshot.texts`), Results and Runs.

The end-to-end test needs `transformers` (the worker loads the model); the others do not.
Waits are on the app's state, never sleeps (a safety limit only)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from textual.widgets import Input

from qvr.events import ParticlesSnapshot, from_json, to_json
from qvr_tui.lm_source import lm_error, lm_label
from qvr_tui.runs_model import RunRow
from qvr_tui.state import RunState
from qvr_tui.widgets.particles import ParticlesTable, done_mark
from qvr_tui.widgets.runs_table import method_cell

from conftest import EXAMPLES, option_error, wait_until

TINY = "examples/tiny_lm"


async def smc_setup(pilot):
    """Setup (key 2) with the SMC preset: its pane."""
    from qvr_tui.screens.setup import SetupPane
    await pilot.app.ready.wait()
    await pilot.press("2")
    setup = pilot.app.query_one(SetupPane)
    setup.preset("smc")
    await pilot.pause()
    return setup


# ------------------------------------------------------------ the LM field's check
def _model_folder(root: Path, *, config=True, tokenizer="tokenizer.json") -> Path:
    root.mkdir(parents=True)
    if config:
        (root / "config.json").write_text("{}")
    if tokenizer:
        (root / tokenizer).write_text("{}")
    return root


def test_lm_folder_checked_by_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache
    monkeypatch.chdir(EXAMPLES.parent)
    assert lm_error(TINY) is None  # relative to the working folder, as the worker reads it
    assert lm_error("") is None  # empty: the program's own model
    assert lm_error("examples") == "no config.json: not a model folder"
    assert lm_error(str(_model_folder(tmp_path / "m1", tokenizer=None))) == \
        "no tokenizer file (tokenizer.json, ...)"
    assert lm_error(str(_model_folder(tmp_path / "m2", tokenizer="vocab.json"))) is None
    assert lm_error("examples/steer.qvr") == "a file, not a model folder"
    assert lm_error("examples/nope") == "no such folder, nor a cached HF model"
    assert lm_error("gpt2") == "no such folder, nor a cached HF model"


def test_lm_name_found_in_the_hub_cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(tmp_path)
    repo = hub / "models--org--tiny"
    _model_folder(repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    assert lm_error("org/tiny") is None
    _model_folder(hub / "models--gpt2" / "snapshots" / "f00", tokenizer=None)
    assert lm_error("gpt2") == "cached, but no tokenizer file"
    assert lm_error("org/other") == "no such folder, nor a cached HF model"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # HF_HOME/hub
    assert lm_error("org/tiny") is None


def test_short_names():
    assert lm_label(TINY) == TINY
    assert lm_label("/home/u/models/gpt2-medium/") == "gpt2-medium"
    assert lm_label("HuggingFaceTB/SmolLM-135M") == "HuggingFaceTB/SmolLM-135M"
    row = RunRow(Path("r"), "r", "finished", "smc", "", "log Z", -1.0, False, lm=TINY)
    assert method_cell(row) == "smc tiny_lm"
    assert method_cell(RunRow(Path("r"), "r", "finished", "smc", "", "", None, False,
                              lm="HuggingFaceTB/SmolLM-135M")) == "smc SmolLM-13…"
    assert method_cell(RunRow(Path("r"), "r", "finished", "smc", "", "", None, False)) == "smc"


# ------------------------------------------------------------ the snapshot's text
def test_snapshot_text_and_truncation_are_shown_as_sent():
    ev = ParticlesSnapshot(5, ((7, 8), (9,), (7,)), (0.0, math.log(3.0), -math.inf),
                           (True, True, False), truncated=(True, False, False),
                           texts=("the dog", "ran .", "the"))
    assert from_json(to_json(ev)) == ev
    st = RunState(vocab=["<eos>", "x"])  # the vocabulary is not used when text is sent
    st.config = {"lm": TINY, "prompt": "the old dog"}
    st.method = "smc"
    st.apply([ev])
    assert [(p.text, round(p.weight, 6), p.finished, p.truncated) for p in st.particles] == [
        ("ran .", 0.75, True, False), ("the dog", 0.25, True, True), ("the", 0.0, False, False)]
    assert [done_mark(p) for p in st.particles] == ["✓", "max", ""]
    assert st.lm_text() == 'examples/tiny_lm · prompt "the old dog"'
    # a record written before snapshots carried text or truncation still reads
    old = from_json('{"type":"particles","step":1,"sequences":[[1]],"log_weights":[0.0],'
                    '"finished":[false]}')
    assert old.texts == () and old.truncated == ()
    st = RunState(vocab=["<eos>", "dog"])
    st.apply([old])
    assert st.particles[0].text == "dog" and st.lm_text() == ""


# ------------------------------------------------------------ Setup at 80x24
@pytest.mark.asyncio
async def test_bad_lm_folder_shown_in_place_and_nothing_starts(tmp_path, monkeypatch):
    from qvr_tui.app import QvrDash
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(EXAMPLES.parent)
    exe = tmp_path / "fake-python"  # a worker that would exit at once: never started here
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    app = QvrDash(program=str(EXAMPLES / "steer.qvr"), runs_dir=tmp_path / "runs",
                  watch=False, python=str(exe))
    async with app.run_test(size=(80, 24)) as pilot:
        setup = await smc_setup(pilot)
        # the model and its constraints come first among SMC's options
        shown = [r.opt_name for r in setup.query("#method-options OptionRow") if r.display]
        assert shown[:8] == ["lm", "prompt", "forbid", "require", "forbid_letters",
                             "max_word_len", "template", "lm_dtype"]
        # steer.qvr's export steers its own pretrained `lm` (E10): an empty field is it
        assert setup.query_one("#opt-lm", Input).placeholder == "program's: tiny_lm"
        assert not setup.query_one("#vocab-row").display  # the LM's tokenizer gives text
        assert not setup.query_one("#start-row").display  # --from is refused with --lm
        setup.set_value("prompt", "the old dog")
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.lm == str(EXAMPLES / "tiny_lm") and cfg.prompt == \
            "the old dog"
        setup.set_value("lm", "examples/nope")
        await pilot.pause()
        assert option_error(setup, "lm") == "no such folder, nor a cached HF model"
        setup.set_value("lm", "examples")
        await pilot.pause()
        assert option_error(setup, "lm") == "no config.json: not a model folder"
        await pilot.press("r")
        await pilot.pause()
        assert app.runner is None and not (tmp_path / "runs").exists()
        assert option_error(setup, "lm") == "no config.json: not a model folder"
        assert "lm" in setup.build_config()[1]
        setup.set_value("lm", TINY)
        await pilot.pause()
        assert option_error(setup, "lm") == ""
        assert setup.build_config()[1] == {}


@pytest.mark.asyncio
async def test_a_program_steering_a_pretrained_lm_opens_with_smc_chosen(tmp_path,
                                                                        monkeypatch):
    """SVI, the usual first choice, is refused for a pretrained LM (nothing to fit): Setup
    opens on SMC for steer.qvr, and on SVI for a program with parameters."""
    from qvr_tui.app import QvrDash
    from qvr_tui.screens.setup import SetupPane
    monkeypatch.chdir(EXAMPLES.parent)
    for name, method in (("steer.qvr", "smc"), ("recurrent_lm.qvr", "svi")):
        app = QvrDash(program=str(EXAMPLES / name), runs_dir=tmp_path / "runs", watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.ready.wait()
            await pilot.pause()
            assert app.query_one(SetupPane).method == method, name


@pytest.mark.asyncio
async def test_a_program_without_a_pretrained_lm_keeps_its_vocabulary_row(tmp_path,
                                                                          monkeypatch):
    from qvr_tui.app import QvrDash
    from qvr_tui.screens.setup import SetupPane
    monkeypatch.chdir(EXAMPLES.parent)
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        setup = app.query_one(SetupPane)
        setup.preset("smc")
        await pilot.pause()
        assert setup.query_one("#opt-lm", Input).placeholder == "the program's"
        assert setup.query_one("#vocab-row").display and setup.query_one("#start-row").display
        setup.set_value("lm", TINY)
        await pilot.pause()
        assert not setup.query_one("#vocab-row").display
        assert not setup.query_one("#start-row").display
        setup.set_value("lm", "")  # empty: the program's own model, not refused
        await pilot.pause()
        assert setup.query_one("#vocab-row").display and option_error(setup, "lm") == ""
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.lm is None
        setup.set_value("prompt", "the")  # FitConfig's own rule: a prompt needs a model
        await pilot.pause()
        assert option_error(setup, "prompt") == \
            "needs --lm (a pretrained language model's text)"


# ------------------------------------------------------------ end to end
@pytest.mark.asyncio
async def test_steer_the_tiny_lm_at_80x24(tmp_path, monkeypatch):
    """Pick SMC, type the model folder, a prompt and a forbidden word, `r`: Live shows
    the particles as the tokenizer's text (none with the word), Results the record's top
    sequences and log Z-hat, Runs the model's name."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    from qvr.runs import open_run
    from qvr_tui.app import QvrDash
    from qvr_tui.widgets.runs_table import RunsTable
    monkeypatch.chdir(EXAMPLES.parent)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tok = Tokenizer.from_file(str(EXAMPLES / "tiny_lm" / "tokenizer.json"))
    eos = 0
    app = QvrDash(program=str(EXAMPLES / "steer.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        setup = await smc_setup(pilot)
        for name, text in (("lm", TINY), ("prompt", "the old dog"), ("forbid", "cat"),
                           ("particles", "6"), ("expansion", "2"), ("max_len", "6")):
            setup.set_value(name, text)
        await pilot.pause()
        assert setup.errors == {}
        await pilot.press("r")  # the focus is on the method selector: `r` runs
        await wait_until(pilot, lambda: app.state.finished and app.runner is None,
                         "the SMC run to end")
        assert app.state.status == "finished", app.state.problem()
        await pilot.pause()
        run = open_run(app.shown_run)
        seqs = json.loads((Path(app.shown_run) / "sequences.json").read_text())

        def decoded(tokens):
            body = list(tokens[:-1] if tokens and tokens[-1] == eos else tokens)
            return tok.decode(body, skip_special_tokens=False)

        # Live: each particle's text is the tokenizer's, shown in the table
        parts = app.state.particles
        assert len(parts) == 6
        table = app.query_one(ParticlesTable)
        assert table.row_count == 6
        for i, p in enumerate(parts):
            assert p.text == decoded(p.tokens)
            assert table.get_row_at(i)[4] == p.text
            assert not re.search(r"\bcat\b", p.text)
            assert p.truncated == (p.finished and p.tokens[-1] != eos)
        words = {w for p in parts for w in re.findall(r"[a-z]+", p.text)}
        assert words & {"the", "a", "dog", "fox", "bird", "chased", "saw", "ran", "slept"}
        assert str(app.query_one("#smc-lm").render()) == \
            'examples/tiny_lm · prompt "the old dog"'
        log_z = run.summary["stats"]["log_Z"]
        assert f"log Ẑ {log_z:.4g}" in str(app.query_one("#live-header").render())
        snaps = [e for e in run.events() if isinstance(e, ParticlesSnapshot)]
        assert snaps and all(e.texts == tuple(decoded(s) for s in e.sequences) for e in snaps)

        # Results: the record's top sequences as text, log Z-hat
        await pilot.press("4")
        await wait_until(pilot, lambda: app.query_one("#smc-table").row_count > 0,
                         "the Results table")
        rows = app.query_one("#smc-table")
        assert rows.row_count == len(seqs["top"])
        for i, item in enumerate(seqs["top"]):
            assert rows.get_row_at(i)[4] == repr(item["text"])
            assert not re.search(r"\bcat\b", item["text"])
        header = str(app.query_one("#results-header").render())
        assert f"log Z-hat {log_z:.4f}" in header
        assert 'examples/tiny_lm · prompt "the old dog"' in header

        # Runs: method smc with the model's name
        await pilot.press("5")
        await pilot.pause()
        runs = app.query_one(RunsTable)
        assert runs.row_count == 1
        assert runs.get_row_at(0)[2] == "smc tiny_lm"


def test_an_unfinished_lm_record_shows_its_last_particles_as_text(tmp_path):
    """A record with no ``sequences.json`` (interrupted): Results reads the particles of
    its last snapshot, with the text the worker put there, and the model and prompt."""
    from qvr.events import FitProgress, FitStarted
    from qvr.runs import RunWriter, open_run
    from qvr_tui.results_model import load_results
    config = {"method": "smc", "lm": TINY, "prompt": "the old dog"}
    with RunWriter(tmp_path / "r", {"program": {"path": None}, "method": "smc",
                                    "config": config}) as w:
        w.write(FitStarted("smc", 6, 1, config))
        w.write(FitProgress("smc", "smc", 2, 6, metrics={"log_Z": -1.5}))
        w.write(ParticlesSnapshot(2, ((5, 6), (7,)), (math.log(1.0), math.log(3.0)),
                                  (False, False), texts=("the fox", "ran")))
    res = load_results(open_run(tmp_path / "r"))
    assert res.partial and res.log_Z == -1.5
    assert [(r.text, round(r.weight, 6)) for r in res.sequences] == [("ran", 0.75),
                                                                      ("the fox", 0.25)]
    assert (res.lm, res.prompt) == (TINY, "the old dog")


@pytest.mark.asyncio
async def test_live_and_results_name_the_programs_own_potentials(tmp_path, monkeypatch):
    """A steering program's score steps (E10, `examples/steer_potentials.qvr`): `r` on
    Setup's SMC; Live's model line and Results' header name them after the model and
    prompt, and the record's ``sequences.json`` lists them."""
    pytest.importorskip("transformers")
    from qvr_tui.app import QvrDash
    monkeypatch.chdir(EXAMPLES.parent)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    app = QvrDash(program=str(EXAMPLES / "steer_potentials.qvr"), runs_dir=tmp_path / "runs",
                  watch=False)
    async with app.run_test(size=(100, 24)) as pilot:
        setup = await smc_setup(pilot)
        for name, text in (("prompt", "the old dog"), ("particles", "4"), ("max_len", "12")):
            setup.set_value(name, text)
        await pilot.pause()
        assert setup.errors == {}
        await pilot.press("r")
        await wait_until(pilot, lambda: app.state.finished and app.runner is None,
                         "the SMC run to end")
        assert app.state.status == "finished", app.state.problem()
        await pilot.pause()
        line = 'tiny_lm · prompt "the old dog" · potentials no_cat, fox_early, fewer_e'
        assert str(app.query_one("#smc-lm").render()) == line
        seqs = json.loads((Path(app.shown_run) / "sequences.json").read_text())
        assert seqs["potentials"] == ["no_cat", "fox_early", "fewer_e"]
        await pilot.press("4")
        await wait_until(pilot, lambda: "potentials" in str(
            app.query_one("#results-header").render()), "the Results header")
        header = str(app.query_one("#results-header").render())
        assert header.splitlines()[1] == line + " (program)"
