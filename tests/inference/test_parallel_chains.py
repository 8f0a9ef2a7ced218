"""`chain_method="parallel"`: chains over forked worker processes."""
import pytest
import torch

from helpers import check_moments, normal_normal_case
from qvr.inference import MCMC, NUTSKernel
from qvr.events import DrawsChunk, FitProgress
from qvr.inference.mcmc.parallel import fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="needs fork")


def _run(seed, **kw):
    model, x, obs, exact = normal_normal_case()
    torch.manual_seed(seed)
    events = []
    r = MCMC(NUTSKernel(), num_warmup=150, num_samples=300, num_chains=4,
             chain_method="parallel", num_workers=2, **kw).run(model, x, obs,
                                                               on_event=events.append)
    return r, events, exact


def test_parallel_chains_target_the_posterior_and_report_every_chain():
    r, events, exact = _run(5)
    assert r.samples["mu"].shape == (4, 300, 1) and r.num_chains == 4
    check_moments(r.samples, exact)
    assert r.total_divergences == 0
    assert {e.chain for e in events if isinstance(e, FitProgress)} == {0, 1, 2, 3}
    draws = {e.chain: 0 for e in events if isinstance(e, DrawsChunk)}
    for e in events:
        if isinstance(e, DrawsChunk):
            draws[e.chain] += len(e.draws["mu"])
    assert draws == {0: 300, 1: 300, 2: 300, 3: 300}
    assert r.step_sizes.shape == (4,) and r.inverse_mass_matrix.shape == (4, 1)


def test_parallel_chains_are_reproducible_with_the_global_seed():
    a, _, _ = _run(7)
    b, _, _ = _run(7)
    assert torch.equal(a.samples["mu"], b.samples["mu"])


def test_a_failing_worker_is_reported_with_its_chains():
    model, x, obs, _ = normal_normal_case()

    class Boom(NUTSKernel):
        def sample(self, state, target):
            import os
            if os.getpid() != parent:
                raise ValueError("exploded")
            return super().sample(state, target)

    import os
    parent = os.getpid()
    with pytest.raises(RuntimeError, match=r"chains \[2, 3\].*ValueError: exploded"):
        MCMC(Boom(), num_warmup=5, num_samples=5, num_chains=4, chain_method="parallel",
             num_workers=2).run(model, x, obs)


def test_num_workers_is_validated():
    with pytest.raises(ValueError, match="num_workers"):
        MCMC(NUTSKernel(), num_warmup=1, num_samples=1, num_workers=0)


def test_cancelling_stops_every_worker_and_keeps_what_was_drawn():
    model, x, obs, _ = normal_normal_case()
    seen = []

    def stop():
        return len(seen) > 0

    def on_event(e):
        if isinstance(e, DrawsChunk):
            seen.append(e)

    r = MCMC(NUTSKernel(), num_warmup=20, num_samples=100000, num_chains=4,
             chain_method="parallel", num_workers=2, draws_chunk=10).run(
                 model, x, obs, on_event=on_event, should_stop=stop)
    assert r.cancelled
    assert 1 <= r.num_samples < 100000 and r.samples["mu"].shape[1] == r.num_samples
