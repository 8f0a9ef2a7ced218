"""Next-token models: `LogitsLM` (per-prefix cache, incremental logits functions, the
stateless spec interface) and the stateful adapter for user models (qvr.smc.model)."""
import math

import pytest
import torch

from qvr.smc import LogitsLM, SMCSteering
from qvr.smc.model import PrefixBatch, PrefixStates, as_stateful, take_rows
from smc_helpers import A, B, BIGRAM, EOS, START, bigram_logits, half_on_a
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

TABLE = torch.tensor([[0.1, 0.7, -0.4], [0.9, -0.2, 0.0], [0.3, 0.3, 0.3], [0.0, 0.0, 0.0]])
BOS = 3


class CountingLogits:
    """Logits from (last token, number of `a` so far mod 3), as a full-prefix function
    and incrementally (exactly the same floats either way)."""

    def __init__(self):
        self.rows = 0

    def _logits(self, last, count):
        return TABLE[last] + 0.5 * (count % 3).to(TABLE.dtype).unsqueeze(-1)

    def __call__(self, prefixes):
        self.rows += prefixes.shape[0] * prefixes.shape[1]
        count = (prefixes == A).sum(1)
        return self._logits(prefixes[:, -1], count)

    # incremental form
    def start(self, tokens):
        self.rows += tokens.shape[0]
        count = (tokens == A).sum(1)
        return (tokens[:, -1], count), self._logits(tokens[:, -1], count)

    def step(self, state, tokens):
        self.rows += tokens.shape[0]
        count = state[1] + (tokens == A).long()
        return (tokens, count), self._logits(tokens, count)


class FullOnly:
    """The same function without the incremental methods."""

    def __init__(self):
        self.inner = CountingLogits()

    def __call__(self, prefixes):
        return self.inner(prefixes)


def run(lm, seed=0, **kw):
    args = dict(potential=half_on_a, num_particles=8, expansion=3, max_len=6,
                generator=torch.Generator().manual_seed(seed))
    args.update(kw)
    return SMCSteering(lm, **args).run()


@pytest.mark.parametrize("seed", range(3))
def test_cached_incremental_and_recomputed_runs_are_identical(seed):
    results = [run(LogitsLM(CountingLogits(), eos=EOS, bos=BOS), seed),
               run(LogitsLM(FullOnly(), eos=EOS, bos=BOS), seed),
               run(LogitsLM(CountingLogits(), eos=EOS, bos=BOS, cache=False), seed)]
    for r in results[1:]:
        assert r.sequences == results[0].sequences
        assert torch.equal(r.log_weights, results[0].log_weights)


def test_incremental_state_does_less_work_than_recomputing():
    inc, full = CountingLogits(), CountingLogits()
    run(LogitsLM(inc, eos=EOS, bos=BOS), max_len=12,
        potential=lambda p, c, t: 1.0 if c[-1] != EOS else 0.05)
    run(LogitsLM(full, eos=EOS, bos=BOS, cache=False), max_len=12,
        potential=lambda p, c, t: 1.0 if c[-1] != EOS else 0.05)
    assert inc.rows * 3 < full.rows


def test_per_prefix_cache_evaluates_each_prefix_once():
    seen = []

    def logits_fn(prefixes):
        seen.extend(map(tuple, prefixes.tolist()))
        return bigram_logits(prefixes)

    lm = LogitsLM(logits_fn, eos=EOS)
    for seed in range(5):
        run(lm, seed, max_len=4)
    assert len(seen) == len(set(seen))  # across steps, particles and runs
    lm2 = LogitsLM(logits_fn, eos=EOS, cache_size=2)
    lm2.logits([(A,), (B,), (A, A)])
    assert len(lm2._memo) == 2


def test_log_probs_sample_and_bos():
    got = []

    def logits_fn(prefixes):
        got.append(prefixes.clone())
        return torch.zeros(prefixes.shape[0], 4)

    lm = LogitsLM(logits_fn, eos=EOS, bos=BOS)
    lp = lm.log_probs([(), (A, B)])
    assert lp.shape == (2, 4) and torch.allclose(lp, torch.full((2, 4), -math.log(4),
                                                                 dtype=torch.float64))
    assert got[0].tolist() == [[BOS]] and got[1].tolist() == [[BOS, A, B]]
    draws = lm.sample([(A,)], 5000, torch.Generator().manual_seed(0))
    assert draws.shape == (1, 5000) and draws.dtype == torch.long
    freq = torch.bincount(draws[0], minlength=4).double() / 5000
    assert torch.all((freq - 0.25).abs() < 4 * math.sqrt(0.25 * 0.75 / 5000))


