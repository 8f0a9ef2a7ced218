"""``--guide map`` and ``--guide laplace`` (`qvr.inference.vi.laplace`,
`qvr.inference.methods.laplace`): Laplace exact on a Gaussian posterior (mode, covariance,
density, k-hat), MAP against the closed-form mode without the Jacobian on a Gamma-Poisson
model and the Laplace centre moved by the Jacobian, the failures (a ridge, a density with
no mode, too many coordinates, a cancelled search), the guide rebuilt from a run's saved
parameters (at the fit's rows and at new rows), and ``qvr run`` on eight schools
(prediction from a Laplace run: test_laplace_predict.py)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

import qvr
from qvr.inference import fit


ROOT = Path(__file__).resolve().parents[2]


def load(body: str, rows: int):
    return qvr.loads(f"object Row : FinSet {rows}\nprogram p : Row -> Row\n"
                     + "".join(f"    {line}\n" for line in body.strip().splitlines())
                     + "export p\n")


def run_fit(prog, data, guide, **config):
    return fit(prog, data=data, config={"method": "svi", "guide": guide, "seed": 1,
                                        "dtype": "float64", **config})


# ---------------------------------------------------------------- a Gaussian posterior

GAUSS_Y = np.random.default_rng(0).normal(2.0, 1.5, 10)
GAUSS = "sample a <- Normal(0.5, 2.0)\nsample b <- Normal(a, 1.0)\n" \
        "observe y : Row <- Normal(b, 1.5)\nreturn a"


def gauss_posterior():
    """(a, b) ~ N((0.5, 0.5), [[4, 4], [4, 5]]), y_i ~ N(b, 1.5^2): the exact posterior."""
    p0 = np.linalg.inv(np.array([[4.0, 4.0], [4.0, 5.0]]))
    prec = p0 + np.diag([0.0, len(GAUSS_Y) / 2.25])
    cov = np.linalg.inv(prec)
    return cov @ (p0 @ np.array([0.5, 0.5]) + np.array([0.0, GAUSS_Y.sum() / 2.25])), cov


@pytest.fixture(scope="module")
def gauss_fit():
    r = run_fit(load(GAUSS, 10), {"y": GAUSS_Y}, "laplace")
    assert r.status == "finished", r.message
    return r


def test_laplace_is_exact_on_a_gaussian_posterior(gauss_fit):
    g = gauss_fit.guide
    mean, cov = gauss_posterior()
    np.testing.assert_allclose(g.flat_mode().numpy(), mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(g.covariance().detach().numpy(), cov, rtol=0, atol=1e-9)
    assert gauss_fit.method == "svi" and gauss_fit.stats["converged"] is True
    # log p - log q is constant (the log evidence): no heavy tail at all
    assert gauss_fit.stats["khat"] < 0.5 and gauss_fit.stats["khat_draws"] == 1000
    assert set(gauss_fit.params) == {"mode_a", "mode_b", "scale_tril", "loc_a", "loc_b",
                                     "log_scale_a", "log_scale_b"}
    # the per-site marginals (the dashboard's table, --from): the mode and sqrt diag cov
    for i, name in enumerate("ab"):
        assert gauss_fit.params[f"loc_{name}"].item() == pytest.approx(mean[i], abs=1e-9)
        assert np.exp(gauss_fit.params[f"log_scale_{name}"]).item() == \
            pytest.approx(math.sqrt(cov[i, i]), rel=1e-6)


def test_laplace_density_is_the_normal_density(gauss_fit):
    g = gauss_fit.guide
    mean, cov = gauss_posterior()
    torch.manual_seed(3)
    draws = g.rsample(torch.zeros(10, 1, dtype=torch.float64), {"y": torch.tensor(GAUSS_Y)},
                      sample_shape=(5,))
    assert draws["a"].shape == (5,) and draws["b"].shape == (5,)
    lq = g.log_prob(None, draws, batch_ndims=1).numpy()
    ab = np.stack([draws["a"].numpy(), draws["b"].numpy()], -1)
    np.testing.assert_allclose(lq, stats.multivariate_normal(mean, cov).logpdf(ab),
                               rtol=1e-10)
    # the summary is made of 1,000 draws: its means within 4 standard errors
    rows = gauss_fit.summary.rows
    for i, name in enumerate("ab"):
        assert abs(rows[name]["mean"] - mean[i]) < 4 * math.sqrt(cov[i, i] / 1000)


# ---------------------------------------------------------------- a positive latent

POIS_Y = np.array([3, 1, 4, 1, 5, 9, 2, 6])
POIS = "sample lam <- Gamma(2.0, 0.5)\nobserve y : Row <- Poisson(lam)\nreturn lam"


def test_map_leaves_the_jacobian_out_and_laplace_puts_it_in():
    """lam | y ~ Gamma(a, b), a = 2 + sum y, b = 0.5 + n: MAP is the mode of that density,
    (a - 1) / b; Laplace works on u = log lam, whose density ∝ lam^a e^(-b lam) has its
    mode at a / b and curvature -a there."""
    a, b = 2.0 + POIS_Y.sum(), 0.5 + len(POIS_Y)
    prog = load(POIS, 8)
    m = run_fit(prog, {"y": POIS_Y}, "map")
    lap = run_fit(prog, {"y": POIS_Y}, "laplace")
    assert m.status == lap.status == "finished"
    assert float(m.guide.median()["lam"]) == pytest.approx((a - 1) / b, rel=1e-10)
    assert float(lap.guide.median()["lam"]) == pytest.approx(a / b, rel=1e-10)
    # the Jacobian moves the centre by the factor a / (a - 1)
    assert float(lap.guide.median()["lam"] / m.guide.median()["lam"]) == \
        pytest.approx(a / (a - 1), rel=1e-10)
    assert float(lap.guide.scale_tril[0, 0]) == pytest.approx(1 / math.sqrt(a), rel=1e-8)
    assert m.stats["mode_log_density"] == pytest.approx(
        stats.gamma(2.0, scale=2.0).logpdf((a - 1) / b)
        + stats.poisson((a - 1) / b).logpmf(POIS_Y).sum(), rel=1e-10)
    # the Laplace density of lam: a log-normal
    lam = torch.tensor([2.5, 4.0, 6.0], dtype=torch.float64)
    lq = lap.guide.log_prob(None, {"lam": lam}, batch_ndims=1).numpy()
    want = stats.lognorm(s=1 / math.sqrt(a), scale=a / b).logpdf(lam.numpy())
    np.testing.assert_allclose(lq, want, rtol=1e-10)


def test_map_is_a_point_with_no_density_and_no_khat():
    r = run_fit(load(POIS, 8), {"y": POIS_Y}, "map")
    a, b = 2.0 + POIS_Y.sum(), 0.5 + len(POIS_Y)
    row = r.summary.rows["lam"]
    assert row["mean"] == pytest.approx((a - 1) / b, rel=1e-10) and math.isnan(row["sd"])
    assert r.summary.columns == ("mean", "sd")
    assert "khat" not in r.stats and r.guide.point_estimate
    assert set(r.params) == {"mode_lam", "loc_lam"}  # no scale: a point
    with pytest.raises(ValueError, match="a MAP fit is a point estimate: it has no density"):
        r.guide.log_prob(None, {"lam": torch.tensor(3.0)})


# ---------------------------------------------------------------- failures

def test_a_ridge_gets_the_hessian_message():
    """a, b flat, y ~ N(a + b, 1): the log density is constant along a - b."""
    r = run_fit(load("sample a <- Flat\nsample b <- Flat\n"
                     "observe y : Row <- Normal(a + b, 1.0)\nreturn a", 8),
                {"y": POIS_Y * 1.0}, "laplace")
    assert r.status == "failed" and r.stats["error_type"] == "NotNegativeDefinite"
    assert r.message == ("the Hessian at the mode is not negative definite: its largest "
                         "eigenvalue is 0 along `a`, `b` (a saddle point or a ridge); try "
                         "SVI or NUTS")


def test_a_density_without_a_mode_is_named():
    """s flat on (0, inf), y = 0 ~ N(0, s): log p~ = -7 log s rises without bound as s -> 0."""
    r = run_fit(load("sample s <- HalfFlat\nobserve y : Row <- Normal(0.0, s)\nreturn s", 8),
                {"y": np.zeros(8)}, "laplace")
    assert r.status == "failed" and r.stats["error_type"] == "NoMode"
    assert r.message.startswith("the log density has no mode: it ")
    assert "`s`" in r.message and r.message.endswith("try SVI or NUTS")


def test_too_many_coordinates_are_refused(monkeypatch):
    from qvr.inference.data.fit_data import DataError
    from qvr.inference.vi import mode_search
    monkeypatch.setattr(mode_search, "MAX_DIM", 1)
    with pytest.raises(DataError, match="--guide laplace: the latent sites have 2 "
                                        "unconstrained coordinates, above the 1 "):
        run_fit(load(GAUSS, 10), {"y": GAUSS_Y}, "laplace")


def test_a_stop_request_cancels_the_search():
    r = fit(load(GAUSS, 10), data={"y": GAUSS_Y},
            config={"method": "svi", "guide": "laplace", "seed": 1}, should_stop=lambda: True)
    assert r.status == "cancelled" and r.guide is None


# ---------------------------------------------------------------- rebuilt, predicted

LOCAL = "sample mu <- Normal(0.0, 5.0)\nsample u : Row <- Normal(mu, 1.0)\n" \
        "observe y : Row <- Normal(u, 0.5)\nreturn mu"


def test_rebuild_from_saved_params_at_the_fit_rows_and_at_new_rows():
    from qvr.inference.vi.laplace import rebuild
    y = np.array([0.3, 1.2, -0.4, 2.0, 0.9, 1.1])
    prog = load(LOCAL, 6)
    r = run_fit(prog, {"y": y}, "laplace", dtype="float32")  # float64 inside the search
    assert r.status == "finished", r.message
    model, g = r.guide.model[0], r.guide
    x6, obs = torch.zeros(6, 1), {"y": torch.tensor(y, dtype=torch.float32)}
    params = {k: np.asarray(v) for k, v in r.params.items()}
    same = rebuild("laplace", model, {"y"}, params, x6, obs)
    assert same.latent_names == ["mu", "u"] and same.dim == 7
    torch.testing.assert_close(same.flat_mode(), g.flat_mode())
    torch.testing.assert_close(same.scale_tril, g.scale_tril)
    draws = g.sample(x6, obs, sample_shape=(4,))
    torch.testing.assert_close(same.log_prob(x6, draws, batch_ndims=1),
                               g.log_prob(x6, draws, batch_ndims=1))
    # at three new rows: the global site only, from its marginal
    prog3 = load(LOCAL, 3)
    x3 = torch.zeros(3, 1)
    other = rebuild("laplace", prog3, {"y"}, params, x3, {})
    torch.manual_seed(0)
    d = other.sample(x3, {}, sample_shape=(4000,))
    assert set(d) == {"mu"}
    sd = math.sqrt(float(g.covariance()[0, 0]))
    assert abs(float(d["mu"].mean()) - float(g.flat_mode()[0])) < 4 * sd / math.sqrt(4000)
    assert float(d["mu"].std()) == pytest.approx(sd, rel=4 * math.sqrt(2 / 4000))
    m = rebuild("map", model, {"y"}, {k: v for k, v in params.items() if k != "scale_tril"},
                x6, obs)
    assert m.point_estimate and torch.equal(m.sample(x6, obs, (2,))["u"][0],
                                            m.sample(x6, obs, (2,))["u"][1])
    with pytest.raises(ValueError, match="the laplace guide does not fit the program: the "
                                         "program has a latent site `mu`"):
        rebuild("laplace", model, {"y"}, {"mode_u": params["mode_u"]}, x6, obs)


# ---------------------------------------------------------------- the command line



def test_qvr_run_eight_schools_laplace_and_map(qvr_run, tmp_path):
    from qvr.runs import open_run
    rc, out, err = qvr_run(ROOT / "examples" / "eight_schools.qvr", "--method", "svi",
                           "--guide", "laplace", "--seed", "1")
    assert rc == 0, err
    assert "the Hessian of the log density at the mode: 10 x 10, exact (autograd)" in err
    assert "Pareto k-hat" in err  # eight schools is far from Gaussian: k-hat above 0.7
    assert out.splitlines()[1].split()[:4] == ["site", "shape", "mean", "sd"]
    assert "LOO: elpd_loo" in out
    (folder,) = (tmp_path / "runs").iterdir()
    run = open_run(folder)
    assert run.status == "finished" and run.method == "svi" and run.config["guide"] == "laplace"
    st = run.summary["stats"]
    assert st["khat"] > 0.7 and st["dim"] == 10
    # the mode of the Jacobian-adjusted density (checked against scipy's BFGS: -40.0565)
    assert st["mode_log_density"] == pytest.approx(-40.05649292527, abs=1e-6)
    assert (folder / "loo.json").exists()
    rc, out, err = qvr_run(ROOT / "examples" / "eight_schools.qvr", "--method", "svi",
                           "--guide", "map", "--seed", "1")
    assert rc == 0, err
    assert "MAP: a point estimate, the mode of the density without the Jacobian" in err
    assert "no pointwise log-likelihood, LOO or predictive checks: a MAP fit is one point" \
        in err
    assert "MAP: the log density still rises along `tau`" in err  # the mode is at tau = 0
    mu = next(ln for ln in out.splitlines() if ln.startswith("mu "))
    assert mu.split()[3:] == ["-", "-", "-"]  # sd and quantiles: not defined for a point
    assert "LOO" not in out


def test_map_optimises_the_programs_parameters_with_finite_latents_summed_out():
    """An HMM whose kernels are learnable and whose regimes are summed out: no continuous
    latent (the Laplace part is empty), MAP is the maximum likelihood of the kernels."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_enumerate import chain_source
    data = {"x": np.array([0, 1, 2, 0, 1]),
            **{f"y{t}": np.array([0, 1, 3, 2, 1]) for t in range(1, 4)}}
    events = []
    one = fit(qvr.loads(chain_source(3)), data=data,
              config={"method": "svi", "guide": "map", "seed": 1, "steps": 1})
    r = fit(qvr.loads(chain_source(3)), data=data,
            config={"method": "svi", "guide": "map", "seed": 1}, on_event=events.append)
    assert r.status == "finished" and r.stats["dim"] == 0 and r.stats["converged"]
    assert r.stats["max_gradient"] < 1e-6
    assert r.stats["mode_log_density"] > one.stats["mode_log_density"] + 1.0
    assert any(getattr(e, "message", "").startswith(
        "MAP: the program's parameters (21 values) are optimised jointly with the latents")
        for e in events)
    assert any(k.startswith("model.") for k in r.params) and r.summary.rows == {}


