"""`ProgramLM` on compiled QVR programs (qvr-runtime.md §8.4, §8.5 item 6): the seed's
position-wise `transformer_lm` and the `scan`-based `recurrent_lm`."""
import math
from pathlib import Path

import pytest
import torch

import qvr
from qvr.smc import ProgramLM, SMCSteering, forbid_tokens
from smc_helpers import chi_square_pvalue
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BOS, EOS = 0, 1


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    return qvr.load(EXAMPLES / "transformer_lm.qvr")


@pytest.fixture(scope="module")
def recurrent():
    torch.manual_seed(0)
    return qvr.load(EXAMPLES / "recurrent_lm.qvr")


def two_sample_pvalue(a: torch.Tensor, b: torch.Tensor, size: int) -> float:
    """Chi-square test that two samples of tokens come from one law (cells with few
    expected counts pooled)."""
    ca = torch.bincount(a.flatten(), minlength=size).double()
    cb = torch.bincount(b.flatten(), minlength=size).double()
    na, nb = ca.sum(), cb.sum()
    tot = ca + cb
    big = tot >= 10
    ca = torch.cat([ca[big], ca[~big].sum(0, keepdim=True)])
    cb = torch.cat([cb[big], cb[~big].sum(0, keepdim=True)])
    tot = ca + cb
    keep = tot > 0
    ca, cb, tot = ca[keep], cb[keep], tot[keep]
    ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
    stat = float(((ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb).sum())
    return chi_square_pvalue(stat, int(keep.sum()) - 1)


def test_kinds_and_modes(transformer, recurrent):
    assert ProgramLM(transformer, BOS, EOS).kind == "positionwise"
    assert ProgramLM(transformer, BOS, EOS).mode == "last-token"
    assert ProgramLM(recurrent, BOS, EOS).kind == "scan"
    assert ProgramLM(recurrent, BOS, EOS).mode == "scan-state"
    assert ProgramLM(recurrent, BOS, EOS, cache=False).mode == "recompute"


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("k", [1, 3])
def test_transformer_lm_end_to_end(transformer, cache, k):
    """§8.5 item 6: N sequences, each ending in eos or of length max_len."""
    lm = ProgramLM(transformer, bos=BOS, eos=EOS, cache=cache)
    n, max_len = 12, 10
    r = SMCSteering(lm, potential=forbid_tokens(7), num_particles=n, expansion=k,
                    max_len=max_len, generator=torch.Generator().manual_seed(1)).run()
    assert len(r.sequences) == n and r.num_steps <= max_len
    for s, f, t in zip(r.sequences, r.finished.tolist(), r.truncated.tolist()):
        assert (s[-1] == EOS and f and not t) or (len(s) == max_len and t and not f)
        assert 7 not in s and all(0 <= a < 32 for a in s)
    assert math.isfinite(r.log_Z) and r.log_Z <= 1e-12  # G <= 1
    assert abs(sum(r.posterior().values()) - 1) < 1e-9


def test_last_token_state_has_the_law_of_the_whole_prefix(transformer):
    """Position-wise kernels: the prediction at the last position depends on the last
    token only, so the cached draw and the spec's whole-prefix draw share one law."""
    cached = ProgramLM(transformer, BOS, EOS)
    full = ProgramLM(transformer, BOS, EOS, cache=False)
    prefix = (5, 9, 2, 17)
    gen = torch.Generator().manual_seed(2)
    a = full.sample([prefix], 6000, gen)
    state = cached.advance(None, None, torch.tensor([prefix[-1]] * 6000), [prefix] * 6000)
    b = cached.draw(state, 1, gen)
    assert two_sample_pvalue(a, b, 32) > 1e-3


def test_scan_state_has_the_program_law_for_a_fixed_prefix(recurrent):
    """Consuming a fixed prefix one cell step at a time reproduces the program's
    next-token law for that prefix (one independent trajectory per row)."""
    cached = ProgramLM(recurrent, BOS, EOS)
    full = ProgramLM(recurrent, BOS, EOS, cache=False)
    gen = torch.Generator().manual_seed(3)
    m = 6000
    for prefix in [(), (4, 20, 33)]:
        a = full.sample([prefix], m, gen)
        state = cached.start(m)
        for i, tok in enumerate(prefix):
            state = cached.advance(state, torch.arange(m), torch.full((m,), tok),
                                   [prefix[:i + 1]] * m)
        b = cached.draw(state, 1, gen)
        assert two_sample_pvalue(a, b, 64) > 1e-3, prefix
    # and the distribution is not degenerate (the test has power)
    assert len(torch.unique(a)) > 5


@pytest.mark.parametrize("cache", [True, False])
def test_recurrent_lm_end_to_end(recurrent, cache):
    lm = ProgramLM(recurrent, bos=BOS, eos=EOS, cache=cache)
    r = SMCSteering(lm, num_particles=10, expansion=2, max_len=8,
                    generator=torch.Generator().manual_seed(4)).run()
    assert len(r.sequences) == 10
    assert r.Z == pytest.approx(1.0)
    for s in r.sequences:
        assert s[-1] == EOS or len(s) == 8


def test_program_runs_are_reproducible_and_leave_the_global_rng_alone(recurrent, transformer):
    for prog in (recurrent, transformer):
        def run():
            return SMCSteering(ProgramLM(prog, BOS, EOS), num_particles=6, expansion=2,
                               max_len=5, generator=torch.Generator().manual_seed(5)).run()
        torch.manual_seed(9)
        before = torch.random.get_rng_state()
        r1, r2 = run(), run()
        assert torch.equal(torch.random.get_rng_state(), before)
        assert r1.sequences == r2.sequences


def test_argument_errors(transformer):
    with pytest.raises(ValueError, match="eos=32"):
        ProgramLM(transformer, bos=0, eos=32)
    hmm = qvr.load(EXAMPLES / "hmm.qvr")
    with pytest.raises(TypeError, match="Token -> Token"):
        ProgramLM(hmm, bos=0, eos=1)
    with pytest.raises(TypeError):
        ProgramLM(object(), bos=0, eos=1)


def test_scan_draw_shares_the_first_kernel_parameters_across_copies(recurrent):
    """`post_copies` (parameters once per particle, K draws) gives the same values as
    running the links on K copies of each state, from the same global RNG state."""
    from qvr.smc.program_lm import _rowwise_family, _ScanPlan
    lm = ProgramLM(recurrent, BOS, EOS)
    assert _rowwise_family(lm.plan.post[0])  # recurrent_lm's `refine`
    h = lm.start(7, torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.manual_seed(3)
        a = lm.plan.post_copies(h, 4)
        torch.manual_seed(3)
        b = _ScanPlan.chain(lm.plan.post, h.repeat_interleave(4, 0))
    assert a.shape == b.shape == (28, h.shape[1]) and torch.allclose(a, b, atol=1e-6)


def test_whole_prefix_draws_from_a_prefix_batch_equal_those_from_tuples(recurrent):
    import numpy as np

    from qvr.smc.model import PrefixBatch
    lm = ProgramLM(recurrent, BOS, EOS, cache=False)
    pb = PrefixBatch(np.array([[4, 20, 33], [5, 6, 7]]))
    a = lm.sample(pb, 3, torch.Generator().manual_seed(1))
    b = lm.sample(list(pb), 3, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (2, 3)
