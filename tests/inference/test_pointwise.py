"""After the fit (issue 25): pointwise log-likelihood and predictive replicates.

* the terms are exact: a Poisson regression's against scipy, a per-row mixture whose finite
  latent is summed out by enumeration against the hand-written log-sum-exp, a
  `marginalize` block's rows against the same;
* on a conjugate normal model the posterior predictive mean and variance of the recorded
  replicates match their closed forms within Monte Carlo error, and the record holds
  the terms in chunks with their shapes named in ``run.json``;
* ``--method prior`` draws the prior predictive (its moments in closed form);
* SVI records ``log_p``/``log_q`` per guide draw; ``pointwise=False`` records nothing;
  a program whose likelihood is a `score` says why it has no pointwise terms.
"""
from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
import torch
from scipy import stats

import qvr
from qvr.inference import FitConfig, fit
from qvr.events import FitWarning
from qvr.inference.criticism.pointwise import Pointwise, data_sha256
from qvr.runs import open_run

NORMAL = textwrap.dedent("""\
    object Row : FinSet 40
    program normal_mean : Row -> Row
        sample mu <- Normal(0.0, 10.0)
        observe y : Row <- Normal(mu, 1.0)
        return mu
    export normal_mean
    """)

POISSON = textwrap.dedent("""\
    object Row : FinSet 50
    object Group : FinSet 5
    program counts : Row -> Row
        sample base <- Normal(1.0, 1.0)
        sample effect : Group <- Normal(0.0, 0.5)
        let rate = exp(base + effect[group_of])
        observe k : Row <- Poisson(rate)
        return effect
    export counts
    """)

MIXTURE = textwrap.dedent("""\
    object Row : FinSet 30
    program mix : Row -> Row
        sample mu1 <- Normal(-2.0, 1.0)
        sample mu2 <- Normal(2.0, 1.0)
        let pz = 0.7 * ones
        sample z <- Bernoulli(pz)
        let loc = mu1 + (mu2 - mu1) * z
        observe y : Row <- Normal(loc, 1.0)
        return y
    export mix
    """)

MARGINALIZED = textwrap.dedent("""\
    object Point : FinSet 30
    program faulty : Point -> Point
        sample level <- Normal(20.0, 5.0)
        sample p_fault <- Beta(1.0, 20.0)
        let pf = p_fault * ones
        marginalize faulty : Point <- Bernoulli(pf) [reduction=logsumexp]
            let noise_now = 1.0 + 9.0 * faulty
            observe temperature : Point <- Normal(level, noise_now)
        return level
    export faulty
    """)

SCORED = textwrap.dedent("""\
    object Row : FinSet 20
    program scored : Row -> Row
        data y : Row
        sample mu <- Normal(0.0, 10.0)
        score likelihood = sum(log_density(Normal(mu, 1.0), y))
        return mu
    export scored
    """)


def _normal_data(n=40, seed=1):
    return np.random.default_rng(seed).normal(1.5, 1.0, n)


def test_poisson_terms_match_scipy():
    model = qvr.loads(POISSON).morphism
    g = np.random.default_rng(0)
    group = g.integers(0, 5, 50)
    k = g.poisson(3.0, 50)
    x = torch.zeros(50, 1)
    obs = {"k": torch.tensor(k, dtype=torch.float32), "group_of": torch.tensor(group)}
    pw = Pointwise(model, x, obs, ["base", "effect"])
    base = torch.tensor([0.9, 1.2, 1.1])
    effect = torch.tensor(g.normal(0, 0.3, (3, 5)), dtype=torch.float32)
    out = pw.many({"base": base, "effect": effect})
    assert out["log_lik.k"].shape == (3, 50) and out["y_rep.k"].shape == (3, 50)
    rate = np.exp(base.numpy()[:, None] + effect.numpy()[:, group])
    ref = stats.poisson.logpmf(k, rate)
    assert np.abs(out["log_lik.k"].numpy() - ref).max() < 1e-4
    assert pw.rows == {"k": "local"}
    # replicates are counts drawn at each draw's rates (not the data)
    rep = out["y_rep.k"].numpy()
    assert np.all(rep == np.round(rep)) and not np.array_equal(rep[0], k)


