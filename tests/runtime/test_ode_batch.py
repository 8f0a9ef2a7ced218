"""`ode` for many chains in one solve (`qvr.runtime.ode_batch`, issue 36.9): under vmap the
chains' systems are solved as one, with the values and gradients each chain gets alone."""
import pytest
import torch

import qvr
from qvr.inference.mcmc.potential import _per_chain, make_target
from qvr.runtime import ode_batch
from qvr.runtime.dopri5 import SolveFailed

LV = """
object Step : FinSet 6
object Species : FinSet 2
program lv : Step -> Step
    data times : Step
    sample a <- Normal(1.0, 0.5) [lower=0.0]
    sample b <- Normal(0.05, 0.05) [lower=0.0]
    sample c <- Normal(1.0, 0.5) [lower=0.0]
    sample d <- Normal(0.05, 0.05) [lower=0.0]
    sample z_init : Species <- LogNormal(2.3, 1.0)
    let z = ode((u, t) -> [u[0] * (a - b * u[1]), u[1] * (d * u[0] - c)], z_init, times, 1e-10, 1e-10)
    let log_z = log(z)
    observe y : Step * Species <- LogNormal(log_z, 0.25)
    return z
export lv
"""

Y = [[30.0, 4.0], [47.2, 6.1], [70.2, 9.8], [77.4, 35.2], [36.3, 59.4], [20.6, 41.7]]


def _target():
    model = qvr.loads(LV).morphism
    obs = {"times": torch.arange(6.0), "y": torch.tensor(Y)}
    return make_target(model, torch.zeros(1, 1), obs)


def test_three_chains_in_one_solve_match_each_chain_alone(f64, monkeypatch):
    t = _target()
    t.compile = False  # the vmapped density itself (a compile would fail anyway: `ode`)
    # three chains far apart: different step sequences if solved alone
    z = torch.tensor([[0.55, 0.028, 0.80, 0.024, 33.9, 5.9],
                      [0.9, 0.05, 0.6, 0.03, 20.0, 8.0],
                      [0.4, 0.02, 1.1, 0.02, 40.0, 3.0]]).log()
    solves = []
    real = ode_batch.Spec.run

    def run(self, y0, params, batched):
        solves.append((batched, tuple(y0.shape)))
        return real(self, y0, params, batched)

    monkeypatch.setattr(ode_batch.Spec, "run", run)
    lp, grad = t.log_density_and_grad(z)
    assert not t.vmap_failed
    assert solves == [(True, (3, 2))]  # one solve for the three chains
    solves.clear()
    lp1, grad1 = _per_chain(t.single, z)  # each chain alone (autograd, no vmap)
    assert solves == [(False, (2,))] * 3
    assert torch.allclose(lp, lp1, rtol=0, atol=1e-6), (lp, lp1)
    assert torch.allclose(grad, grad1, rtol=0, atol=1e-6), (grad - grad1).abs().max()
    assert float(grad.abs().min()) > 1e-3  # every coordinate has a gradient to compare


