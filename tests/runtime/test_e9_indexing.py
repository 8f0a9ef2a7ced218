"""Issue 36, point 7 at run time (docs/extensions.md E9.11): ranges in indices (`X[:, 1]`,
`X[2, :]`, `y[a:b]`), list literals reduced over an object, `append_row`/`append_col`
and `ode` from an initial time t0 — values against numpy, scipy and closed forms, under
vmap, make_fx, inside `scan` and in float64."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp

import qvr
from qvr.runtime.errors import IndexRangeError, InputShapeError

HEAD = """object Row : FinSet 6
object Coef : FinSet 3
object Comp : FinSet 2
"""

G = np.random.default_rng(7)
X = G.normal(size=(6, 3))
V = G.normal(size=3)


def run(body: str, values: dict):
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    model = qvr.loads(HEAD + f"\nprogram p : Row -> Row\n{lines}\n\nexport p\n").morphism
    values = {k: v for k, v in values.items() if re.search(rf"\b{k}\b", body)}  # what it reads
    ex = model.execute(torch.zeros(6, 1), values, score=True)
    return {k: r.value for k, r in ex.sites.items()}


def close(a, b, tol=1e-6):
    a = a.detach().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, float)
    np.testing.assert_allclose(a, np.asarray(b, float), rtol=tol, atol=tol)


DATA = {"X": torch.tensor(X), "v": torch.tensor(V), "b": torch.tensor(0.0)}


def test_ranges_in_indices_follow_numpy():
    out = run("""
data X : Row * Coef
data v : Coef
let col = X[:, 1]
let row = X[2, :]
let block = X[1:3, 0]
let corner = X[:2, 1:]
let tail = X[-2:, :-1]
let whole = X[:]
let both = X[:, :]
let empty = X[4:2, :]
let clipped = v[1:10]
sample b <- Normal(0.0, 1.0)
return b
""", DATA)
    refs = {"col": X[:, 1], "row": X[2, :], "block": X[1:3, 0], "corner": X[:2, 1:],
            "tail": X[-2:, :-1], "whole": X, "both": X, "empty": X[4:2, :], "clipped": V[1:10]}
    for name, ref in refs.items():
        assert tuple(out[name].shape) == ref.shape, name
        close(out[name], ref)


def test_range_bounds_read_from_data():
    out = run("""
data X : Row * Coef
let part = X[lo:hi + 1, :]
sample b <- Normal(0.0, 1.0)
return b
""", {**DATA, "lo": torch.tensor(1), "hi": torch.tensor(3)})
    close(out["part"], X[1:4, :])


def test_a_factor_over_a_column_and_a_row():
    # the factor's fast path indexes with a vector binder: the binder's axis comes first
    out = run("""
data X : Row * Coef
let colsum = factor c : Coef in sum(X[:, c])
let rowsum = factor r : Row in sum(X[r, :])
let pick = factor c : Coef in X[1:4, c]
sample b <- Normal(0.0, 1.0)
return b
""", DATA)
    close(out["colsum"], X.sum(0))
    close(out["rowsum"], X.sum(1))
    close(out["pick"], X[1:4, :].T)


def test_an_integer_index_out_of_range_names_the_value():
    with pytest.raises(IndexRangeError) as e:
        run("""
data X : Row * Coef
let bad = X[:, k]
sample b <- Normal(0.0, 1.0)
return b
""", {**DATA, "k": torch.tensor(3)})
    assert "X[…]" in str(e.value) and "index on axis 1" in str(e.value)


def test_a_row_of_data_in_a_scan_body():
    # `X[t, :]` reads only t: computed for all steps at once before the loop
    out = run("""
data X : Row * Coef
data v : Coef
let path = scan(Row, 0.0, (s, t) -> 0.5 * s + X[t, :] @ v)
sample b <- Normal(0.0, 1.0)
return b
""", DATA)
    ref = [0.0]
    for t in range(1, 6):
        ref.append(0.5 * ref[-1] + X[t] @ V)
    close(out["path"], ref)


def test_append_row_and_append_col_follow_numpy():
    out = run("""
