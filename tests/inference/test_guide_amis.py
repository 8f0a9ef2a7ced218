"""``--resample amis``: adaptive multiple importance sampling from a Normal approximation
(`qvr.inference.vi.amis`, `qvr.inference.methods.guide_amis`).

Monte Carlo tolerances.  Weighted draws with importance ESS E estimate a mean with standard
error ``sd / sqrt(E)`` and an sd with ``sd * sqrt((kurtosis - 1) / (4 E))`` (2 E for a
Normal, kurtosis 3); the run's 1000 resampled draws are worth ``1 / (1/E + 1/1000)``
independent draws.  Each figure is held to 4 standard errors.
"""
import math

import numpy as np
import pytest
import torch

from helpers import BETA_BERNOULLI
from qvr import loads
from qvr.events import FitWarning
from qvr.inference import FitConfig, fit
from qvr.inference.criticism.khat import pareto_khat
from qvr.inference.criticism.khat_text import khat_line, resample_text
from qvr.inference.methods.guide_amis import weigh
from qvr.inference.methods.guide_results import SUMMARY_DRAWS
from qvr.inference.vi.amis import amis, weighted_moments

# the Beta-Bernoulli posterior of `helpers.BETA_BERNOULLI` with 4 successes in 30
A, B = 6.0, 29.0
BETA_MEAN = A / (A + B)
BETA_SD = math.sqrt(A * B / ((A + B) ** 2 * (A + B + 1)))
FLIPS = torch.tensor([1.0] * 4 + [0.0] * 26)


def _worth(ess: float, n: int = SUMMARY_DRAWS) -> float:
    return 1.0 / (1.0 / ess + 1.0 / n)


def _gaussian(mean: torch.Tensor, cov: torch.Tensor):
    dist = torch.distributions.MultivariateNormal(mean, covariance_matrix=cov)
    return lambda z: dist.log_prob(z)


def test_a_correlated_gaussian_is_found_from_a_poor_start():
    """Target N(mu, Sigma), correlation 0.9; the start is off by 1.5 sds in every
    coordinate and a third as wide, uncorrelated: the weighted moments recover mu and
    Sigma, and the weights end well behaved."""
    mu = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    sd = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    corr = torch.full((3, 3), 0.9, dtype=torch.float64).fill_diagonal_(1.0)
    cov = corr * sd[:, None] * sd[None, :]
    start = mu + 1.5 * sd
    out = amis(_gaussian(mu, cov), start, torch.diag(sd / 3), rounds=6, per_round=4000,
               budget_s=1e9, generator=torch.Generator().manual_seed(0))
    assert out.rounds == 6 and out.draws.shape == (2000 + 5 * 4000, 3)
    assert out.per_round == 4000 and not out.stopped
    assert pareto_khat(out.log_ratios) < 0.5
    m, c, ess = weighted_moments(out.draws, out.log_ratios)
    assert ess > 5000 and out.ess[-1] == pytest.approx(ess)
    assert out.ess[0] < out.ess[-1] / 10  # the first round's few good draws
    for i in range(3):
        assert abs(float(m[i] - mu[i])) < 4 * float(sd[i]) / math.sqrt(ess)
        assert abs(math.sqrt(float(c[i, i])) - float(sd[i])) < \
            4 * float(sd[i]) / math.sqrt(2 * ess)
    r01 = float(c[0, 1] / torch.sqrt(c[0, 0] * c[1, 1]))
    assert abs(r01 - 0.9) < 4 * (1 - 0.9 ** 2) / math.sqrt(ess)


