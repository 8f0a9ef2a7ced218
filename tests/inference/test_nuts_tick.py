"""The NUTS tick (`qvr.inference.mcmc.tick`): the folded tick (leaf + U-turn checks on
masked checkpoint stacks) against the leaf with Python checks on lists, the Inductor
kernel against PyTorch, the ``compiler`` setting and its ``"auto"`` policy, and the
fallback when Inductor fails."""
import math
import os
import shutil

import pytest
import torch

from qvr.inference import MCMC, NUTSKernel
from qvr.inference.mcmc import tick as T
from qvr.inference.potential import make_target

from qvr import loads

from helpers import FUNNEL, check_moments, correlated_case, normal_normal_case

#: the C++ compiler Inductor calls (its default, unless CXX names another)
HAVE_CC = shutil.which(os.environ.get("CXX", "g++")) is not None


def _target(src=FUNNEL):
    return make_target(loads(src).morphism, torch.zeros(1, 1), {})


def test_checkpoint_masks_follow_checkpoint_range():
    K = 5
    for n in range(32):
        store, check = T.checkpoint_masks(n, K)
        assert store.shape == (K, 1, 1) and check.shape == (K, 1)
        lo, hi = T.checkpoint_range(n)
        want_store = [k == hi and n % 2 == 0 for k in range(K)]
        assert store.view(-1).tolist() == want_store
        assert check.view(-1).tolist() == [lo <= k <= hi for k in range(K)]
    # leaf 7 of a subtree ends the sub-subtrees of sizes 2, 4 and 8: slots 0..2
    assert T.checkpoint_masks(7, K)[1].view(-1).tolist() == [True, True, True, False, False]


@pytest.mark.parametrize("momentum", [True, False])
@pytest.mark.parametrize("dense", [False, True])
def test_folded_tick_stops_the_same_chains_as_the_python_checks(momentum, dense):
    """Run a 16-leaf subtree both ways from the same state: the masked checks on stacks
    and the list-based checks give the same leaves, weights and running chains."""
    t = _target()
    C, D, K = 6, t.dim, 5
    gen = torch.Generator().manual_seed(3)
    z0 = 2.0 * torch.randn(C, D, generator=gen)
    density = t.compiled_for(z0)
    leaf = T.leaf_function(density, True, dense, 1000.0)
    folded = T.folded_function(leaf, momentum)
    listed = T.LeafTick(leaf, momentum, "eager")
    g0, _ = density(z0)
    inv = (torch.eye(D).expand(C, D, D).clone() * 0.8 if dense else torch.full((C, D), 0.8))
    p = torch.randn(C, D, generator=gen)
    eps = torch.full((C, 1), 0.3)
    direction = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0]).unsqueeze(-1)
    f = z0.new_zeros
    start = [z0, p, torch.nan_to_num(g0), eps * direction, inv, f(C) + 5.0,
             torch.ones(C, dtype=torch.bool), f(C), torch.zeros(C, dtype=torch.long),
             torch.zeros(C, dtype=torch.bool), f(C) - math.inf, z0, g0, f(C), f(C)]
    a = list(start) + [f(C, D)] + list(T.InductorTick.checkpoints(K, z0))
    b = list(start) + [f(C, D)] + list(T.LeafTick.checkpoints(K, z0))
    stopped_at = {}
    for n in range(16):
        u = torch.rand(C, generator=gen)
        store, check = T.checkpoint_masks(n, K)
        out_a = folded(*a[:15], u, a[15], a[16], a[17], store, check, direction)
        out_b = listed(*b[:15], u, b[15], b[16], b[17], n, direction)
        for x, y in zip(out_a[:12], out_b[:12]):
            assert torch.equal(x, y)
        assert torch.equal(out_a[12], out_b[12])  # momentum sums
        assert torch.equal(out_a[15], out_b[15])  # running
        for c in range(C):
            if not bool(out_a[15][c]) and c not in stopped_at:
                stopped_at[c] = n

        def carry(prev, out):
            (z, p_, lp, g, sum_acc, n_leaves, diverged, sub_w, sz, sg, slp, sh, psum, ck_a,
             ck_v, running) = out
            return [z, p_, g, prev[3], prev[4], prev[5], running, sum_acc, n_leaves,
                    diverged, sub_w, sz, sg, slp, sh, psum, ck_a, ck_v]

        a, b = carry(a, out_a), carry(b, out_b)
    # the checks did fire: some chains turned within the 16 leaves
    assert stopped_at


def test_worth_compiling_and_probe_iterations():
    assert [i for i in range(1, 2000) if T.is_probe(i)] == [50, 100, 200, 400, 800, 1600]
    assert not T.worth_compiling(0, 1e9)  # unknown op count: never
    assert not T.worth_compiling(80, 1000)  # a short run
    assert T.worth_compiling(100, 100_000)  # the funnel's ~130k ticks
    # the saving grows with the graph: a bigger leaf needs fewer ticks to pay
    need = [min(n for n in range(0, 10 ** 6, 1000) if T.worth_compiling(ops, n))
            for ops in (40, 80, 160)]
    assert need[0] > need[1] > need[2]


