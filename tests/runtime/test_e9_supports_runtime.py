"""E9.2 supports at run time (qvr.runtime.constraints, compile_program, inference.sites):
bijector log-Jacobians against autograd Jacobians, truncated densities against numerical
integration, the sorted-iid density K! prod p, improper priors, and host data as family
arguments.  All comparisons are with another computation in this process."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributions as D
from torch.autograd.functional import jacobian

import qvr
from qvr.inference.mcmc.potential import make_target
from qvr.runtime.constraints import (OrderedTransform, PositiveOrderedTransform,
                                     constant_log_normaliser, ordered_vector,
                                     positive_ordered_vector)
from qvr.runtime.improper import ImproperPriorError, improper_init
from qvr.runtime.errors import CompileError


def program(body: str, head: str = "", rows: int = 5):
    src = (f"object Row : FinSet {rows}\n{head}program p : Row -> Row\n"
           + "".join(f"    {line}\n" for line in body.strip().splitlines()) + "export p\n")
    return qvr.loads(src).morphism


@pytest.fixture(autouse=True)
def _double():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(old)


# ------------------------------------------------------------------ bijectors

@pytest.mark.parametrize("cls, constraint", [(OrderedTransform, ordered_vector),
                                             (PositiveOrderedTransform, positive_ordered_vector)])
def test_ordered_bijectors_log_jacobian_is_the_autograd_one(cls, constraint):
    t = cls()
    assert type(torch.distributions.biject_to(constraint)) is cls
    for _ in range(5):
        x = torch.randn(4)
        y = t(x)
        assert bool(constraint.check(y))
        J = jacobian(t, x)
        assert float(t.log_abs_det_jacobian(x, y)) == pytest.approx(
            float(torch.linalg.slogdet(J).logabsdet), abs=1e-10)
        assert torch.allclose(t.inv(y), x, atol=1e-10)


def _coords(values: dict, layout) -> torch.Tensor:
    """The free coordinates of every site (a simplex without its last entry, a Cholesky
    factor of a correlation matrix by its strictly lower entries)."""
    out = []
    for name, kind in layout:
        v = values[name]
        if kind == "simplex":
            out.append(v[..., :-1].reshape(-1))
        elif kind == "corr":
            i, j = torch.tril_indices(v.shape[-1], v.shape[-1], -1)
            out.append(v[..., i, j].reshape(-1))
        else:
            out.append(v.reshape(-1))
    return torch.cat(out)


def test_log_density_of_the_unconstrained_point_is_the_change_of_variables():
    """log p~(z) = log p(T(z)) + log|det J_T(z)|, J by autograd over the whole map, with a
    dependent bound (`Uniform(0.0, ub)`, `Flat [lower=0.0, upper=ub]`: T uses the bound of
    the current evaluation), an ordered vector, a simplex, a Cholesky factor, HalfFlat."""
    m = program("""
sample a <- Normal(0.0, 1.0)
let ub = 1.0 - sigmoid(a)
sample t3 <- Uniform(0.0, ub)
sample t4 <- Flat [lower=0.0, upper=ub]
sample t5 <- Normal(a, 1.0) [lower=a, upper=t4]
sample m1 <- Normal(0.0, 5.0) [over=Mu]
sample s1 <- Flat [over=S]
sample l1 <- LKJCholesky(2.0) [over=L]
sample h <- HalfFlat
observe y : Row <- Normal(a, h)
return a""", head="object Mu : Ordered 3\nobject S : Simplex 3\nobject L : CholeskyFactor 3\n")
    x = torch.zeros(5, 1)
    obs = {"y": torch.randn(5)}
    target = make_target(m, x, obs)
    reg = target.registry
    assert [s.name for s in reg.sites if s.dependent] == ["t3", "t4", "t5"]
    layout = [(s.name, {"s1": "simplex", "l1": "corr"}.get(s.name, "plain")) for s in reg.sites]
    for _ in range(3):
        z = torch.randn(reg.dim)
        values, _ = reg.unpack(z)
        J = jacobian(lambda zz: _coords(reg.unpack(zz)[0], layout), z)
        assert J.shape == (reg.dim, reg.dim)
        direct = m.log_joint_total(x, {**values, **obs}) + torch.linalg.slogdet(J).logabsdet
        assert float(target.single(z)) == pytest.approx(float(direct), abs=1e-8)
        assert 0 < float(values["t3"]) < 1 - float(torch.sigmoid(values["a"]))
        assert float(values["a"]) < float(values["t5"]) < float(values["t4"])
        assert torch.allclose(reg.unconstrain(values), z, atol=1e-8)


def test_constrain_maps_many_points_through_their_own_bounds():
    m = program("""
