"""Programs: sites, the log joint, supplied values and `marginalize` (runtime spec 5)."""
import itertools
import math

import pytest
import torch
from torch.distributions import Bernoulli, HalfNormal, Normal, Poisson

import qvr
from qvr.runtime.errors import ObservationShapeError

D = torch.distributions

HIER = """
object Grp : FinSet 3
object Row : FinSet 4
program p : Row -> Row
    sample mu <- Normal(0.0, 2.0)
    sample tau <- HalfNormal(1.0)
    sample eff : Grp <- Normal(mu, tau) [iid_over=Grp]
    let m = eff[g] + 0.5 * x
    sample z <- Normal(m, 1.0)
    observe y : Row <- Normal(z, tau)
    score pen = -0.5 * mu * mu
    return eff
export p
"""


@pytest.fixture
def hier():
    return qvr.loads(HIER).morphism


def _host():
    return {"g": torch.tensor([0, 2, 2, 1]), "x": torch.tensor([1.0, -1.0, 0.5, 2.0])}


def test_site_kinds_and_facts(hier):
    assert [(s.name, s.step, s.site_kind, s.family, s.plate) for s in hier.site_infos()] == [
        ("mu", "sample", "global", "Normal", None), ("tau", "sample", "global", "HalfNormal", None),
        ("eff", "sample", "plate", "Normal", 3), ("z", "sample", "local", "Normal", None),
        ("y", "observe", "local", "Normal", 4)]
    assert hier.observed_names == {"y"}
    assert hier.host_names == {"g", "x"}
    assert hier.effect_set == {"Sample", "Score"}
    assert hier._step_mu.family == "Normal" and list(hier._step_mu.parameters()) == []


def test_log_joint_equals_the_hand_computed_joint(hier):
    v = {"mu": torch.tensor(0.3), "tau": torch.tensor(0.8),
         "eff": torch.tensor([0.1, -0.4, 0.9]), "z": torch.tensor([0.2, 0.0, 1.5, 0.4]),
         "y": torch.tensor([0.0, -0.3, 1.0, 1.2])}
    h = _host()
    x = torch.zeros(4, 1)
    lj = hier.log_joint(x, {**v, **h})
    m = v["eff"][h["g"]] + 0.5 * h["x"]
    glob = (Normal(0, 2).log_prob(v["mu"]) + HalfNormal(1.0).log_prob(v["tau"])
            + Normal(v["mu"], v["tau"]).log_prob(v["eff"]).sum() - 0.5 * v["mu"] ** 2)
    rows = Normal(m, 1.0).log_prob(v["z"]) + Normal(v["z"], v["tau"]).log_prob(v["y"])
    assert lj.shape == (4,)
    # row attribution: per-row terms on their rows, scalars spread evenly
    assert torch.allclose(lj, rows + glob / 4, atol=1e-5)
    assert torch.allclose(lj.sum(), rows.sum() + glob, atol=1e-5)


def test_execute_records_every_step(hier):
    h = _host()
    torch.manual_seed(0)
    ex = hier.execute(torch.zeros(4, 1), {**h, "y": torch.zeros(4)})
    assert list(ex.sites) == ["mu", "tau", "eff", "m", "z", "y", "pen"]
    r = ex.sites
    assert r["eff"].value.shape == (3,) and r["eff"].contribution.shape == ()
    assert r["z"].value.shape == (4,) and r["z"].contribution.shape == (4,)
    assert r["y"].is_observed and not r["z"].is_observed
    assert r["m"].is_deterministic and r["m"].log_prob is None
    assert r["pen"].is_deterministic and r["pen"].log_prob.shape == (4,)
    assert str(r["tau"].support) == "GreaterThanEq(lower_bound=0.0)"
    total = sum(rec.log_prob for rec in r.values() if rec.log_prob is not None)
    assert torch.allclose(total, ex.log_joint)
    # the traced values reproduce the log joint
    vals = {k: rec.value for k, rec in r.items() if rec.step in ("sample", "observe")}
    assert torch.allclose(hier.log_joint(torch.zeros(4, 1), {**vals, **h}), ex.log_joint)


