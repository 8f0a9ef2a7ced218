"""E9.1 at run time (docs/e9/letexpr.md): every builtin against a numpy/torch reference,
reductions over objects with leading batch axes present, `@`, linear algebra, list
literals, `log_density`, `data` steps and their shape errors, observed values read before
their `observe`, and the same programs under `torch.func.vmap`, `make_fx` and float64."""
import math

import numpy as np
import pytest
import torch

from qvr import loads
from qvr.runtime.errors import InputShapeError, MissingValueError

HEAD = """object Row : FinSet 6
object Coef : FinSet 3
object Other : FinSet 4
"""


def prog(body: str, dom: str = "Row") -> object:
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return loads(HEAD + f"\nprogram p : {dom} -> {dom}\n{lines}\n\nexport p\n").morphism


def run(body: str, values: dict, rows: int = 6, dom: str = "Row"):
    """{name: value} of every step of one forward run with `values` supplied."""
    ex = prog(body, dom).execute(torch.zeros(rows, 1), values, score=True)
    return {k: r.value for k, r in ex.sites.items()}


def close(a, b, tol=1e-5):
    a = a.detach().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, float)
    np.testing.assert_allclose(a, np.asarray(b, float), rtol=tol, atol=tol)


G = np.random.default_rng(0)
XS = G.uniform(0.2, 0.9, size=(6, 3))  # in every elementwise builtin's domain


# ---------------------------------------------------------------- elementwise builtins