def test_a_banana_is_weighted_to_its_exact_moments():
    """a ~ N(0, 1), b | a ~ N(a², 1): E b = 1, sd b = sqrt 3; the start is the Laplace
    approximation at the mode (0, 0), N(0, I), whose mean of b is 0."""
    def log_p(z):
        a, b = z[:, 0], z[:, 1]
        return -0.5 * a ** 2 - 0.5 * (b - a ** 2) ** 2
    out = amis(log_p, torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
               rounds=8, per_round=8000, budget_s=1e9,
               generator=torch.Generator().manual_seed(1))
    k = pareto_khat(out.log_ratios)
    assert k < 0.7, k
    m, c, ess = weighted_moments(out.draws, out.log_ratios)
    # b's kurtosis from exact draws (a fixed seed): its sd's standard error
    g = torch.Generator().manual_seed(2)
    a = torch.randn(10 ** 6, generator=g, dtype=torch.float64)
    b = a ** 2 + torch.randn(10 ** 6, generator=g, dtype=torch.float64)
    kurt = float(((b - 1) ** 4).mean() / 9.0)
    assert abs(float(m[0])) < 4 / math.sqrt(ess)
    assert abs(float(m[1]) - 1.0) < 4 * math.sqrt(3.0) / math.sqrt(ess), float(m[1])
    assert abs(math.sqrt(float(c[0, 0])) - 1.0) < 4 / math.sqrt(2 * ess)
    assert abs(math.sqrt(float(c[1, 1])) - math.sqrt(3.0)) < \
        4 * math.sqrt(3.0) * math.sqrt((kurt - 1) / (4 * ess)), float(c[1, 1])


def test_the_time_budget_sets_the_draws_per_round():
    """A slow density (at least 10 µs a row: 20 ms for the first round's 2000) and a
    budget of 0.01 s: the first round's cost leaves the least draws per round, and the
    rounds stop there, the budget spent."""
    import time

    def slow(z):
        time.sleep(1e-5 * z.shape[0])
        return -0.5 * (z ** 2).sum(-1)
    out = amis(slow, torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
               rounds=8, budget_s=0.01, generator=torch.Generator().manual_seed(0))
    assert out.per_round == 250
    assert out.rounds == 1 and out.stopped == "the time budget (0.01 s) was spent"
    assert out.draws.shape[0] == 2000 and len(out.ess) == 1


def test_many_coordinates_mean_fewer_draws_per_round(monkeypatch):
    """The draws of all rounds together hold at most `MAX_NUMBERS` numbers (here 8,000:
    1,000 two-coordinate draws in each of 4 rounds)."""
    from qvr.inference.vi import amis as module
    monkeypatch.setattr(module, "MAX_NUMBERS", 8000)
    out = amis(lambda z: -0.5 * (z ** 2).sum(-1), torch.zeros(2, dtype=torch.float64),
               torch.eye(2, dtype=torch.float64), rounds=4, budget_s=1e9,
               generator=torch.Generator().manual_seed(0))
    assert out.per_round == 1000 and out.draws.shape == (4000, 2)


def test_a_generator_makes_it_reproducible():
    def run(seed):
        return amis(lambda z: -0.5 * (z ** 2).sum(-1) - z[:, 0] ** 4,
                    torch.zeros(3, dtype=torch.float64), torch.eye(3, dtype=torch.float64),
                    rounds=3, per_round=1000, budget_s=1e9,
                    generator=torch.Generator().manual_seed(seed))
    a, b, c = run(5), run(5), run(6)
    assert torch.equal(a.draws, b.draws) and np.array_equal(a.log_ratios, b.log_ratios)
    assert not torch.equal(a.draws, c.draws)


def test_nan_and_infinite_densities_weigh_nothing():
    """A density that is NaN or +inf at some draws (a numerical blow-up) gives those draws
    zero weight, and the rest still find the posterior."""
    def bad(z):
        lp = -0.5 * (z ** 2).sum(-1)
        lp = torch.where(z[:, 0] > 2.5, torch.full_like(lp, math.nan), lp)
        return torch.where(z[:, 0] < -2.5, torch.full_like(lp, math.inf), lp)
    out = amis(bad, torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
               rounds=3, per_round=4000, budget_s=1e9,
               generator=torch.Generator().manual_seed(0))
    cut = out.draws[:, 0].abs() > 2.5
    assert cut.any() and np.all(out.log_ratios[cut.numpy()] == -np.inf)
    assert np.isfinite(out.log_ratios[~cut.numpy()]).all()
    m, c, ess = weighted_moments(out.draws, out.log_ratios)
    assert abs(float(m[1])) < 4 / math.sqrt(ess)


