"""The PSIS Pareto k-hat of an approximation's draws (`qvr.inference.criticism.khat`,
Yao, Vehtari, Simpson & Gelman 2018), on ratios with a known tail index and through
`qvr.fit` (SVI): below 0.5 where the mean-field family holds the posterior, above 0.7 on
Neal's funnel, with the warning event.

Known tail indices.  Exact Pareto weights ``w = U^-k`` (U uniform) have a generalized
Pareto tail of shape k above any threshold.  Gaussian ratios: draws from q = N(0, 1)
weighted to p = N(0, σ²), σ > 1, give ``w ∝ exp(a x²)`` with ``a = (1 - 1/σ²)/2``, so
``P(W > t) = 2 Φ̄(z)`` with ``z = sqrt(log t / a)``; its local tail index
``k(t) = -1 / (d log P(W > t) / d log t) = 2a z Φ̄(z) / φ(z)`` rises to ``k = 2a =
1 - 1/σ²`` (Mills' ratio ``z Φ̄ / φ → 1``), so a fit to the largest M of S draws (above
``z0``: ``2 Φ̄(z0) = M / S``) lies between ``k(z0)`` and ``k``.  The estimate's standard
error is ``(1 + k) / sqrt(M)`` (the generalized Pareto MLE's), M = 3 sqrt(S) at relative
efficiency 1; means over seeds are held to 4 standard errors.
"""
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

from helpers import FUNNEL
from qvr import loads
from qvr.events import FitWarning
from qvr.inference import FitConfig, fit
from qvr.inference.criticism.khat import (KHAT_DRAWS, KHAT_WARN, khat_record,
                                          khat_warning, pareto_khat)
from qvr.inference.criticism.khat_text import (khat_line, khat_verdict,
                                               recorded_khat_warning)

S = 100_000
M = math.ceil(min(S / 5, 3 * math.sqrt(S)))  # arviz-stats' tail length at r_eff = 1
SEEDS = 10


def _mean_khat(make) -> float:
    return float(np.mean([pareto_khat(make(np.random.default_rng(seed)))
                          for seed in range(SEEDS)]))


def _se(k: float) -> float:
    return (1 + k) / math.sqrt(M) / math.sqrt(SEEDS)


@pytest.mark.parametrize("k", [0.3, 0.7, 1.1])
def test_exact_pareto_weights_give_their_shape(k):
    got = _mean_khat(lambda rng: -k * np.log(rng.random(S)))
    # arviz-stats shrinks towards 0.5 with weight 10 against M: at most 0.006 here
    assert got == pytest.approx(k, abs=4 * _se(k) + 10 / (M + 10) * abs(k - 0.5))


@pytest.mark.parametrize("sigma2", [1.5, 2.0, 4.0])
def test_gaussian_ratios_lie_between_the_local_and_the_limiting_tail_index(sigma2):
    k = 1 - 1 / sigma2
    z0 = stats.norm.isf(M / S / 2)
    k_local = k * z0 * stats.norm.sf(z0) / stats.norm.pdf(z0)
    assert 0.85 * k < k_local < 0.9 * k  # the bracket is narrow enough to mean something

    def ratios(rng):
        x = rng.standard_normal(S)
        return stats.norm.logpdf(x, 0.0, math.sqrt(sigma2)) - stats.norm.logpdf(x)
    got = _mean_khat(ratios)
    assert k_local - 4 * _se(k) <= got <= k + 4 * _se(k), (k_local, got, k)


def test_a_target_narrower_than_the_draws_has_bounded_weights():
    """p = N(0, 0.5) weighted from q = N(0, 1): w ∝ exp(-x²/2) is bounded: k-hat < 0."""
    x = np.random.default_rng(0).standard_normal(4000)
    assert pareto_khat(stats.norm.logpdf(x, 0.0, math.sqrt(0.5)) - stats.norm.logpdf(x)) < 0


def test_exact_ratios_and_non_finite_ones():
    x = np.random.default_rng(0).standard_normal(1000)
    assert pareto_khat(np.full(1000, 3.0)) == 0.0  # q = p: the log normaliser, every draw
    # q = p up to float32 rounding: the largest ratios tie (psislw refused a flat tail)
    rounded = np.float32(-12.5) + np.float32(3e-6) * x.astype(np.float32)
    assert pareto_khat(rounded) < 0.5
    assert pareto_khat(np.r_[x, np.inf]) == math.inf
    assert pareto_khat(np.r_[x, np.nan]) == math.inf
    assert pareto_khat(np.r_[x, -np.inf]) == pareto_khat(x)  # a zero weight, not in the tail
    assert math.isnan(pareto_khat(x[:9]))   # fewer than ten
    assert math.isnan(pareto_khat(x[:24]))  # no tail of five draws (arviz raised)
    assert math.isfinite(pareto_khat(x[:25]))
    assert khat_record(x[:9]) == {"khat": None, "khat_draws": 9}
    assert khat_record(np.r_[x, np.inf]) == {"khat": math.inf, "khat_draws": 1001}


