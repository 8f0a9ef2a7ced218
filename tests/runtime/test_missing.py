"""Missing entries of observed values (design E5): `split_missing`, observe steps of inline
families and of morphisms, Monte-Carlo chains (row-wise and position-mixing): the rows with
a missing entry contribute exactly 0, with finite gradients."""
import math

import pytest
import torch

import qvr
from qvr.runtime import combinators as C
from qvr.runtime.values import mask_missing, missing_entries, split_missing

from test_position_mixing import MeanMix, lme

NAN = math.nan

FAMILY = """object Obs : FinSet 6
program p : Obs -> Obs
    sample mu <- Normal(0.0, 1.0)
    observe y <- Normal(mu, 1.5)
    sample w <- Beta(2.0, 3.0)
    observe c <- Bernoulli(w)
    return mu
export p
"""

MORPH = """object Tok : FinSet 5
object Y : Real 3
object Z : Real 2
morphism e : Tok -> Y [role=embed]
morphism k : Y -> Z [role=kernel] ~ Normal
morphism lm : Y -> Tok [role=kernel] ~ Categorical
let ek = e >> k
program q : Tok -> Z
    sample h <- e
    observe z <- k(h)
    observe t <- lm(h)
    return z
program r : Tok -> Z
    observe z <- ek
    return z
export q
"""


def finite_grads(loss, params):
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return all(g is None or bool(torch.isfinite(g).all()) for g in grads)


# ---------------------------------------------------------------- split_missing

def test_split_missing_reals_rows_and_placeholders():
    z = torch.tensor([[1.0, 2.0], [NAN, 3.0], [4.0, 5.0], [NAN, NAN]])
    filled, observed = split_missing(z, False)
    assert observed.tolist() == [True, False, True, False]
    assert filled.tolist() == [[1.0, 2.0], [0.0, 3.0], [4.0, 5.0], [0.0, 0.0]]
    # event rank 0 (a scalar family): every entry is a row
    filled, observed = split_missing(torch.tensor([1.0, NAN, 2.0]), False, event_rank=0)
    assert observed.tolist() == [True, False, True] and filled.tolist() == [1.0, 0.0, 2.0]


def test_split_missing_indices():
    filled, observed = split_missing(torch.tensor([[0, -1, 2], [1, 1, 1]]), True)
    assert observed.tolist() == [[True, False, True], [True, True, True]]
    assert filled.tolist() == [[0, 0, 2], [1, 1, 1]] and filled.dtype == torch.int64
    # indices that arrive as floats (a JSON file with null): NaN and -1 are missing
    filled, observed = split_missing(torch.tensor([2.0, NAN, -1.0]), True)
    assert observed.tolist() == [True, False, False] and filled.tolist() == [2.0, 0.0, 0.0]
    # -1 is a number in a real value
    assert split_missing(torch.tensor([[-1.0]]), False)[1] is None


def test_complete_values_are_returned_untouched():
    z = torch.randn(4, 2)
    filled, observed = split_missing(z, False)
    assert filled is z and observed is None
    assert split_missing(torch.tensor([0, 3]), True)[1] is None
    assert split_missing([1.0, NAN], False) == ([1.0, NAN], None)  # not a tensor
    lp = torch.randn(3)
    assert mask_missing(lp, None) is lp
    assert mask_missing(lp, torch.tensor([True, False, True])).tolist()[1] == 0.0


def test_missing_entries_memo_sees_in_place_changes():
    z = torch.tensor([1.0, 2.0, 3.0])
    assert missing_entries(z, False)[1] is None
    z[1] = NAN
    filled, missing = missing_entries(z, False)
    assert missing.tolist() == [False, True, False] and filled.tolist() == [1.0, 0.0, 3.0]


# ---------------------------------------------------------------- inline family steps