def test_normal_replicates_are_one_vmapped_pass_with_a_draw_each(monkeypatch):
    """`Normal`'s reparameterised sampler fills an unbatched tensor in place, which vmap
    refuses with different randomness; without autograd the runtime draws with
    `Normal.sample` (out of place), so the replicates of 2,000 draws are one vmapped
    pass, not 2,000 runs of the program — and each draw gets its own noise."""
    model = qvr.loads(NORMAL).morphism
    y = torch.tensor(_normal_data(), dtype=torch.float32)
    pw = Pointwise(model, torch.zeros(40, 1), {"y": y}, ["mu"])
    calls = []
    one = Pointwise.one
    monkeypatch.setattr(Pointwise, "one", lambda self, v: calls.append(1) or one(self, v))
    mu = torch.linspace(-1.0, 1.0, 2000)
    torch.manual_seed(0)
    out = pw.many({"mu": mu})
    assert not pw.rep_vmap_failed and len(calls) < 100, len(calls)
    noise = (out["y_rep.y"] - mu[:, None]).double()  # (2000, 40): N(0, 1) noise
    assert noise.shape == (2000, 40)
    # 80,000 iid N(0, 1): mean within 4 / sqrt(80,000) = 0.014, sd within 0.01
    assert abs(float(noise.mean())) < 0.014 and abs(float(noise.std()) - 1) < 0.01
    # not the same noise at every draw (vmap's "same" randomness would give that)
    assert float((noise[0] - noise[1]).abs().max()) > 0.1
    assert abs(float(torch.corrcoef(noise[:, :2].T)[0, 1])) < 0.1


def test_multivariate_normal_replicates_are_vmapped_too(monkeypatch):
    """torch's multivariate Normals sample through `rsample` (in place); the runtime
    draws them from `torch.randn` without autograd, so an `MultivariateNormal`
    likelihood's replicates are one vmapped pass, with the law's covariance."""
    program = textwrap.dedent("""\
        object Obs : FinSet 60
        object L : CorrCholesky 2
        program corr : Obs -> Obs
            sample l <- LKJCholesky(2.0) [over=L]
            observe y : Obs <- MultivariateNormal(0.0, l)
            return l
        export corr
        """)
    model = qvr.loads(program).morphism
    y = torch.tensor(np.random.default_rng(4).normal(size=(60, 2)), dtype=torch.float64)
    pw = Pointwise(model, torch.zeros(60, 1, dtype=torch.float64), {"y": y}, ["l"])
    rho = 0.6
    chol = torch.tensor([[1.0, 0.0], [rho, math.sqrt(1 - rho ** 2)]], dtype=torch.float64)
    torch.manual_seed(1)
    out = pw.many({"l": chol.expand(2000, 2, 2).clone()})
    assert not pw.rep_vmap_failed
    rep = out["y_rep.y"].double()
    assert rep.shape == (2000, 60, 2)
    cov = torch.cov(rep.reshape(-1, 2).T)  # 120,000 pairs: entries within ~0.004 (1 sd)
    want = torch.tensor([[1.0, rho], [rho, 1.0]], dtype=torch.float64)
    assert float((cov - want).abs().max()) < 0.02, cov
    assert float((rep[0] - rep[1]).abs().max()) > 0.1  # each draw its own noise


def test_enumerated_rows_are_the_row_marginals():
    model = qvr.loads(MIXTURE).morphism
    y = np.random.default_rng(3).normal(0.5, 2.0, 30)
    obs = {"y": torch.tensor(y, dtype=torch.float32), "ones": torch.ones(30)}
    pw = Pointwise(model, torch.zeros(30, 1), obs, ["mu1", "mu2"])
    assert pw.enumerated == ["z"]
    out = pw.many({"mu1": torch.tensor([-1.0, -0.5]), "mu2": torch.tensor([1.0, 2.5])})
    assert set(out) == {"log_lik.y", "y_rep.y"}
    for i, (m1, m2) in enumerate([(-1.0, 1.0), (-0.5, 2.5)]):
        ref = np.logaddexp(np.log(0.3) + stats.norm.logpdf(y, m1, 1.0),
                           np.log(0.7) + stats.norm.logpdf(y, m2, 1.0))
        assert np.abs(out["log_lik.y"][i].numpy() - ref).max() < 1e-4
    assert pw.rows == {"y": "enumerated"}


