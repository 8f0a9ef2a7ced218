"""`qvr.inference.criticism.checks`: PSIS-LOO against arviz-stats and against exact leave-one-out
(a conjugate normal model), predictive p-values, LOO-PIT and its uniformity test, the
files `write_checks` leaves in a record, and what `qvr show` prints of them.  The records
are fakes built with numpy (`predictive_records.py`)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from predictive_records import conjugate_normal, normal_logpdf, write_record  # noqa: E402

from qvr.inference.criticism import checks  # noqa: E402
from qvr.runs import open_run  # noqa: E402

azb = pytest.importorskip("arviz_base")
azs = pytest.importorskip("arviz_stats")


@pytest.fixture(scope="module")
def normal_case():
    rng = np.random.default_rng(1)
    y = rng.normal(0.5, 1.0, size=60)
    return y, conjugate_normal(y, 1.0, chains=4, draws=1000, seed=2)


def test_loo_equals_arviz_on_the_same_array():
    """Element rows of a (4, 300, 5, 3) site: the same elpd, SE, p_loo and Pareto k as
    arviz_stats.loo on the array (with the same reff; and with arviz's own reff from the
    posterior draws when they are given)."""
    rng = np.random.default_rng(0)
    mu = rng.normal(size=(4, 300)).cumsum(axis=1) * 0.05  # autocorrelated: reff < 1
    ll = -0.5 * (rng.normal(size=(4, 300, 5, 3)) + mu[..., None, None]) ** 2 - 1.0
    ours = checks.loo({"y": ll}, {"rows": {"y": "global"}, "kind": "posterior"}, reff=0.7)
    dt = azb.from_dict({"log_likelihood": {"y": ll}})
    ref = azs.loo(dt, pointwise=True, reff=0.7)
    assert ours["rows"] == "element" and ours["n_rows"] == 15 and ours["n_draws"] == 1200
    assert ours["elpd_loo"] == pytest.approx(float(ref.elpd), rel=1e-10)
    assert ours["se"] == pytest.approx(float(ref.se), rel=1e-10)
    assert ours["p_loo"] == pytest.approx(float(ref.p), rel=1e-8)
    np.testing.assert_allclose(ours["pareto_k"], ref.pareto_k.values.reshape(-1), rtol=1e-10)
    np.testing.assert_allclose(ours["elpd_i"], ref.elpd_i.values.reshape(-1), rtol=1e-10)
    assert ours["labels"][:4] == ["y[0,0]", "y[0,1]", "y[0,2]", "y[1,0]"]
    assert ours["good_k"] == pytest.approx(min(1 - 1 / np.log10(1200), 0.7))
    # arviz's default reff comes from the posterior draws
    with_post = checks.loo({"y": ll}, {"rows": {"y": "global"}}, posterior={"mu": mu})
    dt2 = azb.from_dict({"posterior": {"mu": mu}, "log_likelihood": {"y": ll}})
    ref2 = azs.loo(dt2, pointwise=True)
    assert with_post["reff"] < 0.5
    assert with_post["elpd_loo"] == pytest.approx(float(ref2.elpd), rel=1e-10)
    np.testing.assert_allclose(with_post["pareto_k"], ref2.pareto_k.values.reshape(-1),
                               rtol=1e-10)


def test_loo_of_a_conjugate_normal_model_is_exact_leave_one_out(normal_case):
    """Exact posterior draws; leave-one-out predictive of y_i is normal in closed form."""
    y, m = normal_case
    out = checks.loo({"y": m["log_lik"]}, {"rows": {"y": "local"}, "kind": "posterior"})
    exact = m["exact_loo_i"]
    assert out["rows"] == "row" and out["n_rows"] == 60 and out["var"] == "y"
    assert abs(out["elpd_loo"] - exact.sum()) < out["se"]
    assert out["elpd_loo"] == pytest.approx(exact.sum(), abs=0.02)
    np.testing.assert_allclose(out["elpd_i"], exact, atol=0.01)  # Monte Carlo: ~0.004
    assert out["se"] == pytest.approx(np.sqrt(60 * np.var(exact)), rel=0.01)
    assert 0.6 < out["p_loo"] < 1.2  # one parameter
    assert out["warning"] is False and out["high_k"] == [] and out["n_high_k"] == 0
    assert out["method"] == "psis"


def test_loo_sums_the_sites_of_a_row_and_lists_high_k_rows():
    """Two local sites of 30 rows (one with 2 terms per row) are one row each; an outlier
    row gets the highest Pareto k and its label."""
    rng = np.random.default_rng(3)
    y = rng.normal(size=30)
    y[7] = 9.0  # an outlier: its row's leave-one-out posterior differs
    m = conjugate_normal(y, 1.0, chains=2, draws=500, seed=4)
    z = rng.normal(size=(2, 500, 30, 2)) * 0.1 - 1.0
    out = checks.loo({"y": m["log_lik"], "z": z}, {"rows": {"y": "local", "z": "local"}})
    rows = m["log_lik"] + z.sum(axis=-1)
    ref = azs.loo(azb.from_dict({"log_likelihood": {"v": rows}}), pointwise=True,
                  reff=out["reff"])
    assert out["rows"] == "row" and out["n_rows"] == 30 and out["var"] == "y+z"
    assert out["elpd_loo"] == pytest.approx(float(ref.elpd), rel=1e-10)
    assert "labels" not in out
    k = np.asarray(out["pareto_k"])
    assert int(np.argmax(k)) == 7
    assert out["good_k"] == pytest.approx(2 / 3)  # 1000 draws
    assert out["high_k"] == [{"row": 7, "label": "y+z[7]", "k": pytest.approx(k[7])}]
    assert out["n_high_k"] == 1 and out["warning"] is True
    # rows of different kinds: every element is an observation
    flat = checks.loo({"y": m["log_lik"], "z": z}, {"rows": {"y": "local", "z": "global"}})
    assert flat["rows"] == "element" and flat["n_rows"] == 90
    assert flat["labels"][30] == "z[0,0]"


def test_loo_of_guide_draws_corrects_by_importance_and_matches_arviz(normal_case):
    """Draws of mu from a wider normal q with log p (joint) and log q: PSIS-corrected LOO
    recovers the exact leave-one-out, and equals arviz's loo_approximate_posterior."""
    y, m = normal_case
    rng = np.random.default_rng(5)
    n = y.size
    prec = 1 / 100 + n
    mn, sn = (y.sum()) / prec, 1 / np.sqrt(prec)
    mu = rng.normal(mn, 1.5 * sn, size=(1, 4000))
    ll = normal_logpdf(y[None, None, :], mu[..., None], 1.0)
    log_p = ll.sum(axis=-1) + normal_logpdf(mu, 0.0, 10.0)
    log_q = normal_logpdf(mu, mn, 1.5 * sn)
    out = checks.loo({"y": ll}, {"rows": {"y": "local"}, "kind": "guide"},
                     {"log_p": log_p, "log_q": log_q})
    ref = azs.loo_approximate_posterior(azb.from_dict({"log_likelihood": {"y": ll}}),
                                        log_p=log_p.ravel(), log_q=log_q.ravel(),
                                        pointwise=True)
    assert out["method"] == "psis-guide" and out["kind"] == "guide" and out["reff"] == 1.0
    assert out["elpd_loo"] == pytest.approx(float(ref.elpd), rel=1e-10)
    assert out["elpd_loo"] == pytest.approx(m["exact_loo_i"].sum(), abs=0.05)


