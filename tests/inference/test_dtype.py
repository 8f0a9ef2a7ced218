"""`FitConfig.dtype`: float64 fits (SVI, HMC, NUTS with every chain method, SMC), the
default dtype restored after a fit (also a failing one), the record, `qvr run --dtype`,
starting a float64 fit from a float32 run, and a posterior float32 cannot resolve."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import check_moments, normal_normal_case

from qvr import load, loads
from qvr.inference import FitConfig, fit
from qvr.inference.config import ConfigError
from qvr.inference.data.fit_data import DataError
from qvr.inference.criticism.diagnostics import ess_mean
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]


def nn_data():
    model, x, obs, exact = normal_normal_case()
    return model, {"x": x, **obs}, exact


def mcmc(method, **kw):
    return FitConfig(method=method, dtype="float64", num_warmup=40, num_samples=30,
                     num_chains=2, seed=1, **kw)


def test_dtype_is_a_common_option_with_a_float32_default():
    assert FitConfig().dtype == "float32"
    assert all(any(f.name == "dtype" for f, _ in FitConfig.options(m))
               for m in ("svi", "hmc", "nuts", "smc"))
    assert FitConfig(dtype="float16").errors() == {
        "dtype": "must be one of float32, float64; got 'float16'"}
    # a run.json written before the option existed still loads, as float32
    old = FitConfig().to_dict()
    del old["dtype"]
    assert FitConfig.from_dict(old).dtype == "float32"
    with pytest.raises(ConfigError, match="dtype"):
        fit(nn_data()[0], nn_data()[1], {"method": "svi", "dtype": "double"})


@pytest.mark.parametrize("method,chain_method", [
    ("hmc", "vectorized"), ("nuts", "vectorized"), ("nuts", "sequential"),
    ("hmc", "sequential"), ("nuts", "parallel")])
def test_mcmc_runs_in_float64_and_restores_the_default(method, chain_method):
    model, data, _ = nn_data()
    assert torch.get_default_dtype() == torch.float32
    seen = []
    res = fit(model, data, mcmc(method, chain_method=chain_method),
              on_event=lambda e: seen.append(torch.get_default_dtype()))
    assert res.status == "finished"
    assert res.samples["mu"].dtype == np.float64
    m = res.mcmc  # the unconstrained chains, their log densities, step sizes, mass matrix
    assert m.unconstrained.dtype == m.log_densities.dtype == torch.float64
    assert m.step_sizes.dtype == torch.float64
    assert m.inverse_mass_matrix is None or m.inverse_mass_matrix.dtype == torch.float64
    assert set(seen) == {torch.float64}  # every event, FitStarted to FitFinished
    assert torch.get_default_dtype() == torch.float32


def test_svi_runs_in_float64_parameters_guide_and_draws():
    model, data, _ = nn_data()
    res = fit(model, data, FitConfig(method="svi", steps=20, dtype="float64", seed=0))
    assert res.status == "finished" and np.isfinite(res.losses).all()
    assert {p.dtype for p in res.guide.parameters()} == {torch.float64}
    assert res.samples["mu"].dtype == np.float64
    assert all(v.dtype == np.float64 for v in res.params.values())
    assert torch.get_default_dtype() == torch.float32


def test_smc_runs_in_float64():
    prog = load(str(ROOT / "examples" / "transformer_lm.qvr"))
    res = fit(prog, config=FitConfig(method="smc", particles=8, expansion=2, max_len=5,
                                     eos=1, bos=0, dtype="float64", seed=0))
    assert res.status == "finished"
    assert res.smc.log_weights.dtype == torch.float64
    assert res.params and all(v.dtype == np.float64 for v in res.params.values())
    assert torch.get_default_dtype() == torch.float32


def test_the_default_dtype_is_restored_after_a_failing_fit():
    model, data, _ = nn_data()
    bad = {**data, "y": np.array(["a"] * 20)}  # an observed value that is not numbers
    with pytest.raises(DataError):
        fit(model, bad, FitConfig(method="svi", steps=5, dtype="float64"))
    assert torch.get_default_dtype() == torch.float32
    # and a caller's own default is restored too, after a float32 fit
    torch.set_default_dtype(torch.float64)
    try:
        res = fit(model, data, FitConfig(method="svi", steps=5, dtype="float32"))
        assert res.samples["mu"].dtype == np.float32
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_the_record_holds_the_dtype_and_float64_draws(tmp_path):
    model, data, _ = nn_data()
    fit(model, data, mcmc("nuts"), run_dir=tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    assert meta["config"]["dtype"] == "float64"
    run = open_run(tmp_path / "r")
    assert run.config["dtype"] == "float64"
    assert run.draws()["mu"].dtype == np.float64  # saved in the fit's dtype
    assert run.summary["status"] == "finished"


def test_a_float64_fit_starts_from_a_float32_run(tmp_path):
    model, data, _ = nn_data()
    fit(model, data, FitConfig(method="svi", steps=30, lr=0.05, seed=0),
        run_dir=tmp_path / "svi")
    assert open_run(tmp_path / "svi").params()["loc_mu"].dtype == np.float32
    res = fit(model, data, mcmc("nuts"), start_from=tmp_path / "svi")
    assert res.status == "finished" and res.samples["mu"].dtype == np.float64
    res = fit(model, data, FitConfig(method="svi", steps=5, dtype="float64"),
              start_from=tmp_path / "svi")
    assert {p.dtype for p in res.guide.parameters()} == {torch.float64}
    # a program with parameters: SMC in float64 from an SVI fit in float32
    lm = ROOT / "examples" / "recurrent_lm.qvr"
    from qvr.datafiles import find_data, load_data
    corpus = load_data(find_data(lm))
    small = {"x": corpus["x"][:16], "next_char": corpus["next_char"][:16]}
    fit(load(str(lm)), small, FitConfig(method="svi", steps=3, seed=0, pointwise=False),
        run_dir=tmp_path / "lm")
    saved = open_run(tmp_path / "lm").params()
    gen = fit(load(str(lm)), config=FitConfig(method="smc", particles=4, max_len=4, seed=1,
                                              dtype="float64"),
              start_from=tmp_path / "lm")
    assert gen.status == "finished"
    for name, value in gen.params.items():
        assert value.dtype == np.float64
        np.testing.assert_array_equal(value, saved[name].astype(np.float64))
    assert torch.get_default_dtype() == torch.float32


def test_qvr_run_dtype_option(tmp_path, capsys):
    from qvr.cli import main
    program = tmp_path / "nn.qvr"
    program.write_text("""
