"""A parametric program (a template, language spec 7.13) as the export: fitted at the
numbers of `FitConfig.args` (``qvr run --arg NAME=VALUE``), which the run record keeps.

The model is conjugate: with ``mu ~ Normal(0, spread)`` and ``y_i ~ Normal(mu, s)``, the
posterior of mu is Normal with precision ``1/spread^2 + n/s^2`` and mean
``(sum y / s^2) / precision`` — so the posterior depends on the argument, and the draws are
checked against these exact moments (within Monte-Carlo standard errors)."""
import argparse
import json
import math

import numpy as np
import pytest

from helpers import check_moments

N, S = 20, 1.5
SHRINK = f"""
object Obs : FinSet {N}
program shrink(spread : Real) : Obs -> Obs
    sample mu <- Normal(0.0, spread)
    observe y : Obs <- Normal(mu, {S})
    return mu
export shrink
"""

PLAIN = """
object Obs : FinSet 5
program plain : Obs -> Obs
    sample mu <- Normal(0.0, 1.0)
    observe y : Obs <- Normal(mu, 1.0)
    return mu
export plain
"""

TWO_PARAMS = """
object Obs : FinSet 5
program two(centre : Real, spread : Real) : Obs -> Obs
    sample mu <- Normal(centre, spread)
    observe y : Obs <- Normal(mu, 1.0)
    return mu
export two
"""

Y = 1.7 + S * np.random.default_rng(7).standard_normal(N)  # mean far from the prior's 0


def exact(spread: float) -> tuple[float, float]:
    prec = 1 / spread ** 2 + N / S ** 2
    return float(Y.sum()) / S ** 2 / prec, prec ** -0.5


class Out:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def files(tmp_path):
    prog = tmp_path / "shrink.qvr"
    prog.write_text(SHRINK)
    data = tmp_path / "y.json"
    data.write_text(json.dumps({"y": Y.tolist()}))
    return prog, data


@pytest.fixture
def qvr(capsys, tmp_path):
    from qvr.cli import main

    def call(*args):
        try:
            rc = main([*map(str, args)])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return Out(rc, out, err)
    return call