sample a <- Uniform(0.0, 1.0)
let room = 1.0 - a
sample b <- Flat [lower=0.0, upper=room]
observe y : Row <- Normal(0.0, 1.0)
return a""")
    target = make_target(m, torch.zeros(5, 1), {"y": torch.randn(5)})
    z = torch.randn(3, 7, target.dim) * 3
    out = target.constrain(z)
    assert out["b"].shape == (3, 7)
    assert bool(((out["b"] > 0) & (out["a"] + out["b"] < 1)).all())
    one = target.registry.unpack(z[1, 2])[0]
    assert float(out["b"][1, 2]) == pytest.approx(float(one["b"]), abs=1e-12)


# ------------------------------------------------------------------ truncation

def _integral(f, a: float, b: float, n: int = 400_001) -> float:
    """∫_a^b f by the trapezoid rule on a fine grid (numpy)."""
    x = np.linspace(a, b, n)
    return float(np.trapezoid(f(x), x))


def _dist(m, name):
    """The distribution a step builds (the program run once forward)."""
    return m.execute(torch.zeros(1, 1), {}, score=False).sites[name].distribution


def _density(m, name, x, obs=None):
    dist = _dist(m, name)

    def f(grid):
        with torch.no_grad():
            return torch.exp(dist.log_prob(torch.as_tensor(grid))).numpy()
    return f


@pytest.mark.parametrize("family, args, loc", [("Cauchy", "0.0, 2.5", 0.0),
                                               ("StudentT", "3.0, 0.0, 2.5", 0.0),
                                               ("Normal", "0.0, 2.0", 0.0)])
def test_half_families_by_truncation_are_twice_the_density(family, args, loc):
    m = program(f"sample s <- {family}({args}) [lower={loc}]\nreturn s")
    base = {"Cauchy": D.Cauchy(0.0, 2.5), "StudentT": D.StudentT(3.0, 0.0, 2.5),
            "Normal": D.Normal(0.0, 2.0)}[family]
    x = torch.tensor([0.1, 1.0, 7.5, 40.0])
    dist = _dist(m, "s")
    assert torch.allclose(dist.log_prob(x), base.log_prob(x) + math.log(2), atol=1e-12)
    assert float(dist.log_prob(torch.tensor(-0.5))) == -math.inf
    rec = m.execute(torch.zeros(1, 1), {"s": torch.tensor(1.0)}, score=True).sites["s"]
    assert float(rec.contribution) == pytest.approx(float(base.log_prob(torch.tensor(1.0))) + math.log(2))


@pytest.mark.parametrize("spec, lo, hi", [
    ("StudentT(3.0, 1.0, 2.5) [lower=0.0]", 0.0, None),   # no cdf: quadrature
    ("StudentT(4.0, 0.0, 1.0) [lower=-1.0, upper=2.0]", -1.0, 2.0),
    ("Gamma(2.0, 1.0) [upper=3.0]", 0.0, 3.0),            # cdf
    ("Beta(2.0, 3.0) [lower=0.2, upper=0.7]", 0.2, 0.7),  # no cdf
    ("LogNormal(0.0, 1.0) [lower=0.5, upper=4.0]", 0.5, 4.0),
])
def test_truncated_densities_integrate_to_one(spec, lo, hi):
    m = program(f"sample s <- {spec}\nreturn s")
    f = _density(m, "s", None)
    if hi is None:  # [lo, inf): x = lo + t / (1 - t)
        mass = _integral(lambda t: f(lo + t / (1 - t)) / (1 - t) ** 2, 0.0, 1.0 - 1e-9)
    else:
        mass = _integral(f, lo + 1e-12, hi - 1e-12)
    assert mass == pytest.approx(1.0, abs=2e-4)


def test_constant_normaliser_matches_the_cdf_where_there_is_one():
    n = D.Normal(0.3, 1.7)
    want = math.log(float(n.cdf(torch.tensor(2.0)) - n.cdf(torch.tensor(-1.0))))
    assert constant_log_normaliser("Normal", [0.3, 1.7], -1.0, 2.0) == pytest.approx(want, abs=1e-12)
    # the quadrature path (StudentT has no cdf in torch) against a StudentT(1) = Cauchy
    c = D.Cauchy(0.5, 2.0)
    want = math.log(float(1 - c.cdf(torch.tensor(-1.0))))
    assert constant_log_normaliser("StudentT", [1.0, 0.5, 2.0], -1.0, None) == pytest.approx(want, abs=1e-7)


def test_truncation_with_variable_arguments_uses_the_cdf():
    m = program("""
