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
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr.inference import MCMC, NUTSKernel
from qvr.inference.mcmc import tick as T
from qvr.inference.mcmc import transition as TR
from qvr.inference.mcmc import transition_cache as TC
from qvr.inference.mcmc import transition_graph as TG
from qvr.inference.mcmc.potential import FunctionTarget, make_target

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


def _tree_builder(z0, p0, eps, u, K, uturn, biased, monkeypatch):
    """`NUTSKernel._build` for one chain, its draws taken from the table `u`."""
    from qvr.inference.mcmc import nuts as N
    from qvr.inference.mcmc.integrator import MassMatrix

    kernel = NUTSKernel(max_tree_depth=K, uturn=uturn,
                        transition="biased" if biased else "uniform")
    target = FunctionTarget(lambda z: density(z)[1], z0.shape[1])
    rand, leaf_called = _table_rand(u, K)
    monkeypatch.setattr(N.torch, "rand", rand)
    mass = MassMatrix.identity("diagonal", 1, z0.shape[1], z0.dtype, z0.device)
    state = kernel.init(target, z0, 0, 1)
    state.step_size = eps.clone()
    tick = _Ticks(T.LeafTick(T.leaf_function(target.log_density_and_grad, False, False,
                                             1000.0), uturn, "eager"), u, leaf_called)
    g0, lp0 = density(z0)
    h0 = -lp0 + mass.kinetic(p0)
    with torch.no_grad():
        t = kernel._build(state, target, tick, K, z0, lp0, g0, p0, h0,
                          mass.as_tensor(z0), uturn)
    monkeypatch.undo()
    return t


@pytest.mark.parametrize("uturn,biased", [("displacement", True), ("momentum", True),
                                          ("position", False), ("displacement", False)])
def test_one_chain_matches_the_tree_builder_on_the_same_numbers(uturn, biased,
                                                                monkeypatch):
    K = 6
    gen = torch.Generator().manual_seed(11)
    f = TR.transition_function(density, False, 1000.0, uturn, K, biased)
    store, check = TR.mask_tables(K)
    depths = set()
    for trial in range(25):
        z0 = 2.0 * torch.randn(1, 3, generator=gen)
        p0 = torch.randn(1, 3, generator=gen)
        eps = torch.tensor([0.05 + 0.5 * float(torch.rand(1, generator=gen))])
        u = torch.rand(1, TR.table_width(K), generator=gen)
        g0, lp0 = density(z0)
        out = TR.TransitionOut(*f(z0, lp0, g0, p0, torch.ones(1, 3), eps, u, store, check))
        want = _tree_builder(z0, p0, eps, u, K, uturn, biased, monkeypatch)
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
    f = TR.transition_function(density, False, 1000.0, "momentum", K, True)
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
    f = TR.transition_function(density, False, 1000.0, "momentum", K, True)
    out = TR.TransitionOut(*f(z0, lp0, g0, torch.ones(2, 3), torch.ones(2, 3),
                              torch.tensor([0.2, 0.2]), torch.rand(2, TR.table_width(K)),
                              store, check))
    assert int(out.num_steps[0]) == 0 and int(out.num_steps[1]) > 0


def _adaptation(C, D, da_state, lo, hi, W):
    args = TR.idle_adaptation(C, D, False, torch.float32, "cpu")
    args[0] = torch.stack([da_state.log_step, da_state.log_step_avg, da_state.h_bar,
                           da_state.mu, torch.zeros(C), torch.zeros(C)], -1)
    args[3] = torch.tensor([0, W, lo, hi])
    return args


def _block_inputs(K, T, C, D, seed):
    """Starts, momenta, uniforms and mask tables for a block on `density`."""
    gen = torch.Generator().manual_seed(seed)
    z0 = torch.randn(C, D, generator=gen)
    P = torch.randn(T, C, D, generator=gen)
    U = torch.rand(T, C, TR.table_width(K), generator=gen)
    store, check = TR.mask_tables(K)
    g0, lp0 = density(z0)
    return z0, P, U, store, check, g0, lp0


def test_a_block_is_its_transitions_one_after_another_with_adaptation():
    """`block_function` over `T` transitions = `T` single transitions fed the same rows of
    momenta and uniforms, with `DualAveraging.update` and `Welford.update` between them
    (float rounding of the step sizes aside); each transition costs its longest chain's
    leaves."""
    from qvr.inference.mcmc.adaptation import DualAveraging, Welford
    K, T, C, D = 6, 7, 3, 3
    z0, P, U, store, check, g0, lp0 = _block_inputs(K, T, C, D, seed=3)
    eps0 = torch.tensor([0.1, 0.5, 1.5])
    dual = DualAveraging(0.8)
    s = dual.init(eps0)
    block = TR.block_function(density, False, 1000.0, "momentum", K, True)
    out = TR.BlockOut(*block(z0, lp0, g0, torch.ones(C, D), eps0, P, U, torch.tensor(T),
                             store, check, *_adaptation(C, D, s, 2, T - 1, T)))
    one = TR.transition_function(density, False, 1000.0, "momentum", K, True)
    w = Welford(C, D)
    z, lp, g, eps = z0, lp0, g0, eps0
    for t in range(T):
        o = TR.TransitionOut(*one(z, lp, g, P[t], torch.ones(C, D), eps, U[t], store, check))
        row = out.rec[t]
        assert torch.allclose(row[:, :D], o.z, atol=1e-4), t
        assert torch.allclose(row[:, D], o.log_density, atol=1e-4)
        assert torch.allclose(row[:, D + 1], o.accept_prob, atol=1e-5)
        assert torch.allclose(row[:, D + 2], o.energy, atol=1e-4)
        assert row[:, D + 3].tolist() == o.diverged.float().tolist()
        assert row[:, D + 4].long().tolist() == o.num_steps.tolist()
        assert row[:, D + 5].long().tolist() == o.depth.tolist()
        s = dual.update(s, o.accept_prob)
        eps = torch.exp(s.log_step)
        if 2 <= t <= T - 1:
            w.update(o.z)
        z, lp, g = o.z, o.log_density, o.grad
    assert torch.allclose(out.eps, eps, rtol=1e-5)
    assert torch.allclose(out.da[:, 0], s.log_step, atol=1e-5)
    assert torch.allclose(out.da[:, 1], s.log_step_avg, atol=1e-5)
    assert torch.allclose(out.da[:, 2], s.h_bar, atol=1e-6)
    assert out.da[:, 4].tolist() == [float(T)] * C
    assert torch.allclose(out.welford[:, :D], w.mean, atol=1e-5)
    assert torch.allclose(out.welford[:, D:], w.m2, atol=1e-4)
    assert out.welford_n.tolist() == [float(w.n)] * C
    assert torch.allclose(out.z, z, atol=1e-4) and torch.allclose(out.grad, g, atol=1e-3)
    leaves = out.rec[:, :, D + 4]
    assert int(out.passes) == int(leaves.max(1).values.sum())
    assert len(set(leaves[:, 0].tolist())) > 1


