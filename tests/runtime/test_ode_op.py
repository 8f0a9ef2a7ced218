"""`ode` in the compiled MCMC density (`qvr.runtime.ode_op`, issue 36.9): the trace records
the solve as one operation, with the values and gradients of the eager density; and the
whole solve compiled as one loop (`qvr.runtime.dopri5.make_solve`) at every shape."""
import warnings

import pytest
import torch

import qvr
from qvr.inference.mcmc.potential import make_target
from qvr.runtime import dopri5, ode_batch, ode_op

from test_ode_batch import LV, Y


Z = torch.tensor([[0.55, 0.028, 0.80, 0.024, 33.9, 5.9],
                  [0.9, 0.05, 0.6, 0.03, 20.0, 8.0],
                  [0.4, 0.02, 1.1, 0.02, 40.0, 3.0],
                  [0.6, 0.03, 0.7, 0.025, 30.0, 4.0]], dtype=torch.float64)


@pytest.fixture(scope="module")
def lv_compiled():
    """The Lotka-Volterra target of `test_ode_batch` compiled at four chains far apart
    (float64), and what it asked the disk cache to keep."""
    from qvr.inference.mcmc import graph_cache
    from qvr.runtime import ode as ode_mod
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    stored = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_cache, "store", lambda *a, **k: stored.append(a) or True)
        # the solver stays eager here (its compile is the last test's): the operator and
        # the eager density run the same solver either way
        mp.setattr(dopri5, "COMPILE_AFTER", None)
        # the solves below take 100-350 steps; a failing one stops sooner
        mp.setattr(ode_mod, "MAX_STEPS", 600)
        model = qvr.loads(LV).morphism
        t = make_target(model, torch.zeros(1, 1),
                        {"times": torch.arange(6.0), "y": torch.tensor(Y)})
        fn = t.compiled_for(Z.log())
        yield t, fn, stored
    torch.set_default_dtype(old)


def test_the_compiled_density_of_an_ode_model_is_the_eager_one(lv_compiled):
    """The TorchScript density (the solve one operation of its graph) gives the eager
    vmapped density's values and gradients, at the trace point and away from it; it is
    not kept on disk and not offered to the whole-transition compiler."""
    t, fn, stored = lv_compiled
    z = Z.log()
    assert fn is not None, t.compile_notes
    graph = t._graphs[4]
    assert ode_op.contains_ode(graph)
    calls = [n for n in graph.graph.nodes if n.op == "call_function"
             and "ode_solve" in str(n.target)]
    assert len(calls) == 1  # the four chains in one solve
    for point in (z, z + 0.05):
        g, lp = fn(point)
        lp_e, g_e = t._vmapped(point)
        assert lp.dtype == g.dtype == torch.float64
        assert torch.allclose(lp, lp_e, rtol=1e-9, atol=1e-9), (lp, lp_e)
        assert torch.allclose(g, g_e, rtol=1e-7, atol=1e-7), (g - g_e).abs().max()
        assert float(g.abs().min()) > 1e-3  # every coordinate has a gradient to compare
    assert stored == []
    assert t.density_graph(z) is None
    assert t.not_exportable(z) == "an `ode` solve is one Python operation in the compiled " \
        "density"


def test_the_ticks_around_an_ode_density_say_why_inductor_is_not_tried(lv_compiled):
    """The NUTS tick cache: the TorchScript leaf around the density, and a note instead of
    an Inductor compile that would trace into the solve (and fail there)."""
    from qvr.inference.mcmc.tick import TickCache
    t, _, _ = lv_compiled
    cache = TickCache()
    tick = cache.get(t, Z.log(), False, 1000.0, "position", 10, want_inductor=True)
    assert tick.backend == "torchscript"
    assert cache.notes == ["not compiled by Inductor: an `ode` solve is one Python "
                           "operation in the compiled density"]


def test_a_failed_chain_in_the_compiled_density_is_minus_infinity(lv_compiled):
    """A chain whose solve fails (a hare birth rate of e^12: past the step limit or
    overflowing): -inf and a zero gradient from the compiled density, the other chains
    their values at the same point."""
    t, fn, _ = lv_compiled
    z = Z.log()
    lp_all, _ = t.log_density_and_grad(z)
    wild = z.clone()
    wild[1, 0] = 12.0
    lp, g = t.log_density_and_grad(wild)
    assert t._compiled[4] is fn  # still the compiled density
    assert lp[1] == -float("inf") and float(g[1].abs().max()) == 0.0
    keep = [0, 2, 3]
    assert torch.allclose(lp[keep], lp_all[keep], rtol=1e-9, atol=1e-9)


def test_a_graph_whose_right_hand_side_is_gone_falls_back_to_the_eager_density(
        lv_compiled, monkeypatch):
    """`ode_op.MAX_ENTRIES`: a traced density whose entry was dropped raises when called;
    the target then evaluates that density eagerly, with the same values.  (Last of the
    tests of `lv_compiled`: it leaves the target eager.)"""
    t, fn, _ = lv_compiled
    z = Z.log()
    lp_c, g_c = t.log_density_and_grad(z)
    monkeypatch.setattr(ode_op, "_ENTRIES", {})
    with pytest.raises(RuntimeError, match="no right-hand side"):
        fn(z)
    lp, g = t.log_density_and_grad(z)
    assert t._compiled[4] is None
    assert torch.allclose(lp, lp_c, rtol=1e-9, atol=1e-9)
    assert torch.allclose(g, g_c, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("chains, grad", [(2, False), (1, True)])
def test_the_whole_solve_compiles_at_every_shape(f64, monkeypatch, chains, grad):
    """Several chains (an expanded chain axis from vmap) without sensitivities (a loop
    that carries none; an empty S once had strides of its own), or one chain with them
    (several with them: `test_ode_batch`): the compiled solve is used, with no fallback
    warning, and gives the closed form."""
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", 0)
    times = torch.tensor([0.0, 0.5, 1.5, 3.0])
    stepper = []
    real = dopri5.Stepper._compile

    def spy(self, example):
        real(self, example)
        stepper.append(self)
    monkeypatch.setattr(dopri5.Stepper, "_compile", spy)

    def rhs(t, y, k):
        return -k * y

    k = torch.full((chains,), 0.8)

    def one(kk):
        return ode_batch.solve(rhs, torch.tensor(2.0), [kk], times, 1e-8, 1e-8, 4096, {})

    def total(kk):
        return one(kk).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        if grad:
            run = torch.func.grad_and_value(total)
            dk, ys = torch.func.vmap(run)(k) if chains > 1 else run(k[0])
        else:
            with torch.no_grad():
                ys = torch.func.vmap(one)(k) if chains > 1 else one(k[0])
    assert [s.compiled is not None for s in stepper] == [True]
    assert stepper[0].columns == (2 if grad else 0)  # d/dy0 and d/dk, or none
    exact = 2.0 * torch.exp(-0.8 * times)
    if grad:
        assert torch.allclose(ys, exact.sum().expand_as(ys), rtol=1e-6)
        assert torch.allclose(dk, (-times * exact).sum().expand_as(dk), rtol=1e-6)
    else:
        assert torch.allclose(ys, exact.expand_as(ys), rtol=1e-6)
