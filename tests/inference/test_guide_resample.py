"""``--resample psis`` (`qvr.inference.methods.guide_resample`): a fitted guide's draws
resampled by their Pareto-smoothed importance weights when k-hat < 0.7.

Monte Carlo tolerances.  The run's 1000 draws are drawn with replacement from S = 4000
weighted guide draws whose importance ESS is E (recorded): they are worth about
``n = 1 / (1/E + 1/1000)`` independent posterior draws.  For Normal draws the standard
error of a mean is ``sd / sqrt(n)``, of an sd ``sd / sqrt(2 n)``, of a correlation
``(1 - rho²) / sqrt(n)``; the tests hold each to 4 standard errors.

Where k-hat comes from.  A mean-field guide of a correlated Normal (unit variances,
correlation rho) has the conditional variances ``1 - rho²``; along the posterior's long
axis the variance ratio is ``(1 + rho) / (1 - rho²) = 1 / (1 - rho)``, whose Gaussian
ratio's tail index is ``1 - (1 - rho) = rho`` (`test_khat.py`'s Gaussian case): rho = 0.6
is resamplable (k about 0.5-0.6), rho = 0.8 is not (k about 0.8).
"""
import math

import numpy as np
import pytest
import torch

from helpers import BETA_BERNOULLI, FUNNEL, correlated
from qvr import loads
from qvr.events import FitWarning
from qvr.inference import FitConfig, fit
from qvr.inference.config import ConfigError
from qvr.inference.criticism.khat_text import khat_line, resample_text
from qvr.inference.methods.guide_resample import RESAMPLE_DRAWS
from qvr.inference.methods.guide_results import SUMMARY_DRAWS

RHO = 0.6


def _collect():
    events = []
    return events, events.append


def _worth(ess: float) -> float:
    """Independent draws the 1000 resampled draws are worth (module docstring)."""
    return 1.0 / (1.0 / ess + 1.0 / SUMMARY_DRAWS)


@pytest.fixture(scope="module")
def correlated_fit():
    events, on_event = _collect()
    res = fit(loads(correlated(RHO)), {},
              FitConfig(method="svi", steps=1500, lr=0.02, elbo_particles=8, seed=0,
                        resample="psis", pointwise=False), on_event=on_event)
    return res, events


def test_resampling_moves_a_mean_field_guide_to_the_correlated_posterior(correlated_fit):
    res, events = correlated_fit
    st = res.stats
    assert st["resampled"] is True and "resample_note" not in st
    assert st["khat_draws"] == RESAMPLE_DRAWS == st["resample_draws"]
    assert st["khat"] < 0.7
    assert 200 < st["resample_ess"] <= RESAMPLE_DRAWS
    assert not [e for e in events if isinstance(e, FitWarning)]
    # the guide itself is the mean-field one: conditional sds sqrt(1 - rho²) = 0.8
    guide_sd = [float(np.exp(res.params[f"log_scale_{s}"]).reshape(-1)[0]) for s in "ab"]
    assert max(guide_sd) < 0.9, guide_sd
    a, b = (res.samples[s].reshape(-1).astype(np.float64) for s in "ab")
    assert res.samples["a"].shape[:2] == (1, SUMMARY_DRAWS)
    n = _worth(st["resample_ess"])
    for v in (a, b):
        assert abs(v.mean()) < 4 / math.sqrt(n)
        assert abs(v.std() - 1.0) < 4 / math.sqrt(2 * n), v.std()
    corr = float(np.corrcoef(a, b)[0, 1])
    assert abs(corr - RHO) < 4 * (1 - RHO ** 2) / math.sqrt(n), corr
    # the long axis (a + b) / sqrt 2: variance 1 + rho (the guide's: 1 - rho²)
    long_sd = float(((a + b) / math.sqrt(2)).std())
    assert abs(long_sd - math.sqrt(1 + RHO)) < 4 * math.sqrt(1 + RHO) / math.sqrt(2 * n)
    # the summary is of the resampled draws
    row = res.summary.to_dict()["a"]
    assert row["mean"] == pytest.approx(a.mean(), abs=1e-6)
    assert row["sd"] == pytest.approx(a.std(ddof=1), rel=1e-4)


