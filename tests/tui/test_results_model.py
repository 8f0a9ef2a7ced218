"""results_model on the recorded runs (tests/tui/fixtures/runs, see make_results_fixtures.py):
Stan's five checks with their values and colours, the grouped summary (sorting, filtering,
expansion), per-parameter series, matrices, partial records, SVI/SMC results, the runs
table, overlay curves and the ArviZ export (with a fake module: ArviZ is not installed)."""
from __future__ import annotations

import json
import math
import types

import numpy as np
import pytest

from qvr.runs import open_run
from qvr.inference.criticism.diagnostics import e_bfmi
from qvr_tui import results_data, runs_model
from qvr_tui.arviz_export import ArvizMissing, export_arviz
from qvr_tui.plots_model import param_series, site_matrix
from qvr_tui.results_model import load_results
from qvr_tui.runs_model import run_rows
from qvr_tui.table_model import table_rows

from results_fixtures import RUNS, copy_runs


@pytest.fixture(scope="module")
def nuts():
    return load_results(open_run(RUNS / "nuts"))


@pytest.fixture(scope="module")
def summary_json():
    return json.loads((RUNS / "nuts" / "summary.json").read_text())


def check(res, key):
    return next(c for c in res.checks if c.key == key)


def test_nuts_checks_values_and_colours(nuts, summary_json):
    assert nuts.status == "finished" and not nuts.partial
    assert (nuts.num_chains, nuts.num_draws) == (2, 60)
    assert [c.key for c in nuts.checks] == ["divergences", "r_hat", "ess", "tree_depth", "e_bfmi"]
    params = summary_json["parameters"]
    div = check(nuts, "divergences")
    n_div = int(np.load(RUNS / "nuts" / "samples.npz")["sample_stats.diverging"].sum())
    assert div.value == f"{n_div}/120" and div.ok == (n_div == 0)
    rh = check(nuts, "r_hat")
    worst = max(r["r_hat"] for r in params.values())
    assert rh.value == f"{worst:.3f}" and rh.ok == (worst <= 1.01)
    assert rh.colour == ("green" if worst <= 1.01 else "red")
    assert rh.threshold == "≤ 1.01"
    ess = check(nuts, "ess")
    b = min(r["ess_bulk"] for r in params.values())
    t = min(r["ess_tail"] for r in params.values())
    assert ess.value == f"{b:.0f}/{t:.0f}" and ess.threshold == "≥ 200"
    assert ess.ok == (b >= 200 and t >= 200)
    assert ess.per_chain == pytest.approx((b / 2, t / 2))
    td = check(nuts, "tree_depth")
    hits = int((np.load(RUNS / "nuts" / "samples.npz")["sample_stats.tree_depth"] >= 10).sum())
    assert td.value == f"{100 * hits / 120:.1f}%" and td.ok == (hits == 0)
    eb = check(nuts, "e_bfmi")
    assert eb.per_chain == pytest.approx(tuple(summary_json["stats"]["e_bfmi"]))
    assert eb.ok == all(v >= 0.3 for v in summary_json["stats"]["e_bfmi"])


def test_recorded_nuts_values(nuts):
    """The fixture's own numbers (seed 1), so the colours above are exercised both ways."""
    assert check(nuts, "divergences").colour == "green"
    assert check(nuts, "r_hat").colour == "red"
    assert check(nuts, "ess").colour == "red"
    assert check(nuts, "e_bfmi").colour == "green"


def test_grouped_summary(nuts, summary_json):
    sites = {s.site: s for s in nuts.sites}
    assert set(sites) == {"mu", "sigma", "probs"}
    assert sites["probs"].shape == (3, 4) and sites["probs"].shape_text == "3×4"
    assert sites["mu"].shape == () and sites["mu"].shape_text == "scalar"
    assert [c.label for c in sites["probs"].coords][:2] == ["probs[0,0]", "probs[0,1]"]
    assert len(sites["probs"].coords) == 12
    pr = {k: v for k, v in summary_json["parameters"].items() if k.startswith("probs[")}
    assert sites["probs"].worst_r_hat == pytest.approx(max(v["r_hat"] for v in pr.values()))
    assert sites["probs"].min_ess_tail == pytest.approx(min(v["ess_tail"] for v in pr.values()))
    lo, hi = sites["probs"].mean_range
    assert (lo, hi) == pytest.approx((min(v["mean"] for v in pr.values()),
                                      max(v["mean"] for v in pr.values())))