def test_supplied_values_are_clamped_and_coerced(hier):
    h = _host()
    torch.manual_seed(1)
    out = hier.rsample(torch.zeros(4, 1), observations={**h, "mu": torch.tensor([[50.0]]),
                                                       "tau": torch.tensor(0.01)})
    assert out.shape == (3,) and torch.allclose(out, torch.full((3,), 50.0), atol=0.1)
    # a plate value with |I| elements in another shape is reshaped
    ex = hier.execute(torch.zeros(4, 1), {**h, "eff": torch.ones(3, 1), "y": torch.zeros(4)})
    assert ex.sites["eff"].value.shape == (3,)
    with pytest.raises(ObservationShapeError) as ei:
        hier.execute(torch.zeros(4, 1), {**h, "mu": torch.zeros(2)})
    assert str(ei.value) == ("program `p`, step `mu`: a global site's value must hold "
                             "exactly one draw (expected 1 value(s), shape (), got shape (2,))")
    with pytest.raises(ObservationShapeError, match="one draw per element of `Grp`"):
        hier.execute(torch.zeros(4, 1), {**h, "eff": torch.zeros(4)})


def test_unobserved_observe_draws_and_sample_shape(hier):
    h = _host()
    ex = hier.execute(torch.zeros(4, 1), h, score=False)
    assert ex.sites["y"].value.shape == (4,) and ex.log_joint is None
    assert hier.rsample(torch.zeros(4, 1), torch.Size([5, 2]), observations=h).shape == (5, 2, 3)


def test_observe_with_global_arguments_draws_one_value_per_row():
    prog = qvr.loads("object R : FinSet 6\nprogram p : R -> R\n    sample s <- HalfNormal(1.0)\n"
                     "    observe y : R <- Normal(0.0, s)\n    return y\nexport p\n").morphism
    assert prog.rsample(torch.zeros(6, 1)).shape == (6,)
    # integer data for a continuous family is scored as floats
    lj = prog.log_joint(torch.zeros(3, 1), {"s": torch.tensor(1.0), "y": torch.tensor([0, 1, 2])})
    assert torch.allclose(lj, Normal(0., 1.).log_prob(torch.tensor([0., 1., 2.]))
                          + HalfNormal(1.).log_prob(torch.tensor(1.)) / 3)


def test_named_morphism_arguments_are_concatenated():
    src = ("object O : Real 3\nobject M : Real 2\n"
           "morphism blend : O * M -> M [role=kernel] ~ Normal\n"
           "morphism dec : M -> M [role=kernel] ~ Normal\n"
           "program cell(o, m) : O * M -> M\n    sample k <- dec(m)\n    sample b <- blend(o, k)\n"
           "    return b\nexport cell\n")
    prog = qvr.loads(src)
    cell = prog.morphism
    x = torch.randn(5, 5)
    ex = cell.execute(x, {})
    k, b = ex.sites["k"].value, ex.sites["b"].value
    expected = prog["dec"].log_prob(x[:, 3:], k) + prog["blend"].log_prob(
        torch.cat([x[:, :3], k], -1), b)
    assert torch.allclose(ex.log_joint, expected)
    assert cell.input_parts[0][0] == "o" and cell.input_parts[1][1].name == "M"


# ------------------------------------------------------------------ marginalize

SENSOR = """
object Point : FinSet 5
program faulty : Point -> Point
    sample level <- Normal(20.0, 5.0)
    sample jitter <- HalfNormal(1.0)
    sample p_fault <- Beta(1.0, 20.0)
    marginalize faulty{ann} <- Bernoulli(p_fault) [reduction={red}]
        let noise_now = jitter * (1.0 + 9.0 * faulty)
        observe temperature : Point <- Normal(level, noise_now)
    return level
export faulty
"""


@pytest.mark.parametrize("red", ["logsumexp", "sum", "mean"])
def test_plain_marginalize_with_one_shared_latent_equals_enumeration(red):
    # no annotation: one `faulty` for the whole block
    prog = qvr.loads(SENSOR.format(red=red, ann="")).morphism
    t = torch.tensor([19.0, 21.5, 20.2, 35.0, 18.0])
    v = {"level": torch.tensor(20.0), "jitter": torch.tensor(0.7), "p_fault": torch.tensor(0.1),
         "temperature": t}
    ex = prog.execute(torch.zeros(5, 1), v)
    per_class = torch.stack([
        math.log(0.9) + Normal(20.0, 0.7).log_prob(t).sum(),
        math.log(0.1) + Normal(20.0, 7.0).log_prob(t).sum()])
    expected = {"logsumexp": torch.logsumexp(per_class, 0), "sum": per_class.sum(),
                "mean": per_class.mean()}[red]
    assert torch.allclose(ex.sites["_marg_faulty"].value, expected, atol=1e-4)
    assert ex.sites["_marg_faulty"].is_deterministic
    assert "faulty" not in ex.sites and "temperature" not in ex.sites  # summed out
    prior = (Normal(20., 5.).log_prob(torch.tensor(20.)) + HalfNormal(1.).log_prob(torch.tensor(.7))
             + D.Beta(1., 20.).log_prob(torch.tensor(.1)))
    assert torch.allclose(ex.log_joint.sum(), expected + prior, atol=1e-4)


