"""E9.6 recorded quantities (`record v = e`) in fits: eight schools, non-centred
(posteriordb eight_schools-eight_schools_noncentered), with the school effects recorded as
Stan's transformed parameters.

NUTS (4 chains): the recorded `theta` is exactly `mu + tau * theta_raw` of the same draws,
summarised with R-hat and ESS and marked recorded, and its posterior means and sds match
the posteriordb reference (means within 5 MCSE, sds within 20 %); the record keeps it
(draws chunks, ``samples.npz``, ``summary.json``), also when the writer is killed with
SIGKILL mid-run; `qvr show` prints its row; the ArviZ export puts it in the posterior.
SVI records it from the fitted guide's draws; SMC says it cannot.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import qvr
from qvr.inference import FitConfig, fit
from qvr.events import FitWarning
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]
POSTERIOR = Path("/work/shared/posteriordb-sample/eight_schools-eight_schools_noncentered")

PROGRAM = textwrap.dedent("""\
    # Eight schools, non-centred; the school effects recorded per draw.
    object School : FinSet 8

    program eight_schools : School -> School
        sample mu <- Normal(0.0, 5.0)
        sample tau <- HalfCauchy(5.0)
        sample theta_raw : School <- Normal(0.0, 1.0)
        let s = 1.0 * sigma
        record theta = mu + tau * theta_raw
        observe y : School <- Normal(theta, s)
        return theta

    export eight_schools
    """)


def _data():
    d = json.loads((POSTERIOR / "data.json").read_text())
    assert d["J"] == 8
    return {"y": np.asarray(d["y"], dtype=np.float64),
            "sigma": np.asarray(d["sigma"], dtype=np.float64)}


def _reference():
    ref = json.loads((POSTERIOR / "reference.json").read_text())["params"]
    means = np.array([ref[f"theta[{j}]"]["mean"] for j in range(1, 9)])
    sds = np.array([ref[f"theta[{j}]"]["sd"] for j in range(1, 9)])
    return means, sds


@pytest.fixture(scope="module")
def program_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schools")
    path = folder / "schools.qvr"
    path.write_text(PROGRAM, encoding="utf-8")
    data = folder / "schools.json"
    data.write_text(json.dumps({k: v.tolist() for k, v in _data().items()}), encoding="utf-8")
    return path, data


@pytest.fixture(scope="module")
def nuts(program_file, tmp_path_factory):
    path, _ = program_file
    run_dir = tmp_path_factory.mktemp("runs") / "nuts"
    prog = qvr.load(str(path))
    events = []
    res = fit(prog, data=_data(), config=FitConfig(
        method="nuts", num_warmup=500, num_samples=1000, num_chains=4, seed=11,
        dtype="float64"), run_dir=run_dir, on_event=events.append, program_path=str(path))
    assert res.status == "finished"
    return res, run_dir, events


# ---------------------------------------------------------------- the compiled program

def test_program_knows_its_recorded_names_and_computes_them(program_file):
    prog = qvr.load(str(program_file[0])).exports["eight_schools"]
    assert prog.recorded_names == ["theta"]
    # only the steps `theta` needs run: the observe step (and its `s`) does not
    assert [s.name for s in prog.recorded_plan()] == ["mu", "tau", "theta_raw", "theta"]
    assert prog.recorded_sites() == ["mu", "tau", "theta_raw"]
    raw = torch.linspace(-1.0, 1.0, 8, dtype=torch.float64)
    out = prog.recorded_values(torch.zeros(1, 1), {"mu": torch.tensor(2.0, dtype=torch.float64),
                                                   "tau": torch.tensor(3.0, dtype=torch.float64),
                                                   "theta_raw": raw})
    assert list(out) == ["theta"]
    assert torch.equal(out["theta"], 2.0 + 3.0 * raw)


def test_a_missing_site_is_an_error_naming_it(program_file):
    from qvr.runtime.errors import MissingValueError
    prog = qvr.load(str(program_file[0])).exports["eight_schools"]
    with pytest.raises(MissingValueError, match="no value supplied for `tau`"):
        prog.recorded_values(torch.zeros(1, 1), {"mu": torch.tensor(0.0),
                                                 "theta_raw": torch.zeros(8)})


# ---------------------------------------------------------------- NUTS

def test_nuts_records_theta_from_the_same_draws_exactly(nuts):
    res, _, _ = nuts
    s = res.samples
    assert s["recorded.theta"].shape == (4, 1000, 8)
    assert s["theta_raw"].shape == (4, 1000, 8) and s["mu"].shape == (4, 1000, 1)
    np.testing.assert_array_equal(s["recorded.theta"], s["mu"] + s["tau"] * s["theta_raw"])
    assert res.mcmc.samples["recorded.theta"].shape == (4, 1000, 8)


def test_nuts_summary_has_theta_rows_with_rhat_and_ess_marked_recorded(nuts):
    res, _, _ = nuts
    summ = res.summary
    assert summ.recorded == ["theta"]
    assert summ.sites["theta"]["recorded"] is True and "recorded" not in summ.sites["mu"]
    assert summ.sites["theta"]["shape"] == [8] and summ.sites["theta"]["size"] == 8
    for j in range(8):
        row = summ.rows[f"theta[{j}]"]
        assert 0.99 < row["r_hat"] < 1.02
        assert row["ess_bulk"] > 400 and row["ess_tail"] > 400
    assert "recorded.theta[0]" not in summ.rows
    # the sampler's worst figures are the sites' (theta's own are in its rows)
    site_rhat = max(r["r_hat"] for k, r in summ.rows.items() if not k.startswith("theta["))
    assert res.stats["max_r_hat"] == pytest.approx(site_rhat)
    assert "recorded per draw (record v = e): theta" in str(summ)


def test_nuts_theta_matches_the_posteriordb_reference(nuts):
    res, _, _ = nuts
    ref_mean, ref_sd = _reference()
    theta = res.samples["recorded.theta"].reshape(-1, 8)
    rows = [res.summary.rows[f"theta[{j}]"] for j in range(8)]
    mean = np.array([r["mean"] for r in rows])
    sd = np.array([r["sd"] for r in rows])
    mcse = np.array([r["mcse_mean"] for r in rows])
    np.testing.assert_allclose(mean, theta.mean(0), rtol=1e-12)
    np.testing.assert_allclose(sd, theta.std(0, ddof=1), rtol=1e-12)
    assert np.all(np.abs(mean - ref_mean) < 5 * mcse), (mean, ref_mean, mcse)
    assert np.all(np.abs(sd / ref_sd - 1.0) < 0.20), (sd, ref_sd)


def test_nuts_draws_chunks_carry_theta_as_they_are_reported(nuts):
    res, run_dir, events = nuts
    from qvr.events import DrawsChunk
    chunks = [e for e in events if isinstance(e, DrawsChunk)]
    assert chunks and all("recorded.theta" in c.draws for c in chunks)
    for c in chunks:
        d = c.draws
        np.testing.assert_array_equal(d["recorded.theta"],
                                      d["mu"][:, None] + d["tau"][:, None] * d["theta_raw"])
    files = sorted((run_dir / "draws").glob("*.npz"))
    assert files
    with np.load(files[0]) as f:
        assert set(f.files) == {"mu", "tau", "theta_raw", "recorded.theta"}


def test_the_record_keeps_theta_after_reopening(nuts):
    res, run_dir, _ = nuts
    run = open_run(run_dir)
    assert run.status == "finished"
    assert run.recorded_names() == ["theta"]
    draws = run.draws()
    assert set(draws) == {"mu", "tau", "theta_raw", "theta"}
    np.testing.assert_array_equal(draws["theta"], res.samples["recorded.theta"])
    np.testing.assert_array_equal(run.recorded()["theta"], res.samples["recorded.theta"])
    assert set(run.recorded()) == {"theta"}
    np.testing.assert_array_equal(run.samples()["recorded.theta"], res.samples["recorded.theta"])
    summary = run.summary
    assert summary["recorded"] == ["theta"]
    assert summary["sites"]["theta"]["recorded"] is True
    assert summary["parameters"]["theta[7]"]["r_hat"] == pytest.approx(
        res.summary.rows["theta[7]"]["r_hat"])


def test_qvr_show_prints_the_theta_row_marked_recorded(nuts):
    res, run_dir, _ = nuts
    out = subprocess.run([sys.executable, "-m", "qvr.cli", "show", str(run_dir)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[2:] if line.strip()}
    line = rows["theta"]
    assert line.startswith("theta (recorded)  8 ")
    site = res.summary.sites["theta"]
    assert f"{site['mean_lo']:.3g} .. {site['mean_hi']:.3g}" in line
    assert line.split()[-1] == f"{site['r_hat']:.3f}"
    assert "mu " in out.stdout and "(recorded)" not in rows["mu"]


def test_arviz_export_puts_theta_in_the_posterior(nuts, monkeypatch):
    import types
    res, _, _ = nuts
    calls = {}
    fake = types.ModuleType("arviz")

    def from_dict(posterior=None, sample_stats=None):
        calls.update(posterior=posterior, sample_stats=sample_stats)
        return "idata"

    fake.from_dict = from_dict
    monkeypatch.setitem(sys.modules, "arviz", fake)
    assert res.mcmc.to_arviz() == "idata"
    assert set(calls["posterior"]) == {"mu", "tau", "theta_raw", "theta"}
    np.testing.assert_array_equal(calls["posterior"]["theta"], res.samples["recorded.theta"])


# ---------------------------------------------------------------- a writer killed mid-run

KILLED = textwrap.dedent("""\
    import os, signal, sys, json
    import numpy as np
    import qvr
    from qvr.inference import FitConfig, fit
    from qvr.events import DrawsChunk
    path, data, run_dir = sys.argv[1:4]
    d = json.load(open(data))
    def on_event(e):
        # the writer has written this chunk (file, then its line): die as kill -9 does
        if isinstance(e, DrawsChunk) and e.start >= 1:
            os.kill(os.getpid(), signal.SIGKILL)
    fit(qvr.load(path), data={k: np.asarray(v, float) for k, v in d.items()},
        config=FitConfig(method="nuts", num_warmup=50, num_samples=400, num_chains=2,
                         seed=3, dtype="float64"),
        run_dir=run_dir, on_event=on_event, program_path=path)
    """)


def test_a_record_killed_mid_run_keeps_its_recorded_draws(program_file, tmp_path):
    path, data = program_file
    run_dir = tmp_path / "killed"
    script = tmp_path / "killed.py"
    script.write_text(KILLED, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script), str(path), str(data), str(run_dir)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr
    run = open_run(run_dir)
    assert run.status == "interrupted" and run.summary is None
    assert run.recorded_names() == ["theta"]
    draws = run.draws()
    n = draws["theta"].shape[1]
    assert draws["theta"].shape == (2, n, 8) and n >= 1
    np.testing.assert_array_equal(draws["theta"],
                                  draws["mu"] + draws["tau"] * draws["theta_raw"])


# ---------------------------------------------------------------- SVI and SMC

def test_svi_records_theta_from_the_fitted_guide_draws(program_file, tmp_path):
    path, _ = program_file
    run_dir = tmp_path / "svi"
    res = fit(qvr.load(str(path)), data=_data(), config=FitConfig(
        method="svi", steps=300, lr=0.05, seed=5, dtype="float64"), run_dir=run_dir,
        program_path=str(path))
    assert res.status == "finished"
    s = res.samples
    assert s["recorded.theta"].shape == (1, 1000, 8)
    np.testing.assert_array_equal(s["recorded.theta"],
                                  s["mu"][..., None] + s["tau"][..., None] * s["theta_raw"])
    assert res.summary.sites["theta"]["recorded"] is True
    theta = s["recorded.theta"].reshape(-1, 8)
    np.testing.assert_allclose([res.summary.rows[f"theta[{j}]"]["mean"] for j in range(8)],
                               theta.mean(0), rtol=1e-12)
    run = open_run(run_dir)
    assert run.summary["recorded"] == ["theta"]
    assert run.summary["sites"]["theta"]["recorded"] is True
    out = subprocess.run([sys.executable, "-m", "qvr.cli", "show", str(run_dir)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("theta (recorded)  8 ") for line in out.stdout.splitlines())


def test_a_recorded_value_of_a_summed_out_finite_latent_is_reported_not_recorded(tmp_path):
    text = textwrap.dedent("""\
        object Obs : Real 1

        program coin : Obs -> Obs
            sample k <- Bernoulli(0.3)
            sample mu <- Normal(0.0, 1.0)
            let shift = mu + 2.0 * k
            record doubled = 2.0 * mu
            record flipped = 1.0 - k
            observe y <- Normal(shift, 1.0)
            return mu

        export coin
        """)
    prog = qvr.loads(text)
    events = []
    res = fit(prog, data={"y": np.array([[0.5], [1.5], [2.5]])}, config=FitConfig(
        method="nuts", num_warmup=30, num_samples=20, num_chains=2, seed=1,
        dtype="float64"), on_event=events.append)
    warnings = [e.message for e in events if isinstance(e, FitWarning)]
    assert any(m.startswith("`flipped` is not recorded: it reads `k`, which NUTS sums out")
               for m in warnings), warnings
    assert "recorded.flipped" not in res.samples
    np.testing.assert_array_equal(res.samples["recorded.doubled"], 2.0 * res.samples["mu"])
    assert res.summary.recorded == ["doubled"]


def test_smc_says_it_records_nothing():
    from qvr.inference.criticism.recorded import smc_note
    prog = qvr.loads(PROGRAM)
    note = smc_note(prog)
    assert note == ("SMC generation records token sequences only: its particles carry no "
                    "value of the program's sites per particle, so the recorded quantities "
                    "`theta` are not recorded (fit the program with NUTS, HMC or SVI to "
                    "record them)")
    assert smc_note(qvr.loads(PROGRAM.replace("record theta", "let theta"))) is None