def test_marginalize_block_rows_are_the_exact_marginals():
    model = qvr.loads(MARGINALIZED).morphism
    t = np.random.default_rng(4).normal(20.0, 1.5, 30)
    obs = {"temperature": torch.tensor(t, dtype=torch.float32), "ones": torch.ones(30)}
    pw = Pointwise(model, torch.zeros(30, 1), obs, ["level", "p_fault"])
    out = pw.many({"level": torch.tensor([19.5]), "p_fault": torch.tensor([0.1])})
    ref = np.logaddexp(np.log(0.9) + stats.norm.logpdf(t, 19.5, 1.0),
                       np.log(0.1) + stats.norm.logpdf(t, 19.5, 10.0))
    assert np.abs(out["log_lik.temperature"][0].numpy() - ref).max() < 1e-4
    assert pw.rows == {"temperature": "marginalized"}
    assert out["y_rep.temperature"].shape == (1, 30)


def test_data_hash_names_the_data():
    a = {"y": torch.arange(3.0)}
    assert data_sha256(None, a) == data_sha256(None, {"y": torch.arange(3.0)})
    assert data_sha256(None, a) != data_sha256(None, {"y": torch.arange(3.0) + 1})
    assert data_sha256(None, a) != data_sha256(None, {"z": torch.arange(3.0)})


@pytest.fixture(scope="module")
def conjugate_run(tmp_path_factory):
    y = _normal_data()
    run_dir = tmp_path_factory.mktemp("runs") / "normal"
    res = fit(qvr.loads(NORMAL), data={"y": y},
              config=FitConfig(method="nuts", num_warmup=300, num_samples=500, num_chains=4,
                               seed=0), run_dir=run_dir)
    assert res.status == "finished"
    return y, open_run(run_dir)


def test_record_holds_chunked_terms_with_shapes(conjugate_run):
    y, run = conjugate_run
    meta = json.loads((run.path / "run.json").read_text())
    assert meta["pointwise"]["log_lik"] == {"y": [40]}
    assert meta["pointwise"]["y_rep"] == {"y": [40]}
    assert meta["pointwise"]["kind"] == "posterior" and meta["pointwise"]["chains"] == 4
    assert meta["data_sha256"] == run.data_sha256 and len(run.data_sha256) == 64
    files = sorted(p.name for p in (run.path / "pointwise").iterdir())
    assert files[0] == "c0-00000000.npz" and len(files) == 4
    ll = run.log_likelihood()["y"]
    assert ll.shape == (4, 500, 40) and ll.dtype == np.float32
    mu = run.samples()["mu"].reshape(4, 500)
    ref = stats.norm.logpdf(y[None, None, :], mu[..., None], 1.0)
    assert np.abs(ll - ref).max() < 1e-3
    np.testing.assert_allclose(run.observed()["y"], y, rtol=1e-6)  # as the fit saw it


def test_posterior_predictive_moments_match_closed_form(conjugate_run):
    from qvr.inference.criticism.diagnostics import ess_bulk
    y, run = conjugate_run
    n = len(y)
    v = 1.0 / (1.0 / 100.0 + n)
    m = v * y.sum()
    rep = run.predictive()["y"].astype(np.float64)  # (4, 500, 40)
    assert rep.shape == (4, 500, 40)
    per_draw = rep.mean(-1)  # (4, 500): mean over rows, var (v + 1/n) per draw
    ess = float(ess_bulk(per_draw))
    mcse = math.sqrt((v + 1.0 / n) / ess)
    assert abs(per_draw.mean() - m) < 4 * mcse
    # predictive variance 1 + v per row: pooled over rows and draws
    var = rep.reshape(-1, n).var(axis=0, ddof=1).mean()
    tol = 4 * (1 + v) * math.sqrt(2.0 / (ess * 0.5))
    assert abs(var - (1.0 + v)) < tol, (var, 1 + v, tol)