object Obs : FinSet 20
program normal_normal : Obs -> Obs
    sample mu <- Normal(1.0, 2.0)
    observe y : Obs <- Normal(mu, 1.5)
    return mu
export normal_normal
""")
    runs = tmp_path / "runs"
    rc = main(["run", str(program), "--method", "nuts", "--synthetic", "20", "--warmup", "20",
               "--samples", "10", "--chains", "2", "--dtype", "float64", "--runs-dir",
               str(runs)])
    assert rc == 0, capsys.readouterr().err
    (folder,) = runs.iterdir()
    run = open_run(folder)
    assert run.config["dtype"] == "float64" and run.draws()["mu"].dtype == np.float64
    with pytest.raises(SystemExit) as exc:
        main(["run", str(program), "--method", "nuts", "--dtype", "half", "--runs-dir",
              str(runs)])
    assert exc.value.code == 2
    assert "--dtype" in capsys.readouterr().err
    assert len(list(runs.iterdir())) == 1  # no folder for the usage error


def test_nuts_normal_normal_in_float64_within_mcse():
    model, data, exact = nn_data()
    res = fit(model, data, FitConfig(method="nuts", dtype="float64", num_warmup=300,
                                     num_samples=400, num_chains=4, seed=2))
    assert res.samples["mu"].dtype == np.float64
    rhats = check_moments(res.samples, exact)
    assert max(rhats.values()) < 1.05


TIGHT = """
object Obs : FinSet 1
program tight : Obs -> Obs
    sample mu <- Normal(10000.0, 0.001)
    observe y : Obs <- Normal(mu, 0.001)
    return mu
export tight
"""


def test_float64_resolves_a_posterior_float32_cannot():
    """A Normal-Normal posterior of sd 7e-4 around 1e4: float32's spacing there (2**-10,
    about 9.8e-4) is wider than the posterior sd, so a float32 chain cannot resolve it
    (exact float arithmetic below); float64 NUTS gets the closed-form mean and sd within
    MCSE."""
    y = 10000.00123
    mean, sd = (10000.0 + y) / 2, math.sqrt(0.5) * 1e-3  # equal prior and noise scales
    assert np.spacing(np.float32(1e4)) == 2.0 ** -10 > sd
    assert abs(float(np.float32(mean)) - mean) > 0.1 * sd
    res = fit(loads(TIGHT).morphism, {"x": np.zeros((1, 1)), "y": np.array([y])},
              FitConfig(method="nuts", dtype="float64", num_warmup=300, num_samples=400,
                        num_chains=4, seed=0))
    d = res.samples["mu"]
    assert d.dtype == np.float64
    ess = float(np.asarray(ess_mean(d.reshape(4, -1, 1))).item())
    mcse = d.std() / math.sqrt(ess)
    assert abs(d.mean() - mean) < 4 * mcse
    check_moments(res.samples, {"mu": ([mean], [sd])})


def test_json_decimals_are_read_at_the_fits_dtype(tmp_path):
    from qvr.inference.data.fit_data import load_data_file
    from qvr.inference.front.fitting import fit_dtype
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"y": [10000.00123], "n": [3]}))
    assert load_data_file(path)["y"].dtype == torch.float32
    with fit_dtype("float64"):
        got = load_data_file(path)
    assert got["y"].dtype == torch.float64 and float(got["y"][0]) == 10000.00123
    assert got["n"].dtype == torch.int64
    assert torch.get_default_dtype() == torch.float32