@pytest.mark.parametrize("red", ["logsumexp", "sum", "mean"])
def test_plain_marginalize_annotated_by_its_plate_has_one_latent_per_row(red):
    # `marginalize faulty : Point`: one `faulty` per point, each summed out on its own row
    prog = qvr.loads(SENSOR.format(red=red, ann=" : Point")).morphism
    t = torch.tensor([19.0, 21.5, 20.2, 35.0, 18.0])
    v = {"level": torch.tensor(20.0), "jitter": torch.tensor(0.7), "p_fault": torch.tensor(0.1),
         "temperature": t}
    ex = prog.execute(torch.zeros(5, 1), v)
    per_class = torch.stack([math.log(0.9) + Normal(20.0, 0.7).log_prob(t),
                             math.log(0.1) + Normal(20.0, 7.0).log_prob(t)], -1)
    expected = {"logsumexp": torch.logsumexp(per_class, -1), "sum": per_class.sum(-1),
                "mean": per_class.mean(-1)}[red]
    assert ex.sites["_marg_faulty"].value.shape == (5,)
    assert torch.allclose(ex.sites["_marg_faulty"].value, expected, atol=1e-4)
    assert torch.allclose(ex.sites["_marg_faulty"].log_prob, expected, atol=1e-4)  # row n
    prior = (Normal(20., 5.).log_prob(torch.tensor(20.)) + HalfNormal(1.).log_prob(torch.tensor(.7))
             + D.Beta(1., 20.).log_prob(torch.tensor(.1)))
    assert torch.allclose(ex.log_joint.sum(), expected.sum() + prior, atol=1e-4)


ZIP = """
object Row : FinSet 4
program zip : Row -> Row
    sample rate <- Gamma(2.0, 1.0)
    sample pz <- Beta(1.0, 1.0)
    let pz_rows = pz * ones
    marginalize zero <- Bernoulli(pz_rows)
        let rate_now = rate * (1.0 - zero)
        observe count : Row <- Poisson(rate_now)
    return rate
export zip
"""


def test_zero_inflated_per_row_marginalize_equals_enumeration():
    prog = qvr.loads(ZIP).morphism
    y = torch.tensor([0.0, 3.0, 0.0, 1.0])
    v = {"rate": torch.tensor(1.5), "pz": torch.tensor(0.3), "count": y, "ones": torch.ones(4)}
    ex = prog.execute(torch.zeros(4, 1), v)
    # one latent per row: (1 - pz) Poisson(y; rate) + pz Poisson(y; ~0)
    brute = torch.log(0.7 * Poisson(1.5).log_prob(y).exp()
                      + 0.3 * Poisson(1e-7).log_prob(y).exp())
    assert ex.sites["_marg_zero"].value.shape == (4,)
    assert torch.allclose(ex.sites["_marg_zero"].value, brute, atol=1e-5)
    assert torch.allclose(ex.sites["_marg_zero"].log_prob, brute, atol=1e-5)


GROUPED = """
object Cust : FinSet 2
object Seg : FinSet 3
object Buy : FinSet 5
program seg : Buy -> Buy
    sample share <- Dirichlet(2.0) [over=Seg]
    sample loc : Seg <- Normal(0.0, 3.0)
    sample rate : Seg <- Gamma(2.0, 0.5)
    marginalize s : Seg <- Categorical(share) [over=Cust]
        observe amount : Buy <- Normal(loc[s], 1.0) [via=buyer_of]
        observe items : Buy <- Poisson(rate[s]) [via=buyer_of]
    return share
export seg
"""