def test_a_block_jitters_each_transitions_step_by_its_last_uniform():
    """`hyper[4]` is the jitter: a transition steps by `eps * (1 + jitter * (2 u - 1))`
    with `u` its row's last uniform (which nothing else reads), so a block with jitter
    0.5 and `u` = 1 is the block without jitter at 1.5 times the step, and `u` = 0.5
    leaves the step as it is; dual averaging (off here) never sees the jitter."""
    K, T, C, D = 5, 4, 3, 3
    z0, P, U, store, check, g0, lp0 = _block_inputs(K, T, C, D, seed=4)
    eps = torch.tensor([0.2, 0.4, 0.9])
    block = TR.block_function(density, False, 1000.0, "momentum", K, True)

    def run(step, u_last, jitter):
        V = U.clone()
        V[..., -1] = u_last
        args = TR.idle_adaptation(C, D, False, torch.float32, "cpu")
        args[4][4] = jitter
        return TR.BlockOut(*block(z0, lp0, g0, torch.ones(C, D), step, P, V,
                                  torch.tensor(T), store, check, *args))

    plain = run(eps * 1.5, 0.0, 0.0)
    jittered = run(eps, 1.0, 0.5)
    assert torch.equal(plain.rec, jittered.rec)
    assert torch.equal(jittered.eps, eps)  # the state keeps the unjittered step
    assert torch.equal(run(eps, 0.5, 0.5).rec, run(eps, 0.0, 0.0).rec)
    assert not torch.equal(plain.rec, run(eps, 0.0, 0.0).rec)


def test_nuts_jitters_its_step_by_default_and_checks_the_setting():
    """nutpie's default (0.1): without it a fixed step leaves gp_pois_regr's chains stuck
    in 2 of 8 seeds (nutpie's too, with its jitter off); the setting is in the kernel's
    config and out-of-range values are refused."""
    from qvr.inference.mcmc.nuts import NUTSKernel
    assert NUTSKernel().step_size_jitter == 0.1
    assert NUTSKernel(step_size_jitter=0.0).config()["step_size_jitter"] == 0.0
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="step_size_jitter must be in"):
            NUTSKernel(step_size_jitter=bad)


def test_the_ticks_step_by_the_jittered_step(monkeypatch):
    """Leaf by leaf, an iteration's step is `eps * (1 + jitter * (2 u - 1))`, one `u`
    per chain drawn after the momentum (the state's step is left as it is)."""
    from qvr.inference.mcmc import nuts as N
    seen = []
    real = N.NUTSKernel._build

    def spy(self, state, target, tick, K, z0, lp0, g0, p0, h0, inv, uturn, eps=None):
        seen.append((state.step_size.clone(), eps.clone()))
        return real(self, state, target, tick, K, z0, lp0, g0, p0, h0, inv, uturn, eps)

    monkeypatch.setattr(N.NUTSKernel, "_build", spy)
    target = FunctionTarget(lambda z: density(z)[1], 3)
    for jitter in (0.0, 0.5):
        kernel = NUTSKernel(max_tree_depth=3, step_size_jitter=jitter, compiler="torchscript")
        state = kernel.init(target, torch.zeros(64, 3), 0, 1)
        state.step_size = torch.full((64,), 0.3)
        kernel.sample(state, target)
        base, used = seen[-1]
        assert torch.equal(base, torch.full((64,), 0.3))
        if jitter == 0.0:
            assert torch.equal(used, base)
        else:
            ratio = used / base
            assert float(ratio.min()) >= 0.5 - 1e-6 and float(ratio.max()) <= 1.5 + 1e-6
            assert len(set(ratio.tolist())) == 64  # one draw per chain
            assert float(ratio.min()) < 0.8 and float(ratio.max()) > 1.2


def test_a_block_stops_at_its_limit_and_adapts_only_inside_its_windows():
    K, T, C, D = 5, 6, 2, 3
    z0, P, U, store, check, g0, lp0 = _block_inputs(K, T, C, D, seed=8)
    eps0 = torch.tensor([0.3, 0.6])
    from qvr.inference.mcmc.adaptation import DualAveraging
    s = DualAveraging(0.8).init(eps0)
    block = TR.block_function(density, False, 1000.0, "momentum", K, True)
    # 4 of 6 transitions; dual averaging for the first 2 (warmup ends), Welford for 1..2
    out = TR.BlockOut(*block(z0, lp0, g0, torch.ones(C, D), eps0, P, U, torch.tensor(4),
                             store, check, *_adaptation(C, D, s, 1, 2, 2)))
    assert (out.rec[:4, :, D + 4] > 0).all() and float(out.rec[4:].abs().sum()) == 0
    assert out.da[:, 4].tolist() == [2.0, 2.0]
    assert out.welford_n.tolist() == [2.0, 2.0]
    assert torch.equal(out.z, out.rec[3, :, :D])
    # the step size after warmup is the last iterate's, not changed by transitions 2 and 3
    assert torch.allclose(out.eps, torch.exp(out.da[:, 0]))