def test_sorting(nuts):
    by_rhat = [r.key for r in table_rows(nuts.sites, "r_hat")]
    expected = sorted(nuts.sites, key=lambda s: -s.worst_r_hat)
    assert by_rhat == [s.site for s in expected]
    by_bulk = [r.key for r in table_rows(nuts.sites, "ess_bulk")]
    assert by_bulk == [s.site for s in sorted(nuts.sites, key=lambda s: s.min_ess_bulk)]
    assert [r.key for r in table_rows(nuts.sites, "name")] == ["mu", "probs", "sigma"]
    # coordinates of an expanded site follow it, sorted the same way
    rows = table_rows(nuts.sites, "r_hat", expanded={"probs"})
    i = [r.key for r in rows].index("probs")
    coords = [r.coord for r in rows[i + 1:i + 13]]
    assert all(r.depth == 1 for r in rows[i + 1:i + 13])
    vals = [c.get("r_hat") for c in coords]
    assert vals == sorted(vals, reverse=True)


def test_nan_rhat_sorts_first():
    coord = lambda s, v: results_data.Coord(s, s, (), {"r_hat": v})
    a = results_data.SiteRow("a", (), (coord("a", 1.2),), 0)
    b = results_data.SiteRow("b", (), (coord("b", float("nan")),), 1)
    assert [r.key for r in table_rows([a, b], "r_hat")] == ["b", "a"]


def test_filter(nuts):
    assert [r.key for r in table_rows(nuts.sites, "order", "SIG")] == ["sigma"]
    rows = table_rows(nuts.sites, "order", "[2,")
    assert [r.key for r in rows] == ["probs", "probs[2,0]", "probs[2,1]", "probs[2,2]",
                                     "probs[2,3]"]
    assert table_rows(nuts.sites, "order", "nothing-like-this") == []
    # a site matched by name lists its coordinates only when expanded
    assert [r.key for r in table_rows(nuts.sites, "order", "prob")] == ["probs"]
    assert len(table_rows(nuts.sites, "order", "prob", {"probs"})) == 13


def test_param_series(nuts):
    s = param_series(nuts, "probs[1,2]")
    draws = np.load(RUNS / "nuts" / "samples.npz")["probs"][:, :, 1, 2]
    assert len(s.traces) == 2 and [len(t) for t in s.traces] == [60, 60]
    np.testing.assert_allclose(s.traces[1], draws[1])
    assert s.rank_counts.shape == (2, 12)  # 60 draws per chain -> 12 rank bins
    assert s.rank_counts.sum(axis=1).tolist() == [60, 60]
    assert int(s.hist_counts.sum()) == 120
    div = np.load(RUNS / "nuts" / "samples.npz")["sample_stats.diverging"]
    assert [len(d) for d in s.divergent] == div.astype(bool).sum(axis=1).tolist()
    scalar = param_series(nuts, "mu")
    assert [len(t) for t in scalar.traces] == [60, 60]
    assert param_series(nuts, "nope[0]") is None


def test_rank_histogram_of_separated_chains():
    res = results_data.Results(path=RUNS, method="nuts", status="finished")
    res.draws = {"x": np.stack([np.arange(50.0), 100 + np.arange(50.0)])[..., None]}
    s = param_series(res, "x", bins=10)
    # chain 0 holds the lowest 50 ranks of 100: all its draws in the first half of the bins
    assert s.rank_counts[0].tolist() == [10] * 5 + [0] * 5
    assert s.rank_counts[1].tolist() == [0] * 5 + [10] * 5


def test_site_matrix(nuts):
    draws = np.load(RUNS / "nuts" / "samples.npz")["probs"].astype(np.float64)
    m = site_matrix(nuts, "probs", "mean")
    assert m.shape == (3, 4)
    np.testing.assert_allclose(m, draws.reshape(-1, 3, 4).mean(axis=0))
    np.testing.assert_allclose(site_matrix(nuts, "probs", "sd"),
                               draws.reshape(-1, 3, 4).std(axis=0, ddof=1))
    np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-5)  # Dirichlet rows
    assert site_matrix(nuts, "mu") is None