UNARY = {
    "abs": np.abs, "softplus": lambda x: np.log1p(np.exp(x)), "log1p": np.log1p,
    "expm1": np.expm1, "tanh": np.tanh, "lgamma": np.vectorize(math.lgamma),
    "digamma": lambda x: torch.special.digamma(torch.tensor(x)).numpy(),
    "logsigmoid": lambda x: -np.log1p(np.exp(-x)), "square": np.square,
    "erf": np.vectorize(math.erf), "erfc": np.vectorize(math.erfc), "log2": np.log2,
    "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": lambda x: np.arccosh(x + 1.0), "atanh": np.arctanh,
    "floor": lambda x: np.floor(4 * x), "ceil": lambda x: np.ceil(4 * x),
    "round": lambda x: np.round(4 * x), "trunc": lambda x: np.trunc(-4 * x),
    "sign": lambda x: np.sign(x - 0.5), "reciprocal": np.reciprocal,
    "rsqrt": lambda x: 1 / np.sqrt(x), "relu": lambda x: np.maximum(x - 0.5, 0),
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
ARG = {"acosh": "X + 1.0", "floor": "4.0 * X", "ceil": "4.0 * X", "round": "4.0 * X",
       "trunc": "-4.0 * X", "sign": "X - 0.5", "relu": "X - 0.5"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_elementwise_builtin_matches_numpy(name):
    got = run(f"""
data X : Row * Coef
let v = {name}({ARG.get(name, "X")})
sample b <- Normal(0.0, 1.0)
return b
""", {"X": torch.tensor(XS, dtype=torch.float32), "b": torch.tensor(0.0)})["v"]
    assert tuple(got.shape) == (6, 3)
    close(got, UNARY[name](XS))


def test_pow_clamp_and_elementwise_max_min():
    out = run("""
data X : Row * Coef
data w : Coef
let p = pow(X, w)
let c = clamp(X, 0.3, w)
let hi = max(X, w)
let lo = min(w, 0.5)
sample b <- Normal(0.0, 1.0)
return b
""", {"X": torch.tensor(XS, dtype=torch.float32), "w": torch.tensor([0.5, 2.0, 0.6]),
      "b": torch.tensor(0.0)})
    w = np.array([0.5, 2.0, 0.6])
    close(out["p"], XS ** w)
    close(out["c"], np.minimum(np.maximum(XS, 0.3), w))
    close(out["hi"], np.maximum(XS, w))
    close(out["lo"], np.minimum(w, 0.5))


# ---------------------------------------------------------------- reductions over objects

REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
          "logsumexp": lambda a, axis: np.log(np.exp(a).sum(axis)),
          "var": lambda a, axis: np.var(a, axis=axis, ddof=1),
          "std": lambda a, axis: np.std(a, axis=axis, ddof=1)}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_over_the_last_axis_and_over_each_object(name):
    out = run(f"""
data X : Row * Coef
let last = {name}(X)
let by_row = {name}(X, Row)
let by_coef = {name}(X, Coef)
sample b <- Normal(0.0, 1.0)
return b
""", {"X": torch.tensor(XS, dtype=torch.float64), "b": torch.tensor(0.0)})
    fn = REDUCE[name]
    close(out["last"], fn(XS, axis=-1))
    close(out["by_row"], fn(XS, axis=0))
    close(out["by_coef"], fn(XS, axis=1))
    assert tuple(out["by_row"].shape) == (3,) and tuple(out["by_coef"].shape) == (6,)


def test_reductions_pick_the_typed_axis_when_leading_batch_axes_are_present():
    # inside `factor r : Row in …` the body is evaluated once for all r (a leading batch axis
    # of size |Row| in front of the typed axes): `sum(T[r], Other)` must reduce `Other`
    T = G.normal(size=(6, 3, 4))
    out = run("""
data T : Row * Coef * Other
let s = factor r : Row, c : Coef in sum(T[r, c], Other)
let m = factor r : Row in mean(T[r], Coef)
let soft = factor r : Row in softmax(T[r], Coef)
let cum = factor r : Row in cumsum(T[r], Coef)
sample b <- Normal(0.0, 1.0)
return b
""", {"T": torch.tensor(T), "b": torch.tensor(0.0)})
    close(out["s"], T.sum(-1))
    close(out["m"], T.mean(1))
    e = np.exp(T)
    close(out["soft"], e / e.sum(1, keepdims=True))
    close(out["cum"], np.cumsum(T, axis=1))


def test_a_reduction_compiled_with_its_axes_resolves_from_the_right():
    """The compiled closure on a value carrying two leading batch axes (as in MCMC's
    per-row values or a factor's binders): the object's dimension is counted from the
    right, so the batch axes never shift it."""
    from qvr.runtime.letexpr import compile_let
    from qvr.sema.axes import Axis
    from qvr.sema.axes_walk import ExprAxes
    from qvr.sema.types import FinSet
    from qvr.syntax.chunks import split
    from qvr.syntax.parser import parse_chunk

    text = "program q : A -> A\n    let r = sum(M, Coef) + sum(softmax(M, Other), Coef)\n    return r\n"
    decl = parse_chunk(split(text)[0][0][1]).decl
    rhs = decl.body[0].rhs

    class Scope:
        def name_axes(self, t):
            return (Axis("Coef", 3), Axis("Other", 4)) if t == "M" else None

        def is_local(self, t):
            return t == "M"

        def object_type(self, t):
            return FinSet(3) if t == "Coef" else FinSet(4) if t == "Other" else None

    walker = ExprAxes(Scope())
    assert walker.expr(rhs) == (Axis("Other", 4),)
    fn = compile_let(rhs, lambda n: ("local", n), None, walker)

    class Frame:
        dtype, device = torch.float64, torch.device("cpu")
        env = {"M": torch.tensor(G.normal(size=(2, 5, 3, 4)))}

        def literal(self, v):
            return torch.tensor(v, dtype=self.dtype)

    got = fn(Frame(), {})
    M = Frame.env["M"].numpy()
    e = np.exp(M)
    close(got, M.sum(-2) + (e / e.sum(-1, keepdims=True)).sum(-2))


# ---------------------------------------------------------------- `@`, linear algebra

def test_matmul_follows_torch_matmul_and_contracts_typed_vectors_with_batch_axes():
    X, w, W = G.normal(size=(6, 3)), G.normal(size=3), G.normal(size=(3, 4))
    out = run("""
data X : Row * Coef
data w : Coef
data W : Coef * Other
let mv = X @ w
let vm = w @ W
let mm = X @ W
let vv = w @ w
let rows = factor r : Row in X[r] @ w
sample b <- Normal(0.0, 1.0)
return b
""", {"X": torch.tensor(X), "w": torch.tensor(w), "W": torch.tensor(W), "b": torch.tensor(0.0)})
    close(out["mv"], X @ w)
    close(out["vm"], w @ W)
    close(out["mm"], X @ W)
    close(out["vv"], w @ w)
    close(out["rows"], X @ w)


def test_cholesky_tri_solve_logdet_diag_eye_transpose_match_numpy():
    A = G.normal(size=(3, 3))
    S = A @ A.T + 3 * np.eye(3)
    v, V = G.normal(size=3), G.normal(size=(3, 4))
    out = run("""
data S : Coef * Coef
data v : Coef
data V : Coef * Other
let L = cholesky(S)
let x = tri_solve(L, v)
let Y = tri_solve(L, V)
let ld = logdet(S)
let D = diag(v)
let I = eye(Coef)
let T = transpose(V)
let bad = cholesky(S - 10.0 * eye(Coef))
sample b <- Normal(0.0, 1.0)
return b
""", {"S": torch.tensor(S), "v": torch.tensor(v), "V": torch.tensor(V), "b": torch.tensor(0.0)})
    L = np.linalg.cholesky(S)
    close(out["L"], L)
    close(out["x"], np.linalg.solve(L, v))
    close(out["Y"], np.linalg.solve(L, V))
    close(out["ld"], np.linalg.slogdet(S)[1])
    close(out["D"], np.diag(v))
    close(out["I"], np.eye(3))
    close(out["T"], V.T)
    assert bool(torch.isnan(out["bad"]).all())  # not positive definite: NaN, no exception


def test_list_literals_stack_along_a_new_leading_axis():
    a, w = G.normal(size=3), G.normal(size=3)
    out = run("""
data a : Coef
data w : Coef
sample s <- Normal(0.0, 1.0)
let l = [a, w, a * w]
let n = [[1.0, 2.0], [3.0, s]]
let scalars = [s, 2.0, s * 3.0]
let per_row = factor r : Row in [s, 1.0 * r]
return s
""", {"a": torch.tensor(a), "w": torch.tensor(w), "s": torch.tensor(0.5)})
    close(out["l"], np.array([a, w, a * w]))
    close(out["n"], [[1.0, 2.0], [3.0, 0.5]])
    close(out["scalars"], [0.5, 2.0, 1.5])
    close(out["per_row"], [[0.5, float(r)] for r in range(6)])


def test_slice_follows_python_semantics_along_the_first_typed_axis():
    X = G.normal(size=(6, 3))
    out = run("""
data X : Row * Coef
data k : Coef
let a = slice(X, 1)
let b = slice(X, 1, -2)
let c = slice(X, -2)
let d = slice(X, 2, 100)
let e = slice(X, 4, 1)
sample s <- Normal(0.0, 1.0)
return s
""", {"X": torch.tensor(X), "k": torch.tensor([0.0, 1.0, 2.0]), "s": torch.tensor(0.0)})
    close(out["a"], X[1:])
    close(out["b"], X[1:-2])
    close(out["c"], X[-2:])
    close(out["d"], X[2:100])
    assert tuple(out["e"].shape) == (0, 3)


def test_slice_bounds_read_from_data():
    X = G.normal(size=(6, 3))
    out = run("""
data X : Row * Coef
let a = slice(X, start, stop)
sample s <- Normal(0.0, 1.0)
return s
""", {"X": torch.tensor(X), "start": torch.tensor(2), "stop": torch.tensor(5.0),
      "s": torch.tensor(0.0)})
    close(out["a"], X[2:5])


# ---------------------------------------------------------------- log_density

def test_log_density_matches_torch_distributions():
    y = G.normal(size=6)
    k = np.array([0, 3, 1, 2, 5, 1])
    flips = np.array([0, 1, 1, 0, 1, 0])
    out = run("""
data y : Row
data k : Row
data f : Row
sample mu <- Normal(0.0, 1.0)
let n = log_density(Normal(mu, 2.0), y)
let t = log_density(StudentT(3.0, mu, 0.5), y)
let g = log_density(Gamma(2.0, exp(mu)), exp(y))
let p = log_density(Poisson(exp(mu)), k)
let b = log_density(Bernoulli(sigmoid(mu)), f)
let c = log_density(Categorical([0.2, 0.3, 0.5]), 2.0)
return mu
""", {"y": torch.tensor(y), "k": torch.tensor(k), "f": torch.tensor(flips),
      "mu": torch.tensor(0.3, dtype=torch.float64)})
    D, mu = torch.distributions, torch.tensor(0.3, dtype=torch.float64)
    yt = torch.tensor(y)
    close(out["n"], D.Normal(mu, 2.0).log_prob(yt))
    close(out["t"], D.StudentT(3.0, mu, 0.5).log_prob(yt))
    close(out["g"], D.Gamma(2.0, mu.exp()).log_prob(yt.exp()))
    close(out["p"], D.Poisson(mu.exp()).log_prob(torch.tensor(k, dtype=torch.float64)))
    close(out["b"], D.Bernoulli(torch.sigmoid(mu)).log_prob(torch.tensor(flips, dtype=torch.float64)))
    close(out["c"], math.log(0.5))


def test_score_with_log_density_is_the_observe_density():
    y = G.normal(size=6)
    with_score = prog("""
sample mu <- Normal(0.0, 1.0)
data yy : Row
score lik = sum(log_density(Normal(mu, 0.7), yy))
return mu
""")
    with_observe = prog("""
sample mu <- Normal(0.0, 1.0)
observe yy : Row <- Normal(mu, 0.7)
return mu
""")
    vals = {"mu": torch.tensor(0.4), "yy": torch.tensor(y, dtype=torch.float32)}
    a = with_score.log_joint_total(torch.zeros(6, 1), vals)
    b = with_observe.log_joint_total(torch.zeros(6, 1), vals)
    assert torch.allclose(a, b, atol=1e-5)


# ---------------------------------------------------------------- `data` steps

def test_data_steps_are_host_data_the_program_reads():
    model = prog("""
data X : Row * Coef
data w : Other
sample b <- Normal(0.0, 1.0)
return b
""")
    assert model.host_names == {"X", "w"} and "X" not in model.bound_names
    from qvr.inference.data.fit_data import reads_host
    assert reads_host(model, "X") and reads_host(model, "w")


def test_data_step_shape_errors_name_the_key_and_both_shapes():
    body = """
data X : Row * Coef
data w : Other
sample b <- Normal(0.0, 1.0)
return b
"""
    ok = {"X": torch.zeros(6, 3), "w": torch.zeros(4), "b": torch.tensor(0.0)}
    prog(body).execute(torch.zeros(6, 1), ok)
    # the first object is the domain object: one row per input row is accepted too
    prog(body).execute(torch.zeros(9, 1), {**ok, "X": torch.zeros(9, 3)})
    with pytest.raises(InputShapeError) as e:
        prog(body).execute(torch.zeros(6, 1), {**ok, "X": torch.zeros(6, 4)})
    assert str(e.value) == ("program `p`, step `X`: host data `X` does not have the shape its "
                            "`data` step declares (expected shape (6, 3) (`Row * Coef`), got "
                            "shape (6, 4))")
    with pytest.raises(InputShapeError) as e:
        prog(body).execute(torch.zeros(9, 1), {**ok, "X": torch.zeros(7, 3)})
    assert str(e.value) == ("program `p`, step `X`: host data `X` does not have the shape its "
                            "`data` step declares (expected shape (6, 3) (`Row * Coef`) or (9, 3) "
                            "(one row per input row), got shape (7, 3))")
    with pytest.raises(InputShapeError) as e:  # not the domain object: no batch axis
        prog(body).execute(torch.zeros(6, 1), {**ok, "w": torch.zeros(6, 4)})
    assert str(e.value) == ("program `p`, step `w`: host data `w` does not have the shape its "
                            "`data` step declares (expected shape (4,) (`Other`), got shape (6, 4))")
    with pytest.raises(MissingValueError) as e:
        prog(body).execute(torch.zeros(6, 1), {"w": torch.zeros(4), "b": torch.tensor(0.0)})
    assert "host data `X` was not supplied" in str(e.value)


def test_synthetic_data_draws_data_steps_with_their_declared_shape():
    from qvr.inference.data.fit_data import synthesize
    model = prog("""
data X : Row * Coef
data w : Other
sample beta : Coef <- Normal(0.0, 1.0)
let mu = X @ beta + sum(w)
observe y : Row <- Normal(mu, 1.0)
return beta
""")
    torch.manual_seed(0)
    data, truth = synthesize(model, 10)
    assert tuple(data["X"].shape) == (10, 3) and tuple(data["w"].shape) == (4,)
    assert tuple(data["y"].shape) == (10,) and set(truth) == {"beta"}


# ---------------------------------------------------------------- observed before observe

AR = """object Time : FinSet 8

program ar1 : Time -> Time
    sample rho <- Normal(0.0, 1.0)
    let mu = rho * slice(y, 0, -1)
    score lik = sum(log_density(Normal(mu, 0.5), slice(y, 1)))
    observe y : Time <- Normal(0.0, 10.0)
    return rho

export ar1
"""


def test_an_observed_series_read_before_its_observe_is_the_observed_value():
    model = loads(AR).morphism
    y = torch.tensor(G.normal(size=8))
    rho = torch.tensor(0.6, dtype=torch.float64)
    got = model.log_joint_total(torch.zeros(8, 1), {"y": y, "rho": rho})
    D = torch.distributions
    want = (D.Normal(0.0, 1.0).log_prob(rho) + D.Normal(rho * y[:-1], 0.5).log_prob(y[1:]).sum()
            + D.Normal(0.0, 10.0).log_prob(y).sum())
    assert torch.allclose(got.double(), want, atol=1e-4)
    assert "y" not in model.host_names
    with pytest.raises(MissingValueError) as e:
        model.execute(torch.zeros(8, 1), {"rho": rho}, score=False)
    assert str(e.value) == ("program `ar1`, step `mu`: `y` is read before its `observe` step, so "
                            "its observed value must be supplied (expected a value for `y` in the "
                            "observations, got missing)")


# ---------------------------------------------------------------- vmap, make_fx, float64

REG = """object Row : FinSet 12
object Coef : FinSet 3

program reg : Row -> Row
    data X : Row * Coef
    sample beta : Coef <- Normal(0.0, 10.0)
    sample s <- HalfNormal(1.0)
    let mu = X @ beta
    let L = cholesky(transpose(X) @ X + eye(Coef))
    let pen = sum(square(tri_solve(L, beta))) + logdet(transpose(X) @ X + eye(Coef))
    let both = [beta, beta * 2.0]
    score extra = -0.01 * pen + 0.0 * sum(sum(both, Coef)) + max(softmax(beta))
    observe y : Row <- Normal(mu, s)
    return beta

export reg
"""


def _reg_values(dtype):
    g = torch.Generator().manual_seed(3)
    X = torch.randn(12, 3, generator=g, dtype=dtype)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=dtype) + 0.3 * torch.randn(12, generator=g, dtype=dtype)
    return {"X": X, "y": y}