def test_the_warning_and_the_lines():
    advice = ("try a richer guide (--guide fullrank, lowrank:K or flow), Pathfinder "
              "(--method pathfinder), or NUTS")
    assert khat_warning(0.7) is None and khat_warning(float("nan")) is None
    assert khat_warning(0.93, "svi", "meanfield") == (
        "Pareto k-hat 0.93 > 0.7: the mean-field guide is too far from the posterior for "
        f"its draws to be trusted; {advice}")
    assert khat_warning(1.2, "laplace") == (
        "Pareto k-hat 1.20 > 0.7: the Laplace approximation is too far from the posterior "
        "for its draws to be trusted; its means and sds are unreliable: try --resample "
        "amis (adaptive importance sampling from it) or NUTS (--method nuts)")
    # tried already (its k-hat stayed above 0.7): NUTS only
    assert khat_warning(1.2, "pathfinder", amis_tried=True) == (
        "Pareto k-hat 1.20 > 0.7: Pathfinder's approximation is too far from the posterior "
        "for its draws to be trusted; its means and sds are unreliable: try NUTS "
        "(--method nuts)")
    assert khat_warning(0.93, "svi", "laplace") == (
        "Pareto k-hat 0.93 > 0.7: the Laplace guide is too far from the posterior for its "
        "draws to be trusted; try --resample amis (adaptive importance sampling from it), "
        "a richer guide (--guide fullrank, lowrank:K or flow), Pathfinder (--method "
        "pathfinder), or NUTS")
    assert [khat_verdict(k) for k in (-0.3, 0.49, 0.5, 0.7, 0.71, math.inf)] == \
        ["good", "good", "usable", "usable", "unreliable", "unreliable"]
    assert khat_line({"khat": 0.31, "khat_draws": 1000}) == \
        "Pareto k-hat 0.31 (1000 draws): good (below 0.5)"
    assert khat_line({"khat": 0.6405, "khat_draws": 1000}) == \
        "Pareto k-hat 0.64 (1000 draws): usable (0.5 to 0.7)"
    assert khat_line({"khat": 0.98, "khat_draws": 400}) == \
        "Pareto k-hat 0.98 (400 draws): unreliable (above 0.7)"
    assert khat_line({"khat": math.inf, "khat_draws": 1000}) == \
        "Pareto k-hat inf (1000 draws): unreliable (above 0.7)"
    assert khat_line({"khat": None, "khat_draws": 9}) == \
        "Pareto k-hat: none (9 draws), no tail to fit"
    assert khat_line({"khat_note": "not computed across ranks"}) == \
        "Pareto k-hat not computed across ranks"
    assert khat_line({"final_loss": 3.0}) is None and khat_line(None) is None
    # the run's own warning wins; made again from the stats without one
    stats = {"khat": 0.98, "khat_draws": 1000}
    assert recorded_khat_warning(stats, "svi", "meanfield") == \
        khat_warning(0.98, "svi", "meanfield")
    assert recorded_khat_warning(stats, "svi", "meanfield",
                                 [FitWarning("other"), FitWarning("Pareto k-hat 0.98 > 0.7: x")]
                                 ) == "Pareto k-hat 0.98 > 0.7: x"
    assert recorded_khat_warning({"khat": 0.64}, "svi") is None


TWO_MEANS = """
object Obs : FinSet 20
program two_means : Obs -> Obs
    sample a <- Normal(1.0, 2.0)
    sample b <- Normal(-1.0, 1.0)
    observe y : Obs <- Normal(a, 1.5)
    observe z : Obs <- Normal(b, 0.5)
    return a
export two_means
"""

def _collect():
    events = []
    return events, events.append


def test_svi_where_the_mean_field_family_holds_the_posterior_is_good():
    """Two independent conjugate means: the posterior is a product of Normals, which the
    mean-field guide holds; a converged guide gives k-hat < 0.5.  A guide sd r times the
    posterior's gives k = 1 - r² for r < 1 (the Gaussian case above), bounded weights
    for r >= 1: with the guide's sds within 10 % of the exact ones k <= 0.19, and the
    1000-draw estimate's sd is about 0.12 (8 ELBO particles: the last iterate is that
    close; with one it strayed 20 %)."""
    g = torch.Generator().manual_seed(3)
    y = 1.7 + 1.5 * torch.randn(20, generator=g)
    z = -0.4 + 0.5 * torch.randn(20, generator=g)
    events, on_event = _collect()
    res = fit(loads(TWO_MEANS), {"y": y, "z": z},
              FitConfig(method="svi", steps=1000, lr=0.02, elbo_particles=8, seed=0),
              on_event=on_event)
    exact_sd = {"a": (1 / 2.0 ** 2 + 20 / 1.5 ** 2) ** -0.5, "b": (1 + 20 / 0.5 ** 2) ** -0.5}
    for site, sd in exact_sd.items():
        got = float(np.exp(res.params[f"log_scale_{site}"]).reshape(-1)[0])
        assert got == pytest.approx(sd, rel=0.1), site
    assert res.stats["khat_draws"] == KHAT_DRAWS
    assert res.stats["khat"] < 0.5
    assert not [e for e in events if isinstance(e, FitWarning) and "k-hat" in e.message]


