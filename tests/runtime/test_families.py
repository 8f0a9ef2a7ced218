"""Every family in every position the family table marks *yes* compiles, draws values in its
support and scores them finitely; *opt* ones this runtime omits raise QVR950 (spec 11.12)."""
import pytest
import torch

import qvr
from qvr.runtime.errors import CompileError
from qvr.runtime.families import INLINE_FAMILIES, KERNEL_FAMILIES
from qvr.sema.families import FAMILIES

STEP_YES = sorted(n for n, f in FAMILIES.items() if f.step == "yes")
KERNEL_YES = sorted(n for n, f in FAMILIES.items() if f.kernel == "yes")
# E9.9: the multivariate families the runtime builds (tests/runtime/test_e9_multivariate.py)
STEP_OPT = sorted(n for n, f in FAMILIES.items() if f.step == "opt"
                  and n not in ("MultivariateNormal", "MultivariateNormalCov", "LowRankMVN",
                                "LKJCholesky"))
KERNEL_OPT = sorted(n for n, f in FAMILIES.items() if f.kernel == "opt")

LITERAL = {"real": "0.5", "pos": "2.0", "unit": "0.3"}
SPECIAL_ARGS = {"Uniform": "-1.0, 2.0", "TruncatedNormal": "m, 1.0, -1.0, 2.0",
                "Categorical": "w", "Pareto": "1.5, 3.0"}


def _args(name):
    if name in SPECIAL_ARGS:
        return SPECIAL_ARGS[name]
    return ", ".join(LITERAL[k] for _, k in FAMILIES[name].params)


def _step_program(name):
    over = " [over=K]" if FAMILIES[name].event_rank == 1 else ""
    return ("object K : FinSet 4\nobject P : FinSet 300\nprogram p : P -> P\n"
            "    sample m <- Normal(0.0, 1.0)\n    sample w <- Dirichlet(1.0) [over=K]\n"
            f"    sample v : P <- {name}({_args(name)}){over}\n"
            f"    sample g <- {name}({_args(name)}){over}\n"
            "    return v\nexport p\n")


def test_the_runtime_covers_every_mandatory_family():
    assert set(STEP_YES) <= INLINE_FAMILIES
    assert set(KERNEL_YES) == KERNEL_FAMILIES


# improper priors (E9.2: `Flat`, `HalfFlat`) have no forward draws and no arguments:
# tests/runtime/test_e9_supports_runtime.py covers them
@pytest.mark.parametrize("name", [n for n in STEP_YES if not FAMILIES[n].improper])
def test_inline_family(name):
    prog = qvr.loads(_step_program(name)).morphism
    torch.manual_seed(0)
    ex = prog.execute(torch.zeros(2, 1), {})
    for site in ("v", "g"):
        rec = ex.sites[site]
        event = (4,) if FAMILIES[name].event_rank == 1 else ()
        assert rec.value.shape == ((300,) if site == "v" else ()) + event
        assert rec.site_kind == ("plate" if site == "v" else "global")
        assert bool(rec.support.check(rec.value).all()), (name, site)
        assert torch.isfinite(rec.contribution), (name, site)
        if FAMILIES[name].discrete:
            assert rec.value.dtype == torch.int64
        else:
            assert rec.value.dtype == torch.float32
    assert torch.isfinite(ex.log_joint).all()


def _codomain(name):
    cod = FAMILIES[name].kernel_cod
    return {"continuous": "Real 2", "discrete": "FinSet 5", "bool": "FinSet 2"}[cod]


@pytest.mark.parametrize("domain", ["Real 3", "FinSet 6"])
@pytest.mark.parametrize("name", KERNEL_YES)
def test_kernel_family(name, domain):
    prog = qvr.loads(f"object X : {domain}\nobject C : {_codomain(name)}\n"
                     f"morphism k : X -> C [role=kernel, hidden_dim=8] ~ {name}\nexport k\n")
    k = prog.morphism
    x = torch.randn(50, 3) if domain == "Real 3" else torch.arange(6).repeat(9)[:50]
    source = dict(k.param_source.named_parameters())
    if domain == "Real 3":
        assert sorted(source) == ["net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight",
                                  "net.4.bias", "net.4.weight"]
    else:
        assert list(source) == ["table"] and source["table"].shape[0] == 6
    y = k.rsample(x)
    if name in ("Categorical", "Bernoulli"):
        assert y.shape == (50,) and y.dtype == torch.int64
    else:
        assert y.shape == (50, 2)
        assert y.dtype == (torch.int64 if FAMILIES[name].discrete else torch.float32)
    assert bool(k.support.check(y).all()), name
    lp = k.log_prob(x, y)
    assert lp.shape == (50,) and torch.isfinite(lp).all(), name
    assert k.rsample(x, torch.Size([3])).shape == (3, *y.shape)