def only_run(tmp_path):
    (folder,) = list((tmp_path / "runs").iterdir())
    return folder


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize("spread", [0.05, 10.0])
def test_nuts_posterior_follows_the_argument(files, qvr, tmp_path, spread):
    from qvr.runs import open_run
    prog, data = files
    out = qvr("run", prog, "--method", "nuts", "--data", data, "--arg", f"spread={spread}",
              "--warmup", "150", "--samples", "200", "--chains", "2",
              "--runs-dir", tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    run = open_run(only_run(tmp_path))
    assert run.status == "finished"
    assert run.config["args"] == {"spread": spread}
    assert run.program["export"] == "shrink"
    mean, sd = exact(spread)
    check_moments({"mu": run.samples()["mu"]}, {"mu": ([mean], [sd])})
    # far-apart posteriors: spread 0.05 holds mu near the prior's 0 (the data's mean is
    # ~1.2), spread 10 lets it follow the data
    draws = run.samples()["mu"].mean()
    assert abs(draws) < 0.1 if spread == 0.05 else abs(draws - Y.mean()) < 3 * S / N ** 0.5


def test_svi_fits_at_the_argument_and_the_record_keeps_it(files, qvr, tmp_path):
    from qvr.runs import open_run
    prog, data = files
    out = qvr("run", prog, "--method", "svi", "--data", data, "--arg", "spread=0.05",
              "--steps", "1500", "--lr", "0.05", "--runs-dir", tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    folder = only_run(tmp_path)
    run = open_run(folder)
    meta = json.loads((folder / "run.json").read_text())
    assert meta["config"]["args"] == {"spread": 0.05}
    mean, sd = exact(0.05)  # mean ~0.03, sd ~0.05; the data's mean is ~1.2
    fitted = run.summary["parameters"]["mu"]  # from draws of the fitted guide
    # the guide (a Normal: the posterior's own family) ends near the exact posterior;
    # Adam's last steps jitter its mean by a fraction of a posterior sd
    assert abs(fitted["mean"] - mean) < sd
    assert 0.5 * sd < fitted["sd"] < 2 * sd
    # `qvr show` names the export with its argument
    shown = qvr("show", folder)
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0].startswith(
        f"program {prog.resolve()} (export shrink(spread=0.05)), started ")


def test_synthetic_rows_with_an_argument(files, qvr, tmp_path):
    """The issue's command: `--synthetic 20 --arg spread=2.0`."""
    prog, _ = files
    out = qvr("run", prog, "--method", "svi", "--synthetic", "20", "--arg", "spread=2.0",
              "--steps", "50", "--runs-dir", tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("svi: 50 steps, final loss ")


def test_smc_generates_from_a_template(tmp_path, qvr):
    prog = tmp_path / "lm.qvr"
    prog.write_text("""
object Char : FinSet 6
object Emb : Real 4
morphism emb : Char -> Emb [role=embed]
morphism readout : Emb -> Char [role=kernel] ~ Categorical
program lm(width : Real) : Char -> Char
    sample h <- emb
    observe next : Char <- readout(h)
    return next
export lm
""")
    base = ("run", prog, "--method", "smc", "--eos", "0", "--particles", "4", "--max-len",
            "3", "--runs-dir", tmp_path / "runs")
    out = qvr(*base, "--arg", "width=1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("smc: log Z = ")
    out = qvr(*base)
    assert out.returncode == 2
    assert out.stderr == ("qvr run: `lm` is a parametric program: give its parameters with "
                          "--arg NAME=VALUE (missing: width : Real)\n")


@pytest.mark.parametrize("argv, message", [
    ([], "`shrink` is a parametric program: give its parameters with --arg NAME=VALUE "
         "(missing: spread : Real)"),
    (["--arg", "sprad=1"], "`shrink` has no parameter `sprad` (did you mean `spread`?); its "
                           "parameters: spread : Real"),
    (["--arg", "spread=1", "--arg", "width=2"],
     "`shrink` has no parameter `width`; its parameters: spread : Real"),
    (["--arg", "spread=1", "--arg", "spread=2"], "--arg: `spread` is given twice (1 and 2)"),
])
def test_argument_problems_are_usage_errors_before_a_run_folder(files, qvr, tmp_path, argv,
                                                                message):
    prog, _ = files
    out = qvr("run", prog, "--method", "svi", "--synthetic", "5", *argv,
              "--runs-dir", tmp_path / "runs")
    assert out.returncode == 2
    assert out.stderr == f"qvr run: {message}\n"
    assert not (tmp_path / "runs").exists()  # found before a run folder is made


@pytest.mark.parametrize("value, message", [
    ("spread", "expected NAME=VALUE (e.g. spread=2.0), got 'spread'"),
    ("=2", "expected NAME=VALUE (e.g. spread=2.0), got '=2'"),
    ("spread=wide", "spread: expected a number, got 'wide'"),
    ("spread=nan", "spread: expected a finite number, got 'nan'"),
    ("spread=inf", "spread: expected a finite number, got 'inf'"),
])
def test_unparseable_arguments_are_named(files, qvr, tmp_path, value, message):
    prog, _ = files
    out = qvr("run", prog, "--method", "svi", "--arg", value, "--runs-dir", tmp_path / "runs")
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == f"qvr run: error: argument --arg: {message}"


def test_arguments_for_an_export_that_is_not_a_template(tmp_path, qvr):
    prog = tmp_path / "plain.qvr"
    prog.write_text(PLAIN)
    out = qvr("run", prog, "--method", "svi", "--synthetic", "5", "--arg", "spread=1",
              "--runs-dir", tmp_path / "runs")
    assert out.returncode == 2
    assert out.stderr == ("qvr run: `plain` is a program, not a parametric program: it takes "
                          "no --arg (given: spread)\n")


def test_several_missing_parameters_are_listed_with_their_types(tmp_path, qvr):
    prog = tmp_path / "two.qvr"
    prog.write_text(TWO_PARAMS)
    out = qvr("run", prog, "--method", "nuts", "--synthetic", "5", "--arg", "spread=1",
              "--runs-dir", tmp_path / "runs")
    assert out.returncode == 2
    assert out.stderr == ("qvr run: `two` is a parametric program: give its parameters with "
                          "--arg NAME=VALUE (missing: centre : Real)\n")
    out = qvr("run", prog, "--method", "nuts", "--synthetic", "5",
              "--runs-dir", tmp_path / "runs")
    assert "(missing: centre : Real, spread : Real)" in out.stderr


def test_command_line_arguments_add_to_shipped_ones(tmp_path):
    """`args` from data/NAME.fit.json (or --config) are the program's defaults: --arg
    replaces the names it gives and keeps the others."""
    from qvr.commands.run import add_fit_options, config_from_args
    prog = tmp_path / "two.qvr"
    prog.write_text(TWO_PARAMS)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "two.fit.json").write_text(
        json.dumps({"args": {"centre": 1.0, "spread": 2.0}}))
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--method")
    add_fit_options(p)
    args = p.parse_args([str(prog), "--method", "svi", "--arg", "spread=0.5"])
    assert config_from_args(args).args == {"centre": 1.0, "spread": 0.5}
    args = p.parse_args([str(prog), "--method", "svi"])
    assert config_from_args(args).args == {"centre": 1.0, "spread": 2.0}


# ---------------------------------------------------------------- the library


def test_choose_export_and_kind():
    from qvr import loads
    from qvr.inference.front.fitting import choose_export, export_kind
    prog = loads(SHRINK)
    assert export_kind(prog.exports["shrink"]) == "template"
    assert choose_export(prog) == "shrink"


def test_model_of_instantiates_with_args():
    from qvr import loads
    from qvr.inference.front.fitting import DataError, model_of
    prog = loads(SHRINK)
    model = model_of(prog, {"spread": 0.5})
    assert hasattr(model, "execute") and hasattr(model, "log_joint")
    with pytest.raises(DataError) as info:
        model_of(prog)
    assert str(info.value) == ("`shrink` is a parametric program: give its parameters with "
                               "--arg NAME=VALUE (missing: spread : Real)")
    with pytest.raises(DataError, match="not a parametric program"):
        model_of(loads(PLAIN), {"spread": 1.0})


def test_fit_records_a_failure_for_missing_args(tmp_path):
    """Through `fit` itself (no command line): a `DataError`, the record says failed."""
    from qvr import loads
    from qvr.inference import FitConfig, fit
    from qvr.inference.front.fitting import DataError
    from qvr.runs import open_run
    with pytest.raises(DataError, match=r"missing: spread : Real"):
        fit(loads(SHRINK), config=FitConfig(method="svi", steps=5, synthetic=5),
            run_dir=tmp_path / "r")
    assert open_run(tmp_path / "r").status == "failed"
    res = fit(loads(SHRINK), {"y": Y}, config=FitConfig(method="svi", steps=5,
                                                       args={"spread": 1.0}))
    assert res.status == "finished"


# ---------------------------------------------------------------- the option itself


def test_the_option_round_trips_and_old_records_load():
    from qvr.inference.config import ConfigError, FitConfig, gather_args, parse_arg
    cfg = FitConfig(method="nuts", args={"spread": 2.0})
    assert cfg.errors() == {}
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["args"] == {"spread": 2.0}
    assert FitConfig.from_dict(d) == cfg
    assert cfg.for_method()["args"] == {"spread": 2.0}
    old = {k: v for k, v in FitConfig().to_dict().items() if k != "args"}
    assert FitConfig.from_dict(old).args == {}  # a run.json from before the option
    assert FitConfig().args == {} and FitConfig().args is not FitConfig().args
    assert parse_arg(" spread = 2 ") == ["spread", 2.0]
    assert gather_args([["a", 1.0], ["b", 2.0]]) == {"a": 1.0, "b": 2.0}
    with pytest.raises(ValueError, match=r"`a` is given twice \(1 and 3\)"):
        gather_args([["a", 1.0], ["a", 3.0]])
    assert FitConfig(args={"spread": math.inf}).errors() == {
        "args": "spread: must be a finite number, got inf"}
    assert FitConfig(args={"spread": True}).errors() == {
        "args": "spread: must be a finite number, got True"}
    assert "args" in FitConfig(args=[1.0]).errors()
    with pytest.raises(ConfigError):
        FitConfig(args={"spread": math.nan}).validate()
    assert FitConfig.help_of("args").endswith("once per parameter")  # no "(default {})"