def test_interrupted_is_partial():
    res = load_results(open_run(RUNS / "interrupted"))
    assert res.status == "interrupted" and res.partial
    run = open_run(RUNS / "interrupted")
    per = run.draws_per_chain()
    assert res.num_draws == min(per.values()) and res.num_draws < 60
    assert res.partial_note.startswith("partial: the worker stopped without finishing; "
                                       f"built from {res.num_draws} draws per chain")
    assert {s.site for s in res.sites} == {"mu", "sigma", "probs"}
    # checks from what is there: R-hat/ESS recomputed; E-BFMI needs the energies: n/a
    assert check(res, "e_bfmi").ok is None and check(res, "e_bfmi").value == "n/a"
    assert check(res, "r_hat").ok is not None
    assert check(res, "divergences").ok is not None
    assert [len(t) for t in param_series(res, "mu").traces] == [res.num_draws] * 2


def test_failed_message():
    res = load_results(open_run(RUNS / "failed"))
    assert res.status == "failed"
    assert "class values out of range" in res.message


def test_svi_results():
    res = load_results(open_run(RUNS / "svi"))
    losses = np.load(RUNS / "svi" / "losses.npy")
    assert len(res.losses) == 300
    stats = json.loads((RUNS / "svi" / "summary.json").read_text())["stats"]
    assert res.final_loss == pytest.approx(stats["final_loss"])
    assert res.final_elbo == pytest.approx(-stats["final_loss"])
    assert res.final_loss == pytest.approx(losses[-1], rel=1e-6)
    guide = {g.site: g for g in res.guide}
    assert set(guide) == {"mu", "sigma", "probs"}
    params = np.load(RUNS / "svi" / "params.npz")
    # the guide lives in unconstrained space: a 3x4 simplex plate has a 3x3 location
    assert guide["probs"].is_matrix and guide["probs"].shape == (3, 3)
    assert guide["probs"].site_shape == (3, 4) and guide["probs"].unconstrained
    assert not guide["mu"].unconstrained
    np.testing.assert_allclose(guide["mu"].scale, np.exp(params["log_scale_mu"]))
    np.testing.assert_allclose(guide["probs"].loc, params["loc_probs"])
    assert site_matrix(res, "probs", "sd").shape == (3, 3)
    # the posterior summary (from draws of the guide) is by site, in the site's own shape
    assert res.site("probs").shape == (3, 4)


def test_smc_results():
    res = load_results(open_run(RUNS / "smc"))
    seqs = json.loads((RUNS / "smc" / "sequences.json").read_text())
    assert res.log_Z == pytest.approx(seqs["log_Z"])
    assert len(res.sequences) == len(seqs["top"]) == 6  # every distinct sequence
    assert [r.text for r in res.sequences] == [t["text"] for t in seqs["top"]]
    assert sum(r.weight for r in res.sequences) == pytest.approx(
        sum(t["weight"] for t in seqs["top"]))


