"""Pathfinder (`qvr.inference.vi.pathfinder`, ``--method pathfinder``, ``--init pathfinder``).

Fixed seeds throughout; tolerances say where they come from."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load
from qvr.inference import fit
from qvr.inference.mcmc.potential import FunctionTarget
from qvr.inference.vi.pathfinder import Settings, distinct_starts, local_normal, pathfinder

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = Path(__file__).parent / "posteriordb"


def gaussian(D: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(D, D, generator=g, dtype=torch.float64)
    cov = A @ A.T / D + 0.5 * torch.eye(D, dtype=torch.float64)
    mean = 3 * torch.randn(D, generator=g, dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def lp(z):
        d = z - mean
        return -0.5 * ((d @ prec) * d).sum(-1)
    return FunctionTarget(lp, D), mean, cov


@pytest.mark.parametrize("D,m", [(5, 3), (20, 4)])  # the dense and the low-rank form
def test_the_local_normal_is_the_bfgs_inverse_hessian_and_samples_it(D, m):
    g = torch.Generator().manual_seed(1)
    S = torch.randn(D, m, generator=g, dtype=torch.float64)
    A = torch.randn(D, D, generator=g, dtype=torch.float64)
    Y = (A @ A.T + D * torch.eye(D, dtype=torch.float64)) @ S
    alpha = torch.rand(D, generator=g, dtype=torch.float64) + 0.5
    H, eye = torch.diag(alpha), torch.eye(D, dtype=torch.float64)
    for k in range(m):  # the BFGS recursion from diag(alpha), pair by pair
        s, y = S[:, k], Y[:, k]
        rho = 1 / float(s @ y)
        H = (eye - rho * torch.outer(s, y)) @ H @ (eye - rho * torch.outer(y, s)) \
            + rho * torch.outer(s, s)
    x, grad = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(
        D, generator=g, dtype=torch.float64)
    q = local_normal(x, grad, S, Y, alpha)
    assert (q.chol is not None) == (2 * m >= D)
    assert torch.allclose(torch.stack([q.apply(e) for e in eye]), H, atol=1e-10)
    assert torch.allclose(q.diag(), torch.diagonal(H), atol=1e-10)
    assert torch.allclose(q.mu, x - H @ grad, atol=1e-10)
    u = torch.randn(200_000, D, generator=g, dtype=torch.float64)
    theta, log_q = q.sample(u)
    # 200k draws: the covariance's relative error is ~ sqrt(2 / 200k) = 0.3 % per entry
    assert float((torch.cov(theta.T) - H).abs().max() / H.abs().max()) < 0.02
    exact = torch.distributions.MultivariateNormal(q.mu, covariance_matrix=H)
    assert torch.allclose(log_q[:100], exact.log_prob(theta[:100]), atol=1e-8)


def test_a_gaussian_target_is_recovered():
    target, mean, cov = gaussian(5)
    res = pathfinder(target, Settings(), torch.Generator().manual_seed(1),
                     dtype=torch.float64)
    assert res.failed == 0 and len(res.paths) == 4
    for p in res.paths:  # the L-BFGS path reaches the mode: the normal's mean is it
        assert float((p.q.mu - mean).abs().max()) < 0.05
        assert math.isfinite(p.elbo)
    sd = torch.diagonal(cov).sqrt()
    # 1000 resampled draws (PSIS weights): the mean within 0.15 sd (MCSE ~ 0.05 sd with
    # the repeats of resampling), the covariance within 20 %
    assert float(((res.draws.mean(0) - mean).abs() / sd).max()) < 0.15
    assert float(((torch.cov(res.draws.T) - cov).abs()).max() / cov.abs().max()) < 0.2
    assert res.draws.shape == (1000, 5)
    # log Z of the target: the best ELBO is near it (q ~ p); the largest of many 25-draw
    # estimates may exceed it a little (measured +0.07)
    log_z = 2.5 * math.log(2 * math.pi) + 0.5 * float(torch.logdet(cov))
    best = max(p.elbo for p in res.paths)
    assert abs(best - log_z) < 0.2


def test_it_is_deterministic_under_a_seed():
    target, _, _ = gaussian(3)
    a = pathfinder(target, Settings(paths=2, draws=50, psis_draws=40),
                   torch.Generator().manual_seed(7), dtype=torch.float64)
    b = pathfinder(target, Settings(paths=2, draws=50, psis_draws=40),
                   torch.Generator().manual_seed(7), dtype=torch.float64)
    assert torch.equal(a.draws, b.draws)


def test_a_failing_path_is_dropped_and_the_others_resampled():
    target, mean, cov = gaussian(3)
    base = target.fn

    def lp(z):  # -inf beyond z0 > 20: a start there has no finite density
        return torch.where(z[..., 0] > 20, torch.full_like(z[..., 0], -math.inf), base(z))
    bad = FunctionTarget(lp, 3)
    res = pathfinder(bad, Settings(paths=3, draws=200, psis_draws=300),
                     torch.Generator().manual_seed(2), dtype=torch.float64,
                     inits=[torch.tensor([30.0, 0.0, 0.0]), None, None])
    assert [p.ok for p in res.paths] == [False, True, True]
    assert res.paths[0].message == "the log density is not finite at the start"
    assert res.failed == 1 and res.draws.shape == (300, 3)
    assert res.log_ratios.shape == (400,)  # the two paths' pooled draws
    z, note = distinct_starts(res, 4, torch.Generator().manual_seed(0))
    assert z.shape == (4, 3) and len({tuple(r.tolist()) for r in z}) == 4 and note == ""


def test_every_path_failing_is_an_error():
    from qvr.inference.vi.pathfinder import PathfinderError
    target = FunctionTarget(lambda z: torch.full_like(z[..., 0], -math.inf), 2)
    with pytest.raises(PathfinderError, match="path 1: the log density is not finite"):
        pathfinder(target, Settings(paths=1), torch.Generator().manual_seed(0),
                   inits=[torch.zeros(2)])


def _reference(name):
    return json.loads((REFERENCES / f"{name}.json").read_text())["params"]


def _errors(result, reference) -> dict:
    from test_posteriordb import stan_names
    draws = stan_names(result.samples)
    return {n: (float(draws[n].mean()) - r["mean"]) / r["sd"] for n, r in reference.items()}


def test_kid_scores_matches_the_posteriordb_reference():
    path = ROOT / "examples" / "kid_scores.qvr"
    res = fit(load(str(path)), config={"method": "pathfinder", "seed": 1, "dtype": "float64",
                                       "pointwise": False}, program_path=str(path))
    assert res.status == "finished", res.message
    errors = _errors(res, _reference("kidiq-kidscore_momhsiq"))
    assert max(abs(e) for e in errors.values()) < 0.3, errors  # measured 0.09
    s = res.stats
    assert s["paths"] == 4 and s["failed_paths"] == 0 and s["khat_draws"] == 4000
    assert s["khat"] < 0.7  # measured 0.56
    assert res.samples["beta"].shape == (1, 1000, 3)
    assert set(res.summary.columns) == {"mean", "sd", "q5", "q50", "q95"}


def test_eight_schools_is_near_the_reference_and_warns_by_its_khat():
    """Non-centred eight schools: the joint mode (tau ~ 30) is far from the mass, the
    best ELBO is an early iterate's, and the draws are off by up to ~0.9 sd in mu
    (seeds 1-3: 0.61, 0.77, 0.79); k-hat 0.8-1.1 says so, with a warning.  Issue 39 asked
    for 0.3 sd; that is beyond Pathfinder's own draws here (pymc-extras' Pathfinder 0.15.1,
    its defaults, `bench/vi.py`, same machine and day, is 0.93 sd off, k-hat 0.78), and
    met by ``--resample amis`` from them (below)."""
    path = ROOT / "examples" / "eight_schools.qvr"
    events = []
    res = fit(load(str(path)), config={"method": "pathfinder", "seed": 1, "dtype": "float64",
                                       "pointwise": False}, program_path=str(path),
              on_event=events.append)
    assert res.status == "finished", res.message
    errors = _errors(res, _reference("eight_schools-eight_schools_noncentered"))
    assert max(abs(e) for e in errors.values()) < 1.0, errors
    assert res.stats["khat"] > 0.7
    warnings = [e.message for e in events if type(e).__name__ == "FitWarning"]
    assert any(w.startswith("Pareto k-hat") and "Pathfinder's approximation" in w
               for w in warnings)
    assert "recorded.theta" in res.samples  # `record theta = ...` per draw
    progress = [e for e in events if type(e).__name__ == "FitProgress"]
    assert {e.chain for e in progress} == {0, 1, 2, 3}
    assert all(e.method == "pathfinder" for e in progress)
    assert any("loss" in e.metrics for e in progress) and \
        any("elbo" in e.metrics for e in progress)


def _sd_ratios(result, reference) -> dict:
    from test_posteriordb import stan_names
    draws = stan_names(result.samples)
    return {n: float(draws[n].std()) / r["sd"] for n, r in reference.items()}


@pytest.mark.parametrize("example, posterior", [
    ("eight_schools", "eight_schools-eight_schools_noncentered"),
    ("kid_scores", "kidiq-kidscore_momhsiq")])
def test_pathfinder_with_amis_meets_the_reference(example, posterior):
    """Issue 39's bar for Pathfinder, 0.3 reference sds of every posteriordb mean, which
    Pathfinder's own draws miss on eight schools (above): ``--resample amis`` from them
    meets it (measured, seeds 1-3: eight schools within 0.05-0.06 sds, sds 0.95-1.09;
    kid_scores within 0.02-0.06), and every sd within 0.8-1.25 of the reference's."""
    path = ROOT / "examples" / f"{example}.qvr"
    res = fit(load(str(path)), config={"method": "pathfinder", "seed": 1, "dtype": "float64",
                                       "pointwise": False, "resample": "amis"},
              program_path=str(path))
    assert res.status == "finished", res.message
    st = res.stats
    assert st["amis_resampled"] is True and st["khat"] < 0.7
    reference = _reference(posterior)
    errors = _errors(res, reference)
    assert max(abs(e) for e in errors.values()) < 0.3, errors
    ratios = _sd_ratios(res, reference)
    assert all(0.8 <= r <= 1.25 for r in ratios.values()), ratios