def test_blocks_agree_up_to_rounding_but_not_on_leaves_or_values():
    K, T, C, D = 5, 4, 2, 3
    gen = torch.Generator().manual_seed(1)
    z0 = torch.randn(C, D, generator=gen)
    g0, lp0 = density(z0)
    store, check = TR.mask_tables(K)
    out = TR.BlockOut(*TR.block_function(density, False, 1000.0, "momentum", K, True)(
        z0, lp0, g0, torch.ones(C, D), torch.tensor([0.2, 0.4]),
        torch.randn(T, C, D, generator=gen), torch.rand(T, C, TR.table_width(K), generator=gen),
        torch.tensor(T), store, check, *TR.idle_adaptation(C, D, False, torch.float32, "cpu")))
    assert TR.blocks_agree(out, out)
    rounded = out._replace(z=out.z + 3e-5, rec=out.rec + torch.cat(
        [torch.full((T, C, D + 3), 3e-5), torch.zeros(T, C, 3), torch.full((T, C, D), 3e-5)],
        -1))
    assert TR.blocks_agree(out, rounded)
    # the gradient columns close the record: the density's gradient at each z
    assert out.rec.shape == (T, C, 2 * D + 6)
    assert torch.allclose(out.rec[..., D + 6:], density(out.rec[..., :D].reshape(-1, D))[0]
                          .reshape(T, C, D), atol=1e-6)
    assert not TR.blocks_agree(out, out._replace(z=out.z + 1e-2))
    leaves = out.rec.clone()
    leaves[1, 0, D + 4] += 1
    assert not TR.blocks_agree(out, out._replace(rec=leaves))
    assert not TR.blocks_agree(out, out._replace(passes=out.passes + 1))


def test_prune_deletes_the_least_recently_used_packages_beyond_the_limit(tmp_path,
                                                                        monkeypatch):
    """Oldest modification time first, each package with its check file, until the rest
    fit; never the package just written, nor a build's temporary file or lock; the limit
    from ``QVR_CACHE_MAX_MB`` (bad or non-positive values: the 1 GiB default)."""
    def package(name, mtime, size=1000, check=True):
        p = tmp_path / f"{name}.pt2"
        p.write_bytes(b"x" * size)
        if check:
            (tmp_path / f"{name}.check.pt").write_bytes(b"c" * 100)
        os.utime(p, (mtime, mtime))
        return p

    old, mid, new, fresh = (package("a", 100), package("b", 200), package("c", 300),
                            package("d", 50))
    (tmp_path / "e.123.9.tmp.pt2").write_bytes(b"t" * 5000)  # a build writing aside
    (tmp_path / "e.compiling").write_text("123")
    gone = TC.prune(tmp_path, keep=fresh, limit=2300)
    # 4 x 1100 bytes: the two oldest but `fresh` go (a, then b), leaving 2200 <= 2300
    assert gone == [old, mid]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "c.check.pt", "c.pt2", "d.check.pt", "d.pt2", "e.123.9.tmp.pt2", "e.compiling"]
    assert TC.prune(tmp_path, keep=fresh, limit=10_000) == []
    assert TC.prune(tmp_path, keep=fresh, limit=0) == [new]  # never the one kept
    monkeypatch.setenv("QVR_CACHE_MAX_MB", "0.5")
    assert TC.max_bytes() == 2 ** 19
    for bad in ("lots", "-3", "0"):
        monkeypatch.setenv("QVR_CACHE_MAX_MB", bad)
        assert TC.max_bytes() == 2 ** 30


