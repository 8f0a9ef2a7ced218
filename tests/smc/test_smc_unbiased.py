"""Statistical properties of SMC steering on a tiny bigram model with exact enumeration
(qvr-runtime.md §8.5 items 1–3): unbiased `Ẑ`, `G ≡ 1`, posterior consistency.

Every test is seeded; tolerances come from the Monte Carlo standard error of the runs.
"""
import math

import numpy as np
import pytest
import torch

from qvr.smc import LogitsLM, SMCSteering, forbid_patterns
from smc_helpers import (A, B, EOS, bigram_logits, chi_square_pvalue, enumerate_target,
                         half_on_a, log_of)
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

MAX_LEN = 4
RUNS = 2000


def bigram_lm():
    return LogitsLM(bigram_logits, eos=EOS)


FORBID_AB = forbid_patterns((A, B))


def forbid_ab(parent, child, t):
    return math.exp(FORBID_AB.log_potential([parent], [child], t)[0].item())


@pytest.mark.parametrize("potential,n,k", [
    (half_on_a, 4, 3), (half_on_a, 4, 1), (half_on_a, 1, 3),  # spec §8.5 item 1
    (forbid_ab, 4, 3), (forbid_ab, 1, 3),  # zero weights: dead fillers, stratified draws
], ids=["half_on_a-N4-K3", "half_on_a-N4-K1", "half_on_a-N1-K3", "forbid_ab-N4-K3",
        "forbid_ab-N1-K3"])
def test_z_hat_is_unbiased(potential, n, k):
    _, z = enumerate_target(MAX_LEN, log_of(potential))
    gen = torch.Generator().manual_seed(1000 * n + k)
    smc = SMCSteering(bigram_lm(), potential=potential, num_particles=n, expansion=k,
                      max_len=MAX_LEN, generator=gen)
    zs = np.array([smc.run().Z for _ in range(RUNS)])
    se = zs.std(ddof=1) / math.sqrt(RUNS)
    assert abs(zs.mean() - z) <= 4 * se, (zs.mean(), z, se)
    assert se < 0.1 * z  # the check has power


def test_constant_potential_gives_z_one_equal_weights_and_the_model_law():
    target, z = enumerate_target(MAX_LEN)
    assert z == pytest.approx(1.0)
    n, runs = 4, 2500
    gen = torch.Generator().manual_seed(7)
    smc = SMCSteering(bigram_lm(), num_particles=n, expansion=3, max_len=MAX_LEN, generator=gen)
    counts: dict = {}
    for _ in range(runs):
        r = smc.run()
        assert r.Z == pytest.approx(1.0, abs=1e-12)
        assert torch.allclose(r.log_weights, torch.zeros(n, dtype=torch.float64), atol=1e-12)
        # one particle per run, uniformly at random: its law is the model's string law
        s = r.sequences[int(torch.randint(n, (), generator=gen))]
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) <= set(target)
    # chi-square over cells with expected count >= 5 (the rest pooled)
    expected = {s: p * runs for s, p in target.items()}
    big = [s for s, e in expected.items() if e >= 5]
    obs = [counts.get(s, 0) for s in big] + [runs - sum(counts.get(s, 0) for s in big)]
    exp = [expected[s] for s in big] + [runs - sum(expected[s] for s in big)]
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp) if e > 0)
    dof = sum(e > 0 for e in exp) - 1
    assert chi_square_pvalue(stat, dof) > 1e-3, (stat, dof)


@pytest.mark.parametrize("potential", [half_on_a, forbid_ab], ids=["half_on_a", "forbid_ab"])
def test_posterior_is_consistent_at_large_n(potential):
    target, z = enumerate_target(MAX_LEN, log_of(potential))
    exact = {s: m / z for s, m in target.items()}
    n = 4000
    gen = torch.Generator().manual_seed(11)
    r = SMCSteering(bigram_lm(), potential=potential, num_particles=n, expansion=3,
                    max_len=MAX_LEN, generator=gen).run()
    post = r.posterior()
    assert set(post) <= set(exact)
    assert sum(post.values()) == pytest.approx(1.0)
    for s, p in exact.items():
        # binomial error of N draws, inflated x2 for weights and resampling, 5 sigma
        assert abs(post.get(s, 0.0) - p) <= 5 * math.sqrt(2 * p * (1 - p) / n) + 1e-3, s
    assert abs(r.Z - z) < 0.05 * z