data X : Row * Coef
data v : Coef
let rows = append_row(X, X[1:3, :])
let front = append_row(1.5, v)
let back = append_col(v, 2.0)
let cols = append_col(X, X[:, :1])
let vec = append_row(v, v)
sample b <- Normal(0.0, 1.0)
return b
""", DATA)
    refs = {"rows": np.concatenate([X, X[1:3]]), "front": np.concatenate([[1.5], V]),
            "back": np.concatenate([V, [2.0]]), "cols": np.concatenate([X, X[:, :1]], 1),
            "vec": np.concatenate([V, V])}
    for name, ref in refs.items():
        assert tuple(out[name].shape) == ref.shape, name
        close(out[name], ref)


MIX = """
data y : Row
sample theta <- Beta(2.0, 2.0)
sample mu1 <- Normal(0.0, 1.0)
sample mu2 <- Normal(0.0, 1.0)
let lp1 = log(theta) + log_density(Normal(mu1, 1.0), y)
let lp2 = log(1.0 - theta) + log_density(Normal(mu2, 1.0), y)
let resp = softmax(([lp1, lp2]), Comp)
score lik = sum(logsumexp([lp1, lp2], Comp))
return theta
"""


def test_a_two_component_mixture_written_as_stans_log_mix():
    y = G.normal(size=6)
    out = run(MIX, {"y": torch.tensor(y), "theta": torch.tensor(0.3),
                    "mu1": torch.tensor(-1.0), "mu2": torch.tensor(2.0)})
    a = math.log(0.3) + stats.norm(-1.0, 1.0).logpdf(y)
    b = math.log(0.7) + stats.norm(2.0, 1.0).logpdf(y)
    ref = logsumexp([a, b], axis=0)
    close(out["lik"], ref.sum())
    assert tuple(out["resp"].shape) == (2, 6)
    close(out["resp"], np.exp(np.stack([a, b]) - ref))


def test_the_mixture_density_under_vmap_and_make_fx():
    from torch.func import vmap
    from torch.fx.experimental.proxy_tensor import make_fx
    model = qvr.loads(HEAD + "\nprogram p : Row -> Row\n" + "\n".join(
        "    " + line for line in MIX.strip().split("\n")) + "\n\nexport p\n").morphism
    y = torch.tensor(G.normal(size=6), dtype=torch.float32)

    def lp(theta, m1, m2):
        return model.log_joint_total(torch.zeros(6, 1), {"y": y, "theta": theta, "mu1": m1, "mu2": m2})

    th, m1, m2 = torch.tensor([0.2, 0.6]), torch.tensor([0.0, -1.0]), torch.tensor([1.0, 2.0])
    loop = torch.stack([lp(*z) for z in zip(th, m1, m2)])
    assert torch.allclose(vmap(lp)(th, m1, m2), loop, atol=1e-5)
    traced = make_fx(lp)(th[0], m1[0], m2[0])
    assert torch.allclose(traced(th[1], m1[1], m2[1]), loop[1], atol=1e-5)


def test_indexing_and_append_keep_float64():
    out = run("""
data X : Row * Coef
data v : Coef
let c = X[:, 1]
let a = append_row(0.0, v)
sample b <- Normal(0.0, 1.0)
return b
""", DATA)
    assert out["c"].dtype == torch.float64 and out["a"].dtype == torch.float64


# ---------------------------------------------------------------- ode from t0

ODE_T0 = """
object Obs : FinSet {n}
program decay : Obs -> Obs
    sample k <- HalfNormal(1.0)
    let y = ode((u, t) -> -k * u, y0, t0, times{tol})
    observe z : Obs <- Normal(y, 0.1)
    return y