def test_svi_on_the_funnel_with_a_mean_field_guide_is_unreliable_and_warns(tmp_path):
    """Neal's funnel: the mean-field guide's sd of v (~0.5) is far below the prior's 3.
    The joint weights' tail is at least as heavy as v's marginal ratio N(0, 3) / q(v)
    (a conditional mean of the joint weights): k >= 1 - sd_v² / 9, above 0.97 here."""
    events, on_event = _collect()
    res = fit(loads(FUNNEL), {}, FitConfig(method="svi", steps=1500, lr=0.02, seed=1),
              on_event=on_event, run_dir=tmp_path / "run")
    sd_v = float(np.exp(res.params["log_scale_v"]).reshape(-1)[0])
    assert 1 - sd_v ** 2 / 9 > 0.9
    k = res.stats["khat"]
    assert res.stats["khat_draws"] == KHAT_DRAWS
    assert k > KHAT_WARN
    warned = [e.message for e in events if isinstance(e, FitWarning)]
    assert warned == [
        f"Pareto k-hat {k:.2f} > 0.7: the mean-field guide is too far from the posterior "
        "for its draws to be trusted; try a richer guide (--guide fullrank, lowrank:K or "
        "flow), Pathfinder (--method pathfinder), or NUTS"]
    # the record has both: the stats and the warning event
    from qvr.runs import open_run
    run = open_run(tmp_path / "run")
    assert run.summary["stats"]["khat"] == pytest.approx(k, rel=1e-12)
    assert [e.message for e in run.events(load_draws=False)
            if isinstance(e, FitWarning)] == warned


def test_degenerate_weights_give_an_infinite_khat_not_a_small_one():
    """A guide thousands of nats from the posterior: a handful of draws carry all the
    weight, the rest of the tail underflows to zero, and a generalized Pareto fit of that
    tail says k near 0.  Pyro's rule (fewer than ten tail weights above 1e-15 of the
    largest) makes it infinite (kid_scores' mean-field guide after 1,000 steps had log
    ratios with an sd of ~2,000 nats and k-hat 0.05 before)."""
    from qvr.inference.criticism.khat import degenerate_rows, degenerate_tail
    rng = np.random.default_rng(0)
    wild = rng.normal(0.0, 2000.0, size=1000)
    assert degenerate_tail(wild)
    assert pareto_khat(wild) == math.inf
    assert khat_record(wild)["khat"] == math.inf
    # nine weights near the top and the rest far below: still degenerate; ten: not
    nine = np.concatenate([np.zeros(9), np.full(991, -100.0)]) + rng.normal(0, 1e-3, 1000)
    ten = np.concatenate([np.zeros(10), np.full(990, -100.0)]) + rng.normal(0, 1e-3, 1000)
    assert degenerate_tail(nine) and not degenerate_tail(ten)
    # an ordinary heavy tail is not degenerate, and its rows are judged one by one
    heavy = 0.375 * rng.normal(size=1000) ** 2
    assert not degenerate_tail(heavy)
    assert degenerate_rows(np.stack([heavy, wild, ten])).tolist() == [False, True, False]


def test_loo_rows_with_degenerate_guide_weights_have_infinite_k():
    """PSIS-LOO from guide draws whose own weights are degenerate: every row's k is inf
    (listed above the threshold), not the near-zero k of a tail of zeros."""
    from qvr.inference.criticism.checks import loo
    rng = np.random.default_rng(1)
    S, n = 1000, 5
    ll = rng.normal(-1.0, 0.1, size=(1, S, n))
    importance = {"log_p": rng.normal(0.0, 2000.0, size=S), "log_q": np.zeros(S)}
    out = loo({"y": ll}, None, importance)
    assert out["pareto_k"] == [math.inf] * n
    assert out["n_high_k"] == n


def test_the_advice_for_a_program_whose_latents_are_all_local():
    """Every guide covers local (per-row) latents with mean-field pairs: the warning does
    not send the user to a richer guide that would change nothing."""
    got = khat_warning(3.05, "svi", "meanfield", local_only=True)
    assert got == ("Pareto k-hat 3.05 > 0.7: the mean-field guide is too far from the "
                   "posterior for its draws to be trusted; its latents are all local (one "
                   "per row), which every guide covers with mean-field pairs: try more "
                   "steps or ELBO particles (--steps, --elbo-particles), or NUTS")
    assert "richer guide" in khat_warning(3.05, "svi", "meanfield")
