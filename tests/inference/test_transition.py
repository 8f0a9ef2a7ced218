"""The whole NUTS transition in one loop (`qvr.inference.mcmc.transition`, issue 24).

* exactness: for one chain, the masked flat loop consumes a uniform table exactly as the
  Python tree builder (`NUTSKernel._build`) consumes its random stream when fed the same
  numbers, and reaches the same proposal, leaf count, depth, divergence and acceptance
  statistic (both run eagerly; the tree builder's draws are redirected into the table);
* independence: a batch of chains gives each chain what it gives alone (no lockstep);
* the compiled kernel (AOTInductor, C++ loop) agrees with PyTorch, is loaded from the disk
  cache by a second compile, and a failing compile or run leaves the fit on ticks;
* statistics: a fit with ``compiler="transition"`` has the exact posterior moments of a
  conjugate model within MCSE, and its tree depths and acceptance match the tick kernel's
  within Monte Carlo error.
"""
import math
import os
import shutil

import numpy as np
import pytest
import torch

from qvr.inference import MCMC, NUTSKernel
from qvr.inference.mcmc import tick as T
from qvr.inference.mcmc import transition as TR
from qvr.inference.potential import FunctionTarget, make_target

from helpers import check_moments, normal_normal_case

HAVE_CC = shutil.which(os.environ.get("CXX", "g++")) is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C++ compiler for Inductor")

SCALES = torch.tensor([0.3, 1.0, 3.0])


def density(z):
    """An anisotropic Gaussian: trees of varied depths; raw `(grad, log_density)`."""
    return -z / SCALES ** 2, -0.5 * (z * z / SCALES ** 2).sum(-1)


def _table_rand(u, K):
    """A stand-in for `torch.rand` inside `NUTSKernel._build` for one chain that hands
    out the table's direction and merge numbers in the order the tree builder draws them
    (a leaf's number is replaced by the tick wrapper below; a draw followed by a tick was
    a leaf's, one followed by another draw was the merge's)."""
    lead = 2 ** K
    st = {"j": 0, "expect_dir": True, "pending": False}

    def rand(*shape, **kw):
        if st["expect_dir"]:
            st["expect_dir"] = False
            return u[:, lead + st["j"]].clone()
        if st["pending"]:  # the previous draw was the merge: this one is a direction
            st["j"] += 1
            st["pending"] = False
            return u[:, lead + st["j"]].clone()
        st["pending"] = True
        return u[:, lead + K + st["j"]].clone()

    def leaf_called():
        st["pending"] = False

    return rand, leaf_called


class _Ticks:
    """Wraps an eager tick: the leaf's uniform is the table's, at the chain's leaf count."""

    def __init__(self, tick, u, on_leaf):
        self.tick, self.u, self.on_leaf = tick, u, on_leaf
        self.counts_itself = tick.counts_itself
        self.backend = tick.backend

    def checkpoints(self, K, z0):
        return self.tick.checkpoints(K, z0)

    def __call__(self, s, u, n):
        self.on_leaf()
        return self.tick(s, self.u[:, int(s.n_leaves[0])].clone(), n)


def _tree_builder(z0, p0, eps, u, K, momentum, biased, monkeypatch):
    """`NUTSKernel._build` for one chain, its draws taken from the table `u`."""
    from qvr.inference.mcmc import nuts as N
    from qvr.inference.mcmc.integrator import MassMatrix

    kernel = NUTSKernel(max_tree_depth=K, uturn="momentum" if momentum else "position",
                        transition="biased" if biased else "uniform")
    target = FunctionTarget(lambda z: density(z)[1], z0.shape[1])
    rand, leaf_called = _table_rand(u, K)
    monkeypatch.setattr(N.torch, "rand", rand)
    mass = MassMatrix.identity("diagonal", 1, z0.shape[1], z0.dtype, z0.device)
    state = kernel.init(target, z0, 0, 1)
    state.step_size = eps.clone()
    tick = _Ticks(T.LeafTick(T.leaf_function(target.log_density_and_grad, False, False,
                                             1000.0), momentum, "eager"), u, leaf_called)
    g0, lp0 = density(z0)
    h0 = -lp0 + mass.kinetic(p0)
    with torch.no_grad():
        t = kernel._build(state, target, tick, K, z0, lp0, g0, p0, h0,
                          mass.as_tensor(z0), momentum)
    monkeypatch.undo()
    return t


