"""Setup checks a field when it changes (not only when `r` is pressed): an invalid value
is shown in place at once, and its error goes as soon as the value is valid again (an old
error stayed beside a corrected value until the next `r`).  SMC's vocabulary can be given
as a file (it could only be found next to the program): it is checked in place and reaches
the fit request and the Live state."""
import json

import pytest
from textual.widgets import Input

from qvr_tui.app import QvrDash
from qvr_tui.screens.setup import SetupPane

from conftest import EXAMPLES, option_error as err, setup_tab

pytestmark = pytest.mark.asyncio


async def type_into(pilot, setup, name, text):
    field = setup.query_one(f"#opt-{name}", Input)
    field.focus()
    field.value = ""
    await pilot.press(*text)
    await pilot.pause()


async def test_a_field_is_checked_as_it_changes(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        setup.preset("nuts")
        await pilot.pause()
        await type_into(pilot, setup, "num_chains", "0")
        assert err(setup, "num_chains") == "must be an integer >= 1, got 0"  # no `r`
        await type_into(pilot, setup, "step_size", "fast")
        assert err(setup, "step_size").startswith("expected a number")
        assert err(setup, "num_chains") == "must be an integer >= 1, got 0"  # still wrong
        await type_into(pilot, setup, "num_chains", "2")
        assert err(setup, "num_chains") == ""  # valid again: the error is gone
        assert err(setup, "step_size").startswith("expected a number")
        # an error shown by the run key also goes when the value is corrected
        await pilot.press("ctrl+r")
        assert app.runner is None and err(setup, "step_size")
        await type_into(pilot, setup, "step_size", "0.1")
        assert err(setup, "step_size") == ""
        assert setup.build_config()[1] == {}


async def test_a_vocabulary_file_for_smc(tmp_path):
    vocab = tmp_path / "words.json"
    words = [f"w{i}" for i in range(40)]
    vocab.write_text(json.dumps(words))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a list"}))
    exe = tmp_path / "fake-python"  # a worker that exits at once
    exe.write_text("#!/bin/sh\nexit 3\n")
    exe.chmod(0o755)
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"),
                  runs_dir=tmp_path / "runs", watch=False, python=str(exe))
    async with app.run_test(size=(100, 40)) as pilot:
        await app.ready.wait()
        await pilot.press("2")
        setup = app.query_one(SetupPane)
        row = setup.query_one("#vocab-row")
        assert not row.display  # SVI: no vocabulary
        setup.preset("smc")
        await pilot.pause()
        assert row.display
        field = setup.query_one("#vocab", Input)
        assert field.placeholder == ("empty: data/recurrent_lm.vocab.json (relative: from "
                                     "the program's folder, else the working folder)")
        shown = lambda: str(setup.query_one("#vocab-error").render())  # noqa: E731
        field.value = str(tmp_path / "missing.json")
        await pilot.pause()
        assert shown() == f"{tmp_path / 'missing.json'}: no such file"
        assert "vocab" in setup.build_config()[1]
        field.value = str(bad)
        await pilot.pause()
        assert shown().startswith(f"{bad}: a vocabulary must be a JSON list of strings")
        field.value = str(vocab)
        await pilot.pause()
        assert shown() == ""
        req = setup.build_request(str(tmp_path / "runs" / "x"))
        assert req is not None and req.vocab == words
        assert req.vocab_path == str(vocab.resolve())  # the worker gets the file
        from qvr_tui.fit_runner import worker_command
        cmd = worker_command(req, "cfg.json", "python")
        assert cmd[cmd.index("--vocab") + 1] == str(vocab.resolve())
        app.begin(req)  # the stand-in worker exits at once: only the Live state matters
        assert app.state.vocab == words
        await pilot.pause()
        field.value = ""  # empty: the one next to the program (the app loads it)
        await pilot.pause()
        empty = setup.build_request(str(tmp_path / "runs" / "x"))
        assert empty.vocab is None and empty.vocab_path is None
        assert "--vocab" not in worker_command(empty, "cfg.json", "python")


async def test_switching_the_data_kind_drops_the_old_kinds_error(tmp_path):
    """Kind `file` with `nope.json` shows an error; switching to `shipped` left it in
    `errors` and drew the shipped hint in the error colour until another field
    changed."""
    from textual.widgets import Select
    async with setup_tab(tmp_path) as (app, pilot, setup):
        kind = setup.query_one("#data-kind", Select)
        shown = setup.query_one("#data-error")
        kind.value = "file"
        await pilot.pause()
        setup.query_one("#data-value", Input).value = "nope.json"
        await pilot.pause()
        assert str(shown.render()) == "nope.json: no such file"
        assert shown.has_class("-error") and setup.errors["data"] == "nope.json: no such file"
        kind.value = "shipped"
        await pilot.pause()
        assert str(shown.render()) == "data/regression_plates.json"
        assert not shown.has_class("-error")
        assert "data" not in setup.errors


async def test_a_relative_vocabulary_path_and_one_load_per_file(tmp_path, monkeypatch):
    """A relative vocabulary path is looked up in the program's folder, then in the
    working folder (it was the working folder only, while the placeholder pointed at the
    program's); the file is loaded once per distinct path (it was loaded at every
    keystroke, and again by `build_request` after `build_config`)."""
    import qvr.datafiles as datafiles
    loads = []
    real = datafiles.load_vocab
    monkeypatch.setattr(datafiles, "load_vocab", lambda p: loads.append(str(p)) or real(p))
    monkeypatch.chdir(tmp_path)  # no data/ here: only the program's folder has it
    app = QvrDash(program=str(EXAMPLES / "recurrent_lm.qvr"),
                  runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await app.ready.wait()
        await pilot.press("2")
        setup = app.query_one(SetupPane)
        setup.preset("smc")
        await pilot.pause()
        field = setup.query_one("#vocab", Input)
        shown = lambda: str(setup.query_one("#vocab-error").render())  # noqa: E731
        field.focus()
        await pilot.press(*"data/recurrent_lm.vocab.json")
        await pilot.pause()
        assert shown() == ""
        want = EXAMPLES / "data" / "recurrent_lm.vocab.json"
        assert loads == [str(want)]  # the keystrokes before named no file
        await pilot.press("space")  # the same path (stripped): not read again
        await pilot.pause()
        req = setup.build_request(str(tmp_path / "runs" / "x"))
        assert req is not None and req.vocab_path == str(want.resolve())
        assert req.vocab == real(want) and len(loads) == 1
        # a file in the working folder only is found there
        (tmp_path / "words.json").write_text(json.dumps(["a", "b"]))
        field.value = "words.json"
        await pilot.pause()
        assert shown() == "" and setup.build_request("x").vocab == ["a", "b"]
        field.value = "nowhere.json"
        await pilot.pause()
        assert shown() == ("nowhere.json: no such file (looked in the program's folder "
                           "and the working folder)")
