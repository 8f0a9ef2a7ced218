"""SMC steering reports through the fit event API (`qvr.events`): order,
metrics, snapshots, throttling, cancellation and a broken callback."""
import math

import pytest
import torch

from qvr.events import (FitCancelled, FitFinished, FitProgress, FitStarted,
                        FitWarning, ParticlesSnapshot, StopToken)
from qvr.smc import LogitsLM, SMCSteering
from smc_helpers import EOS, bigram_logits
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)


def make(**kw):
    args = dict(num_particles=6, expansion=3, max_len=5,
                generator=torch.Generator().manual_seed(0))
    args.update(kw)
    return SMCSteering(LogitsLM(bigram_logits, eos=EOS), **args)


def test_event_sequence_and_metrics():
    events = []
    r = make(progress_interval=0).run(on_event=events.append)
    # the driver reports steps only: `qvr.inference.fit` reports the start and the end
    assert not any(isinstance(e, (FitStarted, FitFinished, FitCancelled)) for e in events)
    progress = [e for e in events if isinstance(e, FitProgress)]
    snaps = [e for e in events if isinstance(e, ParticlesSnapshot)]
    assert [p.step for p in progress] == list(range(1, r.num_steps + 1))
    assert [s.step for s in snaps] == [p.step for p in progress]
    for p in progress:
        assert p.method == "smc" and p.phase == "smc" and p.total == 5
        assert {"ess", "num_finished", "log_Z"} <= set(p.metrics)
        assert 0 < p.metrics["ess"] <= 6
    # G ≡ 1: log Ẑ so far is 0 at every step; the last snapshot is the result
    assert all(p.metrics["log_Z"] == pytest.approx(0.0, abs=1e-12) for p in progress)
    assert progress[-1].metrics["num_finished"] == 6
    assert snaps[-1].sequences == tuple(r.sequences)
    assert snaps[-1].log_weights == tuple(r.log_weights.tolist())
    assert [h["step"] for h in r.history] == list(range(1, r.num_steps + 1))


def test_progress_is_throttled_but_first_and_last_steps_are_reported():
    events = []
    r = make(max_len=30, progress_interval=3600.0,
             potential=lambda p, c, t: 1.0 if c[-1] != EOS else 1e-3).run(on_event=events.append)
    steps = [e.step for e in events if isinstance(e, FitProgress)]
    assert steps[0] == 1 and steps[-1] == r.num_steps and len(steps) <= 3
    assert len(r.history) == r.num_steps  # the result keeps every step


def test_cancellation_returns_a_partial_result():
    token = StopToken()
    events = []

    def on_event(e):
        events.append(e)
        if isinstance(e, FitProgress) and e.step == 2:
            token.cancel()

    r = make(max_len=50, progress_interval=0,
             potential=lambda p, c, t: 1.0 if c[-1] != EOS else 1e-6).run(
        on_event=on_event, should_stop=token)
    assert r.cancelled and r.num_steps == 2
    assert not any(isinstance(e, (FitFinished, FitCancelled)) for e in events)
    assert [e.step for e in events if isinstance(e, FitProgress)] == [1, 2]
    assert len(r.sequences) == 6 and len(r.history) == 2
    assert math.isfinite(r.log_Z)


def test_constructor_callbacks_are_used_and_a_raising_callback_is_isolated():
    seen = []

    def broken(e):
        seen.append(e)
        if isinstance(e, FitProgress):
            raise RuntimeError("consumer bug")

    r = make(on_event=broken, progress_interval=0).run()
    assert not r.cancelled and len(r.sequences) == 6
    assert any(isinstance(e, FitWarning) for e in seen)
    assert sum(isinstance(e, FitProgress) for e in seen) == 1  # no delivery after the bug


def test_a_run_without_listener_builds_no_snapshot_and_gives_the_same_result():
    pot = lambda p, c, t: 1.0 if c[-1] != EOS else 0.2
    quiet = make(potential=pot, max_len=8).run()
    events = []
    loud = make(potential=pot, max_len=8, progress_interval=0).run(on_event=events.append)
    assert quiet.sequences == loud.sequences and torch.equal(quiet.log_weights, loud.log_weights)
    assert quiet.history == loud.history
    assert sum(isinstance(e, ParticlesSnapshot) for e in events) == loud.num_steps
