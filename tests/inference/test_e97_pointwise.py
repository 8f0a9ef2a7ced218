"""Extension E9.7 after a fit: a score with one term per element and an observe of a value
computed from data have pointwise terms, so PSIS-LOO runs on them; the computed observe
has predictive replicates, the score says it has none (run record and `qvr show`).

The conjugate model `mu ~ N(0, 10)`, `log w_i ~ N(mu, 1)` has an exact leave-one-out
predictive density (as in test_pointwise.py); both spellings must reach it."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

import qvr
from qvr.inference import FitConfig, fit
from qvr.inference.data.fit_data import DataError, split_data
from qvr.inference.criticism.pointwise import NO_REPLICATE, Pointwise
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
    object Row : FinSet 40
    program lognormal : Row -> Row
        data w : Row
        sample mu <- Normal(0.0, 10.0)
    """
OBSERVED = textwrap.dedent(HEAD) + textwrap.dedent("""\
        observe log_w : Row = log(w) <- Normal(mu, 1.0)
        return mu
    export lognormal
    """)
SCORED = textwrap.dedent(HEAD) + textwrap.dedent("""\
        score lik : Row = log_density(Normal(mu, 1.0), log(w))
        return mu
    export lognormal
    """)


def _w(n=40, seed=1):
    return np.exp(np.random.default_rng(seed).normal(1.5, 1.0, n))


def _exact_loo(y):
    n = len(y)
    v = 1.0 / (1.0 / 100.0 + (n - 1))
    m = v * (y.sum() - y)
    return stats.norm.logpdf(y, m, np.sqrt(1.0 + v))


@pytest.mark.parametrize("src,site", [(OBSERVED, "log_w"), (SCORED, "lik")],
                         ids=["observed", "scored"])
def test_terms_match_scipy(src, site):
    w = _w()
    model = qvr.loads(src).morphism
    x, obs = split_data(model, {"w": w})
    assert (site in obs) == (site == "log_w")  # the computed value joins the observations
    pw = Pointwise(model, x, obs, ["mu"])
    mu = torch.tensor([0.9, 1.4, 2.0])
    out = pw.many({"mu": mu})
    ref = stats.norm.logpdf(np.log(w)[None, :], mu.numpy()[:, None], 1.0)
    assert out[f"log_lik.{site}"].shape == (3, 40)
    assert np.abs(out[f"log_lik.{site}"].numpy() - ref).max() < 1e-4
    assert pw.rows == {site: "local" if site == "log_w" else "score"}
    if site == "log_w":  # replicates drawn from N(mu, 1), not the data
        rep = out["y_rep.log_w"].numpy()
        assert rep.shape == (3, 40) and not np.allclose(rep[0], np.log(w))
        assert abs(rep[2].mean() - 2.0) < 4.0 / math.sqrt(40)
    else:
        assert not any(k.startswith("y_rep.") for k in out)


def test_data_may_not_give_a_computed_value():
    model = qvr.loads(OBSERVED).morphism
    with pytest.raises(DataError) as info:
        split_data(model, {"w": _w(), "log_w": np.zeros(40)})
    assert str(info.value) == ("`log_w` is computed by its `observe log_w = …` step from the "
                               "data; the data must not give it (remove `log_w` from the data)")


@pytest.mark.parametrize("src,site", [(OBSERVED, "log_w"), (SCORED, "lik")],
                         ids=["observed", "scored"])
def test_loo_reaches_exact_leave_one_out(src, site, tmp_path):
    w = _w()
    res = fit(qvr.loads(src), data={"w": w},
              config=FitConfig(method="nuts", num_warmup=300, num_samples=500, num_chains=4,
                               seed=0), run_dir=tmp_path / "r")
    assert res.status == "finished"
    run = open_run(tmp_path / "r")
    exact = _exact_loo(np.log(w))
    loo = run.loo()
    assert loo["n_rows"] == 40 and loo["n_draws"] == 2000
    assert abs(loo["elpd_loo"] - exact.sum()) < 0.05 * 40 ** 0.5
    assert np.abs(np.asarray(loo["elpd_i"]) - exact).max() < 0.05
    from qvr.commands.report import checks_lines
    lines = checks_lines(run)
    if site == "log_w":
        assert list(run.ppc()["sites"]) == ["log_w"]
        assert run.pointwise_meta["no_replicates"] == {}
    else:
        assert run.ppc() is None
        assert run.pointwise_meta["no_replicates"] == {"lik": NO_REPLICATE}
        assert lines[-1] == f"  lik: no predictive check: {NO_REPLICATE}"


def test_ar_series_has_one_term_per_step(tmp_path):
    """The rewritten examples/ar_series.qvr (`observe y_next : Step = slice(y, 5) <- …`):
    a short NUTS fit on its shipped data, then LOO over the 195 steps after the first five."""
    res = fit(qvr.load(str(ROOT / "examples" / "ar_series.qvr")),
              config=FitConfig(method="nuts", num_warmup=100, num_samples=100, num_chains=2,
                               seed=0), run_dir=tmp_path / "ar")
    assert res.status == "finished"
    run = open_run(tmp_path / "ar")
    assert run.pointwise_meta["log_lik"] == {"y_next": [195]}
    assert run.pointwise_meta["y_rep"] == {"y_next": [195]}
    loo = run.loo()
    assert "error" not in loo and loo["n_rows"] == 195
    assert math.isfinite(loo["elpd_loo"]) and len(loo["elpd_i"]) == 195
    y = np.asarray(run.observed()["y_next"])
    data = np.asarray(__import__("json").loads(
        (ROOT / "examples" / "data" / "ar_series.json").read_text())["y"])
    np.testing.assert_allclose(y, data[5:], rtol=1e-6)
    assert "y_next" in run.ppc()["sites"]
