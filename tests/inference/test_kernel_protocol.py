"""The kernel protocol between `MCMC` (the driver) and its kernels (`mcmc/kernel.py`):
`init` always receives the planned run, kernels keep their caches themselves, the driver
learns how the steps ran through `compiler_used` / `compiler_notes` only; and the NUTS
refactor that restored the split left the draws bit-for-bit unchanged."""
import gc
import importlib.util
from pathlib import Path

import pytest
import torch

from qvr import loads
from qvr.inference import MCMC, HMCKernel, NUTSKernel
from qvr.inference.mcmc import tick as T
from qvr.inference.potential import make_target

from helpers import normal_normal_case

ROOT = Path(__file__).resolve().parents[2]


class RecordingNUTS(NUTSKernel):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.inits = []

    def init(self, target, z0, num_warmup, num_samples):  # no defaults: all four given
        self.inits.append((tuple(z0.shape), num_warmup, num_samples))
        return super().init(target, z0, num_warmup, num_samples)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_init_receives_the_planned_run(chain_method):
    model, x, obs, _ = normal_normal_case()
    k = RecordingNUTS(max_tree_depth=3, compiler="torchscript")
    MCMC(k, num_warmup=7, num_samples=5, num_chains=2, chain_method=chain_method).run(
        model, x, obs)
    want = [((2, 1), 7, 5)] if chain_method == "vectorized" else [((1, 1), 7, 5)] * 2
    assert k.inits == want


def test_the_planned_draws_reach_the_state():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    state = NUTSKernel().init(t, torch.zeros(2, t.dim), 30, 70)
    assert (state.num_warmup, state.num_samples) == (30, 70)
    with pytest.raises(TypeError):  # the plan is not optional
        NUTSKernel().init(t, torch.zeros(2, t.dim), 30)


def test_nuts_keeps_its_ticks_itself_and_forgets_them_with_the_target():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    k = NUTSKernel(compiler="torchscript")
    r = MCMC(k, num_warmup=10, num_samples=5, num_chains=2).run(None, target=t)
    assert "_tick_cache" not in vars(t)
    assert not any(isinstance(v, T.TickCache) for v in vars(t).values())
    cache = k.tick_cache(t)
    assert [tk.backend for tk in cache.ticks.values()] == ["torchscript"]
    assert k.compiler_used(t) == r.compiler == "torchscript"
    # a second run of the same kernel on the same target reuses the traced tick
    tick = next(iter(cache.ticks.values()))
    MCMC(k, num_warmup=10, num_samples=5, num_chains=2).run(None, target=t)
    assert next(iter(k.tick_cache(t).ticks.values())) is tick
    # another kernel has its own ticks
    other = NUTSKernel(compiler="torchscript")
    assert other.compiler_used(t) == "" and other.compiler_notes(t) == []
    del t, r
    gc.collect()
    assert k._tick_caches == {}


def test_the_result_reports_what_the_kernel_says():
    """The driver asks the kernel (`compiler_used`, `compiler_notes`), nothing else."""
    model, x, obs, _ = normal_normal_case()

    class Saying(HMCKernel):
        def compiler_used(self, target):
            return "torchscript"

        def compiler_notes(self, target):
            return ["a note", "another"]

    r = MCMC(Saying(num_steps=2), num_warmup=3, num_samples=2, num_chains=1).run(
        model, x, obs)
    assert (r.compiler, r.compiler_notes) == ("torchscript", ["a note", "another"])
    r = MCMC(HMCKernel(num_steps=2), num_warmup=3, num_samples=2, num_chains=1).run(
        model, x, obs)
    assert (r.compiler, r.compiler_notes) == ("", [])


def _bench_models():
    spec = importlib.util.spec_from_file_location("qvr_bench_inference",
                                                  ROOT / "bench" / "inference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.qvr_models()


#: recorded with the kernel *before* the kernel/driver refactor (TorchScript ticks, torch
#: seed 0, 150 warmup + 100 draws, 3 chains, one thread): gradient evaluations, summed
#: tree depths and leapfrog steps over the draws, the draws' sum (float64 of float32
#: draws) and chain 0's last draw of the first coordinate
REFERENCE = {
    "normal_normal": (1094, 510, 736, 343.3018066883087, 1.2455490827560425),
    "eight_schools": (4457, 968, 2692, 1686.2339634224772, 4.7690277099609375),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_torchscript_draws_are_those_of_the_kernel_before_the_refactor(name):
    src, x, obs = _bench_models()[name]
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="torchscript"), num_warmup=150, num_samples=100,
             num_chains=3).run(loads(src).morphism, x, obs)
    evals, depth, steps, total, last = REFERENCE[name]
    assert r.compiler == "torchscript"
    assert r.num_grad_evals == evals
    assert int(r.tree_depths.sum()) == depth and int(r.num_steps.sum()) == steps
    # identical draws give identical sums; one changed decision moves them by far more
    assert float(r.unconstrained.double().sum()) == pytest.approx(total, rel=1e-9)
    assert float(r.unconstrained[0, -1, 0]) == last