def test_e_bfmi_formula():
    e = np.array([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    # Stan's formula, sum of squared steps over sum of squared deviations:
    # chain 0: 3 / (4 * 0.25) = 3; chain 1: (0 + 1 + 0) / (4 * 0.25) = 1
    assert e_bfmi(e) == pytest.approx([3.0, 1.0])


def test_arviz_missing_message(nuts):
    def no_arviz(name):
        raise ImportError(name)
    with pytest.raises(ArvizMissing) as err:
        export_arviz(nuts, importer=no_arviz)
    assert str(err.value) == "Export to ArviZ needs the arviz package: pip install arviz (into .venv)."


def test_arviz_export_with_fake_module(nuts, tmp_path):
    calls = {}

    class Data:
        def to_netcdf(self, path):
            calls["path"] = path
            open(path, "w").close()

    def from_dict(posterior=None, sample_stats=None):
        calls["posterior"] = posterior
        calls["sample_stats"] = sample_stats
        return Data()

    fake = types.SimpleNamespace(from_dict=from_dict)
    out = export_arviz(nuts, tmp_path / "post.nc", importer=lambda name: fake)
    assert out == tmp_path / "post.nc" and out.exists()
    assert calls["posterior"]["probs"].shape == (2, 60, 3, 4)
    assert calls["posterior"]["mu"].shape == (2, 60)  # scalar sites without the (1,) axis
    assert calls["sample_stats"]["diverging"].dtype == bool
    assert calls["sample_stats"]["lp"].shape == (2, 60)
    with pytest.raises(ValueError, match="only MCMC draws"):
        export_arviz(load_results(open_run(RUNS / "svi")), importer=lambda name: fake)


def test_run_rows_and_stale(tmp_path):
    runs, program = copy_runs(tmp_path)
    rows = run_rows(runs, program)
    by = {r.name: r for r in rows}
    assert set(by) == {"nuts", "svi", "failed", "interrupted"}  # not the SMC run of another file
    assert {n: r.status for n, r in by.items()} == {
        "nuts": "finished", "svi": "finished", "failed": "failed", "interrupted": "interrupted"}
    assert [r.started for r in rows] == sorted((r.started for r in rows), reverse=True)
    stats = json.loads((RUNS / "nuts" / "summary.json").read_text())["stats"]
    assert by["nuts"].key_label == "R-hat"
    assert by["nuts"].key_value == pytest.approx(stats["max_r_hat"])
    assert by["svi"].key_label == "loss" and by["svi"].key_text.startswith("loss ")
    assert not any(r.stale for r in rows)
    program.write_text(program.read_text() + "\n# edited\n")
    assert all(r.stale for r in run_rows(runs, program))


def test_curves():
    label, x, y = runs_model.curve(open_run(RUNS / "svi"))
    assert label == "loss" and len(x) == len(y) == 300
    label, x, y = runs_model.curve(open_run(RUNS / "nuts"))
    lp = np.load(RUNS / "nuts" / "samples.npz")["sample_stats.log_density"]
    assert label == "log density" and len(y) == 60
    np.testing.assert_allclose(y, lp.mean(axis=0))
    label, x, y = runs_model.curve(open_run(RUNS / "interrupted"))
    assert label == "log density" and 0 < len(y) < 60
    assert all(math.isfinite(v) for v in y)


def test_normal_quantile_without_torch_matches_statistics():
    """The rank-normalised diagnostics of a partial run are computed in the UI process,
    without torch: diagnostics' numpy normal quantile (AS241) against CPython's."""
    import statistics

    from qvr.inference.criticism.diagnostics import _ndtri_as241
    p = np.concatenate([np.linspace(1e-9, 1 - 1e-9, 2001), [1e-300, 0.075, 0.925]])
    want = np.array([statistics.NormalDist().inv_cdf(float(x)) for x in p])
    np.testing.assert_allclose(_ndtri_as241(p), want, rtol=0, atol=1e-15)


def test_e_bfmi_of_a_run_without_draws_is_unknown_not_red(tmp_path):
    """A NUTS run cancelled during warmup has E-BFMI NaN per chain: the check says n/a."""
    import json
    import shutil
    from pathlib import Path
    src = next(p for p in (Path(__file__).parent / "fixtures" / "runs").iterdir()
               if (p / "run.json").is_file() and json.loads((p / "run.json").read_text())
               .get("method") == "nuts" and (p / "summary.json").is_file())
    run_dir = tmp_path / "r"
    shutil.copytree(src, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["stats"]["e_bfmi"] = [float("nan"), float("nan")]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    from qvr.runs import open_run
    from qvr_tui.results_model import load_results
    check = next(c for c in load_results(open_run(run_dir)).checks if c.key == "e_bfmi")
    assert check.ok is None and check.value == "n/a"


def test_the_runs_table_gives_a_run_with_nothing_to_sample_its_log_marginal_likelihood():
    """NUTS with no continuous latent site has no R-hat: the Runs table's result column
    was empty; it gives the log marginal likelihood the run reported."""
    from pathlib import Path
    run = open_run(Path(__file__).parent / "recorded" / "nuts_nothing_to_sample")
    label, value = runs_model.run_key_number(run)
    assert label == "log ML" and value == pytest.approx(-184.8496856689453, abs=1e-9)
    row = runs_model.RunRow(run.path, "x", "finished", "nuts", "", label, value, False)
    assert row.key_text == "log ML -184.8"
    # a run cancelled before its first draw records R-hat NaN: the column stays empty
    # (it read "R-hat nan" in tmux)
    cancelled = runs_model.RunRow(run.path, "x", "cancelled", "nuts", "", "R-hat",
                                  float("nan"), False)
    assert cancelled.key_text == ""


def test_the_partial_note_of_a_cancelled_run():
    from pathlib import Path
    from qvr_tui.results_data import Results
    from qvr_tui.results_model import _partial_note
    res = Results(path=Path("r"), method="svi", status="cancelled", partial=True,
                  losses=np.array([3.0, 2.0]))
    assert _partial_note(res) == "partial: the fit was cancelled; losses from 2 progress events"
