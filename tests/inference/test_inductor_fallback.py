"""An Inductor NUTS tick never fails a fit: a kernel that raises when called (at its
first call or later in the run) hands over to the TorchScript leaf, the failing leaf is
recomputed, and the reason is in `MCMCResult.compiler_notes`; compiled ticks run with
autograd off, which is what made Inductor fail on models with parameters
(`examples/sensor_tracking.qvr`: ``mm(): functions with out=... arguments don't support
automatic differentiation``)."""
import os
import shutil
from pathlib import Path

import pytest
import torch

from qvr import load
from qvr.inference import MCMC, NUTSKernel
from qvr.inference.mcmc import tick as T
from qvr.inference.mcmc.potential import make_target

from qvr import loads

from helpers import FUNNEL, normal_normal_case

ROOT = Path(__file__).resolve().parents[2]
HAVE_CC = shutil.which(os.environ.get("CXX", "g++")) is not None
MM_ERROR = ("mm(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad.")


def _run(compiler, seed=3, target=None, **kw):
    if target is None:
        model, x, obs, _ = normal_normal_case()
        target = make_target(model, x, obs)
    # (compiled whatever one eager evaluation costs: tests/inference/conftest.py)
    torch.manual_seed(seed)
    return MCMC(NUTSKernel(compiler=compiler, **kw), num_warmup=60, num_samples=40,
                num_chains=3).run(None, target=target)


def _fake_inductor(monkeypatch, fails_at):
    """Replace the Inductor compile by the same tick run by PyTorch (`positional_tick`,
    the function Inductor would compile) that raises `MM_ERROR` at the call for which
    `fails_at(call_index, check_mask)` is true.  Returns the list of call records."""
    calls = []

    def fake(density, z0, dense, thr, uturn, K):
        fn = T.positional_tick(T.folded_function(T.leaf_function(density, True, dense, thr),
                                                 uturn))

        def compiled(args):
            calls.append(torch.is_grad_enabled())
            if fails_at(len(calls) - 1, args[-1]):
                raise RuntimeError(MM_ERROR)
            return list(fn(*args))

        return T.InductorTick(compiled, K, z0.device), "compiled by Inductor"

    monkeypatch.setattr(T, "inductor_tick", fake)
    return calls


def test_a_tick_failing_at_its_first_call_finishes_on_torchscript(monkeypatch):
    want = _run("torchscript")
    calls = _fake_inductor(monkeypatch, lambda i, check: True)
    got = _run("inductor")
    assert len(calls) == 1  # tried once, then TorchScript for good
    assert got.compiler == "torchscript"
    assert got.compiler_notes == [
        "compiled by Inductor",
        f"the Inductor kernel failed at its first call (RuntimeError: {MM_ERROR}); the "
        "steps ran on TorchScript"]
    # the failed leaf was recomputed from the same inputs and the same uniform draw
    assert torch.equal(got.unconstrained, want.unconstrained)
    assert got.num_grad_evals == want.num_grad_evals


def test_a_tick_failing_inside_a_subtree_hands_its_checkpoints_over(monkeypatch):
    """The failure comes at a leaf whose subtree already stored a checkpoint in the
    Inductor tick's stacks (an odd leaf): the TorchScript leaf carries on from them."""
    def target():  # the funnel builds deep trees: many leaves inside subtrees
        return make_target(loads(FUNNEL).morphism, torch.zeros(1, 1), {})

    want = _run("torchscript", target=target())
    failed_at = []

    def fails_at(i, check):
        if i >= 30 and bool(check.any()) and not failed_at:
            failed_at.append(i)
        return bool(failed_at)

    calls = _fake_inductor(monkeypatch, fails_at)
    got = _run("inductor", target=target())
    assert failed_at and len(calls) == failed_at[0] + 1
    assert got.compiler == "torchscript"
    assert got.compiler_notes[1].startswith(
        "the Inductor kernel failed during the run (RuntimeError: mm(): functions with")
    # the PyTorch-run tick is the TorchScript leaf's arithmetic: the same draws
    assert torch.equal(got.unconstrained, want.unconstrained)
    assert torch.equal(got.tree_depths, want.tree_depths)


def test_compiled_ticks_run_without_autograd(monkeypatch):
    calls = _fake_inductor(monkeypatch, lambda i, check: False)
    r = _run("inductor")
    assert r.compiler == "inductor" and r.compiler_notes == ["compiled by Inductor"]
    # every leaf went through the kernel (the draws' leaves and the warmup's), none with
    # autograd on
    assert len(calls) > int(r.num_steps.sum()) > 0
    assert not any(calls)


needs_cc = pytest.mark.skipif(not HAVE_CC, reason="Inductor needs a C++ compiler")


@needs_cc
def test_inductor_runs_sensor_tracking():
    """The model of the report: a recurrent cell with trainable parameters (its weights
    require grad), which made the Inductor tick raise at its first call."""
    from qvr.inference.data.fit_data import split_data, synthesize
    from qvr.inference.front.fitting import model_of
    model = model_of(load(str(ROOT / "examples" / "sensor_tracking.qvr")))
    torch.manual_seed(0)
    data, _ = synthesize(model, 3)
    x, obs = split_data(model, data)
    torch.manual_seed(1)
    r = MCMC(NUTSKernel(compiler="inductor", max_tree_depth=4), num_warmup=10,
             num_samples=10, num_chains=2).run(model, x, obs)
    assert r.compiler == "inductor"
    assert r.compiler_notes == ["compiled by Inductor"]
    assert r.unconstrained.shape == (2, 10, 30) and not r.unconstrained.requires_grad
    assert bool(torch.isfinite(r.log_densities).all())