def test_ppc_p_values_of_data_like_and_unlike_the_replicates():
    rng = np.random.default_rng(6)
    y_rep = rng.normal(size=(2, 500, 100))
    same = checks.ppc({"y": rng.normal(size=100)}, {"y": y_rep}, None, None,
                      {"kind": "posterior"})
    site = same["sites"]["y"]
    assert same["draws"] == 1000 and site["discrete"] is False and "zeros" not in site["stats"]
    for k in ("mean", "sd", "min", "max"):
        assert 0.05 < site["stats"][k]["p_value"] < 0.95, k
        assert site["stats"][k]["extreme"] is False
    assert site["extreme"] == []
    assert site["loo_pit_note"] == "no log-likelihood terms"
    up = checks.ppc({"y": rng.normal(0.6, 1.0, size=100)}, {"y": y_rep}, None, None, {})
    assert up["sites"]["y"]["stats"]["mean"]["p_value"] < 0.01
    assert up["sites"]["y"]["stats"]["mean"]["extreme"] is True
    assert "mean" in up["sites"]["y"]["extreme"]
    down = checks.ppc({"y": rng.normal(-0.6, 1.0, size=100)}, {"y": y_rep}, None, None, {})
    assert down["sites"]["y"]["stats"]["mean"]["p_value"] > 0.99
    t = down["sites"]["y"]["stats"]["mean"]
    rep_means = y_rep.reshape(1000, 100).mean(axis=1)
    assert t["replicated"]["q50"] == pytest.approx(np.median(rep_means))
    assert t["p_value"] == pytest.approx(np.mean(rep_means > t["observed"]))


