"""Edge cases of SMC steering (qvr-runtime.md §8.3, §8.5 item 5) and argument checks."""
import math

import numpy as np
import pytest
import torch

from qvr.events import FitFailed, ParticlesSnapshot
from qvr.smc import LogitsLM, SMCSteering
from smc_helpers import A, B, EOS, VOCAB, bigram_logits
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)


def bigram_lm():
    return LogitsLM(bigram_logits, eos=EOS)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_all_potentials_zero_gives_z_zero():
    r = SMCSteering(bigram_lm(), potential=lambda p, c, t: 0.0, num_particles=4, expansion=3,
                    max_len=4, generator=gen()).run()
    assert r.Z == 0.0 and r.log_Z == -math.inf
    assert len(r.sequences) == 4 and r.num_steps == 1
    assert torch.all(r.log_weights == -math.inf) and r.dead.all()
    assert r.posterior() == {} and r.top() == []


def test_zero_at_a_later_step_stops_with_the_first_children():
    # every string of length 2 gets G = 0: step 2 kills all children
    pot = lambda p, c, t: 0.0 if t == 2 else 1.0
    lm = LogitsLM(lambda p: torch.tensor([0.0, 0.0, -math.inf]).expand(p.shape[0], 3), eos=EOS)
    r = SMCSteering(lm, potential=pot, num_particles=3, expansion=2, max_len=5,
                    generator=gen()).run()
    assert r.Z == 0.0 and r.num_steps == 2
    assert all(len(s) == 2 for s in r.sequences)


def test_few_positive_children_keep_all_and_fill_with_dead_particles():
    # only children (a,) have G > 0 at step 1; with p(a) = 0.2 and N' = 12 children,
    # seeds where 1 <= m <= N - 1 = 3 of them are positive are the common case
    lm = LogitsLM(lambda p: torch.tensor([0.2, 0.4, 0.4]).log().expand(p.shape[0], 3), eos=EOS)
    seen = 0
    for seed in range(20):
        snaps = []
        r = SMCSteering(lm, potential=lambda p, c, t: float(c[0] == A), num_particles=4,
                        expansion=3, max_len=3, generator=gen(seed), progress_interval=0,
                        on_event=lambda e: snaps.append(e)
                        if isinstance(e, ParticlesSnapshot) else None).run()
        first = snaps[0]
        alive = [w for w in first.log_weights if w > -math.inf]
        if not 1 <= len(alive) <= 3:
            continue
        seen += 1
        # every positive child kept, with weight w · G / K (N'/N and N/N' cancel) ...
        assert alive == [math.log(1 / 3)] * len(alive)
        assert first.log_weights[:len(alive)] == tuple(alive)
        # ... and the other slots are dead copies of the first kept child, weight 0
        assert all(s == (A,) for s in first.sequences)
        assert all(w == -math.inf for w in first.log_weights[len(alive):])
        assert torch.all(r.log_weights[r.dead] == -math.inf)
        assert all(s[0] == A for s in r.sequences)
    assert seen >= 5


def test_finished_particles_keep_their_weight_bit_for_bit():
    # K = 1: N' = N, c* = ∞ and particle i's only child stays at index i
    snaps = []
    pot = lambda p, c, t: 0.3 if c[-1] == B else 1.7
    SMCSteering(bigram_lm(), potential=pot, num_particles=16, expansion=1, max_len=6,
                generator=gen(3), progress_interval=0,
                on_event=lambda e: snaps.append(e) if isinstance(e, ParticlesSnapshot) else None
                ).run()
    checked = 0
    for before, after in zip(snaps, snaps[1:]):
        for i, (s, w, f) in enumerate(zip(before.sequences, before.log_weights, before.finished)):
            if f:
                assert after.sequences[i] == s and after.log_weights[i] == w
                checked += 1
    assert checked > 0


def test_finished_particles_kept_deterministically_with_k_gt_1():
    # EOS children are very heavy (G = 1e6) and rare (p = 0.05), so they are kept
    # deterministically at the next steps; their weight must not change
    snaps = []
    pot = lambda p, c, t: 1e6 if c[-1] == EOS else 1.0
    lm = LogitsLM(lambda p: torch.tensor([0.5, 0.45, 0.05]).log().expand(p.shape[0], 3), eos=EOS)
    SMCSteering(lm, potential=pot, num_particles=8, expansion=4, max_len=6,
                generator=gen(4), progress_interval=0,
                on_event=lambda e: snaps.append(e) if isinstance(e, ParticlesSnapshot) else None
                ).run()
    checked = 0
    for before, after in zip(snaps, snaps[1:]):
        def finished(snap):
            return {(s, w) for s, w, f in zip(snap.sequences, snap.log_weights, snap.finished)
                    if f and s[-1] == EOS}
        fin_before, fin_after = finished(before), finished(after)
        for s, w in fin_before:
            kept = [w2 for s2, w2 in fin_after if s2 == s]
            assert w in kept  # kept deterministically with the same weight
            checked += 1
    assert checked > 0


