"""Setup asks for the parameters of a parametric program (a template export): a row per
parameter of the chosen export (names and types from the checked program), each needing a
number and checked in place; the numbers become `FitConfig.args`, which the worker's
``qvr run --config`` receives.  Switching the export shows its own rows (or none)."""
import json

import pytest
from textual.widgets import Input, Select

from qvr_tui.app import QvrDash
from qvr_tui.fit_runner import worker_command
from qvr_tui.program_model import ProgramModel
from qvr_tui.screens.setup import SetupPane

TWO = """\
object Item : FinSet 8

program plain : Item -> Item
    sample mu <- Normal(0.0, 1.0)
    observe y : Item <- Normal(mu, 1.0)
    return mu

program shrink(spread : Real, centre : Real) : Item -> Item
    sample mu <- Normal(centre, spread)
    sample tau <- HalfNormal(1.0)
    observe y : Item <- Normal(mu, tau)
    return mu

export plain
export shrink
"""


def write(tmp_path, text=TWO):
    path = tmp_path / "two.qvr"
    path.write_text(text)
    return path


def shown(setup):
    return [r.param for r in setup.query(".arg-row") if r.display]


def err(row) -> str:
    return str(row.query_one(".opt-error").render())


async def type_into(pilot, row, text):
    row.input.focus()
    row.input.value = ""
    await pilot.press(*text)
    await pilot.pause()


def test_the_program_model_names_a_templates_parameters(tmp_path):
    m = ProgramModel.load(write(tmp_path))
    assert [(e.name, e.params, e.parametric) for e in m.exports] == [
        ("plain", (), False), ("shrink", (("spread", "Real"), ("centre", "Real")), True)]


@pytest.mark.asyncio
async def test_rows_follow_the_chosen_export_and_become_args(tmp_path):
    path = write(tmp_path)
    app = QvrDash(program=str(path), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(110, 44)) as pilot:
        await app.ready.wait()
        await pilot.press("2")
        setup = app.query_one(SetupPane)
        await pilot.pause()
        assert setup.export() == "plain" and shown(setup) == []
        assert not setup.query_one("#args-title").display
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.args == {}

        setup.query_one("#export", Select).value = "shrink"
        await pilot.pause()
        assert shown(setup) == ["spread", "centre"]
        assert str(setup.query_one("#args-title").render()) == \
            "parameters of shrink (a parametric program)"
        spread, centre = setup.arg_rows()
        assert spread.input.placeholder == "a number (Real)"
        # not touched yet: judged when the run key is pressed, each error in place
        assert err(spread) == ""
        cfg, errors = setup.build_config()
        assert cfg is None
        assert errors == {"args.spread": "give a number (spread : Real)",
                          "args.centre": "give a number (centre : Real)"}
        assert err(spread) == "give a number (spread : Real)"

        # checked as it changes
        await type_into(pilot, spread, "wide")
        assert err(spread) == "expected a number, got 'wide'"
        await type_into(pilot, spread, "inf")
        assert err(spread) == "expected a finite number, got 'inf'"
        await type_into(pilot, spread, "2.5")
        assert err(spread) == ""
        assert err(centre) == "give a number (centre : Real)"  # still wrong
        await type_into(pilot, centre, "-1")
        assert err(centre) == ""
        cfg, errors = setup.build_config()
        assert errors == {}
        assert cfg.args == {"spread": 2.5, "centre": -1.0}
        assert all(type(v) is float for v in cfg.args.values())

        # the request the run key makes: the export and the args reach the worker
        req = setup.build_request(str(tmp_path / "runs" / "r1"))
        assert req.export == "shrink" and req.config.args == {"spread": 2.5, "centre": -1.0}
        cfg_file = tmp_path / "cfg.json"
        cfg_file.write_text(json.dumps(req.config.to_dict()))
        cmd = worker_command(req, str(cfg_file))
        assert cmd[cmd.index("--export") + 1] == "shrink"
        assert json.loads(cfg_file.read_text())["args"] == {"spread": 2.5, "centre": -1.0}

        # back to the plain program: no rows, no args; the numbers stay with `shrink`
        setup.query_one("#export", Select).value = "plain"
        await pilot.pause()
        assert shown(setup) == [] and setup.build_config()[0].args == {}
        setup.query_one("#export", Select).value = "shrink"
        await pilot.pause()
        assert [r.input.value for r in setup.arg_rows()] == ["2.5", "-1"]


@pytest.mark.asyncio
async def test_a_template_first_is_asked_at_once_and_blocks_the_run_key(tmp_path):
    path = tmp_path / "shrink.qvr"
    path.write_text("object Item : FinSet 8\n"
                    "program shrink(spread : Real) : Item -> Item\n"
                    "    sample mu <- Normal(0.0, spread)\n"
                    "    observe y : Item <- Normal(mu, 1.0)\n"
                    "    return mu\n"
                    "export shrink\n")
    app = QvrDash(program=str(path), runs_dir=tmp_path / "runs", watch=False)
    async with app.run_test(size=(110, 44)) as pilot:
        await app.ready.wait()
        await pilot.press("2")
        setup = app.query_one(SetupPane)
        await pilot.pause()
        assert shown(setup) == ["spread"]
        await pilot.press("ctrl+r")  # no number: no fit, the error shown in place
        await pilot.pause()
        assert app.runner is None
        (row,) = setup.arg_rows()
        assert err(row) == "give a number (spread : Real)"
        await type_into(pilot, row, "0.5")
        assert err(row) == ""
        assert setup.build_config()[0].args == {"spread": 0.5}


@pytest.mark.asyncio
async def test_shipped_args_prefill_the_rows(tmp_path):
    path = write(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "two.fit.json").write_text(json.dumps({"args": {"spread": 3}}))
    app = QvrDash(program=str(path), runs_dir=tmp_path / "runs", watch=False,
                  export="shrink")
    async with app.run_test(size=(110, 44)) as pilot:
        await app.ready.wait()
        setup = app.query_one(SetupPane)
        await pilot.pause()
        assert [r.input.value for r in setup.arg_rows()] == ["3", ""]
        assert isinstance(setup.arg_rows()[0].input, Input)


@pytest.mark.asyncio
async def test_the_worker_fits_the_template_at_the_numbers_given(tmp_path):
    """The run key with a parametric export: the worker (`qvr run --config`) fits it at the
    numbers typed, and its record holds them."""
    import time

    from qvr.runs import open_run
    path = write(tmp_path)
    app = QvrDash(program=str(path), runs_dir=tmp_path / "runs", watch=False,
                  export="shrink")
    async with app.run_test(size=(110, 44)) as pilot:
        await app.ready.wait()
        setup = app.query_one(SetupPane)
        setup.preset("svi")
        await pilot.pause()
        setup.set_value("steps", "20")
        setup.set_arg("spread", "0.5")
        setup.set_arg("centre", "1")
        await pilot.pause()
        await pilot.press("ctrl+r")
        assert app.runner is not None
        run_dir = app.runner.run_dir
        deadline = time.monotonic() + 300  # a safety limit, not a timing assertion
        while not (app.state.finished and app.runner is None):
            assert time.monotonic() < deadline, app.state.status_line()
            await pilot.pause(0.05)
        assert app.state.status == "finished", app.state.problem()
        run = open_run(run_dir)
        assert run.config["args"] == {"spread": 0.5, "centre": 1.0}
        assert run.program["export"] == "shrink"