def test_the_cache_key_digests_a_held_tensors_shape_not_its_value():
    """A density graph holding a tensor (a 0-d one: kid_scores' did) has a cache key; the
    tensor is an input of the package (`lift_constants`, issue 37.4), so its value is not
    part of the key but its shape and dtype are."""
    class Scaled(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.register_buffer("c", torch.tensor(c))

        def forward(self, z):
            return -self.c * z, -0.5 * self.c * (z * z).sum(-1)

    z0 = torch.zeros(2, 3)
    keys = [TC.cache_key(torch.fx.symbolic_trace(Scaled(c)), z0, False, 1000.0, "momentum", 10,
                         True, 8) for c in (2.0, 3.0, [2.0, 2.0, 2.0], 2)]
    assert keys[0] == keys[1] and len(set(keys[1:])) == 3
    lifted, consts = TG.lift_constants(torch.fx.symbolic_trace(Scaled(3.0)))
    assert consts and not [n for n in lifted.graph.nodes if n.op == "get_attr"]
    z = torch.randn(2, 3)
    # the lifted graph computes with the values it is given (all linear in c here)
    for k in (1.0, 2.0):
        got = lifted(z, *[k * c for c in consts])
        want = torch.fx.symbolic_trace(Scaled(3.0 * k))(z)
        assert all(torch.allclose(a, b) for a, b in zip(got, want))


def test_the_cache_key_is_digested_once_per_graph_and_settings(monkeypatch):
    """A run asks for the key twice (is the package on disk? then compile or load it):
    the graph is digested once; other settings or another graph digest again."""
    calls = []
    digest = TC._digest
    monkeypatch.setattr(TC, "_digest", lambda *a: calls.append(a) or digest(*a))
    graph = torch.fx.symbolic_trace(lambda z: (-z, -0.5 * (z * z).sum(-1)))
    z0 = torch.zeros(2, 3)
    first = TC.cache_key(graph, z0, False, 1000.0, "momentum", 10, True, 8)
    assert TC.is_cached(graph, z0, False, 1000.0, "momentum", 10, True, 8) is False
    assert TC.cache_key(graph, z0, False, 1000.0, "momentum", 10, True, 8) == first
    assert len(calls) == 1
    assert TC.cache_key(graph, z0, False, 1000.0, "momentum", 10, True, 16) != first
    other = torch.fx.symbolic_trace(lambda z: (-z, -0.5 * (z * z).sum(-1)))
    assert TC.cache_key(other, z0, False, 1000.0, "momentum", 10, True, 8) == first
    assert len(calls) == 3


def test_constant_folded_values_are_inputs_not_part_of_the_key():
    """A constant-folded density keeps its folded values in a list attribute
    (`_FX_CONST_FOLDED_ATTRS`, read by `getitem`, or as ``_FX_CONST_FOLDED_ATTRS.0`` once
    the graph went through the disk cache); both forms are lifted to inputs, so two
    graphs that differ only there (eight schools with the same `y` and another `sigma`)
    share a key, while a list read whole stays a constant whose values key it.  A folded
    value may be expanded (stride 0), as garch's is: its stride is part of the key."""
    import operator

    def folded(c, dotted):
        root = torch.nn.Module()
        root.consts = torch.nn.ParameterList([
            torch.nn.Parameter(torch.tensor(c).expand(1), requires_grad=False),
            torch.nn.Parameter(torch.tensor(2.0), requires_grad=False)])
        g = torch.fx.Graph()
        z = g.placeholder("z")
        if dotted:
            k = g.get_attr("consts.0")
        else:
            k = g.call_function(operator.getitem, (g.get_attr("consts"), 0))
        grad = g.call_function(torch.mul, (z, k))
        g.output((grad, g.call_function(torch.sum, (grad, -1))))
        return torch.fx.GraphModule(root, g)

    z0 = torch.zeros(2, 3)
    for dotted in (False, True):
        graphs = [folded(c, dotted) for c in (2.0, 2.0, 3.0)]
        assert graphs[0].code == graphs[2].code  # only the listed value differs
        keys = [TC.cache_key(g, z0, False, 1000.0, "momentum", 10, True, 8) for g in graphs]
        assert keys[0] == keys[1] == keys[2]
        lifted, consts = TG.lift_constants(graphs[2])
        assert len(consts) == 1 and consts[0].stride() == (0,)
        z = torch.ones(2, 3)
        want = graphs[2](z)
        got = lifted(z, *consts)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        assert not [n for n in lifted.graph.nodes if n.op == "get_attr"]

    def whole(c):  # a list read whole (as a tuple of its items): not lifted
        root = torch.nn.Module()
        root.consts = torch.nn.ParameterList([
            torch.nn.Parameter(torch.tensor(c), requires_grad=False)])
        g = torch.fx.Graph()
        z = g.placeholder("z")
        k = g.call_function(torch.stack, (g.get_attr("consts"),))
        grad = g.call_function(torch.mul, (z, k))
        g.output((grad, g.call_function(torch.sum, (grad, -1))))
        return torch.fx.GraphModule(root, g)

    keys = [TC.cache_key(whole(c), z0, False, 1000.0, "momentum", 10, True, 8)
            for c in (2.0, 3.0)]
    assert keys[0] != keys[1]


def test_the_cache_key_names_the_kind_of_cpu(monkeypatch):
    """A package is keyed by the CPU's architecture and vector-instruction flags
    (`_machine`): a cache directory shared by two kinds of CPU holds one package each,
    instead of handing one the other's machine code."""
    assert TC._machine().split(":")[0] == __import__("platform").machine()
    flags = TC._machine().split(":")[1]
    assert set(flags.split(",")) - {""} <= set(TC._ISA_FLAGS)
    g = torch.fx.symbolic_trace(lambda z: (2 * z, (z * z).sum(-1)))
    z0 = torch.zeros(2, 3)
    here = TC._digest(g, z0, False, 1000.0, "momentum", 10, True, 8)
    assert TC._digest(g, z0, False, 1000.0, "momentum", 10, True, 8) == here
    monkeypatch.setattr(TC, "_machine", lambda: "another-arch:")  # no real machine
    assert TC._digest(g, z0, False, 1000.0, "momentum", 10, True, 8) != here


class _EagerBlock(TR.CompiledTransition):
    """The block run by PyTorch (the reference) in place of a compiled package: the
    kernel's block path without a C++ compile."""

    def __init__(self, density, dense, thr, uturn, K, biased, T):
        super().__init__(TR.block_function(density, dense, thr, uturn, K, biased), K, T,
                         None, 0.0, False)


def _eager_blocks(monkeypatch, calls=None):
    def compile_transition(graph, z0, dense, thr, uturn, K, biased, T, *a, **k):
        return _EagerBlock(graph, dense, thr, uturn, K, biased, T), "eager block"

    monkeypatch.setattr(TC, "compile_transition", compile_transition)
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: True)
    if calls is not None:
        from qvr.inference.mcmc import nuts as N
        run = N.NUTSKernel._run_block

        def spy(self, compiled, state, target, k):
            calls.append((state.i, k, state.warming_up, frozenset(state.mass_updates),
                          state.num_warmup))
            return run(self, compiled, state, target, k)

        monkeypatch.setattr(N.NUTSKernel, "_run_block", spy)