@pytest.mark.parametrize("name", KERNEL_OPT)
def test_optional_kernel_families_raise_qvr950(name):
    with pytest.raises(CompileError) as ei:
        qvr.loads(f"object X : Real 3\nobject C : Real 2\n"
                  f"morphism k : X -> C [role=kernel] ~ {name}\nexport k\n", path="o.qvr")
    assert ei.value.lines == [f"o.qvr:3:37: error[QVR950]: family `{name}` is not supported by "
                              "this runtime"]


def _opt_step(name):
    fam = FAMILIES[name]
    args = ", ".join("w" if k in ("vec", "mat") else LITERAL[k] for _, k in fam.params)
    over = {0: "", 1: " [over=K]", 2: " [over=[K, J]]"}[fam.event_rank]
    return ("object K : FinSet 4\nobject J : FinSet 4\nprogram p : K -> K\n"
            "    sample w <- Dirichlet(1.0) [over=K]\n"
            f"    sample v <- {name}({args}){over}\n    return v\nexport p\n")


@pytest.mark.parametrize("name", STEP_OPT)
def test_optional_step_families_raise_qvr950(name):
    with pytest.raises(CompileError) as ei:
        qvr.loads(_opt_step(name), path="o.qvr")
    assert ei.value.lines == [f"o.qvr:5:17: error[QVR950]: family `{name}` is not supported by "
                              "this runtime"]


def test_latent_prior_with_an_optional_family_has_no_runtime_effect():
    prog = qvr.loads("object A : FinSet 3\n"
                     "morphism f : A -> A [role=latent] ~ Horseshoe(1.0) [over=cod]\nexport f\n".replace(
                         " [over=cod]", ""))
    assert prog.morphism.tensor.shape == (3, 3)


def test_multivariate_normals_draw_their_law_without_autograd():
    """Without autograd `draw` samples the multivariate Normals from `torch.randn` (a form
    vmap batches): 200,000 draws have the law's mean and covariance (entries within
    ~0.005, 1 sd), and the draw is the same law as torch's `rsample` under autograd."""
    import torch.distributions as D
    from qvr.runtime.families import draw
    L = torch.tensor([[1.0, 0.0], [0.9, 0.3]], dtype=torch.float64)
    loc = torch.tensor([1.0, -2.0], dtype=torch.float64)
    W = torch.tensor([[1.0], [0.5], [-1.0]], dtype=torch.float64)
    d = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    torch.manual_seed(0)
    for dist in (D.MultivariateNormal(loc, scale_tril=L),
                 D.LowRankMultivariateNormal(torch.zeros(3, dtype=torch.float64), W, d)):
        with torch.no_grad():
            x = draw(dist, torch.Size([200_000]))
        assert x.shape == (200_000, *dist.event_shape)
        assert float((x.mean(0) - dist.loc).abs().max()) < 0.015
        assert float((torch.cov(x.T) - dist.covariance_matrix).abs().max()) < 0.02
    with torch.no_grad():
        batched = draw(D.MultivariateNormal(torch.zeros(5, 2, dtype=torch.float64),
                                            scale_tril=L), torch.Size([3]))
    assert batched.shape == (3, 5, 2)


@pytest.mark.parametrize("name", ["StudentT", "Cauchy", "Exponential", "Laplace"])
def test_in_place_families_draw_their_law_out_of_place(name):
    """torch fills these in place even without autograd; `draw` builds them from
    `torch.randn` / `torch.rand` there: 100,000 draws pass a Kolmogorov-Smirnov test
    against scipy's law (fixed seed), and a vmapped draw gives each element its own."""
    import torch.distributions as D
    from scipy import stats
    from torch.func import vmap
    from qvr.runtime.families import draw
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    dist, law = {
        "StudentT": (D.StudentT(t(5.0), t(1.0), t(2.0)), stats.t(5.0, 1.0, 2.0)),
        "Cauchy": (D.Cauchy(t(1.0), t(2.0)), stats.cauchy(1.0, 2.0)),
        "Exponential": (D.Exponential(t(3.0)), stats.expon(scale=1 / 3.0)),
        "Laplace": (D.Laplace(t(-1.0), t(0.5)), stats.laplace(-1.0, 0.5)),
    }[name]
    torch.manual_seed(0)
    with torch.no_grad():
        x = draw(dist, torch.Size([100_000]))
        assert x.shape == (100_000,) and x.dtype == torch.float64
        assert bool(torch.isfinite(x).all())
        assert stats.kstest(x.numpy(), law.cdf).pvalue > 1e-3
        rows = vmap(lambda m: m + draw(dist), randomness="different")(torch.zeros(4).double())
    assert len(set(rows.tolist())) == 4
