"""A slow iteration still reports progress, and a density that vmap cannot run says so in
one line (issue 36.9: an ODE fit showed nothing for 500 s and a raw RuntimeWarning cut
mid-sentence).  The density is made slow by a fake clock that each evaluation advances:
no sleeps, nothing depends on the machine's speed."""
import warnings

import torch

from qvr.inference import MCMC, NUTSKernel
from qvr.events import FitNote, FitProgress
from qvr.inference.mcmc import driver
from qvr.inference.mcmc.potential import FunctionTarget, make_target, vmap_note

from helpers import normal_normal_case


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_slow_iteration_reports_progress_while_it_runs(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(driver, "_clock", clock)

    def density(z):  # 4 s of (fake) time per gradient
        clock.now += 4.0
        return -0.5 * (z * z).sum(-1)

    events = []
    target = FunctionTarget(density, 2)
    torch.manual_seed(0)
    # a tiny step size: the first iteration builds the whole depth-4 tree (15 leaves)
    MCMC(NUTSKernel(step_size=1e-3, max_tree_depth=4, adapt_step_size=False), num_warmup=2,
         num_samples=2, num_chains=2, on_event=events.append).run(None, target=target)
    progress = [e for e in events if isinstance(e, FitProgress)]
    first_step = next(i for i, e in enumerate(progress) if "gradients_in_iteration" not in
                      e.metrics)
    beats = progress[:first_step]  # before the first iteration ended
    assert progress[first_step].step == 1 and progress[first_step].phase == "warmup"
    assert beats, "no progress while the first iteration ran"
    assert {e.chain for e in beats} == {0, 1}
    assert all(e.phase == "warmup" and e.step == 0 and e.total == 2 for e in beats)
    counts = [e.metrics["gradients_in_iteration"] for e in beats if e.chain == 0]
    # 15 leaves of 4 s, a heartbeat when 5 s passed without progress: every second leaf
    assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] <= 15
    assert len(counts) >= 5
    assert target.on_evaluation is None  # the run's hook is gone with the run
    # the plain progress line (no terminal) says that the iteration is under way
    import io
    from qvr.commands.progress import Progress
    from qvr.events import FitStarted
    p = Progress(io.StringIO(), force=False)
    p.update(FitStarted("nuts", 4, 2, {"num_warmup": 2, "num_samples": 2}))
    for e in events[:events.index(beats[-1]) + 1]:
        p.update(e)
    n = int(beats[-1].metrics["gradients_in_iteration"])
    assert p.plain_line() == ("qvr run: progress: nuts warmup 0/2, - draws/s (chain 0), "
                              "accept nan, divergences 0, ETA --:--, iteration 1 running "
                              f"({n} gradients so far)")


TORCH_MESSAGE = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there "
                 "exists a Tensor `other` in extra_args that has more elements than `self`. "
                 "This happened due to `other` being vmapped over but `self` not being "
                 "vmapped over in a vmap. Please try to use out-of-place operators instead.")
NOTE = ("the chains' densities are evaluated one chain at a time (slower): torch.func.vmap "
        "cannot run this model (RuntimeError: vmap: inplace arithmetic(self, *extra_args) "
        "is not possible because there exists a Tensor `other` in extra_args that has more "
        "elements than `self`.)")


def _unvmappable(monkeypatch):
    from qvr.inference.mcmc.potential import ProgramTarget

    def fail(self, z):
        raise RuntimeError(TORCH_MESSAGE)

    monkeypatch.setattr(ProgramTarget, "_vmapped", fail)
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    t.compile = False
    return t


def test_a_density_vmap_cannot_run_is_said_in_one_line_not_a_warning(monkeypatch):
    assert vmap_note(RuntimeError(TORCH_MESSAGE)) == NOTE
    t = _unvmappable(monkeypatch)
    events = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(0)
        MCMC(NUTSKernel(), num_warmup=5, num_samples=5, num_chains=2,
             on_event=events.append).run(None, target=t)
    assert [e.message for e in events if isinstance(e, FitNote)] == [NOTE]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert t.notes == [NOTE] and t.report_note is None
    # used without a driver: a one-line RuntimeWarning of the same text
    t2 = _unvmappable(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t2.log_density_and_grad(torch.zeros(2, t2.dim))
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == [NOTE]