def test_the_kernel_runs_blocks_cut_at_the_windows_and_samples_the_posterior(monkeypatch):
    """NUTS with the block (run eagerly here): every call ends at or before a slow
    window's end and the end of warmup, the driver records every iteration, and the
    draws have the conjugate model's exact moments within MCSE with the acceptance and
    tree depths of the per-iteration kernel."""
    calls = []
    _eager_blocks(monkeypatch, calls)
    model, x, obs, exact = normal_normal_case()
    events = []
    torch.manual_seed(2)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=300, num_samples=600,
             num_chains=4, on_event=events.append).run(None, target=make_target(model, x, obs))
    assert r.compiler == "transition" and r.compiler_notes[-1] == "eager block"
    # progress per chain and phase: from the first block to the last step, increasing;
    # the draws chunks cover every draw once
    from qvr.events import DrawsChunk, FitProgress
    for c in range(4):
        for phase, total in (("warmup", 300), ("sampling", 600)):
            steps = [e.step for e in events if isinstance(e, FitProgress)
                     and e.chain == c and e.phase == phase]
            assert steps[-1] == total and steps == sorted(set(steps)), (c, phase, steps)
            assert steps[0] <= TR.block_size(4, 1, 10)
        chunks = [e for e in events if isinstance(e, DrawsChunk) and e.chain == c]
        assert [e.start for e in chunks] == sorted(e.start for e in chunks)
        assert sum(len(e.draws["mu"]) for e in chunks) == 600
    assert sum(k for _, k, *_ in calls) == 900 and max(k for _, k, *_ in calls) > 10
    for i, k, warm, ends, W in calls:
        if warm:
            assert i + k <= W
            assert not [m for m in ends if i <= m < i + k - 1], (i, k)
    assert r.samples["mu"].shape == (4, 600, 1)
    assert int((r.num_steps == 0).sum()) == 0 and r.tree_depths.min() >= 1
    rhats = check_moments(r.samples, exact)
    assert max(rhats.values()) < 1.01
    torch.manual_seed(2)
    ref = MCMC(NUTSKernel(compiler="torchscript"), num_warmup=300, num_samples=600,
               num_chains=4).run(None, target=make_target(model, x, obs))
    # adapted step sizes vary from run to run (and the depths with them): alike in mean
    assert abs(float(r.step_sizes.mean()) / float(ref.step_sizes.mean()) - 1) < 0.3
    # posterior sd 0.33: at step 0.2 trees of depth 1-3 (at 1.0 every leaf diverges)
    _same_trees_at_a_fixed_step_size("transition", make_target(model, x, obs),
                                     step_size=0.2, draws=500)


def _same_trees_at_a_fixed_step_size(compiler, target, step_size, draws=1000):
    """At a fixed step size and metric (no adaptation: the depths of adapted runs vary
    with each run's step sizes), the tree depths and acceptance statistics of `compiler`'s
    kernel and the TorchScript ticks: each depth's share within 5 binomial SE, the mean
    acceptance within 0.03."""
    runs = []
    for comp in (compiler, "torchscript"):
        torch.manual_seed(7)
        kernel = NUTSKernel(compiler=comp, step_size=step_size, adapt_step_size=False,
                            adapt_mass_matrix=False)
        runs.append(MCMC(kernel, num_warmup=50, num_samples=draws, num_chains=4).run(
            None, target=target))
    r, ref = runs
    assert r.compiler == compiler and ref.compiler == "torchscript"
    a = r.tree_depths.reshape(-1).numpy()
    b = ref.tree_depths.reshape(-1).numpy()
    assert len(set(a)) >= 2
    for d in sorted(set(a) | set(b)):
        pa, pb = (a == d).mean(), (b == d).mean()
        se = math.sqrt(max(pa * (1 - pa), pb * (1 - pb), 1e-4) * 2 / a.size)
        assert abs(pa - pb) < 5 * se + 0.005, (d, pa, pb)
    assert abs(float(r.accept_probs.mean()) - float(ref.accept_probs.mean())) < 0.03


class _RawTarget(FunctionTarget):
    """The anisotropic Gaussian with its raw density as the 'graph' an eager block runs."""

    def density_graph(self, z):
        return density