def test_kernel_validates_the_compiler_setting():
    with pytest.raises(ValueError, match="compiler"):
        NUTSKernel(compiler="nnc")
    assert NUTSKernel().config()["compiler"] == "auto"


def test_environment_variable_overrides_auto_only(monkeypatch):
    monkeypatch.setenv(T.ENV_VAR, "torchscript")
    assert T.resolve_compiler("auto") == "torchscript"
    assert T.resolve_compiler("inductor") == "inductor"
    monkeypatch.setenv(T.ENV_VAR, "bogus")
    assert T.resolve_compiler("auto") == "auto"


def test_torchscript_and_eager_ticks_give_the_same_draws():
    """The traced leaf and the eager leaf (the density evaluated by the program) are the
    same arithmetic: the same seed gives the same draws to float rounding."""
    model, x, obs, _ = normal_normal_case()
    runs = []
    for compile_ in (True, False):
        t = make_target(model, x, obs)
        t.compile = compile_
        torch.manual_seed(4)
        r = MCMC(NUTSKernel(compiler="torchscript"), num_warmup=60, num_samples=40,
                 num_chains=3).run(None, target=t)
        backend = {tk.backend for tk in T.TickCache.of(t).ticks.values()}
        assert backend == ({"torchscript"} if compile_ else {"eager"})
        runs.append(r.unconstrained)
    assert torch.allclose(runs[0], runs[1], atol=1e-5)


needs_cc = pytest.mark.skipif(not HAVE_CC, reason="Inductor needs a C++ compiler")


@needs_cc
@pytest.mark.parametrize("dense,momentum", [(False, True), (True, False)])
def test_inductor_tick_agrees_with_pytorch(dense, momentum):
    t = _target()
    z0 = 0.5 * torch.randn(4, t.dim, generator=torch.Generator().manual_seed(0))
    density = t.compiled_for(z0)
    tick, note = T.inductor_tick(density, z0, dense, 1000.0, momentum, 6)
    assert tick is not None, note
    fn = T.folded_function(T.leaf_function(density, True, dense, 1000.0), momentum)
    example = T.example_inputs(z0, torch.nan_to_num(density(z0)[0]), dense, 6)
    for n in (0, 1, 3, 6, 7):
        store, check = T.checkpoint_masks(n, 6)
        args = list(example[:19]) + [store, check, example[21]]
        want = fn(*args)
        got = tick(*example[:19], n, example[21])
        assert len(got) == len(want) == 16
        for a, b in zip(want, got):
            assert T._agree(a, b)


@needs_cc
def test_inductor_samples_the_posterior():
    torch.manual_seed(1)
    model, x, obs, exact = correlated_case()
    t = make_target(model, x, obs)
    r = MCMC(NUTSKernel(compiler="inductor"), num_warmup=300, num_samples=800,
             num_chains=4).run(None, target=t)
    assert {tk.backend for tk in T.TickCache.of(t).ticks.values()} == {"inductor"}
    rhats = check_moments(r.samples, exact)
    assert max(rhats.values()) < 1.01
    assert r.total_divergences == 0


@needs_cc
def test_auto_switches_at_a_probe_and_stays_reproducible(monkeypatch):
    """With compiling made cheap, ``auto`` compiles at the first probe (iteration 50):
    the same seed gives the same draws again."""
    monkeypatch.setattr(T, "COMPILE_COST_S", 1e-4)
    model, x, obs, _ = normal_normal_case()
    draws = []
    for _ in range(2):
        t = make_target(model, x, obs)
        torch.manual_seed(2)
        r = MCMC(NUTSKernel(), num_warmup=80, num_samples=40, num_chains=2).run(
            None, target=t)
        cache = T.TickCache.of(t)
        assert {tk.backend for tk in cache.ticks.values()} == {"inductor"}
        assert list(cache.notes.values()) == ["compiled by Inductor"]
        assert r.compiler == "inductor"
        draws.append(r.unconstrained)
    assert torch.equal(draws[0], draws[1])


def test_a_failing_compile_keeps_torchscript(monkeypatch):
    """Inductor raising (say, no C++ compiler) leaves the run on TorchScript, with the
    reason recorded, and the run completes."""
    import torch._inductor.compile_fx as cfx

    def boom(*a, **k):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(cfx, "compile_fx_inner", boom)
    model, x, obs, exact = normal_normal_case()
    t = make_target(model, x, obs)
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="inductor"), num_warmup=100, num_samples=200,
             num_chains=2).run(None, target=t)
    cache = T.TickCache.of(t)
    assert {tk.backend for tk in cache.ticks.values()} == {"torchscript"}
    assert r.compiler == "torchscript"
    (note,) = cache.notes.values()
    assert note.startswith("Inductor failed: RuntimeError: no C++ compiler found")
    assert r.samples["mu"].shape == (2, 200, 1)


def test_models_that_do_not_compile_run_the_eager_tick():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    t.compile = False
    torch.manual_seed(0)
    MCMC(NUTSKernel(compiler="inductor"), num_warmup=20, num_samples=10,
         num_chains=2).run(None, target=t)
    cache = T.TickCache.of(t)
    assert {tk.backend for tk in cache.ticks.values()} == {"eager"}
    assert cache.notes == {}  # nothing to compile: Inductor was not tried