def test_laplace_with_amis_gives_the_exact_beta_posterior(tmp_path):
    """Beta(2, 3) prior, 4 successes in 30: the posterior is Beta(6, 29); Laplace on logit
    p is skewed the wrong way (its mean 0.18 against 0.171)."""
    events = []
    res = fit(loads(BETA_BERNOULLI), {"flip": FLIPS},
              FitConfig(method="svi", guide="laplace", seed=0, resample="amis",
                        pointwise=False), on_event=events.append, run_dir=tmp_path / "run")
    st = res.stats
    assert st["resample_method"] == "amis"
    assert st["resampled"] is True and st["amis_resampled"] is True
    assert st["amis_rounds"] == 8 and "amis_stopped" not in st
    assert st["khat"] == st["amis_khat"] < 0.5
    assert st["khat_draws"] == st["resample_draws"] == 2000 + 7 * 16000
    assert not [e for e in events if isinstance(e, FitWarning)]
    rounds = [e for e in events if getattr(e, "phase", None) == "importance"]
    assert [e.step for e in rounds] == list(range(1, 9))
    assert all(e.total == 8 and e.metrics["ess"] > 0 for e in rounds)
    p = res.samples["p"].reshape(-1).astype(np.float64)
    assert p.shape == (SUMMARY_DRAWS,)
    n = _worth(st["resample_ess"])
    assert abs(p.mean() - BETA_MEAN) < 4 * BETA_SD / math.sqrt(n), p.mean()
    assert abs(p.std() - BETA_SD) < 4 * BETA_SD / math.sqrt(2 * n), p.std()
    # the guide is still the Laplace approximation (the record's parameters)
    mode = float(res.params["mode_p"].reshape(-1)[0])
    # the mode of p^6 (1 - p)^29 (the Jacobian-adjusted density on logit p)
    assert 1 / (1 + math.exp(-mode)) == pytest.approx(6 / 35, abs=1e-4)
    # the saved run says so, and keeps the draws (they cannot be drawn again)
    from qvr.runs import open_run
    run = open_run(tmp_path / "run")
    assert (run.path / "samples.npz").exists()
    line = khat_line(run.summary["stats"])
    assert line.startswith(f"Pareto k-hat {st['khat']:.2f} ({st['khat_draws']} draws): ")
    assert line.endswith(f"; draws resampled by adaptive importance sampling (8 rounds, "
                         f"114,000 draws, ESS {st['resample_ess']:.0f})")