def test_a_monte_carlo_density_is_refused():
    """`h = f >> g` of two stochastic kernels has a Monte-Carlo density (runtime spec 4.1)."""
    from qvr.inference.data.fit_data import DataError
    program = qvr.loads("object X : Real 2\nmorphism f : X -> X [role=kernel] ~ Normal\n"
                        "morphism g : X -> X [role=kernel] ~ Normal\nlet h = f >> g\n"
                        "program p : X -> X\n    sample z <- Normal(0.0, 1.0)\n"
                        "    observe y <- h\n    return y\nexport p\n")
    torch.manual_seed(0)
    data = {"x": torch.randn(5, 2), "y": torch.randn(5, 2)}
    with pytest.raises(DataError, match=r"^--guide map: the program's log density is a "
                                        r"Monte-Carlo estimate \(a composite"):
        fit(program, data, {"method": "svi", "guide": "map"})


def test_a_stalled_line_search_starts_its_history_afresh():
    """posteriordb's gp_pois_regr (examples/gp_counts.qvr): from Stan's random start the
    Poisson rates exp(f) overflow along the first directions and the strong-Wolfe search
    finds no decrease; with its history restarted on shorter steps it reaches the mode."""
    r = fit(qvr.load(str(ROOT / "examples" / "gp_counts.qvr")),
            config={"method": "svi", "guide": "laplace", "seed": 1, "dtype": "float64"})
    assert r.status == "finished", r.message
    assert r.stats["converged"] and r.stats["dim"] == 13
    assert r.stats["mode_log_density"] == pytest.approx(-40.855489825, abs=1e-6)
