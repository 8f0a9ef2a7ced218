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
from qvr.inference.mcmc.potential import make_target

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


@pytest.mark.parametrize("uturn", ["displacement", "momentum", "position"])
@pytest.mark.parametrize("dense", [False, True])
def test_folded_tick_stops_the_same_chains_as_the_python_checks(uturn, dense):
    """Run a 16-leaf subtree both ways from the same state: the masked checks on stacks
    and the list-based checks give the same leaves, weights and running chains."""
    t = _target()
    C, D, K = 6, t.dim, 5
    gen = torch.Generator().manual_seed(3)
    z0 = 2.0 * torch.randn(C, D, generator=gen)
    density = t.compiled_for(z0)
    leaf = T.leaf_function(density, True, dense, 1000.0)
    folded = T.folded_function(leaf, uturn)
    listed = T.LeafTick(leaf, uturn, "eager")
    g0, _ = density(z0)
    inv = (torch.eye(D).expand(C, D, D).clone() * 0.8 if dense else torch.full((C, D), 0.8))
    p = torch.randn(C, D, generator=gen)
    direction = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0]).unsqueeze(-1)
    f = z0.new_zeros
    start = T.TickState(
        z=z0, p=p, lp=f(C), g=torch.nan_to_num(g0), sum_acc=f(C),
        n_leaves=torch.zeros(C, dtype=torch.long), diverged=torch.zeros(C, dtype=torch.bool),
        sub_w=f(C) - math.inf, sz=z0, sg=g0, slp=f(C), sh=f(C), psum=f(C, D), ck_a=None,
        ck_v=None, ck_x=None, running=torch.ones(C, dtype=torch.bool), eps=0.3 * direction,
        inv=inv, h0=f(C) + 5.0, direction=direction)
    ck = ("ck_a", "ck_v", "ck_x")
    a = start._replace(**dict(zip(ck, T.InductorTick.checkpoints(K, z0))))
    b = start._replace(**dict(zip(ck, T.LeafTick.checkpoints(K, z0))))
    stopped_at = {}
    for n in range(16):
        u = torch.rand(C, generator=gen)
        store, check = T.checkpoint_masks(n, K)
        a, b = folded(a, u, store, check), listed(b, u, n)
        for name in T.TickState._fields:
            if name not in ck:
                assert torch.equal(getattr(a, name), getattr(b, name)), name
        for k in range(K):  # the stored checkpoints agree too
            if b.ck_a[k] is not None:
                assert torch.equal(a.ck_a[k], b.ck_a[k]) and torch.equal(a.ck_v[k], b.ck_v[k])
        for k in range(3 * K):
            if uturn != "position" and b.ck_x[k] is not None:
                assert torch.equal(a.ck_x[k], b.ck_x[k])
        for c in range(C):
            if not bool(a.running[c]) and c not in stopped_at:
                stopped_at[c] = n
    # the checks did fire: some chains turned within the 16 leaves
    assert stopped_at


def test_the_positional_boundary_round_trips_the_record():
    """The traced leaf (positional inside) called with the record gives what the
    record-level leaf gives, field by field."""
    t = _target()
    z0 = 0.5 * torch.randn(3, t.dim, generator=torch.Generator().manual_seed(5))
    density = t.compiled_for(z0)
    s, u = T.example_state(z0, torch.nan_to_num(density(z0)[0]), False, 1)
    traced = T.traced_leaf(density, z0, False, 1000.0)
    assert isinstance(traced, T.CompiledLeaf)
    want, v0, div0 = T.leaf_function(density, True, False, 1000.0)(s, u)
    got, v1, div1 = traced(s, u)
    assert type(got) is T.TickState
    for name in T.TickState._fields:
        x, y = getattr(want, name), getattr(got, name)
        assert torch.allclose(x, y, atol=1e-6, rtol=1e-6), name
    assert torch.allclose(v0, v1) and torch.equal(div0, div1)
    # the fields a leaf does not write are the caller's own tensors
    for name in ("psum", "ck_a", "ck_v", "ck_x", "running", "eps", "inv", "h0",
                 "direction"):
        assert getattr(got, name) is getattr(s, name)