def test_a_seeded_fit_gives_the_same_draws():
    def run(seed):
        return fit(loads(BETA_BERNOULLI), {"flip": FLIPS},
                   FitConfig(method="svi", guide="laplace", seed=seed, resample="amis",
                             pointwise=False)).samples["p"]
    a, b, c = run(3), run(3), run(4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_pathfinder_with_amis_gives_the_exact_beta_posterior():
    res = fit(loads(BETA_BERNOULLI), {"flip": FLIPS},
              FitConfig(method="pathfinder", seed=0, resample="amis", pointwise=False))
    st = res.stats
    assert st["amis_resampled"] is True and st["resampled"] is True  # Pathfinder's own too
    assert st["khat"] == st["amis_khat"] < 0.5
    assert st["pathfinder_khat"] is not None and st["pathfinder_khat"] != st["khat"]
    p = res.samples["p"].reshape(-1).astype(np.float64)
    assert p.shape == (1000,)  # psis_draws
    n = _worth(st["resample_ess"], 1000)
    assert abs(p.mean() - BETA_MEAN) < 4 * BETA_SD / math.sqrt(n), p.mean()
    assert abs(p.std() - BETA_SD) < 4 * BETA_SD / math.sqrt(2 * n), p.std()


def test_one_path_starts_from_its_own_draws():
    """``--paths 1``: no PSIS weights of its own; the start is its draws' plain moments."""
    res = fit(loads(BETA_BERNOULLI), {"flip": FLIPS},
              FitConfig(method="pathfinder", paths=1, seed=0, resample="amis",
                        pointwise=False))
    st = res.stats
    assert st["paths"] == 1 and st["resampled"] is False  # Pathfinder's own: one path
    assert st["amis_resampled"] is True and st["khat"] < 0.5
    p = res.samples["p"].reshape(-1).astype(np.float64)
    n = _worth(st["resample_ess"], p.size)
    assert abs(p.mean() - BETA_MEAN) < 4 * BETA_SD / math.sqrt(n), p.mean()


class _Ctx:
    def __init__(self):
        self.events = []

    def report(self, event):
        self.events.append(event)

    def stop(self):
        return False


def test_no_finite_density_leaves_the_draws_and_says_why():
    ctx, st = _Ctx(), {}
    never = lambda z: torch.full((z.shape[0],), -math.inf, dtype=torch.float64)  # noqa: E731
    picked = weigh(ctx, st, 0.0, never, torch.zeros(2, dtype=torch.float64),
                   torch.eye(2, dtype=torch.float64), method="svi")
    assert picked is None
    assert st["amis_resampled"] is False and st["amis_rounds"] == 1
    assert st["resample_note"] == "fewer than 10 draws with a finite density"
    assert st["amis_stopped"] == "the density is not finite at the proposal's draws"
    assert "khat" not in st
    warned = [e.message for e in ctx.events if isinstance(e, FitWarning)]
    assert warned == ["--resample amis: the draws were not resampled (fewer than 10 draws "
                      "with a finite density): the summary and checks use the "
                      "approximation's own draws"]
    assert resample_text(st) == (
        "draws not resampled by adaptive importance sampling (fewer than 10 draws with a "
        "finite density): the approximation's own")


def test_the_option_and_its_refusals():
    assert FitConfig(method="svi", resample="bootstrap").errors() == {
        "resample": "must be one of none, psis, amis; got 'bootstrap'"}
    assert FitConfig(method="svi", guide="laplace", resample="amis").errors() == {}
    assert FitConfig(method="pathfinder", resample="amis").errors() == {}
    for guide in ("meanfield", "fullrank", "lowrank:2", "flow", "map"):
        kind = guide.split(":")[0]
        assert FitConfig(method="svi", guide=guide, resample="amis").errors() == {
            "resample": f"amis starts from a Normal over every latent: use --guide laplace "
                        f"or --method pathfinder (with --guide {kind}: --resample psis)"}
    assert FitConfig(method="pathfinder", resample="psis").errors() == {
        "resample": "Pathfinder resamples its draws by PSIS always: drop it, or use "
                    "--resample amis"}


def test_laplace_with_amis_meets_the_gp_reference():
    """posteriordb's gp_pois_regr, where Laplace's own draws are 1.6 reference sds off
    with sds up to 5x the reference's (k-hat 0.96: not resampleable): ``--resample amis``
    brings every mean (rho, alpha and the 11 recorded f) within 0.2 sds and every sd within
    0.8-1.25 of the reference's (issue 39's bar; measured on seeds 1-12: within 0.15, sds
    0.82-1.07, k-hat 0.51-0.69)."""
    import json
    from pathlib import Path

    from qvr import load
    from test_posteriordb import stan_names
    root = Path(__file__).resolve().parents[2]
    path = root / "examples" / "gp_counts.qvr"
    res = fit(load(str(path)), config={"method": "svi", "guide": "laplace", "seed": 1,
                                       "dtype": "float64", "pointwise": False,
                                       "resample": "amis"}, program_path=str(path))
    assert res.status == "finished", res.message
    st = res.stats
    assert st["resampled"] is True and st["khat"] < 0.7
    reference = json.loads((Path(__file__).parent / "posteriordb" /
                            "gp_pois_regr-gp_pois_regr.json").read_text())["params"]
    draws = stan_names(res.samples)
    assert set(reference) <= set(draws)
    errors = {n: abs(float(draws[n].mean()) - r["mean"]) / r["sd"]
              for n, r in reference.items()}
    ratios = {n: float(draws[n].std()) / r["sd"] for n, r in reference.items()}
    assert max(errors.values()) <= 0.2, errors
    assert all(0.8 <= v <= 1.25 for v in ratios.values()), ratios