export decay
"""


@pytest.fixture
def f64():
    torch.set_default_dtype(torch.float64)


def _ode(values, n=4, tol=", 1e-10, 1e-10"):
    model = qvr.loads(ODE_T0.format(n=n, tol=tol)).morphism
    return model.execute(torch.zeros(1, 1), {"z": torch.zeros(n), **values}).output


def test_ode_from_an_initial_time_before_the_first_output(f64):
    times = torch.tensor([1.0, 1.5, 2.0, 4.0])
    k = torch.tensor(0.7, requires_grad=True)
    out = _ode({"k": k, "y0": torch.tensor(3.0), "t0": torch.tensor(0.25), "times": times})
    assert tuple(out.shape) == (4,)
    ref = 3.0 * np.exp(-0.7 * (times.numpy() - 0.25))
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-8)
    out[-1].backward()  # d y(T) / d k = -(T - t0) y(T)
    assert float(k.grad) == pytest.approx(-(4.0 - 0.25) * ref[-1], rel=1e-6)


def test_ode_default_tolerances_with_t0(f64):
    times = torch.tensor([0.5, 1.0, 3.0])
    out = _ode({"k": torch.tensor(0.4), "y0": torch.tensor(2.0), "t0": torch.tensor(0.0),
                "times": times}, n=3, tol="")
    np.testing.assert_allclose(out.numpy(), 2.0 * np.exp(-0.4 * times.numpy()), rtol=2e-5)


def test_ode_t0_must_come_before_the_first_output_time(f64):
    with pytest.raises(InputShapeError) as e:
        _ode({"k": torch.tensor(0.7), "y0": torch.tensor(3.0), "t0": torch.tensor(1.0),
              "times": torch.tensor([1.0, 1.5, 2.0, 4.0])})
    assert "step `y`" in str(e.value) and "after its initial time t0" in str(e.value)


def test_ode_t0_must_be_one_number(f64):
    with pytest.raises(InputShapeError) as e:
        _ode({"k": torch.tensor(0.7), "y0": torch.tensor(3.0), "t0": torch.tensor([0.0, 0.1]),
              "times": torch.tensor([1.0, 1.5, 2.0, 4.0])})
    assert "the initial time of `ode` must be one number" in str(e.value)


def test_a_lag_register_in_a_scan_state():
    # the state is a vector over Lag: drop its first entry, append a new one
    model = qvr.loads("""object Time : FinSet 5
object Lag : FinSet 3

program p : Time -> Time
    data v : Lag
    let path = scan(Time, v, (s, t) -> append_row(s[1:], s[0] + 1.0))
    let last = fold(Time, v, (s, t) -> append_row(0.0, s[:-1]))
    sample b <- Normal(0.0, 1.0)
    return b

export p
""").morphism
    ex = model.execute(torch.zeros(5, 1), {"v": torch.tensor([1.0, 2.0, 3.0]), "b": torch.tensor(0.0)})
    state, ref = np.array([1.0, 2.0, 3.0]), [np.array([1.0, 2.0, 3.0])]
    for _ in range(4):
        state = np.concatenate([state[1:], [state[0] + 1.0]])
        ref.append(state)
    close(ex.sites["path"].value, np.stack(ref))
    close(ex.sites["last"].value, np.zeros(3))


def test_a_let_annotated_with_an_object_is_reduced_over_it():
    y = G.normal(size=6)
    out = run("""
data y : Row
sample theta <- Beta(2.0, 2.0)
sample mu1 <- Normal(0.0, 1.0)
sample mu2 <- Normal(0.0, 1.0)
let lps : Comp = [log(theta) + log_density(Normal(mu1, 1.0), y), log1p(-theta) + log_density(Normal(mu2, 1.0), y)]
record resp : Comp * Row = softmax(lps, Comp)
score lik = sum(logsumexp(lps, Comp))
return theta
""", {"y": torch.tensor(y), "theta": torch.tensor(0.3), "mu1": torch.tensor(-1.0),
      "mu2": torch.tensor(2.0)})
    a = math.log(0.3) + stats.norm(-1.0, 1.0).logpdf(y)
    b = math.log(0.7) + stats.norm(2.0, 1.0).logpdf(y)
    ref = logsumexp([a, b], axis=0)
    close(out["lik"], ref.sum())
    close(out["resp"], np.exp(np.stack([a, b]) - ref))


def test_ode_from_t0_under_vmap_equals_the_loop(f64):
    from torch.func import grad, vmap
    # the chains share one adaptive solve (their worst error sets the steps): equal to the
    # loop within the solver's tolerance
    model = qvr.loads(ODE_T0.format(n=3, tol=", 1e-10, 1e-10")).morphism
    data = {"y0": torch.tensor(2.0), "t0": torch.tensor(0.5), "times": torch.tensor([1.0, 2.0, 3.0]),
            "z": torch.tensor([1.0, 0.5, 0.2])}

    def lp(k):
        return model.log_joint_total(torch.zeros(1, 1), {"k": k, **data})

    ks = torch.tensor([0.5, 0.7, 0.9])
    loop = torch.stack([lp(k) for k in ks])
    assert torch.allclose(vmap(lp)(ks), loop, rtol=1e-6)
    assert torch.allclose(vmap(grad(lp))(ks), torch.stack([grad(lp)(k) for k in ks]), rtol=1e-5)