def test_family_observe_rows_with_a_missing_entry_contribute_zero():
    torch.manual_seed(0)
    m = qvr.loads(FAMILY).morphism
    x = torch.zeros(6, 1)
    mu = torch.tensor(0.3, requires_grad=True)
    w = torch.tensor(0.3)
    y = torch.tensor([0.1, NAN, -0.4, 1.2, NAN, 0.7])
    c = torch.tensor([0, 1, -1, 1, 1, -1])
    ex = m.execute(x, {"mu": mu, "y": y, "w": w, "c": c}, score=True)
    cy = ex.sites["y"].contribution
    cc = ex.sites["c"].contribution
    assert cy.shape == (6,) and cc.shape == (6,)
    assert cy[1].item() == 0.0 and cy[4].item() == 0.0
    assert cc[2].item() == 0.0 and cc[5].item() == 0.0
    ref_y = torch.distributions.Normal(mu, 1.5).log_prob(torch.nan_to_num(y))
    keep = ~torch.isnan(y)
    assert torch.allclose(cy[keep], ref_y[keep])
    bern = torch.distributions.Bernoulli(w).log_prob(c.clamp(min=0).float())
    assert torch.allclose(cc[c >= 0], bern[c >= 0])
    # the environment keeps the value as given (missing entries included)
    assert torch.isnan(ex.sites["y"].value[1]) and int(ex.sites["c"].value[2]) == -1
    assert torch.isfinite(ex.log_joint).all()
    assert finite_grads(ex.log_joint.sum(), [mu])
    # the same total as the program on the observed rows only
    rows_y, rows_c = keep, c >= 0
    sub = m.log_joint_total(torch.zeros(6, 1), {"mu": mu, "y": y, "w": w, "c": c})
    ref = (torch.distributions.Normal(0.0, 1.0).log_prob(mu)
           + torch.distributions.Beta(2.0, 3.0).log_prob(w)
           + ref_y[rows_y].sum() + bern[rows_c].sum())
    assert torch.allclose(sub, ref)


# ---------------------------------------------------------------- morphism steps

def test_morphism_observe_masks_rows_and_keeps_gradients_finite():
    torch.manual_seed(0)
    prog = qvr.loads(MORPH)
    m, k, lm = prog.morphism, prog["k"], prog["lm"]
    x = torch.tensor([0, 3, 1, 4])
    h = torch.randn(4, 3)
    z = torch.randn(4, 2)
    z[1, 0] = NAN  # one entry of row 1 missing: the whole row is unobserved
    t = torch.tensor([1, -1, 0, 2])
    ex = m.execute(x, {"h": h, "z": z, "t": t}, score=True)
    cz, ct = ex.sites["z"].contribution, ex.sites["t"].contribution
    assert cz[1].item() == 0.0 and ct[1].item() == 0.0
    rows = torch.tensor([0, 2, 3])
    assert torch.allclose(cz[rows], k.log_prob(h[rows], z[rows]))
    assert torch.allclose(ct[rows], lm.log_prob(h[rows], t[rows]))
    assert finite_grads(ex.log_joint.sum(), list(prog.morphism.parameters()))
    assert torch.isnan(ex.sites["z"].value[1, 0])


def test_row_wise_chain_masks_before_and_after_the_average():
    torch.manual_seed(0)
    prog = qvr.loads(MORPH)
    ek, e, k = prog["ek"], prog["e"], prog["k"]
    x = torch.tensor([[0, 3, 3, 1], [4, 0, 1, 1]])
    z = torch.randn(2, 4, 2)
    zm = z.clone()
    zm[0, 2, 1] = NAN
    zm[1, 0] = NAN
    got = C.observed_log_prob(ek, x, zm)  # an observed value: missing rows masked
    full = ek.log_prob(x, z)
    observed = ~torch.isnan(zm).any(-1)
    assert got[~observed].tolist() == [0.0, 0.0]
    assert torch.equal(got[observed], full[observed])  # the other rows: the same estimator
    params = [e.centers, *k.parameters()]
    assert finite_grads(got.sum(), params)
    # a program observing the chain
    r = prog["r"]
    ex = r.execute(x, {"z": zm}, score=True)
    assert torch.equal(ex.sites["z"].contribution, got)


def test_position_mixing_chain_telescopes_over_observed_positions_only():
    torch.manual_seed(0)
    prog = qvr.loads(MORPH)
    e, k = prog["e"], prog["k"]
    mix = MeanMix(d=3)
    chain = e >> mix >> k
    x = torch.tensor([[0, 3, 3, 1], [4, 0, 1, 1]])
    z = torch.randn(2, 4, 2)
    z[0, 1, 0] = NAN
    z[1, 3] = NAN
    terms = C.observed_log_prob(chain, x, z)
    observed = ~torch.isnan(z).any(-1)
    assert terms[0, 1].item() == 0.0 and terms[1, 3].item() == 0.0
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(0)
        hs = mix.rsample(e.rsample(x, torch.Size([100])))
        loc, scale = k.params(hs)
        lp = torch.distributions.Normal(loc, scale).log_prob(torch.nan_to_num(z)).sum(-1)
        lp = torch.where(observed, lp, 0.0)
    # the sequence estimator over the observed positions only
    assert torch.allclose(terms.sum(-1), lme(lp.sum(-1)), atol=1e-4)
    assert finite_grads(terms.sum(), [e.centers, *k.parameters()])