def test_the_density_under_vmap_equals_the_loop_over_chains():
    from torch.func import grad, vmap
    model = loads(REG).morphism
    obs = _reg_values(torch.float32)
    betas = torch.randn(5, 3)
    ss = torch.rand(5) + 0.5

    def lp(beta, s):
        return model.log_joint_total(torch.zeros(12, 1), {**obs, "beta": beta, "s": s})

    batched = vmap(lp)(betas, ss)
    loop = torch.stack([lp(b, s) for b, s in zip(betas, ss)])
    assert torch.allclose(batched, loop, atol=1e-4)
    g_batched = vmap(grad(lp))(betas, ss)
    g_loop = torch.stack([grad(lp)(b, s) for b, s in zip(betas, ss)])
    assert torch.allclose(g_batched, g_loop, atol=1e-4)


def test_the_density_traces_with_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx
    model = loads(REG).morphism
    obs = _reg_values(torch.float32)

    def lp(beta, s):
        return model.log_joint_total(torch.zeros(12, 1), {**obs, "beta": beta, "s": s})

    beta, s = torch.tensor([0.5, 0.1, -0.3]), torch.tensor(0.8)
    traced = make_fx(lp)(beta, s)
    b2, s2 = torch.tensor([1.0, -2.0, 0.4]), torch.tensor(0.4)
    assert torch.allclose(traced(b2, s2), lp(b2, s2), atol=1e-4)


def test_builtins_keep_float64():
    model = loads(REG).morphism.double()
    obs = _reg_values(torch.float64)
    ex = model.execute(torch.zeros(12, 1), {**obs, "beta": torch.tensor([1.0, 2.0, 3.0],
                                                                        dtype=torch.float64),
                                           "s": torch.tensor(0.5, dtype=torch.float64)})
    assert {ex.sites[n].value.dtype for n in ("mu", "L", "pen", "both", "extra")} == {torch.float64}