@pytest.mark.parametrize("mass_matrix", ["diagonal", "dense"])
def test_blocks_adapt_the_metric_as_the_per_iteration_kernel(monkeypatch, mass_matrix):
    """On a Gaussian with scales 0.3, 1, 3 the windowed warmup run in blocks (dual
    averaging and Welford in the loop, the window ends in Python) learns the variances:
    each within 40% of the truth, for a diagonal and a dense metric (momenta drawn
    through its Cholesky factor for a whole block at once)."""
    _eager_blocks(monkeypatch)
    torch.manual_seed(5)
    r = MCMC(NUTSKernel(compiler="transition", mass_matrix=mass_matrix), num_warmup=400,
             num_samples=200, num_chains=2).run(None, target=_RawTarget(
                 lambda z: density(z)[1], 3))
    assert r.compiler == "transition"
    var = r.inverse_mass_matrix
    if mass_matrix == "dense":
        assert var.shape == (2, 3, 3)
        var = torch.diagonal(var, dim1=-2, dim2=-1)
    assert var.shape == (2, 3)
    ratio = var / SCALES ** 2
    assert ((ratio > 0.6) & (ratio < 1.4)).all(), ratio
    assert float(r.tree_depths.float().mean()) < 3.5  # the metric makes trees shallow
    sd = r.samples["z"].reshape(-1, 3).std(0)
    assert torch.allclose(sd, SCALES, rtol=0.25), sd


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
def test_compiled_transition_agrees_and_is_cached(cache_dir, normal_target, monkeypatch):
    t, _ = normal_target
    z0 = torch.zeros(4, t.dim) + 0.3
    graph = t.density_graph(z0)
    assert graph is not None
    T = TR.block_size(4, t.dim, 10)
    cache_dir.mkdir(parents=True, exist_ok=True)
    stale = cache_dir / ("0" * 32 + ".pt2")  # another model's package, long unused
    stale.write_bytes(b"x" * 4096)
    os.utime(stale, (1e9, 1e9))
    monkeypatch.setenv("QVR_CACHE_MAX_MB", "0.001")  # a new package prunes it
    ct, note = TC.compile_transition(graph, z0, False, 1000.0, "momentum", 10, True, T,
                                     cache_dir)
    assert ct is not None, note
    assert note.startswith("the whole NUTS transition compiled by AOTInductor (a C++ loop "
                           f"of up to {T} transitions a call")
    assert not stale.exists()
    assert len(list(cache_dir.glob("*.pt2"))) == 1
    again, note2 = TC.compile_transition(graph, z0, False, 1000.0, "momentum", 10, True, T,
                                         cache_dir)
    assert again.cached and note2.startswith("the whole NUTS transition loaded from the "
                                             "disk cache")
    # a package from the cache is checked against the outputs it gave when it was built
    # (kept beside it), without running PyTorch's loop; altered outputs reject it
    kept = list(cache_dir.glob("*.check.pt"))
    assert [p.name.split(".")[0] for p in kept] == [p.stem for p in cache_dir.glob("*.pt2")]
    eager = []
    real_loop = TR.eager_loop

    def counted(*a):
        eager.append(1)
        return real_loop(*a)

    package = next(cache_dir.glob("*.pt2"))
    os.utime(package, (1e9, 1e9))  # long unused
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TR, "eager_loop", counted)
        loaded, _ = TC.compile_transition(graph, z0, False, 1000.0, "momentum", 10, True, T,
                                          cache_dir)
    assert loaded is not None and loaded.cached and eager == []
    assert package.stat().st_mtime > 1e9 + 1  # loading marks it used (`prune` keeps it)
    elsewhere = cache_dir.parent / "altered"
    elsewhere.mkdir()
    for p in [*cache_dir.glob("*.pt2"), *kept]:
        shutil.copy(p, elsewhere / p.name)
    check = elsewhere / kept[0].name
    data = torch.load(check)
    data["want"][0] = data["want"][0] + 1.0  # the positions it "gave"
    torch.save(data, check)
    bad, why = TC.compile_transition(graph, z0, False, 1000.0, "momentum", 10, True, T,
                                     elsewhere)
    assert bad is None and why == ("the compiled transition disagrees with what it gave "
                                   "when it was built")
    assert list(elsewhere.iterdir()) == []  # the package and its check deleted
    # a later run's target loads its density from the disk cache (`graph_cache`) and
    # finds the same package: the graph it reads keys the same
    model, x, obs, _ = normal_normal_case()
    later = make_target(model, x, obs)
    assert later.compiled_for(z0) is not None
    assert later.graph_cache_notes == {4: "loaded from the disk cache"}
    third, _ = TC.compile_transition(later.density_graph(z0), z0, False, 1000.0, "momentum", 10,
                                     True, T, cache_dir)
    assert third is not None and third.cached
    # the compiled loop and the Python loop on fresh inputs, a few transitions with dual
    # averaging and the Welford window (over many, float rounding grows into different
    # trajectories)
    args = TR.example_inputs(graph, z0 - 0.7, False, 10, T, seed=21, limit=3)
    want = TR.BlockOut(*TR.block_function(graph, False, 1000.0, "momentum", 10, True)(*args))
    got = again(*(args[:8] + args[10:]))
    assert TR.blocks_agree(want, got)
    assert int(got.passes) > 3 and float(got.rec[2].abs().sum()) > 0
    assert float(got.rec[3:].abs().sum()) == 0  # rows past the limit untouched


@needs_cc
def test_other_data_of_the_same_shapes_reuse_the_package(cache_dir, normal_target):
    """Issue 37.4: the data are inputs of the compiled transition: the same program fitted
    to another data set of the same shapes loads the package built for the first, and
    the loop computes with the new data (it agrees with PyTorch on them, not on the old)."""
    t, _ = normal_target
    z0 = torch.zeros(4, t.dim) + 0.3
    T_ = TR.block_size(4, t.dim, 10)
    first, _ = TC.compile_transition(t.density_graph(z0), z0, False, 1000.0, "momentum",
                                     10, True, T_, cache_dir)
    assert first is not None
    model, x, obs, _ = normal_normal_case(seed=11)  # other y, same 20 rows
    other = make_target(model, x, obs)
    graph = other.density_graph(z0)
    again, note = TC.compile_transition(graph, z0, False, 1000.0, "momentum", 10, True, T_,
                                        cache_dir)
    assert again is not None and again.cached, note
    args = TR.example_inputs(graph, z0 - 0.7, False, 10, T_, seed=21, limit=3)
    want = TR.BlockOut(*TR.block_function(graph, False, 1000.0, "momentum", 10, True)(*args))
    assert TR.blocks_agree(want, again(*(args[:8] + args[10:])))
    old = TR.BlockOut(*TR.block_function(t.density_graph(z0), False, 1000.0, "momentum", 10,
                                         True)(*args))
    assert not torch.allclose(old.log_density, want.log_density)  # the data matter


@needs_cc
def test_fit_with_the_whole_transition(cache_root, normal_target, monkeypatch):
    """Exact moments within MCSE; at a fixed step size, tree depths and acceptance like
    the tick kernel's; the same seed, the same draws."""
    monkeypatch.setenv("QVR_CACHE_DIR", str(cache_root))
    t, exact = normal_target
    torch.manual_seed(1)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=300, num_samples=1000,
             num_chains=4).run(None, target=t)
    assert r.compiler == "transition"
    assert r.compiler_notes[-1].startswith("the whole NUTS transition")
    rhats = check_moments(r.samples, exact)
    assert max(rhats.values()) < 1.01
    _same_trees_at_a_fixed_step_size("transition", t, step_size=0.2)
    # the same seed gives the same draws again (the decision and the table are seeded)
    torch.manual_seed(1)
    again = MCMC(NUTSKernel(compiler="transition"), num_warmup=300, num_samples=1000,
                 num_chains=4).run(None, target=t)
    assert torch.equal(again.unconstrained, r.unconstrained)