def test_laplace_draws_resampled_give_the_exact_beta_posterior():
    """Beta(2, 3) prior, 4 successes in 30: the posterior is Beta(6, 29); the Laplace
    approximation on logit p is skewed the wrong way (its mean 0.18 against 0.171)."""
    flips = torch.tensor([1.0] * 4 + [0.0] * 26)
    a, b = 6.0, 29.0
    mean, sd = a / (a + b), math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    res = fit(loads(BETA_BERNOULLI), {"flip": flips},
              FitConfig(method="svi", guide="laplace", seed=0, resample="psis",
                        pointwise=False))
    st = res.stats
    assert st["resampled"] is True and st["khat"] < 0.7
    n = _worth(st["resample_ess"])
    p = res.samples["p"].reshape(-1).astype(np.float64)
    assert abs(p.mean() - mean) < 4 * sd / math.sqrt(n), p.mean()
    assert abs(p.std() - sd) < 4 * sd / math.sqrt(2 * n), p.std()


def test_the_funnel_is_not_resampled_and_says_why(tmp_path):
    """Neal's funnel with a mean-field guide: k-hat far above 0.7 (`test_khat.py`)."""
    events, on_event = _collect()
    res = fit(loads(FUNNEL), {}, FitConfig(method="svi", steps=1500, lr=0.02, seed=1,
                                           resample="psis"),
              on_event=on_event, run_dir=tmp_path / "run")
    st = res.stats
    k = st["khat"]
    assert k > 0.7
    assert st["resampled"] is False
    assert st["resample_note"] == f"k-hat {k:.2f} >= 0.7"
    assert st["khat_draws"] == RESAMPLE_DRAWS and st["resample_ess"] < 100
    warned = [e.message for e in events if isinstance(e, FitWarning)]
    assert warned[0].startswith(f"Pareto k-hat {k:.2f} > 0.7: the mean-field guide")
    assert warned[1] == (f"--resample psis: the draws were not resampled (k-hat {k:.2f} >= "
                         f"0.7): the summary and checks use the guide's own draws")
    # the draws are the guide's own: v's sd is the guide's (about 0.5), not the prior's 3
    guide_sd = float(np.exp(res.params["log_scale_v"]).reshape(-1)[0])
    v = res.samples["v"].reshape(-1)
    assert abs(v.std() - guide_sd) < 4 * guide_sd / math.sqrt(2 * SUMMARY_DRAWS)
    from qvr.runs import open_run
    run = open_run(tmp_path / "run")
    assert not (run.path / "samples.npz").exists()  # as any SVI run's: drawn again at will
    assert khat_line(run.summary["stats"]).endswith(
        f"; draws not resampled (k-hat {k:.2f} >= 0.7): the guide's own")


def test_the_option_and_its_refusals():
    assert FitConfig().resample == "none"
    assert FitConfig(method="svi", resample="bootstrap").errors() == {
        "resample": "must be one of none, psis, amis; got 'bootstrap'"}
    assert FitConfig(method="svi", guide="map", resample="psis").errors() == {
        "resample": "psis needs draws with a density, and --guide map is one point (the "
                    "mode): use --guide laplace"}
    for guide in ("meanfield", "fullrank", "lowrank:2", "flow", "laplace"):
        assert FitConfig(method="svi", guide=guide, resample="psis").errors() == {}
    with pytest.raises(ConfigError, match="--guide map is one point"):
        fit(loads(correlated(RHO)), {},
            FitConfig(method="svi", guide="map", resample="psis"))


def test_the_line_of_each_outcome():
    base = {"khat": 0.31, "khat_draws": 4000}
    assert resample_text(base) is None and resample_text({"resampled": True}) is None
    assert khat_line({**base, "resampled": True, "resample_ess": 412.4}) == (
        "Pareto k-hat 0.31 (4000 draws): good (below 0.5); draws resampled by PSIS "
        "(ESS 412)")
    assert khat_line({"khat_note": "not computed across ranks", "resampled": False,
                      "resample_note": "no k-hat: not computed across ranks"}) == (
        "Pareto k-hat not computed across ranks; draws not resampled (no k-hat: not "
        "computed across ranks): the guide's own")
    # Pathfinder's own `resampled` adds nothing to its line
    assert khat_line({**base, "resampled": True}) == \
        "Pareto k-hat 0.31 (4000 draws): good (below 0.5)"