def test_worth_compiling_and_probe_iterations():
    assert [i for i in range(1, 2000) if T.is_probe(i)] == [50, 100, 200, 400, 800, 1600]
    assert not T.worth_compiling(0, 1e9)  # unknown op count: never
    assert not T.worth_compiling(80, 1000)  # a short run
    assert T.worth_compiling(100, 100_000)  # the funnel's ~130k ticks
    # the saving grows with the graph: a bigger leaf needs fewer ticks to pay
    need = [min(n for n in range(0, 10 ** 6, 1000) if T.worth_compiling(ops, n))
            for ops in (40, 80, 160)]
    assert need[0] > need[1] > need[2]
    # ... but so does the compile: garch's leaf (2,937 operations) in a 2 x (150 + 150)
    # run (about 3,000 ticks left at the first probe) is not worth its ~40 s compile
    # (59 s against 27 s on TorchScript when it compiled), a 4 x (1000 + 1000) run is
    assert T.compile_cost(2937) > 4 * T.compile_cost(100)
    assert not T.worth_compiling(2937, 3_000)
    assert T.worth_compiling(2937, 30_000)


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
        assert r.compiler_notes == ([] if compile_ else ["eager: the density is not compiled"])
        assert r.compiler == ("torchscript" if compile_ else "eager")
        runs.append(r.unconstrained)
    assert torch.allclose(runs[0], runs[1], atol=1e-5)


needs_cc = pytest.mark.skipif(not HAVE_CC, reason="Inductor needs a C++ compiler")


@needs_cc
@pytest.mark.parametrize("dense,uturn", [(False, "displacement"), (True, "momentum"),
                                         (True, "position")])
def test_inductor_tick_agrees_with_pytorch(dense, uturn):
    t = _target()
    z0 = 0.5 * torch.randn(4, t.dim, generator=torch.Generator().manual_seed(0))
    density = t.compiled_for(z0)
    tick, note = T.inductor_tick(density, z0, dense, 1000.0, uturn, 6)
    assert tick is not None, note
    fn = T.folded_function(T.leaf_function(density, True, dense, 1000.0), uturn)
    s, u = T.example_state(z0, torch.nan_to_num(density(z0)[0]), dense, 6)
    for n in (0, 1, 3, 6, 7):
        store, check = T.checkpoint_masks(n, 6)
        want = fn(s, u, store, check)
        got = tick(s, u, n)
        assert type(got) is T.TickState
        for name in T.TickState._fields:
            assert T._agree(getattr(want, name), getattr(got, name)), name


@needs_cc
def test_inductor_samples_the_posterior():
    torch.manual_seed(1)
    model, x, obs, exact = correlated_case()
    t = make_target(model, x, obs)
    r = MCMC(NUTSKernel(compiler="inductor"), num_warmup=300, num_samples=800,
             num_chains=4).run(None, target=t)
    assert r.compiler == "inductor" and r.compiler_notes == ["compiled by Inductor"]
    rhats = check_moments(r.samples, exact)
    assert max(rhats.values()) < 1.01
    assert r.total_divergences == 0


@needs_cc
def test_auto_switches_at_a_probe_and_stays_reproducible(monkeypatch):
    """With compiling made cheap, ``auto`` compiles at the first probe (iteration 50):
    the same seed gives the same draws again."""
    monkeypatch.setattr(T, "COMPILE_COST_S", 1e-4)
    monkeypatch.setattr(T, "COMPILE_COST_PER_OP_S", 0.0)
    monkeypatch.delenv(T.ENV_VAR, raising=False)  # "auto" itself, not an override
    model, x, obs, _ = normal_normal_case()
    draws = []
    for _ in range(2):
        t = make_target(model, x, obs)
        torch.manual_seed(2)
        r = MCMC(NUTSKernel(), num_warmup=80, num_samples=40, num_chains=2).run(
            None, target=t)
        assert r.compiler_notes == ["compiled by Inductor"]
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
    assert r.compiler == "torchscript"
    (note,) = r.compiler_notes
    assert note.startswith("Inductor failed: RuntimeError: no C++ compiler found")
    assert r.samples["mu"].shape == (2, 200, 1)


def test_models_that_do_not_compile_run_the_eager_tick():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    t.compile = False
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="inductor"), num_warmup=20, num_samples=10,
             num_chains=2).run(None, target=t)
    assert r.compiler == "eager"
    # nothing to compile: Inductor was not tried
    assert r.compiler_notes == ["eager: the density is not compiled"]


def test_the_inductor_head_start_waits_for_a_free_core(monkeypatch):
    """`prewarm_if_idle`: the Inductor import thread starts where other processes keep
    less than half a core busy (or the load is unknown), not on a busy machine."""
    from qvr.inference import threads
    started = []
    monkeypatch.setattr(T, "_prewarm_thread", None)
    monkeypatch.setattr(T, "prewarm", lambda: started.append(True))
    for load, want in ((1.9, []), (0.6, []), (0.2, [True]), (None, [True])):
        started.clear()
        monkeypatch.setattr(threads, "busy_cores", lambda load=load: load)
        T.prewarm_if_idle()
        assert started == want, load