def test_a_failing_compile_leaves_the_fit_on_ticks(monkeypatch, normal_target):
    def boom(*a, **k):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(TC, "cache_key", boom)
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=50, num_samples=50,
             num_chains=2).run(None, target=t)
    assert r.compiler == "torchscript"
    assert r.compiler_notes[0] == ("the transition did not compile: RuntimeError: no C++ "
                                   "compiler found; NUTS goes on without it, leaf by leaf "
                                   "(slower)")
    assert r.samples["mu"].shape == (2, 50, 1)


def test_a_transition_failing_at_run_time_hands_over_to_ticks(monkeypatch):
    class Broken:
        T = 8

        def __call__(self, *a):
            raise RuntimeError("kernel crashed")

    monkeypatch.setattr(TC, "compile_transition", lambda *a, **k: (Broken(), "compiled"))
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(compiler="transition"), num_warmup=30, num_samples=30,
             num_chains=2).run(None, target=t)
    assert r.compiler == "torchscript"
    assert r.compiler_notes[-1].startswith("the compiled transition failed during the run "
                                           "(RuntimeError: kernel crashed)")
    assert r.samples["mu"].shape == (2, 30, 1)


class _FakeBackground:
    """`BackgroundCompile` without a worker: done after `after` polls (None: never),
    then hands over an eagerly run block (or `result`)."""

    after, result_note, made = 3, "the whole NUTS transition compiled by AOTInductor", []

    def __init__(self, graph, z0, dense, thr, uturn, K, biased, T, directory=None, rows=None):
        self.block = _EagerBlock(graph, dense, thr, uturn, K, biased, T)
        self.polls = 0
        _FakeBackground.made.append(self)

    def done(self):
        self.polls += 1
        return self.after is not None and self.polls > self.after

    def result(self):
        return self.block, self.result_note


def test_auto_uses_the_transition_only_for_long_runs(monkeypatch):
    calls = []
    monkeypatch.delenv(T.ENV_VAR, raising=False)
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: True)  # not in the background
    monkeypatch.setattr(TC, "compile_transition",
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
    from qvr.events import FitNote, FitProgress
    events, order = [], []
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: False)
    monkeypatch.setattr(TC, "compile_transition",
                        lambda *a, **k: order.append("compile") or (None, "not here"))
    model, x, obs, _ = normal_normal_case()

    def on_event(e):
        events.append(e)
        order.append(type(e).__name__)

    MCMC(NUTSKernel(compiler="transition"), num_warmup=10, num_samples=10, num_chains=2,
         on_event=on_event).run(None, target=make_target(model, x, obs))
    notes = [e for e in events if isinstance(e, FitNote)]
    assert [n.message for n in notes] == [
        "compiling NUTS to C++ (once per model: tens of seconds)",
        "not here; NUTS goes on without it, leaf by leaf (slower)"]  # it did not compile
    assert order.index("FitNote") < order.index("compile") < order.index("FitProgress")
    # on disk: nothing to say
    events.clear()
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: True)
    MCMC(NUTSKernel(compiler="transition"), num_warmup=10, num_samples=10, num_chains=2,
         on_event=on_event).run(None, target=make_target(model, x, obs))
    assert [e.message for e in events if isinstance(e, FitNote)] == [
        "not here; NUTS goes on without it, leaf by leaf (slower)"]


def test_a_cancelled_run_does_not_wait_for_the_compile(monkeypatch):
    """Cancelling while the transition compiles (the dashboard's `x`, Ctrl-C) ends the run
    at once, with nothing drawn and the reason noted, instead of after tens of seconds of
    C++ compiling; the abandoned build is left to its thread and a later run compiles
    again."""
    import threading
    release, entered = threading.Event(), threading.Event()

    def export(*a, **k):  # a build that only ends when the test says so
        entered.set()
        release.wait()
        raise RuntimeError("released")

    monkeypatch.setattr(torch.export, "export", export)
    monkeypatch.setattr(TC, "cache_dir", lambda: Path(os.environ["QVR_CACHE_DIR"]) / "t")
    model, x, obs, _ = normal_normal_case()
    target = make_target(model, x, obs)
    kernel = NUTSKernel(compiler="transition")
    # a failsafe, not a timing: a run that waits for its build fails the test (the build
    # then ends in an error and the run is stopped at its first iteration, without the
    # STOPPED note) instead of hanging the suite
    failsafe = threading.Timer(300, release.set)
    failsafe.start()
    try:
        r = MCMC(kernel, num_warmup=10, num_samples=10, num_chains=2,
                 on_event=lambda e: None,
                 should_stop=lambda: entered.is_set()).run(None, target=target)
        assert r.cancelled and r.num_samples == 0 and r.samples["mu"].shape[:2] == (2, 0)
        assert r.num_grad_evals <= 1  # the starting point's evaluation only
        assert TC.STOPPED in r.compiler_notes
        assert not kernel.tick_cache(target).transitions  # a later run tries again
    finally:
        release.set()
        failsafe.cancel()


