"""E9.9 multivariate families at run time: `MultivariateNormal`, `MultivariateNormalCov`,
`LowRankMVN` against scipy.stats.multivariate_normal; `LKJCholesky` over a `CorrCholesky K`
space against the closed-form LKJ-Cholesky density; the space's bijector against a numerical
Jacobian; forward draws' covariance within Monte Carlo error; a non-centred
correlated-effects program's density by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats
from torch.distributions import biject_to

import qvr

K = 3
MU = np.array([0.5, -1.0, 2.0])
LM = np.array([[1.2, 0.0, 0.0], [0.4, 0.8, 0.0], [-0.3, 0.5, 0.6]])
COV = LM @ LM.T
FAC = np.array([[1.0, 0.2], [-0.5, 0.7], [0.3, -0.4]])
DIAG = np.array([0.5, 0.8, 0.3])
Y = np.random.default_rng(11).normal(size=(4, K))
B = np.array([0.1, -0.7, 1.9])


def program(body: str, head: str = "") -> "qvr.runtime.monadic.MonadicProgram":
    src = ("object K : FinSet 3\nobject Row : FinSet 4\n" + head + "program p : Row -> Row\n"
           + "".join(f"    {line}\n" for line in body.strip().splitlines()) + "export p\n")
    return qvr.loads(src).morphism


def run(prog, values):
    values = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in values.items()}
    with torch.no_grad():
        return prog.execute(torch.zeros(4, 1, dtype=torch.float64), values).sites


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("family, args, cov", [
    ("MultivariateNormal", "mu, Lm", COV),
    ("MultivariateNormalCov", "mu, S", COV),
    ("LowRankMVN", "mu, F, d", FAC @ FAC.T + np.diag(DIAG)),
])
def test_multivariate_normal_densities_match_scipy(family, args, cov):
    prog = program(f"""
data mu : K
data Lm : K * K
data S : K * K
data F : K * FinSet 2
data d : K
sample b <- {family}({args}) [over=K]
observe y : Row <- {family}({args})
return b""")
    rec = run(prog, {"mu": MU, "Lm": LM, "S": COV, "F": FAC, "d": DIAG, "b": B, "y": Y})
    ref = stats.multivariate_normal(MU, cov)
    assert float(rec["b"].contribution) == pytest.approx(ref.logpdf(B), rel=1e-10)
    assert float(rec["y"].contribution.sum()) == pytest.approx(ref.logpdf(Y).sum(), rel=1e-10)


def test_scalar_loc_is_broadcast_and_the_upper_triangle_ignored():
    prog = program("""