def test_ppc_of_counts_has_zeros_bars_per_value_and_group_checks():
    """Poisson counts in 6 groups; the replicates miss group 2's level: that group is the
    one extreme group; the histogram has one bar per count value."""
    rng = np.random.default_rng(7)
    g = np.repeat(np.arange(6), 20)
    rate = np.where(g == 2, 9.0, 3.0)
    y = rng.poisson(rate)
    y_rep = rng.poisson(3.0, size=(1, 800, 120))
    out = checks.ppc({"y": y, "group.g": g}, {"y": y_rep.astype(np.float32)}, None, None,
                     {"kind": "posterior"})
    site = out["sites"]["y"]
    assert site["discrete"] is True and site["count"] is True
    assert site["stats"]["zeros"]["observed"] == pytest.approx(np.mean(y == 0))
    grp = site["groups"]["g"]
    assert grp["n_groups"] == 6 and grp["n_extreme"] == 1
    two = grp["groups"][2]
    assert two["group"] == 2 and two["n"] == 20 and two["extreme"] and two["p_value"] < 0.01
    assert two["observed"] == pytest.approx(y[g == 2].mean())
    hist = site["hist"]
    edges = np.asarray(hist["edges"])
    assert np.allclose(np.diff(edges), 1.0) and edges[0] == -0.5  # a bar per value from 0
    assert sum(hist["observed"]) == 120
    assert hist["observed"][0] == int(np.sum(y == 0))
    assert sum(hist["replicated_mean"]) == pytest.approx(120)
    sub = y_rep[0, np.linspace(0, 799, 500).astype(int)]
    assert hist["draws"] == 500
    assert hist["replicated_mean"][3] == pytest.approx(np.mean(np.sum(sub == 3, axis=1)))
    assert hist["replicated_q95"][3] == pytest.approx(np.quantile(np.sum(sub == 3, axis=1),
                                                                  0.95))


def test_loo_pit_is_uniform_for_the_right_model_and_not_for_a_wrong_one(normal_case):
    y, m = normal_case
    right = checks.ppc({"y": y}, {"y": m["y_rep"]}, {"y": m["log_lik"]}, None,
                       {"kind": "posterior", "rows": {"y": "local"}})
    pit = right["sites"]["y"]["loo_pit"]
    assert pit["weights"] == "element" and len(pit["values"]) == 60
    assert pit["outside"] is False and pit["p_value"] > 0.1
    assert len(pit["x"]) == len(pit["ecdf"]) == len(pit["band_lower"]) == 59
    assert all(lo <= e <= hi for lo, e, hi in zip(pit["band_lower"], pit["ecdf"],
                                                  pit["band_upper"]))
    # the same PIT as arviz's loo_pit (same PSIS weights; continuous: no ties)
    from arviz_stats.base import array_stats
    s = 4000
    lw, _ = array_stats.psislw(m["log_lik"].reshape(s, 60).T, r_eff=1.0, axis=-1)
    ref = array_stats.loo_pit(m["y_rep"].reshape(s, 60).T[:, None, :], y, lw[:, None, :])
    ours = checks.ppc({"y": y}, {"y": m["y_rep"]}, {"y": m["log_lik"]}, None, {}, reff=1.0)
    np.testing.assert_allclose(ours["sites"]["y"]["loo_pit"]["values"], ref, atol=1e-12)
    # a model with sigma 1 for data of sd 3: PIT piles at 0 and 1
    rng = np.random.default_rng(8)
    wide = rng.normal(0.0, 3.0, size=80)
    w = conjugate_normal(wide, 1.0, chains=2, draws=1000, seed=9)
    wrong = checks.ppc({"y": wide}, {"y": w["y_rep"]}, {"y": w["log_lik"]}, None,
                       {"kind": "posterior"})
    bad = wrong["sites"]["y"]["loo_pit"]
    assert bad["outside"] is True and bad["p_value"] < 0.01
    assert wrong["sites"]["y"]["stats"]["sd"]["extreme"] is True