def test_grouped_marginalize_equals_brute_force_enumeration():
    prog = qvr.loads(GROUPED).morphism
    share = torch.tensor([0.5, 0.3, 0.2])
    loc = torch.tensor([-1.0, 0.5, 2.0])
    rate = torch.tensor([0.5, 2.0, 4.0])
    buyer = torch.tensor([0, 1, 1, 0, 1])
    amount = torch.tensor([-0.8, 1.9, 2.4, -1.5, 0.3])
    items = torch.tensor([0.0, 4.0, 3.0, 1.0, 5.0])
    v = {"share": share, "loc": loc, "rate": rate, "amount": amount, "items": items,
         "buyer_of": buyer}
    ex = prog.execute(torch.zeros(5, 1), v)
    total = []
    for c in itertools.product(range(3), repeat=2):  # one class per customer
        cls = torch.tensor(c)[buyer]
        lp = torch.log(share[list(c)]).sum() + Normal(loc[cls], 1.0).log_prob(amount).sum() \
            + Poisson(rate[cls]).log_prob(items).sum()
        total.append(lp)
    brute = torch.logsumexp(torch.stack(total), 0)
    # the record's value holds the block's terms per group; their sum is its contribution
    assert torch.allclose(ex.sites["_marg_s"].value.sum(), brute, atol=1e-4)
    assert torch.allclose(ex.sites["_marg_s"].contribution, brute, atol=1e-4)


def test_grouped_marginalize_checks_the_class_set():
    prog = qvr.loads(GROUPED.replace("Dirichlet(2.0) [over=Seg]",
                                     "Dirichlet(2.0) [over=Cust]")).morphism
    v = {"share": torch.tensor([0.5, 0.5]), "loc": torch.zeros(3), "rate": torch.ones(3),
         "amount": torch.zeros(5), "items": torch.zeros(5), "buyer_of": torch.zeros(5).long()}
    with pytest.raises(ObservationShapeError) as ei:
        prog.execute(torch.zeros(5, 1), v)
    assert ei.value.expected == "3 classes (the annotation)"
    assert ei.value.actual == "2 entries on the last axis of the prior probabilities"


def test_marginalize_block_draws_its_body_forward_when_not_supplied():
    prog = qvr.loads(ZIP).morphism
    assert prog.rsample(torch.zeros(4, 1), observations={"ones": torch.ones(4)}).shape == ()
    torch.manual_seed(0)
    ex = prog.execute(torch.zeros(4, 1), {"ones": torch.ones(4)})
    count = ex.sites["count"].value
    assert ex.sites["count"].step == "observe" and count.shape == (4,)
    assert count.dtype == torch.int64
    values = {"rate": ex.sites["rate"].value, "pz": ex.sites["pz"].value, "count": count,
              "ones": torch.ones(4)}
    assert torch.allclose(ex.log_joint, prog.log_joint(torch.zeros(4, 1), values))
    with pytest.raises(Exception, match="no value supplied for `count`"):
        prog.log_joint(torch.zeros(4, 1), {k: v for k, v in values.items() if k != "count"})


def test_let_expressions_factor_and_builtins():
    src = """
object L : FinSet 3
object R : FinSet 2
program p : R -> R
    sample base <- Normal(0.0, 1.0)
    let th = factor l : L in { 0 -> base, 1 -> base + 1.0, 2 -> base + 3.0, }
    let dist = factor a : L, b : L in sqrt(1.0 + (a - b) * (a - b))
    let vec = factor a : L in th
    let q = sigmoid(th[idx]) + exp(log(2.0)) - dist[0, 2] / 2.0 + -th[1]
    score s = th[2] + 0.0 * vec[1]
    return q
export p
"""
    prog = qvr.loads(src).morphism
    ex = prog.execute(torch.zeros(2, 1), {"base": torch.tensor(0.5), "idx": torch.tensor([2, 0])})
    th = torch.tensor([0.5, 1.5, 3.5])
    assert torch.allclose(ex.sites["th"].value, th)
    a = torch.arange(3.)
    assert torch.allclose(ex.sites["dist"].value, torch.sqrt(1 + (a[:, None] - a[None]) ** 2))
    assert ex.sites["vec"].value.shape == (3, 3)  # the body is a vector: one row per index
    expected_q = torch.sigmoid(th[[2, 0]]) + 2.0 - math.sqrt(5.0) / 2 - 1.5
    assert torch.allclose(ex.output, expected_q)
    assert torch.allclose(ex.sites["s"].value, torch.tensor(3.5))