def test_prior_method_draws_the_prior_predictive(tmp_path):
    y = _normal_data()
    res = fit(qvr.loads(NORMAL), data={"y": y},
              config=FitConfig(method="prior", num_samples=2000, seed=0),
              run_dir=tmp_path / "prior")
    assert res.status == "finished"
    run = open_run(tmp_path / "prior")
    assert run.pointwise_meta["kind"] == "prior" and run.pointwise_meta["log_lik"] == {}
    assert run.log_likelihood() == {}
    rep = run.predictive()["y"]
    assert rep.shape == (1, 2000, 40)
    mu = run.samples()["mu"].reshape(-1)
    assert mu.shape == (2000,)
    # prior predictive: mean 0, variance 100 + 1; sd of mu about 10 (2000 draws: 4 SE)
    assert abs(mu.mean()) < 4 * 10 / math.sqrt(2000)
    assert abs(rep.var() / 101.0 - 1) < 0.15
    # rows of one draw share mu: their spread is the noise's
    assert abs(rep.var(axis=-1).mean() - 1.0) < 0.1


def test_svi_records_importance_terms(tmp_path):
    y = _normal_data()
    fit(qvr.loads(NORMAL), data={"y": y},
        config=FitConfig(method="svi", steps=300, lr=0.05, seed=0), run_dir=tmp_path / "s")
    run = open_run(tmp_path / "s")
    assert run.pointwise_meta["kind"] == "guide" and run.pointwise_meta["importance"]
    imp = run.importance()
    n = imp["log_p"].shape[1]
    assert imp["log_p"].shape == imp["log_q"].shape == (1, n) and n >= 100
    mu = None  # log_p is the log joint at the draw: check one against the closed form
    ll = run.log_likelihood()["y"]
    assert ll.shape == (1, n, 40)
    # log_p - sum(log_lik) is the prior term log N(mu; 0, 10): a function of mu alone,
    # so it is at most the prior's mode
    prior = imp["log_p"][0] - ll[0].sum(-1)
    assert np.all(prior <= stats.norm.logpdf(0, 0, 10) + 1e-3)
    del mu


def test_pointwise_off_and_scored_likelihood(tmp_path):
    y = _normal_data()
    fit(qvr.loads(NORMAL), data={"y": y},
        config=FitConfig(method="svi", steps=50, seed=0, pointwise=False),
        run_dir=tmp_path / "off")
    assert not (tmp_path / "off" / "pointwise").exists()
    assert open_run(tmp_path / "off").pointwise_meta is None
    seen = []
    fit(qvr.loads(SCORED), data={"y": y[:20]},
        config=FitConfig(method="svi", steps=50, seed=0), run_dir=tmp_path / "sc",
        on_event=seen.append)
    warnings = [e.message for e in seen if isinstance(e, FitWarning)]
    assert any("no `observe` site" in w and "`likelihood`" in w for w in warnings), warnings


def test_elpd_loo_matches_exact_leave_one_out(conjugate_run):
    """Exact LOO of the conjugate model: y_i | y_-i ~ N(m_-i, 1 + v_-i)."""
    y, run = conjugate_run
    n = len(y)
    v = 1.0 / (1.0 / 100.0 + (n - 1))
    m = v * (y.sum() - y)
    exact = stats.norm.logpdf(y, m, np.sqrt(1.0 + v))
    loo = run.loo()
    assert loo["n_rows"] == n and loo["n_draws"] == 2000
    assert abs(loo["elpd_loo"] - exact.sum()) < loo["se"]
    # tighter: PSIS's Monte Carlo error for 2,000 draws of a one-parameter posterior
    assert abs(loo["elpd_loo"] - exact.sum()) < 0.05 * n ** 0.5
    assert np.abs(np.asarray(loo["elpd_i"]) - exact).max() < 0.05
    assert not loo["high_k"]


def test_loo_pit_of_a_correct_model_is_uniform(conjugate_run):
    _, run = conjugate_run
    pit = run.ppc()["sites"]["y"]["loo_pit"]
    assert len(pit["values"]) == 40
    assert pit["p_value"] > 0.01 and not pit["outside"]