def test_exact_finite_intermediate_with_missing_values():
    torch.manual_seed(0)
    src = """object S : FinSet 3
object T : FinSet 4
object Y : Real 2
morphism st : T -> S [role=kernel]
morphism b : S -> Y [role=kernel] ~ Normal
let sb = st >> b
export sb
"""
    prog = qvr.loads(src)
    sb = prog["sb"]
    x = torch.tensor([0, 1, 2, 3])
    z = torch.randn(4, 2)
    zm = z.clone()
    zm[2, 0] = NAN
    got = C.observed_log_prob(sb, x, zm)
    assert got[2].item() == 0.0
    assert torch.equal(got[[0, 1, 3]], sb.log_prob(x, z)[[0, 1, 3]])
    assert finite_grads(got.sum(), list(sb.parameters()))


def test_a_single_link_observed_through_chain_log_prob():
    torch.manual_seed(0)
    prog = qvr.loads(MORPH)
    k = prog["k"]
    h = torch.randn(3, 3)
    z = torch.tensor([[0.1, NAN], [0.2, 0.3], [NAN, NAN]])
    got = C.observed_log_prob(k, h, z)
    assert got[0].item() == 0.0 and got[2].item() == 0.0
    assert torch.allclose(got[1], k.log_prob(h[1:2], z[1:2])[0])


@pytest.mark.parametrize("vectorize", [True, False])
def test_vmapped_latents_beside_missing_observations(vectorize):
    """The ELBO maps latent values with vmap: a missing observation stays a constant mask
    and the mapped densities equal a loop's."""
    torch.manual_seed(0)
    prog = qvr.loads(MORPH)
    ek = prog["ek"]
    x = torch.tensor([[0, 3, 3, 1]])
    zs = torch.randn(3, 1, 4, 2)
    zs[:, 0, 2] = NAN
    mapped = torch.func.vmap(lambda z: C.observed_log_prob(ek, x, z), randomness="same")(zs)
    loop = torch.stack([C.observed_log_prob(ek, x, z) for z in zs])
    assert torch.allclose(mapped, loop, atol=1e-6)
    assert (mapped[:, 0, 2] == 0).all()


def mixture(n):
    return f"""object Component : FinSet 2
object Point : FinSet {n}
program gm : Point -> Point
    sample weights <- Dirichlet(1.0) [over=Component]
    sample centres : Component <- Normal(0.0, 3.0)
    marginalize comp : Point <- Categorical(weights)
        let centre = centres[comp]
        observe position : Point <- Normal(centre, 1.0)
    return centres
export gm
"""


def test_observe_inside_a_marginalize_block():
    """A missing point of a mixture contributes log sum_c p(c) = 0 (up to rounding): the
    density is the mixture's on the observed points only."""
    pos = torch.tensor([0.5, NAN, -2.0, 3.1, NAN, 1.0, 0.2])
    keep = ~torch.isnan(pos)
    centres = torch.tensor([-1.0, 2.0], requires_grad=True)
    w = torch.tensor([0.3, 0.7])
    full = qvr.loads(mixture(7)).morphism.log_joint_total(
        torch.zeros(7, 1), {"weights": w, "centres": centres, "position": pos})
    sub = qvr.loads(mixture(5)).morphism.log_joint_total(
        torch.zeros(5, 1), {"weights": w, "centres": centres, "position": pos[keep]})
    assert torch.allclose(full, sub, atol=1e-5)
    assert finite_grads(full, [centres])


def test_a_latent_value_through_a_chain_is_never_masked():
    """Only observe steps mask missing entries: a NaN in a value scored by a chain's own
    `log_prob` (a latent, a caller's value) stays NaN instead of contributing 0."""
    import qvr
    from qvr.runtime.combinators import observed_log_prob
    text = """
object X : Real 2
morphism f : X -> X [role=kernel] ~ Normal
morphism g : X -> X [role=kernel] ~ Normal
let h = f >> g
export h
"""
    torch.manual_seed(0)
    m = qvr.loads(text).morphism
    x, z = torch.randn(3, 2), torch.randn(3, 2)
    z[1, 0] = float("nan")
    lp = m.log_prob(x, z)
    assert torch.isnan(lp[1]) and torch.isfinite(lp[[0, 2]]).all()
    obs = observed_log_prob(m, x, z)
    assert obs[1] == 0 and torch.isfinite(obs).all()
    torch.testing.assert_close(obs[[0, 2]], lp[[0, 2]])