data Lm : K * K
sample b <- MultivariateNormal(1.5, Lm) [over=K]
return b""")
    full = LM + np.triu(np.ones((K, K)), 1) * 9.0  # entries above the diagonal: not the factor
    rec = run(prog, {"Lm": full, "b": B})
    ref = stats.multivariate_normal(np.full(K, 1.5), COV).logpdf(B)
    assert float(rec["b"].contribution) == pytest.approx(ref, rel=1e-10)


def test_a_covariance_that_is_not_positive_definite_gives_nan_not_an_exception():
    prog = program("data S : K * K\nsample b <- MultivariateNormalCov(0.0, S) [over=K]\nreturn b")
    rec = run(prog, {"S": -np.eye(K), "b": B})
    assert math.isnan(float(rec["b"].contribution))


def test_draws_have_the_covariance_of_the_factor():
    """10000 plate draws: each sample covariance entry within 5 Monte Carlo standard
    errors (sqrt((s_ii s_jj + s_ij^2) / n)) of L Lᵀ, each mean within 5 s.e."""
    src = ("object K : FinSet 3\nobject Draw : FinSet 10000\nprogram p : Draw -> Draw\n"
           "    data mu : K\n    data Lm : K * K\n"
           "    sample b : Draw <- MultivariateNormal(mu, Lm) [over=K]\n    return b\nexport p\n")
    prog = qvr.loads(src).morphism
    torch.manual_seed(3)
    with torch.no_grad():
        rec = prog.execute(torch.zeros(1, 1), {"mu": torch.tensor(MU), "Lm": torch.tensor(LM)}
                           ).sites
    x = rec["b"].value.reshape(-1, K).numpy()
    n = x.shape[0]
    assert n == 10000
    se_mean = np.sqrt(np.diag(COV) / n)
    assert np.all(np.abs(x.mean(0) - MU) < 5 * se_mean)
    se_cov = np.sqrt((np.outer(np.diag(COV), np.diag(COV)) + COV ** 2) / n)
    assert np.all(np.abs(np.cov(x.T) - COV) < 5 * se_cov)


# ---------------------------------------------------------------- LKJCholesky

def lkj_cholesky_log_density(L: np.ndarray, eta: float) -> float:
    """Closed form: log c_K(eta)^-1 + sum_{i=2}^K (K - i + 2 eta - 2) log L_ii, with the
    normalising constant of Lewandowski, Kurowicka and Joe (2009, eq. 16):
    c_K = 2^{sum_k (2 eta - 2 + K - k)(K - k)} prod_k B(eta + (K-k-1)/2, eta + (K-k-1)/2)^{K-k}
    (k = 1 … K-1), and the Jacobian prod_i L_ii^{K-i} of L -> L Lᵀ."""
    k = L.shape[0]
    log_c = 0.0
    for j in range(1, k):
        b = eta + (k - j - 1) / 2
        log_c += (2 * eta - 2 + k - j) * (k - j) * math.log(2) \
            + (k - j) * special.betaln(b, b)
    i = np.arange(2, k + 1)
    return float(np.sum((k - i + 2 * eta - 2) * np.log(np.diag(L)[1:])) - log_c)


def test_the_closed_form_integrates_to_one_for_k_2():
    """K = 2: L = [[1, 0], [r, sqrt(1 - r²)]] with r in (-1, 1) the free coordinate."""
    for eta in (0.7, 1.0, 3.0):
        f = lambda r: math.exp(lkj_cholesky_log_density(  # noqa: E731
            np.array([[1.0, 0.0], [r, math.sqrt(1 - r * r)]]), eta))
        assert integrate.quad(f, -1, 1)[0] == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("space", ["CorrCholesky", "CholeskyFactor"])
@pytest.mark.parametrize("k, eta", [(2, 0.7), (3, 2.0), (4, 1.0), (4, 3.5)])
def test_lkj_cholesky_density_matches_the_closed_form(space, k, eta):
    prog = program(f"sample l <- LKJCholesky({eta}) [over=C]\nreturn l",
                   head=f"object C : {space} {k}\n")
    torch.manual_seed(k)
    L = torch.distributions.LKJCholesky(k, 1.0).sample()
    rec = run(prog, {"l": L})
    assert rec["l"].value.shape == (k, k)
    assert float(rec["l"].contribution) == pytest.approx(
        lkj_cholesky_log_density(L.numpy(), eta), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_corr_cholesky_bijector_log_jacobian_and_round_trip(k):
    """The bijector of the site's support (what the registry uses): K(K-1)/2 reals to the
    strictly lower entries of L; its log|det J| against torch.autograd's Jacobian."""
    prog = program("sample l <- LKJCholesky(2.0) [over=C]\nreturn l",
                   head=f"object C : CorrCholesky {k}\n")
    torch.manual_seed(0)
    with torch.no_grad():
        rec = prog.execute(torch.zeros(1, 1)).sites["l"]
    t = biject_to(rec.support)
    d = k * (k - 1) // 2
    assert t.inverse_shape(torch.Size([k, k])) == (d,)
    rows, cols = torch.tril_indices(k, k, -1)
    for seed in range(3):
        x = torch.randn(d, generator=torch.Generator().manual_seed(seed)) * 1.5
        L = t(x)
        assert torch.allclose(torch.diagonal(L @ L.T), torch.ones(k), atol=1e-12)
        assert torch.allclose(L, torch.tril(L)) and bool((torch.diagonal(L) > 0).all())
        assert torch.allclose(t.inv(L), x, atol=1e-10)
        jac = torch.autograd.functional.jacobian(lambda z: t(z)[rows, cols], x)
        assert float(t.log_abs_det_jacobian(x, L)) == pytest.approx(
            float(torch.linalg.slogdet(jac)[1]), abs=1e-10)


def test_a_non_centred_correlated_effects_program_density_by_hand():
    """effects = z @ transpose(diag(tau) @ L) (rows z_g ~ N(0, I)): the log joint is the
    sum of the LKJ, half-normal, standard normal and observation terms."""
    prog = program("""
sample l <- LKJCholesky(2.0) [over=C]
sample tau : K <- HalfNormal(1.0)
sample z : Row * K <- Normal(0.0, 1.0)
let effects = z @ transpose(diag(tau) @ l)
observe y : Row * K <- Normal(effects, 0.5)
return l""", head="object C : CorrCholesky 3\n")
    g = torch.Generator().manual_seed(5)
    L = torch.distributions.LKJCholesky(3, 1.0).sample()
    tau = torch.rand(3, generator=g) + 0.5
    z = torch.randn(4, 3, generator=g)
    rec = run(prog, {"l": L, "tau": tau, "z": z, "y": Y})
    eff = z.numpy() @ (np.diag(tau.numpy()) @ L.numpy()).T
    want = (lkj_cholesky_log_density(L.numpy(), 2.0)
            + stats.halfnorm(scale=1.0).logpdf(tau.numpy()).sum()
            + stats.norm().logpdf(z.numpy()).sum()
            + stats.norm(eff, 0.5).logpdf(Y).sum())
    got = sum(float(r.contribution.sum()) for r in rec.values() if r.contribution is not None)
    assert got == pytest.approx(want, rel=1e-10)