def test_draws_are_thinned_to_the_budget():
    from qvr.inference.criticism.pointwise import BUDGET_MIN_SECONDS, _kept_draws
    assert _kept_draws(1000, 4, 1e-5, None, 60.0) == (1000, 1)  # cheap: all of them
    # 0.1 s a draw, a 60 s fit: 6 s of budget for 4 chains -> 15 per chain, but at
    # least 100 in all: 25 per chain
    assert _kept_draws(1000, 4, 0.1, None, 60.0) == (25, 40)
    # 0.01 s a draw, a 10 s fit: the minimum budget, 4 s -> 100 per chain (every 10th)
    assert _kept_draws(1000, 4, 0.01, None, 10.0) == (100, 10)
    # a long fit buys more: 10% of 2,000 s = 200 s -> 500 per chain (every 2nd)
    assert _kept_draws(1000, 4, 0.1, None, 2000.0) == (500, 2)
    assert _kept_draws(1000, 4, 10.0, 50, 1.0) == (50, 20)  # asked: exactly that
    assert BUDGET_MIN_SECONDS == 4.0


def test_dear_draws_are_vmapped_in_chunks_as_small_as_the_probe():
    """A language model's draw (0.05 s) runs 8 at a time, as the probe timed it (vmapping
    all its draws at once cost 2.4 times more a draw); a cheap one (1 ms) 100 at a time."""
    from qvr.inference.criticism.pointwise import CALL_SECONDS, PROBE_DRAWS, _vmap_chunk
    assert (PROBE_DRAWS, CALL_SECONDS) == (8, 0.1)
    assert _vmap_chunk(0.05, 128) == 8
    assert _vmap_chunk(0.001, 128) == 100
    assert _vmap_chunk(1e-6, 128) == 128
    assert _vmap_chunk(0.004, 16) == 16


def test_pointwise_draws_option_thins_evenly(tmp_path):
    y = _normal_data()
    fit(qvr.loads(NORMAL), data={"y": y},
        config=FitConfig(method="nuts", num_warmup=100, num_samples=200, num_chains=2,
                         seed=0, pointwise_draws=50), run_dir=tmp_path / "t")
    run = open_run(tmp_path / "t")
    meta = run.pointwise_meta
    assert (meta["draws"], meta["stride"], meta["thinned_from"]) == (50, 4, 200)
    ll = run.log_likelihood()["y"]
    assert ll.shape == (2, 50, 40)
    mu = run.samples()["mu"].reshape(2, 200)[:, ::4]
    assert np.abs(ll - stats.norm.logpdf(y, mu[..., None], 1.0)).max() < 1e-3
    assert run.loo()["n_draws"] == 100


def test_a_record_cut_mid_phase_reads_the_chunks_it_has(conjugate_run, tmp_path):
    """kill -9 during the pointwise phase: the chunk files present are whole (temp file +
    rename), a temp file left behind is ignored, a missing chain is simply absent."""
    import shutil
    _, run = conjugate_run
    cut = tmp_path / "cut"
    shutil.copytree(run.path, cut)
    (cut / "pointwise" / "c3-00000000.npz").unlink()
    (cut / "pointwise" / "c3-00000000.npz.tmp.npz").write_bytes(b"torn")
    (cut / "loo.json").unlink()
    r = open_run(cut)
    assert r.log_likelihood()["y"].shape == (3, 500, 40)
    assert r.predictive()["y"].shape == (3, 500, 40)
    loo = r.loo()  # recomputed from what is there
    assert loo["n_draws"] == 1500 and abs(loo["elpd_loo"] - run.loo()["elpd_loo"]) < 1.0


def test_grouping_indices_are_told_from_integer_covariates():
    from qvr.inference.criticism.pointwise import _groups
    x = torch.zeros(8, 1)
    found = _groups(None, x, {"sigma": torch.tensor([15, 10, 16, 11, 9, 11, 10, 18]),
                              "g": torch.tensor([0, 1, 1, 2, 0, 2, 1, 0]),
                              "perm": torch.arange(8), "y": torch.zeros(8)}, ["y"])
    assert list(found) == ["group.g"]


def test_the_thinning_note_says_its_ordinal_right():
    from qvr.inference.criticism.pointwise import _ordinal
    assert [_ordinal(n) for n in (2, 3, 4, 11, 12, 13, 21, 22, 23, 111)] == [
        "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "111th"]
