"""The `c*` threshold, the deterministic / stratified split and the reweighting
(qvr-runtime.md §8.2 steps 3–7, §8.5 item 4)."""
import math

import numpy as np
import pytest
import torch

from qvr.smc.resample import normalise, resample, stratified_select, threshold
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)


def weight_vectors():
    """Random normalised weight vectors of several shapes: flat, heavy-tailed, with ties
    and zeros, with one dominant weight."""
    rng = np.random.default_rng(0)
    cases = []
    for m, n in [(12, 4), (30, 8), (5, 1), (100, 64), (9, 8), (256, 64)]:
        cases.append((rng.random(m), n))
        cases.append((rng.pareto(1.0, m) + 1e-3, n))
        w = rng.random(m)
        w[rng.random(m) < 0.3] = 0.0
        w[: m // 3] = w[0] + 0.5  # ties among the heaviest
        cases.append((w, n))
        w = rng.random(m) * 1e-6
        w[m // 2] = 1.0
        cases.append((w, n))
        cases.append((np.full(m, 1.0), n))
    return [(w / w.sum(), n) for w, n in cases if (w > 0).sum() > n]


def walk_select(w_stoch, alpha, u0):
    """The spec's literal walk (§8.2 step 6): U ← U − ŵ_j; select if U < 0, then U += α."""
    u, picks = u0, []
    for j, w in enumerate(w_stoch):
        u -= w
        if u < 0:
            picks.append(j)
            u += alpha
    return picks


@pytest.mark.parametrize("case", range(len(weight_vectors())))
def test_threshold_properties(case):
    w_hat, n = weight_vectors()[case]
    th = threshold(w_hat, n)
    total = np.minimum(1.0, th.c_star * w_hat).sum()
    assert total == pytest.approx(n, abs=1e-9)
    # c* is the infimum: a hair below, the sum drops under N; a hair above, it exceeds N
    assert np.minimum(1.0, th.c_star * (1 - 1e-7) * w_hat).sum() < n
    assert np.minimum(1.0, th.c_star * (1 + 1e-7) * w_hat).sum() > n
    assert len(th.det) == th.num_det and 0 <= th.num_det < n
    assert np.all(th.c_star * w_hat[th.det] >= 1 - 1e-12)
    assert np.all(th.c_star * w_hat[th.stoch] < 1 + 1e-12)
    assert sorted(th.det.tolist() + th.stoch.tolist()) == list(range(len(w_hat)))
    assert th.stoch.tolist() == sorted(th.stoch.tolist())
    # the L largest by stable sort
    order = np.argsort(-w_hat, kind="stable")
    assert th.det.tolist() == order[: th.num_det].tolist()


@pytest.mark.parametrize("case", range(len(weight_vectors())))
def test_exactly_n_minus_l_distinct_stratified_picks(case):
    w_hat, n = weight_vectors()[case]
    th = threshold(w_hat, n)
    gen = torch.Generator().manual_seed(case)
    for _ in range(50):
        picks = stratified_select(w_hat[th.stoch], n - th.num_det, gen)
        assert len(picks) == n - th.num_det
        assert len(set(picks.tolist())) == len(picks)  # at most once
        assert np.all(w_hat[th.stoch][picks] > 0)  # never a zero-weight child


def test_systematic_search_equals_the_spec_walk():
    rng = np.random.default_rng(1)
    for _ in range(200):
        m, n = int(rng.integers(3, 40)), int(rng.integers(1, 10))
        w = rng.random(m) ** 3
        w[rng.random(m) < 0.2] = 0
        if (w > 0).sum() <= n:
            continue
        w_hat = w / w.sum()
        th = threshold(w_hat, n)
        ws = w_hat[th.stoch]
        k = n - th.num_det
        alpha = ws.sum() / k
        u0 = float(rng.random()) * alpha
        assert stratified_select(ws, k, u0=u0).tolist() == walk_select(ws, alpha, u0)


def test_selection_frequencies_match_c_star_w():
    w = np.array([0.30, 0.02, 0.15, 0.0, 0.08, 0.05, 0.12, 0.01, 0.20, 0.07])
    w_hat, n = w / w.sum(), 4
    th = threshold(w_hat, n)
    assert th.num_det == 1 and th.det.tolist() == [0]
    gen = torch.Generator().manual_seed(3)
    reps = 20000
    counts = np.zeros(len(w))
    for _ in range(reps):
        counts[th.stoch[stratified_select(w_hat[th.stoch], n - th.num_det, gen)]] += 1
    p = np.minimum(1.0, th.c_star * w_hat)[th.stoch]
    freq = counts[th.stoch] / reps
    se = np.sqrt(p * (1 - p) / reps)
    assert np.all(np.abs(freq - p) <= 4.5 * se + 1e-12), (freq, p)
    assert counts[3] == 0


def test_resample_is_unbiased_and_keeps_deterministic_weights_exactly():
    rng = np.random.default_rng(5)
    log_u = np.log(rng.pareto(1.5, 20) + 0.01)
    n = 6
    gen = torch.Generator().manual_seed(0)
    totals = []
    for _ in range(10000):
        r = resample(log_u, n, gen)
        assert len(r.indices) == n and not r.dead.any()
        # deterministic survivors carry their own weight, bit for bit
        assert np.array_equal(r.log_weights[: r.num_det], log_u[r.indices[: r.num_det]])
        totals.append(np.exp(r.log_weights).sum())
    totals = np.array(totals)
    expected = np.exp(log_u).sum()
    assert abs(totals.mean() - expected) <= 4 * totals.std() / math.sqrt(len(totals)) + 1e-9
    # stratified survivors all carry W / c*
    r = resample(log_u, n, gen)
    log_w, w_hat = normalise(log_u)
    th = threshold(w_hat, n)
    assert np.allclose(r.log_weights[r.num_det:], log_w - math.log(th.c_star))


def test_few_positive_children_are_all_kept_and_fillers_are_dead():
    with np.errstate(divide="ignore"):
        log_u = np.log(np.array([0.0, 0.2, 0.0, 0.5, 0.0, 0.0, 0.1]))
    r = resample(log_u, 5, torch.Generator().manual_seed(0))
    assert math.isinf(r.c_star) and r.num_det == 3
    assert r.indices.tolist() == [1, 3, 6, 1, 1]
    assert np.array_equal(r.log_weights[:3], log_u[[1, 3, 6]])
    assert r.dead.tolist() == [False, False, False, True, True]
    assert np.all(r.log_weights[3:] == -math.inf)


def test_all_zero_weights_return_first_children_dead():
    r = resample(np.full(3, -math.inf), 5)
    assert r.log_total == -math.inf
    assert r.indices.tolist() == [0, 1, 2, 2, 2]
    assert r.dead.all() and np.all(r.log_weights == -math.inf)


def test_single_particle_draws_proportionally_to_weight():
    w = np.array([0.1, 0.6, 0.3])
    gen = torch.Generator().manual_seed(2)
    reps = 10000
    picks = np.array([resample(np.log(w), 1, gen).indices[0] for _ in range(reps)])
    freq = np.bincount(picks, minlength=3) / reps
    assert np.all(np.abs(freq - w) <= 4 * np.sqrt(w * (1 - w) / reps))
    r = resample(np.log(w), 1, gen)
    assert r.num_det == 0 and r.log_weights[0] == pytest.approx(0.0)  # W / c* = 1


def test_rounding_never_loses_or_adds_a_particle():
    # the tail beyond N − 1 is below the rounding error of the heaviest weights
    w_hat = np.array([0.5, 0.5 - 1e-17, 1e-17, 1e-300])
    for n in (1, 2, 3):
        th = threshold(w_hat / w_hat.sum(), n)
        r = resample(np.log(w_hat), n, torch.Generator().manual_seed(0))
        assert len(r.indices) == n and th.num_det < n
        assert len(set(r.indices.tolist())) == n


def composed_resample(log_u, n, generator):
    """`resample` as the composition of `normalise`, `threshold` and `stratified_select`
    (its reference: the inlined version must give the same floats and the same draws)."""
    log_u = np.asarray(log_u, dtype=np.float64)
    log_total, w_hat = normalise(log_u)
    th = threshold(w_hat, n)
    if th.c_star == math.inf:
        fill = n - th.num_det
        idx = np.concatenate([th.det, np.repeat(th.det[:1], fill)])
        logw = np.concatenate([log_u[th.det], np.full(fill, -math.inf)])
        return idx, logw, th.c_star, th.num_det, log_total
    k = n - th.num_det
    picks = th.stoch[stratified_select(w_hat[th.stoch], k, generator)]
    lw = log_u[th.stoch]
    top = lw.max()
    log_strat = top + math.log(np.exp(lw - top).sum()) - math.log(k)
    idx = np.concatenate([th.det, picks])
    logw = np.concatenate([log_u[th.det], np.full(k, log_strat)])
    return idx, logw, th.c_star, th.num_det, log_total


@pytest.mark.parametrize("case", range(len(weight_vectors())))
def test_inlined_resample_equals_the_composition(case):
    w_hat, n = weight_vectors()[case]
    with np.errstate(divide="ignore"):
        log_u = np.log(w_hat) + 3.0
    cases = [(log_u, n), (log_u, len(log_u)), (log_u, len(log_u) + 2)]  # c* < ∞ and c* = ∞
    for log_u, n in cases:
        g1, g2 = torch.Generator().manual_seed(case), torch.Generator().manual_seed(case)
        for _ in range(5):
            r = resample(log_u, n, g1)
            idx, logw, c_star, num_det, log_total = composed_resample(log_u, n, g2)
            assert r.indices.tolist() == idx.tolist()
            assert np.array_equal(r.log_weights, logw)
            assert r.c_star == pytest.approx(c_star, rel=1e-12)  # (summed in another order)
            assert r.num_det == num_det and r.log_total == log_total
        assert torch.equal(g1.get_state(), g2.get_state())


def test_inlined_resample_without_deterministic_children_equals_the_composition():
    """The path where no child can be deterministic (N·max ŵ < 1, no sort), and weights
    right at its boundary (left to the general path)."""
    rng = np.random.default_rng(3)
    n = 16
    flat = np.log(rng.uniform(0.5, 1.0, 64))
    edge = np.zeros(64)
    edge[0] = np.log(63 / (n - 1))  # n·ŵ_max = 1 up to rounding
    with np.errstate(divide="ignore"):
        zeros = np.where(rng.random(64) < 0.3, -np.inf, flat)
    for log_u in (flat, edge, edge + 1e-12, zeros):
        g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        for _ in range(20):
            r = resample(log_u, n, g1)
            idx, logw, c_star, num_det, log_total = composed_resample(log_u, n, g2)
            assert r.indices.tolist() == idx.tolist() and np.array_equal(r.log_weights, logw)
            assert r.num_det == num_det and r.c_star == pytest.approx(c_star, rel=1e-12)