def test_a_centred_gaussian_process_draw_matches_scipy():
    """gp_pois_regr's latent function written centred: f ~ MVN(0, K(x)) by its factor."""
    src = ("object Point : FinSet 5\nprogram gp : Point -> Point\n    data x : Point\n"
           "    let cov = factor i : Point, j : Point in square(1.3) * exp(-0.5 * square(x[i] - x[j]) / square(0.8))\n"
           "    let chol = cholesky(cov + 1e-6 * eye(Point))\n"
           "    sample f <- MultivariateNormal(0.0, chol) [over=Point]\n"
           "    observe k : Point <- Poisson(exp(f))\n    return f\nexport gp\n")
    prog = qvr.loads(src).morphism
    x = np.array([-1.0, -0.3, 0.2, 0.9, 1.7])
    f = np.array([0.3, -0.2, 0.1, 0.5, -0.4])
    k = np.array([1.0, 0.0, 2.0, 1.0, 0.0])
    rec = run(prog, {"x": x, "f": f, "k": k})
    cov = 1.3 ** 2 * np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.8 ** 2) + 1e-6 * np.eye(5)
    assert float(rec["f"].contribution) == pytest.approx(
        stats.multivariate_normal(np.zeros(5), cov).logpdf(f), rel=1e-9)
    assert float(rec["k"].contribution.sum()) == pytest.approx(
        stats.poisson(np.exp(f)).logpmf(k).sum(), rel=1e-10)


def test_an_observed_vector_is_drawn_once_per_row_when_its_factor_is_not_global():
    """Replicates (predictive checks) run the program forward: `diag(tau) @ l` reads the
    plate `tau : Coef`, so the site's arguments are not all global, yet they have no row
    axis: the draw is one K-vector per row (it was a single vector)."""
    prog = program("""
sample l <- LKJCholesky(2.0) [over=C]
sample tau : K <- HalfNormal(1.0)
observe y : Row <- MultivariateNormal(0.0, diag(tau) @ l)
return l""", head="object C : CorrCholesky 3\n")
    torch.manual_seed(0)
    with torch.no_grad():
        ex = prog.execute(torch.zeros(4, 1), score=False)
    assert ex.sites["y"].value.shape == (4, 3)


def test_per_row_means_from_a_design_matrix():
    """observe y : Obs <- MultivariateNormal(X @ B, L): one mean vector per row."""
    src = ("object Obs : FinSet 6\nobject Coef : FinSet 2\nobject P : FinSet 3\n"
           "program p : Obs -> Obs\n    data X : Obs * P\n    data Lm : Coef * Coef\n"
           "    sample B : P * Coef <- Normal(0.0, 1.0)\n    let mu = X @ B\n"
           "    observe y : Obs <- MultivariateNormal(mu, Lm)\n"
           "    sample b : Obs <- MultivariateNormal(mu, Lm) [over=Coef]\n    return B\nexport p\n")
    prog = qvr.loads(src).morphism
    rng = np.random.default_rng(0)
    X, Bv, y = rng.normal(size=(6, 3)), rng.normal(size=(3, 2)), rng.normal(size=(6, 2))
    Lm = np.array([[1.0, 0.0], [0.5, 0.8]])
    rec = run(prog, {"X": X, "Lm": Lm, "B": Bv, "y": y})
    mu = X @ Bv
    want = sum(stats.multivariate_normal(mu[i], Lm @ Lm.T).logpdf(y[i]) for i in range(6))
    assert float(rec["y"].contribution.sum()) == pytest.approx(want, rel=1e-10)
    assert rec["b"].value.shape == (6, 2) and rec["B"].value.shape == (3, 2)


def test_diag_pre_multiply_is_diag_at():
    prog = program("""
data tau : K
data Lm : K * K
let a = diag_pre_multiply(tau, Lm)
let b = diag(tau) @ Lm
score s = log_density(Normal(0.0, 1.0), a)
score t = log_density(Normal(0.0, 1.0), b)
sample u <- Normal(0.0, 1.0)
return u""")
    tau = np.array([0.5, 2.0, 1.5])
    rec = run(prog, {"tau": tau, "Lm": LM, "u": 0.0})
    assert torch.allclose(rec["a"].value, torch.tensor(np.diag(tau) @ LM))
    assert torch.equal(rec["a"].value, rec["b"].value)