@pytest.mark.parametrize("momentum,biased", [(True, True), (False, False), (True, False)])
def test_one_chain_matches_the_tree_builder_on_the_same_numbers(momentum, biased,
                                                                monkeypatch):
    K = 6
    gen = torch.Generator().manual_seed(11)
    f = TR.transition_function(density, False, 1000.0, momentum, K, biased)
    store, check = TR.mask_tables(K)
    depths = set()
    for trial in range(25):
        z0 = 2.0 * torch.randn(1, 3, generator=gen)
        p0 = torch.randn(1, 3, generator=gen)
        eps = torch.tensor([0.05 + 0.5 * float(torch.rand(1, generator=gen))])
        u = torch.rand(1, TR.table_width(K), generator=gen)
        g0, lp0 = density(z0)
        out = TR.TransitionOut(*f(z0, lp0, g0, p0, torch.ones(1, 3), eps, u, store, check))
        want = _tree_builder(z0, p0, eps, u, K, momentum, biased, monkeypatch)
        assert torch.allclose(out.z, want.z, atol=1e-5), trial
        assert torch.allclose(out.log_density, want.log_density, atol=1e-4)
        assert torch.allclose(out.accept_prob, want.accept_prob, atol=1e-5)
        assert out.num_steps.tolist() == want.num_steps.tolist()
        assert out.depth.tolist() == want.tree_depth.tolist()
        assert out.diverged.tolist() == want.diverging.tolist()
        depths.add(int(out.depth))
    assert len(depths) >= 3  # the trials exercised trees of several depths


def test_chains_advance_independently():
    """Each row of a batch is what that chain gives alone, and the loop runs as many
    passes as the longest chain needs (not the sum of the lockstep subtrees)."""
    K = 7
    gen = torch.Generator().manual_seed(4)
    C = 5
    z0 = 2.0 * torch.randn(C, 3, generator=gen)
    p0 = torch.randn(C, 3, generator=gen)
    eps = torch.tensor([0.05, 0.1, 0.3, 0.6, 1.2])
    u = torch.rand(C, TR.table_width(K), generator=gen)
    store, check = TR.mask_tables(K)
    f = TR.transition_function(density, False, 1000.0, True, K, True)
    g0, lp0 = density(z0)
    out = TR.TransitionOut(*f(z0, lp0, g0, p0, torch.ones(C, 3), eps, u, store, check))
    for c in range(C):
        one = TR.TransitionOut(*f(z0[c:c + 1], lp0[c:c + 1], g0[c:c + 1], p0[c:c + 1],
                                  torch.ones(1, 3), eps[c:c + 1], u[c:c + 1], store, check))
        assert torch.equal(one.z[0], out.z[c])
        assert int(one.num_steps) == int(out.num_steps[c])
        assert int(one.depth) == int(out.depth[c])
    assert int(out.passes) == int(out.num_steps.max())
    assert len(set(out.num_steps.tolist())) > 1


def test_a_diverging_start_is_done_at_once():
    K = 4
    z0 = torch.tensor([[float("nan"), 0.0, 0.0], [0.1, 0.2, 0.3]])
    g0, lp0 = density(z0)
    store, check = TR.mask_tables(K)
    f = TR.transition_function(density, False, 1000.0, True, K, True)
    out = TR.TransitionOut(*f(z0, lp0, g0, torch.ones(2, 3), torch.ones(2, 3),
                              torch.tensor([0.2, 0.2]), torch.rand(2, TR.table_width(K)),
                              store, check))
    assert int(out.num_steps[0]) == 0 and int(out.num_steps[1]) > 0


# ------------------------------------------------------------------ compiled, and fits

@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    """`$QVR_CACHE_DIR` of these tests: the fit below loads what the first test compiled
    (the same model, chains and settings)."""
    return tmp_path_factory.mktemp("qvr_cache")


@pytest.fixture(scope="module")
def cache_dir(cache_root):
    return cache_root / "transitions"


@pytest.fixture(scope="module")
def normal_target():
    model, x, obs, exact = normal_normal_case()
    return make_target(model, x, obs), exact


@needs_cc
def test_compiled_transition_agrees_and_is_cached(cache_dir, normal_target):
    t, _ = normal_target
    z0 = torch.zeros(4, t.dim) + 0.3
    graph = t.density_graph(z0)
    assert graph is not None
    ct, note = TR.compile_transition(graph, z0, False, 1000.0, True, 10, True, cache_dir)
    assert ct is not None, note
    assert note.startswith("the whole NUTS transition compiled by AOTInductor")
    assert len(list(cache_dir.glob("*.pt2"))) == 1
    again, note2 = TR.compile_transition(graph, z0, False, 1000.0, True, 10, True,
                                         cache_dir)
    assert again.cached and note2.startswith("the whole NUTS transition loaded from the "
                                             "disk cache")
    # the compiled loop and the Python loop on fresh inputs
    args = TR.example_inputs(graph, z0 - 0.7, False, 10, seed=21)
    want = TR.transition_function(graph, False, 1000.0, True, 10, True)(*args)
    got = again(*args[:7])
    for a, b in zip(want, got):
        assert TR._agree(a, b)


