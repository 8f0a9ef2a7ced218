"""Issue 25, the workflow a new user runs: `examples/count_regression.qvr` fitted twice
with NUTS on its shipped (over-dispersed) data, once per export.  The Poisson export loses
to the negative binomial by more than 2 SE of the elpd difference, and its replicates'
spread (the sd statistic) is too small for the data (p < 0.05), while the negative
binomial's is not; `qvr compare` ranks them and the ArviZ export carries the groups."""
from __future__ import annotations

from pathlib import Path

import pytest

import qvr
from qvr.inference import FitConfig, fit
from qvr.inference.criticism.checks import compare
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "examples" / "count_regression.qvr"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("cmp")
    prog = qvr.load(PATH)
    out = {}
    for export in ("rentals", "rentals_poisson"):
        res = fit(prog, config=FitConfig(method="nuts", num_warmup=200, num_samples=200,
                                         num_chains=2, seed=3),
                  run_dir=base / export, program_path=str(PATH), export=export)
        assert res.status == "finished"
        out[export] = open_run(base / export)
    return out


def test_negative_binomial_beats_poisson_by_more_than_two_se(runs):
    nb, po = runs["rentals"], runs["rentals_poisson"]
    assert nb.data_sha256 == po.data_sha256  # same observations, different covariates
    table = compare([po.path, nb.path])
    best, second = table["runs"]
    assert best["export"] == "rentals" and second["export"] == "rentals_poisson"
    assert second["elpd_diff"] > 2 * second["dse"] > 0
    assert "rentals predicts better than rentals_poisson" in table["verdict"]
    assert best["weight"] > 0.9


def test_poisson_replicates_are_under_dispersed(runs):
    po = runs["rentals_poisson"].ppc()["sites"]["rented"]["stats"]["sd"]
    nb = runs["rentals"].ppc()["sites"]["rented"]["stats"]["sd"]
    assert po["p_value"] < 0.05 and po["extreme"]
    assert 0.05 < nb["p_value"] < 0.95
    assert po["observed"] == pytest.approx(nb["observed"])
    assert po["replicated"]["q95"] < po["observed"]


def test_arviz_export_carries_the_predictive_groups(runs):
    from qvr.inference.criticism.diagnostics import run_to_arviz
    dt = run_to_arviz(runs["rentals"])
    for group in ("posterior", "log_likelihood", "posterior_predictive", "observed_data"):
        assert group in dt.children, group
    assert dict(dt["log_likelihood"]["rented"].sizes)["draw"] == 200