def test_bad_logits_are_reported():
    lm = LogitsLM(lambda p: torch.full((p.shape[0], 3), float("nan")), eos=EOS)
    with pytest.raises(ValueError, match="NaN"):
        lm.sample([()], 2)
    lm = LogitsLM(lambda p: torch.full((p.shape[0], 3), -math.inf), eos=EOS)
    with pytest.raises(ValueError, match="no finite entry"):
        SMCSteering(lm, num_particles=2, max_len=2).run()


class SampleOnly:
    """A user model with only the spec's `sample` (no state)."""

    eos = EOS

    def __init__(self):
        self.calls = []

    def sample(self, prefixes, n, generator=None):
        self.calls.append(list(prefixes))
        probs = torch.stack([START if not p else BIGRAM[p[-1]] for p in prefixes])
        return torch.multinomial(probs, n, replacement=True, generator=generator)


def test_a_sample_only_model_is_wrapped_and_gets_whole_prefixes():
    m = SampleOnly()
    assert isinstance(as_stateful(m), PrefixStates)
    lm = LogitsLM(bigram_logits, eos=EOS)
    assert as_stateful(lm) is lm
    r1, r2 = run(m, 4), run(LogitsLM(bigram_logits, eos=EOS), 4)
    assert r1.sequences == r2.sequences  # same draws from the same generator
    assert m.calls[0] == [()] * 8
    assert all(len({len(p) for p in c}) == 1 for c in m.calls)
    with pytest.raises(TypeError):
        as_stateful(object())


def test_take_rows_on_nested_states():
    st = {"h": torch.arange(6).reshape(3, 2), "rest": (torch.arange(3), None)}
    out = take_rows(st, torch.tensor([2, 2, 0]))
    assert out["h"].tolist() == [[4, 5], [4, 5], [0, 1]] and out["rest"][0].tolist() == [2, 2, 0]
    with pytest.raises(TypeError):
        take_rows(object(), torch.tensor([0]))


def test_z_hat_is_unbiased_with_an_incremental_model():
    """Same statistical check as §8.5 item 1, through the incremental (cached) path."""

    def probs_of(prefix):
        logits = TABLE[BOS if not prefix else prefix[-1]] + 0.5 * (sum(a == A for a in prefix) % 3)
        return torch.softmax(logits.double(), -1)

    # exact target for this model, by enumeration
    def walk(prefix, mass, out):
        p = probs_of(prefix)
        for a in range(3):
            child = prefix + (a,)
            m = mass * float(p[a]) * half_on_a(prefix, child, len(child))
            if a == EOS or len(child) == 4:
                out[child] = m
            else:
                walk(child, m, out)
        return out

    z = sum(walk((), 1.0, {}).values())
    lm = LogitsLM(CountingLogits(), eos=EOS, bos=BOS)
    smc = SMCSteering(lm, potential=half_on_a, num_particles=4, expansion=3, max_len=4,
                      generator=torch.Generator().manual_seed(8))
    zs = torch.tensor([smc.run().Z for _ in range(1000)], dtype=torch.float64)
    se = zs.std() / math.sqrt(len(zs))
    assert abs(zs.mean() - z) <= 4 * se


def test_prefix_batch_is_a_lazy_sequence_of_tuples():
    import doctest

    import numpy as np

    import qvr.smc.model
    assert doctest.testmod(qvr.smc.model).failed == 0
    pb = PrefixBatch(np.array([[A, B], [B, B]]))
    assert pb == [(A, B), (B, B)] and list(pb) == [(A, B), (B, B)] and len(pb) == 2
    assert pb[-1] == (B, B) and pb.tensor().dtype == torch.long
    assert pb.tensor((BOS,)).tolist() == [[BOS, A, B], [BOS, B, B]]
    empty = PrefixBatch(np.zeros((3, 0), dtype=np.int64))
    assert list(empty) == [()] * 3 and empty.tensor((BOS,)).tolist() == [[BOS]] * 3


def test_whole_prefix_logits_from_a_prefix_batch_equal_those_from_tuples():
    import numpy as np

    lm = LogitsLM(CountingLogits(), eos=EOS, bos=BOS, cache=False)
    pb = PrefixBatch(np.array([[A, B, A], [B, B, EOS], [A, A, A]]))
    assert torch.equal(lm.logits(pb), lm.logits(list(pb)))
    assert torch.equal(LogitsLM(FullOnly(), eos=EOS, bos=BOS).logits(pb), lm.logits(pb))


def test_positive_infinite_logits_are_reported():
    lm = LogitsLM(lambda p: torch.tensor([[0.0, math.inf, 0.0]]).expand(p.shape[0], 3), eos=EOS)
    with pytest.raises(ValueError, match=r"NaN or \+inf"):
        lm.sample([()], 2)