def test_the_solve_under_vmap_gives_per_chain_values_and_gradients(f64):
    """`ode_batch.solve` itself with a torch right-hand side: logistic growth with a
    per-chain rate and capacity, vmapped against a loop over chains."""
    times = torch.tensor([0.0, 0.5, 1.0, 3.0])

    def rhs(t, y, k, cap):
        return k * y * (1.0 - y / cap)

    def one(y0, k, cap):
        ys = ode_batch.solve(rhs, y0, [k, cap], times, 1e-10, 1e-10, 4096)
        return (ys * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum()

    y0 = torch.tensor([0.5, 1.0, 2.0])
    k = torch.tensor([0.9, 2.0, 0.3])
    cap = torch.tensor([10.0, 5.0, 20.0])
    g, v = torch.func.vmap(torch.func.grad_and_value(one, argnums=(0, 1, 2)))(y0, k, cap)
    for c in range(3):
        ys = [x[c].clone().requires_grad_(True) for x in (y0, k, cap)]
        val = one(*ys)
        want = torch.autograd.grad(val, ys)
        assert abs(float(v[c] - val.detach())) < 1e-6
        for i in range(3):
            assert abs(float(g[i][c] - want[i])) < 1e-6, (c, i)
    # the closed form: y = cap / (1 + (cap / y0 - 1) exp(-k t))
    exact = cap / (1 + (cap / y0 - 1) * torch.exp(-k * 3.0))
    got = torch.func.vmap(lambda a, b, c: ode_batch.solve(rhs, a, [b, c], times, 1e-10,
                                                          1e-10, 4096)[-1])(y0, k, cap)
    assert torch.allclose(got, exact, rtol=1e-8)


def test_the_step_limit_counts_the_whole_solve_not_each_output_time(f64, monkeypatch):
    """torchdiffeq's `max_num_steps` restarted at each output time: 20 times of a few steps
    each never reached 10 there; `MAX_STEPS` bounds the solve as a whole."""
    from qvr.runtime import ode as ode_mod
    times = torch.linspace(0.0, 20.0, 21)

    def rhs(t, y, k):
        return -k * y

    ys = ode_batch.solve(rhs, torch.tensor(1.0), [torch.tensor(0.3)], times, 1e-8, 1e-8, 4096)
    assert torch.allclose(ys, torch.exp(-0.3 * times), rtol=1e-6)
    # ~40 steps in all, 1-3 to each time
    with pytest.raises(SolveFailed, match=r"max_num_steps exceeded \(10 steps in all\)"):
        ode_batch.solve(rhs, torch.tensor(1.0), [torch.tensor(0.3)], times, 1e-8, 1e-8, 10)
    monkeypatch.setattr(ode_mod, "MAX_STEPS", 10)
    model = qvr.loads(LV).morphism
    with pytest.raises(ode_mod.OdeStepLimitError) as e:
        model.log_joint(torch.zeros(1, 1), {
            "times": torch.arange(6.0), "y": torch.tensor(Y), "a": torch.tensor(0.55),
            "b": torch.tensor(0.028), "c": torch.tensor(0.8), "d": torch.tensor(0.024),
            "z_init": torch.tensor([33.9, 5.9])})
    assert "`ode` needed more than 10 adaptive steps" in str(e.value)


def test_a_chain_that_runs_out_of_steps_is_dropped_not_the_batch(f64):
    """Under vmap, a chain whose solve needs more than the step limit gives NaN values and
    a zero gradient; the other chains get what they get alone."""
    times = torch.tensor([0.0, 1.0, 3.0])

    def rhs(t, y, k):
        return -k * y * (1.0 + 0.5 * torch.sin(k * t))  # fast oscillation for a large k

    def one(y0, k):
        return ode_batch.solve(rhs, y0, [k], times, 1e-8, 1e-8, 200).sum()

    y0 = torch.tensor([1.0, 1.0, 2.0])
    k = torch.tensor([0.3, 300.0, 0.5])
    with pytest.raises(SolveFailed, match="max_num_steps"):
        one(y0[1], k[1])  # alone, the second chain runs out of steps
    g, v = torch.func.vmap(torch.func.grad_and_value(one, argnums=(0, 1)))(y0, k)
    assert torch.isnan(v[1]) and float(g[0][1]) == 0.0 and float(g[1][1]) == 0.0
    for c in (0, 2):
        a, b = y0[c].clone().requires_grad_(True), k[c].clone().requires_grad_(True)
        val = one(a, b)
        want = torch.autograd.grad(val, (a, b))
        assert abs(float(v[c] - val.detach())) < 1e-6
        assert abs(float(g[0][c] - want[0])) < 1e-6 and abs(float(g[1][c] - want[1])) < 1e-6


def _decay(y0, k, times):
    def rhs(t, y, kk):
        return -kk * y
    return ode_batch.solve(rhs, y0, [k], times, 1e-10, 1e-10, 4096)


@pytest.mark.parametrize("times", [[0.0, 0.5, 2.0, 3.0], [3.0, 2.0, 0.5, 0.0]])
def test_forward_sensitivities_give_the_closed_form_gradient(f64, times):
    """y' = -k y: y(t) = y0 exp(-k (t - t0)), dy/dy0 = exp(-k (t - t0)),
    dy/dk = -(t - t0) y; forwards and backwards in time."""
    times = torch.tensor(times)
    y0 = torch.tensor(2.0, requires_grad=True)
    k = torch.tensor(0.7, requires_grad=True)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    ys = _decay(y0, k, times)
    dt = times - times[0]
    exact = 2.0 * torch.exp(-0.7 * dt)
    assert torch.allclose(ys.detach(), exact, rtol=1e-8)
    g_y0, g_k = torch.autograd.grad((ys * w).sum(), (y0, k))
    assert abs(float(g_y0) - float((w * torch.exp(-0.7 * dt)).sum())) < 1e-7
    assert abs(float(g_k) - float((w * -dt * exact).sum())) < 1e-7


def test_the_compiled_step_gives_the_eager_values_and_gradients(f64, monkeypatch):
    """`dopri5.COMPILE_AFTER`: the same solves eager and compiled (one C++ kernel per
    step attempt), under vmap and grad as the MCMC target runs them."""
    from qvr.runtime import dopri5
    times = torch.tensor([0.0, 0.5, 1.0, 3.0])

    def rhs(t, y, k, cap):
        return k * y * (1.0 - y / cap)

    def one(y0, k, cap):
        return (ode_batch.solve(rhs, y0, [k, cap], times, 1e-6, 1e-6, 4096, {})
                * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum()

    args = (torch.tensor([0.5, 1.0, 2.0]), torch.tensor([0.9, 2.0, 0.3]),
            torch.tensor([10.0, 5.0, 20.0]))
    run = torch.func.vmap(torch.func.grad_and_value(one, argnums=(0, 1, 2)))
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", None)
    g_eager, v_eager = run(*args)
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", 0)
    compiled = []
    real = dopri5.Stepper._compile

    def spy(self, example):
        real(self, example)
        compiled.append(self.compiled is not None)
    monkeypatch.setattr(dopri5.Stepper, "_compile", spy)
    g, v = run(*args)
    assert compiled == [True]
    assert torch.allclose(v, v_eager, rtol=1e-12, atol=0)
    for a, b in zip(g, g_eager):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_a_step_that_does_not_compile_is_said_and_the_solve_goes_on(f64, monkeypatch):
    from qvr.runtime import dopri5
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", 0)

    def broken(*a, **k):
        raise RuntimeError("no C++ compiler here\nmore lines")
    monkeypatch.setattr(torch, "compile", broken)
    times = torch.tensor([0.0, 1.0, 2.0])
    with pytest.warns(RuntimeWarning) as w:
        ys = _decay(torch.tensor(1.0), torch.tensor(0.3), times)
    assert [str(x.message) for x in w] == [
        "`ode`: the solver did not compile (RuntimeError: no C++ compiler here); it "
        "runs uncompiled (several times slower)"]
    assert torch.allclose(ys, torch.exp(-0.3 * times), rtol=1e-8)


def test_each_chain_takes_the_steps_it_takes_alone(f64, monkeypatch):
    """Per-chain step sizes: a chain's values under vmap are those of its solve alone,
    however far apart the chains are (the stiff chain does not refine the others)."""
    from qvr.runtime import dopri5
    steps = []
    real = dopri5.solve

    def spy(*a, **k):
        out = real(*a, **k)
        steps.append(out[3].tolist())
        return out
    monkeypatch.setattr(dopri5, "solve", spy)
    times = torch.tensor([0.0, 1.0, 4.0])
    y0, k = torch.tensor([1.0, 1.0, 2.0]), torch.tensor([0.3, 40.0, 0.5])
    with torch.no_grad():
        batched = torch.func.vmap(lambda a, b: _decay(a, b, times))(y0, k)
    alone = []
    for c in range(3):
        with torch.no_grad():
            alone.append(_decay(y0[c], k[c], times))
    assert steps[0] == [s[0] for s in steps[1:]]
    assert steps[0][1] > 3 * steps[0][0]  # the fast decay takes many more steps
    for c in range(3):
        assert torch.allclose(batched[c], alone[c], rtol=1e-13, atol=0)


def test_a_solve_without_gradients_carries_no_sensitivities(f64, monkeypatch):
    """Under `torch.no_grad` (forward sampling, predictions) the state alone is solved
    (m = 0 columns), with the values of the solve that carries them."""
    from qvr.runtime import dopri5
    columns = []
    real = dopri5.solve

    def spy(stepper, *a, **k):
        columns.append(stepper.columns)
        return real(stepper, *a, **k)
    monkeypatch.setattr(dopri5, "solve", spy)
    times = torch.tensor([0.0, 1.0, 2.0])
    with torch.no_grad():
        plain = _decay(torch.tensor(1.0), torch.tensor(0.3), times)
    k = torch.tensor(0.3, requires_grad=True)
    carried = _decay(torch.tensor(1.0), k, times)
    assert columns == [0, 2]  # d/dy0 and d/dk
    assert torch.allclose(plain, carried.detach(), rtol=1e-12, atol=0)
