"""Sites, `trace` and `AutoNormalGuide` (runtime spec 6.1-6.3)."""
import math

import pytest
import torch
from torch.distributions import biject_to, constraints

from qvr import load, loads
from qvr.inference import AutoNormalGuide, Trace, trace
from qvr.inference.programs.sites import build_registry

from helpers import DISCRETE_LATENT

SHAPES = """
object K : FinSet 3
object G : FinSet 4
object Obs : FinSet 10
program shapes : Obs -> Obs
    sample scale <- HalfNormal(1.0)
    sample frac <- Beta(2.0, 2.0)
    sample w <- Dirichlet(1.0) [over=K]
    sample loc : G <- Normal(0.0, 1.0) [iid_over=G]
    let m = cov * frac
    sample u <- Normal(m, scale)
    observe y : Obs <- Normal(u, 1.0)
    return u
export shapes
"""


def shapes_model():
    return loads(SHAPES).morphism, torch.zeros(10, 1), {"cov": torch.randn(10),
                                                         "y": torch.randn(10)}


def test_trace_records_every_step_and_sums_to_the_log_joint():
    model, x, obs = shapes_model()
    tr = trace(model, x, obs)
    assert isinstance(tr, Trace)
    assert list(tr.sites) == ["scale", "frac", "w", "loc", "m", "u", "y"]
    assert tr.sites["m"].is_deterministic and tr.sites["m"].morphism is None
    assert set(tr.latent_sites) == {"scale", "frac", "w", "loc", "u"}
    assert set(tr.observed_sites) == {"y"}
    values = {k: s.value for k, s in tr.stochastic_sites.items()}
    assert torch.allclose(tr.log_joint, model.log_joint(x, {**values, "cov": obs["cov"]}))
    assert tr.log_joint.shape == (10,)
    assert torch.allclose(sum(s.log_prob for s in tr.sites.values()), tr.log_joint)


def test_trace_import_forms_and_clamping():
    from qvr.inference.trace import trace as trace_fn
    import qvr.inference as qi
    model, x, obs = shapes_model()
    tr = trace_fn(model, x, {**obs, "scale": torch.tensor(0.5)})
    assert float(tr.sites["scale"].value) == 0.5 and tr.sites["scale"].is_observed
    assert callable(qi.trace)
    assert isinstance(qi.trace(model, x, obs), Trace)


def test_guide_parameter_shapes():
    model, x, obs = shapes_model()
    g = AutoNormalGuide(model, observed_names={"y", "cov"})
    assert g.latent_names == ["scale", "frac", "w", "loc", "u"]
    shapes = {n: tuple(p.shape) for n, p in g.named_parameters()}
    assert shapes == {
        "loc_scale": (1,), "log_scale_scale": (1,), "loc_frac": (1,), "log_scale_frac": (1,),
        "loc_w": (2,), "log_scale_w": (2,),  # simplex: u = d - 1
        "loc_loc": (4, 1), "log_scale_loc": (4, 1),  # plate: (|I|, u)
        "loc_u": (1,), "log_scale_u": (1,)}  # local: one pair shared by every row
    assert torch.allclose(g.log_scale_u, torch.tensor([math.log(0.1)]))
    assert torch.equal(g.loc_w, torch.zeros(2))


def test_guide_draws_lie_in_their_supports_with_the_site_shapes():
    model, x, obs = shapes_model()
    g = AutoNormalGuide(model, observed_names={"y", "cov"}, init_scale=2.0)
    v = g.rsample(x, obs)
    assert v["scale"].shape == () and float(v["scale"]) > 0
    assert v["frac"].shape == () and 0 < float(v["frac"]) < 1
    assert v["w"].shape == (3,) and torch.allclose(v["w"].sum(), torch.tensor(1.0))
    assert (v["w"] > 0).all()
    assert v["loc"].shape == (4,)
    assert v["u"].shape == (10,)
    many = g.rsample(x, obs, sample_shape=(5,))
    assert many["u"].shape == (5, 10) and many["w"].shape == (5, 3)


def test_guide_log_prob_is_the_change_of_variables_density():
    model, x, obs = shapes_model()
    g = AutoNormalGuide(model, observed_names={"y", "cov"})
    with torch.no_grad():
        for p in g.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    v = g.rsample(x, obs)
    expect = 0.0
    for name, support in (("scale", constraints.positive), ("frac", constraints.unit_interval),
                          ("w", constraints.simplex), ("loc", constraints.real),
                          ("u", constraints.real)):
        t = biject_to(support)
        val = v[name] if name == "w" else v[name].unsqueeze(-1)
        z = t.inv(val)
        loc, scale = getattr(g, f"loc_{name}"), torch.exp(getattr(g, f"log_scale_{name}"))
        lq = torch.distributions.Normal(loc, scale).log_prob(z).sum()
        expect = expect + lq - t.log_abs_det_jacobian(z, val).sum()
    assert torch.allclose(g.log_prob(x, v), expect, atol=1e-4)
    # sites absent from `values` are skipped
    partial = {"frac": v["frac"]}
    assert g.log_prob(x, partial).shape == ()


def test_guide_without_sites_has_no_parameters():
    model = loads("""
object Obs : FinSet 5
program obs_only : Obs -> Obs
    observe y : Obs <- Normal(0.0, 1.0)
    return y
export obs_only
""").morphism
    g = AutoNormalGuide(model, observed_names={"y"})
    assert list(g.parameters()) == [] and g.latent_names == []
    assert g.log_prob(torch.zeros(5, 1), {}).shape == ()


def test_seed_guide_covers_exactly_h():
    torch.manual_seed(0)
    model = load("examples/transformer_lm.qvr").morphism
    g = AutoNormalGuide(model, observed_names={"next_token"})
    assert g.latent_names == ["h"]
    assert g.loc_h.shape == (16,)
    ctx = torch.randint(0, 32, (3, 4))
    assert g.rsample(ctx)["h"].shape == (3, 4, 16)  # sequence length 4 works (spec D4)


def test_registry_layout_and_round_trip():
    model, x, obs = shapes_model()
    reg = build_registry(model, x, obs)
    assert [s.name for s in reg] == ["scale", "frac", "w", "loc", "u"]
    assert reg.dim == 1 + 1 + 2 + 4 + 10
    z = torch.randn(reg.dim)
    values, logdet = reg.unpack(z)
    assert values["w"].shape == (3,) and values["loc"].shape == (4,)
    assert torch.allclose(reg.unconstrain(values), z, atol=1e-5)
    assert logdet.shape == ()


def test_discrete_latent_site_is_rejected():
    model = loads(DISCRETE_LATENT).morphism
    with pytest.raises(ValueError, match="`k`"):
        AutoNormalGuide(model, observed_names={"y"})