def test_uniformity_band_holds_its_level():
    """About 5% of uniform samples leave the 95% simultaneous band."""
    rng = np.random.default_rng(10)
    out = [checks.uniformity(rng.uniform(size=50), rng=np.random.default_rng(i))["outside"]
           for i in range(200)]
    assert 0.01 <= np.mean(out) <= 0.10


def test_randomized_pit_of_discrete_data_lies_between_the_two_cdfs():
    rng = np.random.default_rng(11)
    y = rng.poisson(2.0, size=40)
    y_rep = rng.poisson(2.0, size=(1, 1000, 40)).astype(np.float32)
    ll = 1e-9 * rng.normal(size=(1, 1000, 40))  # flat weights: PIT = predictive CDF
    out = checks.ppc({"y": y}, {"y": y_rep}, {"y": ll}, None, {"kind": "posterior"})
    pit = np.asarray(out["sites"]["y"]["loo_pit"]["values"])
    assert out["sites"]["y"]["loo_pit"]["randomized"] is True
    lo = (y_rep[0] < y).mean(axis=0)
    hi = (y_rep[0] <= y).mean(axis=0)
    assert np.all(lo - 1e-6 <= pit) and np.all(pit <= hi + 1e-6)
    assert np.all((pit > lo + 1e-6) | (pit < hi - 1e-6) | (lo == hi))
    assert np.std(pit) > 0.2  # spread over (0, 1), not piled at the bounds
    # terms equal at every draw (arviz's PSIS refuses them) weigh the draws equally
    flat = checks.ppc({"y": y}, {"y": y_rep}, {"y": np.zeros((1, 1000, 40))}, None, {})
    pit0 = np.asarray(flat["sites"]["y"]["loo_pit"]["values"])
    assert np.all(lo - 1e-12 <= pit0) and np.all(pit0 <= hi + 1e-12)
    # NaN terms: the statistics stand, the PIT says why it is missing
    ll[0, :, 3] = np.nan
    nan = checks.ppc({"y": y}, {"y": y_rep}, {"y": ll}, None, {})
    assert "stats" in nan["sites"]["y"] and "loo_pit" not in nan["sites"]["y"]
    assert nan["sites"]["y"]["loo_pit_note"] == (
        "LOO-PIT failed: ValueError: 1 of 40 log-likelihood terms are NaN at some draw "
        "(the first: column 3)")


def test_loo_of_terms_equal_at_every_draw():
    """A missing value's term is an exact zero at every draw: equal weights, k = 0, its
    elpd_i the term itself; the other rows as arviz computes them alone."""
    rng = np.random.default_rng(15)
    ll = np.zeros((2, 300, 12))
    ll[..., :8] = rng.normal(size=(2, 300, 8)) * 0.2 - 1.0
    out = checks.loo({"y": ll}, {"rows": {"y": "local"}}, reff=1.0)
    ref = azs.loo(azb.from_dict({"log_likelihood": {"y": ll[..., :8]}}), pointwise=True,
                  reff=1.0)
    assert out["n_constant"] == 4 and out["elpd_i"][8:] == [0.0] * 4
    assert out["pareto_k"][8:] == [0.0] * 4
    assert out["elpd_loo"] == pytest.approx(float(ref.elpd), rel=1e-10)
    np.testing.assert_allclose(out["pareto_k"][:8], ref.pareto_k.values, rtol=1e-10)


def test_row_weights_for_sites_summed_per_row():
    """An enumerated site ``a+b`` (one term per row) gives LOO-PIT weights to each of its
    observed sites by row."""
    y, m = conjugate_normal_pair()
    out = checks.ppc({"a": y, "b": y}, {"a": m["y_rep"], "b": m["y_rep"]},
                     {"a+b": 2 * m["log_lik"]}, None,
                     {"kind": "posterior", "rows": {"a+b": "enumerated"}})
    assert out["sites"]["a"]["loo_pit"]["weights"] == "row"
    assert out["sites"]["b"]["loo_pit"]["weights"] == "row"


def conjugate_normal_pair():
    rng = np.random.default_rng(12)
    y = rng.normal(size=20)
    return y, conjugate_normal(y, 1.0, chains=1, draws=400, seed=13)


