"""The thread policy of the methods other than HMC/NUTS (`qvr.inference.threads`): the
threads asked for, else ``OMP_NUM_THREADS``, else one on a busy machine and torch's
default on an idle one; restored after the fit.  The machine's load is faked: no test
depends on the real one."""
import os

import pytest
import torch

from qvr import loads
from qvr.events import FitNote
from qvr.inference import FitConfig, fit
from qvr.inference import threads as policy

PROGRAM = """\
object K : FinSet 5
program p : K -> K
    sample mu <- Normal(0.0, 1.0)
    observe y : K <- Normal(mu, 1.0)
    return y
export p
"""


def test_busy_cores_is_the_busy_share_of_cpu_time_times_the_cores(monkeypatch):
    readings = iter([(100.0, 200.0), (250.0, 400.0)])
    monkeypatch.setattr(policy.time, "sleep", lambda s: None)
    assert policy.busy_cores(read=lambda: next(readings)) == \
        pytest.approx(0.75 * (os.cpu_count() or 1))
    monkeypatch.setattr(policy.os, "getloadavg", lambda: (1.25, 0.0, 0.0))
    assert policy.busy_cores(read=lambda: None) == 1.25  # no /proc/stat: the load average


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_choice(two_threads, monkeypatch):
    assert policy.threads_for(3, busy=lambda: 1.9) == (3, "asked")
    assert policy.threads_for(None, busy=lambda: 1.9) == (1, "busy machine (1.9 cores in use)")
    assert policy.threads_for(None, busy=lambda: 0.2) == (2, "idle machine")
    assert policy.threads_for(None, busy=lambda: None) == (2, "idle machine")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert policy.threads_for(None, busy=lambda: 0.0) == (1, "OMP_NUM_THREADS")


@pytest.mark.parametrize("load, threads", [(1.9, 1), (0.1, 2)])
def test_svi_computes_on_the_chosen_threads_and_restores_them(two_threads, monkeypatch, load,
                                                              threads):
    seen = []
    monkeypatch.setattr(policy, "busy_cores", lambda: load)
    from qvr.inference.vi import svi
    step = svi.SVI.step

    def spy(self, *a, **k):
        seen.append(torch.get_num_threads())
        return step(self, *a, **k)
    monkeypatch.setattr(svi.SVI, "step", spy)
    events = []
    res = fit(loads(PROGRAM).morphism, {"y": torch.zeros(5)},
              FitConfig(method="svi", steps=3, pointwise=False), on_event=events.append)
    assert res.status == "finished"
    assert seen == [threads] * 3 and res.stats["threads"] == threads
    notes = [e.message for e in events if isinstance(e, FitNote)]
    assert ("computing on one thread: busy machine (1.9 cores in use) (--threads N to choose)"
            in notes) == (threads == 1)
    assert torch.get_num_threads() == 2