def test_max_len_truncation_is_flagged():
    never_ends = LogitsLM(lambda p: torch.tensor([0.0, 0.0, -math.inf]).expand(p.shape[0], 3),
                          eos=EOS)
    r = SMCSteering(never_ends, num_particles=5, expansion=2, max_len=3, generator=gen()).run()
    assert r.truncated.all() and not r.finished.any()
    assert all(len(s) == 3 for s in r.sequences) and r.num_steps == 3
    assert r.Z == pytest.approx(1.0)


def test_finished_and_truncated_flags_match_the_strings():
    r = SMCSteering(bigram_lm(), num_particles=32, expansion=2, max_len=3, generator=gen()).run()
    for s, f, tr in zip(r.sequences, r.finished.tolist(), r.truncated.tolist()):
        assert f == (s[-1] == EOS)
        assert tr == (not f and len(s) == 3)


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_invalid_potentials_raise(bad):
    events = []
    smc = SMCSteering(bigram_lm(), potential=lambda p, c, t: bad, num_particles=2, expansion=2,
                      max_len=3, on_event=events.append)
    with pytest.raises(ValueError, match="potential is"):
        smc.run()
    assert events == []  # the driver reports steps only; `fit` reports the failure


def test_invalid_potentials_through_fit_are_recorded_as_failed():
    from qvr import load
    from qvr.inference import FitConfig, fit
    from qvr.inference.data.fit_data import DataError
    events = []
    with pytest.raises(DataError, match="potential is"):
        fit(load("examples/transformer_lm.qvr"),
            config=FitConfig(method="smc", particles=2, expansion=2, max_len=3, eos=1),
            potential=lambda p, c, t: float("nan"), on_event=events.append)
    assert isinstance(events[-1], FitFailed) and events[-1].error_type == "DataError"


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_invalid_log_potentials_raise(bad):
    smc = SMCSteering(bigram_lm(), log_potential=lambda p, c, t: bad, num_particles=2,
                      max_len=3)
    with pytest.raises(ValueError, match="log-potential is"):
        smc.run()


def test_minus_inf_log_potential_is_a_zero_weight():
    r = SMCSteering(bigram_lm(), log_potential=lambda p, c, t: -math.inf if c[-1] == B else 0.0,
                    num_particles=8, expansion=2, max_len=4, generator=gen()).run()
    assert all(B not in s for s, d in zip(r.sequences, r.dead.tolist()) if not d)


def test_batched_potential_is_called_once_per_step():
    calls = []

    def pot(parents, children, t):
        calls.append((len(parents), t))
        return torch.tensor([0.5 if c[-1] == A else 1.0 for c in children])
    pot.batched = True
    r = SMCSteering(bigram_lm(), potential=pot, num_particles=4, expansion=3, max_len=4,
                    generator=gen()).run()
    assert [t for _, t in calls] == list(range(1, r.num_steps + 1))
    assert calls[0][0] == 12


def test_argument_checks():
    lm = bigram_lm()
    with pytest.raises(TypeError):
        SMCSteering(lm, potential=lambda *a: 1.0, log_potential=lambda *a: 0.0, num_particles=2,
                    max_len=2)
    for kw in ({"num_particles": 0, "max_len": 2}, {"num_particles": 2, "max_len": 0},
               {"num_particles": 2, "max_len": 2, "expansion": 0},
               {"num_particles": 2.5, "max_len": 2}):
        with pytest.raises(ValueError):
            SMCSteering(lm, **kw)


def test_one_particle_runs_and_is_importance_sampling_like():
    r = SMCSteering(bigram_lm(), num_particles=1, expansion=3, max_len=4, generator=gen()).run()
    assert len(r.sequences) == 1 and r.Z == pytest.approx(1.0)


def test_generator_makes_runs_reproducible_and_leaves_the_global_rng_alone():
    def run(seed):
        return SMCSteering(bigram_lm(), potential=lambda p, c, t: 0.5 if c[-1] == A else 1.0,
                           num_particles=6, expansion=3, max_len=4, generator=gen(seed)).run()
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    r1, r2 = run(9), run(9)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert r1.sequences == r2.sequences and torch.equal(r1.log_weights, r2.log_weights)
    assert r1.log_weights.dtype == torch.float64


def test_global_rng_is_used_without_a_generator():
    def run():
        return SMCSteering(bigram_lm(), num_particles=6, expansion=3, max_len=4).run()
    torch.manual_seed(5)
    a = run()
    torch.manual_seed(5)
    b = run()
    assert a.sequences == b.sequences


def test_smc_tests_run_torch_single_threaded():
    assert torch.get_num_threads() == 1  # the autouse fixture of smc_helpers is active


def test_long_strings_grow_the_token_matrix_and_a_huge_max_len_costs_nothing_upfront():
    never_ends = LogitsLM(lambda p: torch.tensor([0.0, 0.0, -math.inf]).expand(p.shape[0], 3),
                          eos=EOS)
    r = SMCSteering(never_ends, num_particles=3, expansion=2, max_len=150, generator=gen()).run()
    assert all(len(s) == 150 and set(s) <= {A, B} for s in r.sequences) and r.truncated.all()
    # strings end early: max_len only bounds them
    r = SMCSteering(bigram_lm(), num_particles=4, expansion=2, max_len=10 ** 9,
                    generator=gen()).run()
    assert all(s[-1] == EOS for s in r.sequences) and r.finished.all()