def test_the_cli_run_writes_summary_and_loo(tmp_path, capsys):
    from qvr.cli import main
    runs = tmp_path / "runs"
    rc = main(["run", str(ROOT / "examples" / "kid_scores.qvr"), "--method", "pathfinder",
               "--paths", "2", "--path-draws", "200", "--psis-draws", "300",
               "--seed", "2", "--runs-dir", str(runs)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0].startswith("pathfinder: 2 paths, ")
    assert "300 draws resampled (PSIS)" in out.splitlines()[0]
    folder = next(runs.iterdir())
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["stats"]["paths"] == 2 and summary["stats"]["draws"] == 300
    assert "khat" in summary["stats"]
    loo = json.loads((folder / "loo.json").read_text())
    assert loo  # PSIS-LOO of the draws as posterior draws
    meta = json.loads((folder / "run.json").read_text())
    assert meta["pointwise"]["kind"] == "posterior" and meta["pointwise"]["draws"] == 300
    with np.load(folder / "samples.npz") as saved:  # its draws are kept: one chain
        assert saved["beta"].shape == (1, 300, 3) and saved["sigma"].shape == (1, 300)
    capsys.readouterr()
    rc = main(["predict", str(folder), "--data",
               str(ROOT / "examples" / "data" / "kid_scores.new.json"), "--seed", "0"])
    assert rc == 0
    assert "kid_score[4]" in capsys.readouterr().out


def test_init_pathfinder_gives_finite_warmup_on_eight_schools():
    path = ROOT / "examples" / "eight_schools.qvr"
    events = []
    res = fit(load(str(path)), config={"method": "nuts", "seed": 3, "num_warmup": 60,
                                       "num_samples": 40, "num_chains": 2,
                                       "init_strategy": "pathfinder", "pointwise": False},
              program_path=str(path), on_event=events.append)
    assert res.status == "finished"
    notes = [e.message for e in events if type(e).__name__ == "FitNote"]
    assert any(n.startswith("init pathfinder: 4 of 4 paths") for n in notes), notes
    assert bool(torch.isfinite(res.mcmc.samples["mu"]).all() if hasattr(
        res.mcmc.samples["mu"], "shape") else True)
    assert np.isfinite(res.samples["mu"]).all() and res.stats["warmup_leapfrogs"] > 0


def test_the_low_rank_form_on_a_30_dimensional_gaussian():
    """2m < D: the draws come from the thin-QR form.  History 5 in 30 dimensions gives a
    rough covariance: the chosen normals' means are within 0.13 sd of the mode, the
    pooled ratios' k-hat is 0.78 and the resampled means are within 0.31 sd (measured);
    the bounds below leave room for that."""
    target, mean, cov = gaussian(30, seed=3)
    res = pathfinder(target, Settings(), torch.Generator().manual_seed(4), dtype=torch.float64)
    assert all(p.q.chol is None and p.q.Q is not None for p in res.paths)
    sd = torch.diagonal(cov).sqrt()
    for p in res.paths:  # the chosen normal (near the end of the climb) is about the mode
        assert float(((p.q.mu - mean).abs() / sd).max()) < 0.3
    assert float(((res.draws.mean(0) - mean).abs() / sd).max()) < 0.5