@needs_cc
def test_fit_with_the_whole_transition(cache_root, normal_target, monkeypatch):
    """Exact moments within MCSE; tree depths and acceptance like the tick kernel's."""
    monkeypatch.setenv("QVR_CACHE_DIR", str(cache_root))
    t, exact = normal_target
    torch.manual_seed(1)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=300, num_samples=1000,
             num_chains=4).run(None, target=t)
    assert r.compiler == "transition"
    assert r.compiler_notes[-1].startswith("the whole NUTS transition")
    rhats = check_moments(r.samples, exact)
    assert max(rhats.values()) < 1.01
    torch.manual_seed(1)
    ref = MCMC(NUTSKernel(compiler="torchscript"), num_warmup=300, num_samples=1000,
               num_chains=4).run(None, target=make_target(*normal_normal_case()[:3]))
    assert ref.compiler == "torchscript"
    # tree depths: the share of each depth within 5 binomial standard errors
    a = r.tree_depths.reshape(-1).numpy()
    b = ref.tree_depths.reshape(-1).numpy()
    for d in sorted(set(a) | set(b)):
        pa, pb = (a == d).mean(), (b == d).mean()
        se = math.sqrt(max(pa * (1 - pa), pb * (1 - pb), 1e-4) * 2 / a.size)
        assert abs(pa - pb) < 5 * se + 0.01, (d, pa, pb)
    assert abs(float(r.accept_probs.mean()) -
               float(ref.accept_probs.mean())) < 0.05
    # the same seed gives the same draws again (the decision and the table are seeded)
    torch.manual_seed(1)
    again = MCMC(NUTSKernel(compiler="transition"), num_warmup=300, num_samples=1000,
                 num_chains=4).run(None, target=t)
    assert torch.equal(again.unconstrained, r.unconstrained)


def test_a_failing_compile_leaves_the_fit_on_ticks(monkeypatch, normal_target):
    def boom(*a, **k):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(TR, "cache_key", boom)
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=50, num_samples=50,
             num_chains=2).run(None, target=t)
    assert r.compiler == "torchscript"
    assert r.compiler_notes[0] == ("the transition did not compile: RuntimeError: no C++ "
                                   "compiler found")
    assert r.samples["mu"].shape == (2, 50, 1)


def test_a_transition_failing_at_run_time_hands_over_to_ticks(monkeypatch):
    class Broken:
        def __call__(self, *a):
            raise RuntimeError("kernel crashed")

    monkeypatch.setattr(TR, "compile_transition", lambda *a, **k: (Broken(), "compiled"))
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=30, num_samples=30,
             num_chains=2).run(None, target=t)
    assert r.compiler == "torchscript"
    assert r.compiler_notes[-1].startswith("the compiled transition failed during the run "
                                           "(RuntimeError: kernel crashed)")
    assert r.samples["mu"].shape == (2, 30, 1)


def test_auto_uses_the_transition_only_for_long_runs(monkeypatch):
    calls = []
    monkeypatch.delenv(T.ENV_VAR, raising=False)
    monkeypatch.setattr(TR, "compile_transition",
                        lambda *a, **k: calls.append(a) or (None, "not here"))
    model, x, obs, _ = normal_normal_case()
    MCMC(NUTSKernel(), num_warmup=100, num_samples=100, num_chains=2).run(
        None, target=make_target(model, x, obs))
    assert calls == []
    MCMC(NUTSKernel(), num_warmup=200, num_samples=TR.AUTO_MIN_ITERATIONS - 200,
         num_chains=2).run(None, target=make_target(model, x, obs))
    assert len(calls) == 1
    monkeypatch.setenv(T.ENV_VAR, "torchscript")
    MCMC(NUTSKernel(), num_warmup=200, num_samples=TR.AUTO_MIN_ITERATIONS,
         num_chains=2).run(None, target=make_target(model, x, obs))
    assert len(calls) == 1


def test_the_driver_says_when_it_compiles_before_the_first_step(monkeypatch):
    """`NUTSKernel.prepare` (called by the driver after `init`) compiles before the first
    iteration and, when the package is not on disk, says so first (`FitNote`)."""
    from qvr.inference.events import FitNote, FitProgress
    events, order = [], []
    monkeypatch.setattr(TR, "is_cached", lambda *a, **k: False)
    monkeypatch.setattr(TR, "compile_transition",
                        lambda *a, **k: order.append("compile") or (None, "not here"))
    model, x, obs, _ = normal_normal_case()

    def on_event(e):
        events.append(e)
        order.append(type(e).__name__)

    MCMC(NUTSKernel(compiler="transition"), num_warmup=10, num_samples=10, num_chains=2,
         on_event=on_event).run(None, target=make_target(model, x, obs))
    notes = [e for e in events if isinstance(e, FitNote)]
    assert [n.message for n in notes] == [
        "compiling NUTS to C++ (once per model: tens of seconds)"]
    assert order.index("FitNote") < order.index("compile") < order.index("FitProgress")
    # on disk: nothing to say
    events.clear()
    monkeypatch.setattr(TR, "is_cached", lambda *a, **k: True)
    MCMC(NUTSKernel(compiler="transition"), num_warmup=10, num_samples=10, num_chains=2,
         on_event=on_event).run(None, target=make_target(model, x, obs))
    assert not [e for e in events if isinstance(e, FitNote)]