def test_auto_compiles_in_the_background_and_takes_over_at_a_block_boundary(monkeypatch):
    """Issue 37.4: a first run (nothing on disk) samples leaf by leaf at once while the
    transition compiles elsewhere, says so, and moves to the compiled loop between two
    iterations once it is ready, saying at which; the draws have the exact moments."""
    from qvr.events import FitNote
    monkeypatch.delenv(T.ENV_VAR, raising=False)
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: False)
    monkeypatch.setattr(TC, "compile_transition", lambda *a, **k: pytest.fail("waited"))
    monkeypatch.setattr(TC, "BackgroundCompile", _FakeBackground)
    monkeypatch.setattr(_FakeBackground, "after", 40)
    _FakeBackground.made.clear()
    model, x, obs, exact = normal_normal_case()
    events = []
    torch.manual_seed(3)
    r = MCMC(NUTSKernel(), num_warmup=300, num_samples=600, num_chains=4,
             on_event=events.append).run(None, target=make_target(model, x, obs))
    assert len(_FakeBackground.made) == 1
    notes = [e.message for e in events if isinstance(e, FitNote)]
    took = ("the whole NUTS transition, compiled in the background (a C++ loop of up to "
            f"{TR.block_size(4, 1, 10)} transitions a call), took over from the "
            "leaf-by-leaf steps at iteration 20")  # two polls an iteration, ready after 40
    assert notes == ["compiling NUTS to C++ in the background (once per model: tens of "
                     "seconds); sampling leaf by leaf meanwhile", took]
    assert r.compiler == "transition" and r.compiler_notes[-1] == took
    assert max(check_moments(r.samples, exact).values()) < 1.01


def test_a_run_that_ends_before_the_background_compile_says_so(monkeypatch):
    monkeypatch.delenv(T.ENV_VAR, raising=False)
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: False)
    monkeypatch.setattr(TC, "BackgroundCompile", _FakeBackground)
    monkeypatch.setattr(_FakeBackground, "after", None)
    model, x, obs, _ = normal_normal_case()
    torch.manual_seed(3)
    r = MCMC(NUTSKernel(), num_warmup=200, num_samples=200, num_chains=2).run(
        None, target=make_target(model, x, obs))
    assert r.compiler == "torchscript"
    assert r.compiler_notes == ["the C++ compile started in the background had not "
                                "finished when the run ended: its steps ran leaf by leaf"]
    # waiting instead (explicit: a first run reproducible from its seed)
    calls = []
    monkeypatch.setattr(TC, "compile_transition",
                        lambda *a, **k: calls.append(a) or (None, "not here"))
    MCMC(NUTSKernel(background_compile=False), num_warmup=200, num_samples=200,
         num_chains=2).run(None, target=make_target(model, x, obs))
    assert len(calls) == 1


def test_a_worker_releases_only_its_own_lock(tmp_path):
    """A run that ends before its compile leaves `KEY.compiling` behind; the worker
    removes it when it names the worker's pid, and leaves another worker's alone."""
    import os
    from qvr.inference.mcmc.compile_worker import _release
    mine, theirs = tmp_path / "a.compiling", tmp_path / "b.compiling"
    mine.write_text(str(os.getpid()))
    theirs.write_text(str(os.getpid() + 1))
    _release(mine)
    _release(theirs)
    _release(tmp_path / "absent.compiling")
    assert not mine.exists() and theirs.read_text() == str(os.getpid() + 1)


@needs_cc
def test_the_background_worker_builds_the_package_a_run_then_loads(tmp_path, normal_target):
    """The worker process (`compile_worker`) compiles into the cache directory; the run's
    `result()` loads that package; while a worker's lock names a live process a second
    run starts none and waits for it."""
    t, _ = normal_target
    z0 = torch.zeros(4, t.dim) + 0.3
    graph = t.density_graph(z0)
    T_ = TR.block_size(4, t.dim, 10)
    job = TC.BackgroundCompile(graph, z0, False, 1000.0, "momentum", 10, True, T_, tmp_path)
    assert job.proc is not None and job.lock.read_text() == str(job.proc.pid)
    other = TC.BackgroundCompile(graph, z0, False, 1000.0, "momentum", 10, True, T_, tmp_path)
    assert other.proc is None and not other.done()  # the first worker is alive
    try:
        job.proc.wait(timeout=900)  # an event (the worker's exit), not a duration
    finally:
        job.stop()
    assert not job.lock.exists()  # the worker released it: no run needs to be there
    assert job.done() and other.done()
    compiled, note = job.result()
    assert compiled is not None and compiled.cached, note
    assert not job.lock.exists() and job.package.is_file()
    args = TR.example_inputs(graph, z0 - 0.7, False, 10, T_, seed=21, limit=3)
    want = TR.BlockOut(*TR.block_function(graph, False, 1000.0, "momentum", 10, True)(*args))
    assert TR.blocks_agree(want, compiled(*(args[:8] + args[10:])))
    # a worker that left no package: why, in one line
    job.package.unlink()
    again, why = other.result()
    assert again is None and why.startswith("the transition did not compile")


def test_a_worker_that_cannot_start_leaves_the_compile_before_the_first_iteration(monkeypatch):
    """`BackgroundCompile` raising (a graph that does not pickle, no process to start):
    the run compiles before its first iteration as without the background, and says why."""
    monkeypatch.delenv(T.ENV_VAR, raising=False)
    monkeypatch.setattr(TC, "is_cached", lambda *a, **k: False)

    def no_worker(*a, **k):
        raise OSError("cannot fork")

    calls = []
    monkeypatch.setattr(TC, "BackgroundCompile", no_worker)
    monkeypatch.setattr(TC, "compile_transition",
                        lambda *a, **k: calls.append(a) or (None, "not here"))
    model, x, obs, _ = normal_normal_case()
    torch.manual_seed(3)
    r = MCMC(NUTSKernel(), num_warmup=200, num_samples=200, num_chains=2).run(
        None, target=make_target(model, x, obs))
    assert len(calls) == 1 and r.compiler == "torchscript"
    assert r.compiler_notes[0] == ("no background compile (OSError: cannot fork); "
                                   "compiling before the first iteration instead")