sample mu <- Normal(0.0, 1.0)
sample lo <- Normal(0.0, 1.0)
observe y : Row <- Normal(mu, 2.0) [lower=lo]
return mu""")
    y = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.1])
    vals = {"mu": torch.tensor(0.2), "lo": torch.tensor(-0.3), "y": y}
    rec = m.execute(torch.zeros(5, 1), vals, score=True).sites["y"]
    n = D.Normal(0.2, 2.0)
    want = n.log_prob(y) - torch.log(1 - n.cdf(torch.tensor(-0.3)))
    assert torch.allclose(rec.contribution, want)


def test_truncation_of_studentt_with_variable_arguments_is_a_compile_error():
    with pytest.raises(CompileError) as exc:
        program("sample nu <- Gamma(2.0, 0.1)\nsample s <- StudentT(nu, 0.0, 1.0) [lower=0.0]\nreturn s")
    assert exc.value.codes == ["QVR950"]
    assert "truncation of `StudentT` with variable arguments is not supported by this runtime" \
        in str(exc.value)


def test_truncated_forward_draws_stay_inside():
    m = program("""
sample a <- Normal(0.0, 1.0) [lower=1.0, upper=1.5]
sample b <- StudentT(3.0, 0.0, 1.0) [lower=2.0]
return a""")
    for _ in range(20):
        rec = m.execute(torch.zeros(1, 1), {}, score=False).sites
        assert 1.0 <= float(rec["a"].value) <= 1.5 and float(rec["b"].value) >= 2.0


# ------------------------------------------------------------------ spaces

def test_ordered_density_is_k_factorial_times_the_iid_density():
    m = program("sample mu <- Normal(1.0, 5.0) [over=Mu]\nreturn mu", head="object Mu : Ordered 3\n")
    v = torch.tensor([-2.0, 0.5, 4.0])
    lp = m.execute(torch.zeros(1, 1), {"mu": v}, score=True).sites["mu"].contribution
    assert float(lp) == pytest.approx(math.log(6) + float(D.Normal(1.0, 5.0).log_prob(v).sum()),
                                      abs=1e-12)
    draws = torch.stack([m.execute(torch.zeros(1, 1), {}, score=False).sites["mu"].value
                         for _ in range(50)])
    assert draws.shape == (50, 3) and bool((draws[:, 1:] > draws[:, :-1]).all())


def test_flat_on_a_simplex_is_the_uniform_dirichlet_and_lkj_is_torchs():
    m = program("sample w <- Flat [over=S]\nsample l <- LKJCholesky(2.0) [over=L]\nreturn w",
                head="object S : Simplex 4\nobject L : CholeskyFactor 3\n")
    w = torch.tensor([0.1, 0.2, 0.3, 0.4])
    L = D.LKJCholesky(3, 2.0).sample()
    rec = m.execute(torch.zeros(1, 1), {"w": w, "l": L}, score=True).sites
    assert float(rec["w"].contribution) == pytest.approx(math.log(6), abs=1e-12)  # 1 / Γ(4)⁻¹
    assert float(rec["l"].contribution) == pytest.approx(float(D.LKJCholesky(3, 2.0).log_prob(L)))


# ------------------------------------------------------------------ improper priors

def test_improper_priors_have_density_zero_and_no_forward_draws():
    m = program("sample b : Row <- Flat\nsample s <- HalfFlat\nreturn b")
    rec = m.execute(torch.zeros(1, 1), {"b": torch.randn(5), "s": torch.tensor(2.0)}, score=True)
    assert float(rec.log_joint.sum()) == 0.0
    with pytest.raises(ImproperPriorError) as exc:
        m.rsample(torch.zeros(1, 1))
    assert str(exc.value) == ("program `p`: `b` has an improper flat prior and cannot be drawn "
                              "from the prior (give it a proper family, e.g. `Uniform(a, b)`, "
                              "to draw prior predictive or synthetic data)")
    assert isinstance(exc.value, ValueError)
    with improper_init():  # a fit's initial values: uniform(-2, 2) unconstrained
        for _ in range(20):
            sites = m.execute(torch.zeros(1, 1), {}, score=False).sites
            assert bool((sites["b"].value.abs() <= 2).all())
            assert math.exp(-2) <= float(sites["s"].value) <= math.exp(2)


def test_synthetic_data_of_a_flat_prior_names_the_site():
    from qvr.inference.data.fit_data import synthesize
    m = program("sample mu <- Flat\nobserve y : Row <- Normal(mu, 1.0)\nreturn mu")
    with pytest.raises(Exception) as exc:
        synthesize(m, 5)
    assert "`mu` has an improper flat prior and cannot be drawn from the prior" in str(exc.value)


def test_halfflat_latent_gets_the_log_jacobian_of_the_positive_bijector():
    m = program("sample s <- HalfFlat\nobserve y : Row <- Normal(0.0, s)\nreturn s")
    y = torch.randn(5)
    target = make_target(m, torch.zeros(5, 1), {"y": y})
    z = torch.tensor([0.3])
    want = D.Normal(0.0, math.exp(0.3)).log_prob(y).sum() + 0.3
    assert float(target.single(z)) == pytest.approx(float(want), abs=1e-10)


# ------------------------------------------------------------------ host data

def test_host_data_family_arguments_and_bounds():
    m = program("""
sample beta <- Normal(0.0, prior_scale)
sample theta : Row <- Normal(centre, 1.0) [lower=floor]
return beta""")
    assert {"prior_scale", "centre", "floor"} <= set(m.host_names)
    from qvr.inference.data.fit_data import reads_host
    assert reads_host(m, "prior_scale")
    centre = torch.arange(5.0)
    theta = centre + 0.5
    vals = {"beta": torch.tensor(0.7), "theta": theta, "prior_scale": 3.0, "centre": centre,
            "floor": torch.tensor(0.0)}
    lj = m.execute(torch.zeros(1, 1), vals, score=True).log_joint.sum()
    n = D.Normal(centre, 1.0)
    want = D.Normal(0.0, 3.0).log_prob(torch.tensor(0.7)) + \
        (n.log_prob(theta) - torch.log(1 - n.cdf(torch.tensor(0.0)))).sum()
    assert float(lj) == pytest.approx(float(want), abs=1e-10)