def test_write_checks_writes_the_files_the_reader_and_show_read(tmp_path, normal_case):
    y, m = normal_case
    path = write_record(tmp_path / "r", log_lik={"y": m["log_lik"]}, y_rep={"y": m["y_rep"]},
                        observed={"y": y}, groups={"half": np.arange(60) // 30},
                        posterior={"mu": m["mu"]})
    run = open_run(path)
    assert run.loo()["elpd_loo"] == pytest.approx(m["exact_loo_i"].sum(), abs=0.05)
    assert not (path / "loo.json").exists()  # computed, not written, by the reader
    loo, ppc = checks.write_checks(path)
    on_disk = json.loads((path / "loo.json").read_text())
    assert on_disk == json.loads(json.dumps(loo))
    assert on_disk["elpd_loo"] == pytest.approx(m["exact_loo_i"].sum(), abs=0.05)
    assert 0.5 < on_disk["reff"] <= 1.2
    saved = json.loads((path / "ppc.json").read_text())
    assert saved["sites"]["y"]["groups"]["half"]["n_groups"] == 2
    assert saved["sites"]["y"]["loo_pit"]["outside"] is False
    assert run.ppc() == saved
    from qvr.commands.report import render_run
    text = render_run(run)
    assert f"LOO: elpd_loo {on_disk['elpd_loo']:.1f} (SE {on_disk['se']:.1f})" in text
    assert "60 rows; Pareto k: all below 0.70" in text
    assert "Predictive checks (posterior, 4000 draws):" in text
    assert "  y: mean p=" in text and "LOO-PIT uniformity p=" in text
    assert "half: 0 of 2 groups extreme" in text
    # ArviZ export of the record: arviz's LOO on it is ours
    from qvr.inference.criticism.diagnostics import run_to_arviz
    dt = run_to_arviz(run)
    assert set(dt.children) >= {"posterior", "log_likelihood", "posterior_predictive",
                                "observed_data", "constant_data"}
    assert float(azs.loo(dt).elpd) == pytest.approx(on_disk["elpd_loo"], rel=1e-9)


def test_write_checks_of_a_prior_run_and_of_failures(tmp_path, monkeypatch):
    rng = np.random.default_rng(14)
    y = rng.normal(size=10)
    path = write_record(tmp_path / "p", log_lik={"y": rng.normal(size=(1, 100, 10))},
                        y_rep={"y": rng.normal(size=(1, 100, 10))}, observed={"y": y},
                        kind="prior", method="prior")
    loo, ppc = checks.write_checks(path)
    assert loo is None and not (path / "loo.json").exists()
    assert ppc["kind"] == "prior" and "loo_pit" not in ppc["sites"]["y"]
    assert "prior" in ppc["sites"]["y"]["loo_pit_note"]
    # a statistical failure is written as an error, not raised
    bad = rng.normal(size=(1, 100, 10))
    bad[0, 5, 2] = np.nan
    path2 = write_record(tmp_path / "f", log_lik={"y": bad},
                         y_rep={"y": rng.normal(size=(1, 100, 10))}, observed={"y": y})
    loo, ppc = checks.write_checks(path2)
    message = ("ValueError: 1 of 10 log-likelihood terms are NaN at some draw (the first: "
               "column 2)")
    assert loo == {"error": message}
    assert json.loads((path2 / "loo.json").read_text()) == loo
    assert ppc["sites"]["y"]["stats"]["mean"]["p_value"] > 0
    assert ppc["sites"]["y"]["loo_pit_note"] == "LOO-PIT failed: " + message
    from qvr.commands.report import loo_line
    assert loo_line(loo) == "LOO: failed: " + message

    def boom(*a, **k):
        raise FloatingPointError("the weights overflowed")
    monkeypatch.setattr(checks, "_site_ppc", boom)
    _, ppc = checks.write_checks(path2)
    assert ppc["sites"]["y"] == {"error": "FloatingPointError: the weights overflowed"}


def test_records_without_pointwise_terms_have_no_checks(tmp_path):
    from qvr.commands.report import checks_lines
    from qvr.runs.writer import RunWriter
    with RunWriter(tmp_path / "old", {"method": "nuts"}):
        pass
    run = open_run(tmp_path / "old")
    assert checks.loo_of_run(run) is None and checks.ppc_of_run(run) is None
    assert run.loo() is None and run.ppc() is None
    assert checks_lines(run) == []
