"""`marginalize z : I <- F(p)` sums out one latent per element of its plate I (issue 36,
point 8): the log-likelihood is `sum_n logsumexp_k [log pi_k + log p(y_n | k)]`, checked
against its closed form (scipy) for a Bernoulli and a 3-component Gaussian mixture at fixed
parameter values; the pointwise terms are the per-row mixture terms; `infer_discrete`
gives the per-row responsibilities; a short NUTS fit of the example's `gaussian_mixture`
recovers well-separated centres.  An unannotated block keeps one latent for all rows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy import stats
from scipy.special import logsumexp, softmax

import qvr
from qvr.inference import MCMC, NUTSKernel
from qvr.inference.enumeration.discrete import infer_discrete
from qvr.inference.criticism.pointwise import Pointwise

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BERNOULLI = """
object Obs : FinSet 40
program two : Obs -> Obs
    sample p <- Beta(1.0, 1.0)
    sample mu0 <- Normal(0.0, 5.0)
    sample mu1 <- Normal(0.0, 5.0)
    sample sigma <- HalfNormal(2.0)
    marginalize z{ann} <- Bernoulli(p)
        let loc = mu0 + (mu1 - mu0) * z
        observe y : Obs <- Normal(loc, sigma)
    return p
export two
"""
AT = {"p": 0.3, "mu0": -1.0, "mu1": 2.5, "sigma": 0.8}


def _bernoulli_data(n=40):
    rng = np.random.default_rng(11)
    z = rng.random(n) < 0.3
    return np.where(z, rng.normal(2.5, 0.8, n), rng.normal(-1.0, 0.8, n))


def _bernoulli_rows(y):
    return np.logaddexp(np.log(1 - AT["p"]) + stats.norm.logpdf(y, AT["mu0"], AT["sigma"]),
                        np.log(AT["p"]) + stats.norm.logpdf(y, AT["mu1"], AT["sigma"]))


def _values(y, extra=None):
    v = {k: torch.tensor(val) for k, val in AT.items()}
    v["y"] = torch.tensor(y, dtype=torch.float32)
    return {**v, **(extra or {})}


def test_bernoulli_mixture_is_one_latent_per_row():
    y = _bernoulli_data()
    model = qvr.loads(BERNOULLI.format(ann=" : Obs")).morphism
    ex = model.execute(torch.zeros(40, 1), _values(y))
    rows = _bernoulli_rows(y)
    got = ex.sites["_marg_z"].value
    assert got.shape == (40,)
    assert np.abs(got.numpy() - rows).max() < 1e-4
    priors = (stats.beta.logpdf(0.3, 1, 1) + stats.norm.logpdf(-1.0, 0, 5)
              + stats.norm.logpdf(2.5, 0, 5) + stats.halfnorm.logpdf(0.8, scale=2.0))
    assert abs(float(ex.log_joint.sum()) - (rows.sum() + priors)) < 1e-3


def test_unannotated_block_keeps_one_latent_for_all_rows():
    y = _bernoulli_data()
    model = qvr.loads(BERNOULLI.format(ann="")).morphism
    ex = model.execute(torch.zeros(40, 1), _values(y))
    shared = np.logaddexp(
        np.log(0.7) + stats.norm.logpdf(y, -1.0, 0.8).sum(),
        np.log(0.3) + stats.norm.logpdf(y, 2.5, 0.8).sum())
    assert abs(float(ex.sites["_marg_z"].value) - shared) < 1e-3
    # the two meanings differ by far here (the silent wrong answer)
    assert _bernoulli_rows(y).sum() - shared > 100


def _mixture_case(n=60):
    rng = np.random.default_rng(7)
    w = np.array([0.2, 0.5, 0.3])
    c = np.array([-4.0, 0.5, 5.0])
    k = rng.choice(3, n, p=w)
    y = rng.normal(c[k], 1.2)
    return w, c, 1.2, y


def _mixture_rows(w, c, s, y):
    return logsumexp(np.log(w) + stats.norm.logpdf(y[:, None], c, s), axis=1)


def test_gaussian_mixture_example_log_likelihood_and_pointwise_terms():
    w, c, s, y = _mixture_case()
    model = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr")).morphism
    v = {"weights": torch.tensor(w, dtype=torch.float32),
         "centres": torch.tensor(c, dtype=torch.float32), "spread": torch.tensor(s),
         "position": torch.tensor(y, dtype=torch.float32)}
    ex = model.execute(torch.zeros(60, 1), v)
    rows = _mixture_rows(w, c, s, y)
    assert np.abs(ex.sites["_marg_comp"].value.numpy() - rows).max() < 1e-4
    # pointwise terms (LOO): one per row, the row's mixture
    pw = Pointwise(model, torch.zeros(60, 1), {"position": v["position"]},
                   ["weights", "centres", "spread"])
    out = pw.many({"weights": v["weights"][None], "centres": v["centres"][None],
                   "spread": v["spread"].reshape(1)})
    assert out["log_lik.position"].shape == (1, 60)
    assert np.abs(out["log_lik.position"][0].numpy() - rows).max() < 1e-4
    assert pw.rows == {"position": "marginalized"}


def test_infer_discrete_gives_the_per_row_responsibilities():
    w, c, s, y = _mixture_case()
    model = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr")).morphism
    lat = {"weights": torch.tensor(w, dtype=torch.float32),
           "centres": torch.tensor(c, dtype=torch.float32), "spread": torch.tensor(s)}
    obs = {"position": torch.tensor(y, dtype=torch.float32)}
    gen = torch.Generator().manual_seed(3)
    post = infer_discrete(model, torch.zeros(60, 1), obs, lat, sample=True, generator=gen)
    resp = softmax(np.log(w) + stats.norm.logpdf(y[:, None], c, s), axis=1)
    assert post.marginals["comp"].shape == (60, 3)
    assert np.abs(post.marginals["comp"].numpy() - resp).max() < 1e-5
    draw = post.samples["comp"]
    assert draw.shape == (60,) and draw.dtype == torch.int64
    sure = resp.max(1) > 0.999  # rows whose component is all but certain
    assert sure.sum() >= 10
    assert (draw.numpy()[sure] == resp.argmax(1)[sure]).all()
    # the Bernoulli mixture: p(z_n = 1 | y_n); the unannotated block: one (K,) posterior
    y2 = _bernoulli_data()
    two = qvr.loads(BERNOULLI.format(ann=" : Obs")).morphism
    lat2 = {k: torch.tensor(v) for k, v in AT.items()}
    post = infer_discrete(two, torch.zeros(40, 1), {"y": torch.tensor(y2, dtype=torch.float32)},
                          lat2)
    a = np.log(0.3) + stats.norm.logpdf(y2, 2.5, 0.8)
    b = np.log(0.7) + stats.norm.logpdf(y2, -1.0, 0.8)
    assert np.abs(post.marginals["z"][:, 1].numpy() - 1 / (1 + np.exp(b - a))).max() < 1e-5
    one = qvr.loads(BERNOULLI.format(ann="")).morphism
    post = infer_discrete(one, torch.zeros(40, 1), {"y": torch.tensor(y2, dtype=torch.float32)},
                          lat2)
    assert post.marginals["z"].shape == (2,)


def test_short_fit_of_the_example_mixture_recovers_its_centres():
    rng = np.random.default_rng(5)
    n = 150
    truth = np.array([-6.0, 0.0, 6.0])
    k = rng.choice(3, n, p=[0.3, 0.3, 0.4])
    y = rng.normal(truth[k], 1.0)
    model = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr")).morphism
    torch.manual_seed(0)
    r = MCMC(NUTSKernel(), num_warmup=150, num_samples=100, num_chains=2).run(
        model, torch.zeros(n, 1), {"position": torch.tensor(y, dtype=torch.float32)})
    for chain in range(2):
        centres = np.sort(r.samples["centres"][chain].mean(0).numpy())
        # posterior sd of a centre ~ 1 / sqrt(45) ~ 0.15; label order is the chain's own
        assert np.abs(centres - truth).max() < 0.6, centres
        spread = float(r.samples["spread"][chain].mean())
        assert abs(spread - 1.0) < 0.25, spread


COUPLED = """
object Obs : FinSet 4
program m : Obs -> Obs
    sample p <- Beta(1.0, 1.0)
    let half = 0.4 * {ones}
    sample s <- Bernoulli(half)
    let shift = 3.0 * s
    marginalize z : Obs <- Bernoulli(p)
        let loc = shift + 2.0 * z
        observe y : Obs <- Normal(loc, 1.0)
    return p
export m
"""


def test_an_enumerated_site_read_inside_a_block_is_summed_out_with_it():
    # `s` (enumerated: global, or one per row) is read by the block's terms: the block is a
    # factor over `s` (it was taken for a constant before, a silent wrong answer)
    import itertools
    from qvr.inference.enumeration.enumerate import enumerated_log_joint
    y = torch.tensor([0.1, 2.1, 3.2, 5.1])
    x = torch.zeros(4, 1)
    for ones, values in (("p / p", [torch.tensor(v) for v in (0, 1)]),
                         ("ones", [torch.tensor(v) for v in itertools.product((0, 1), repeat=4)])):
        model = qvr.loads(COUPLED.format(ones=ones)).morphism
        data = {"y": y, "p": torch.tensor(0.3), **({"ones": torch.ones(4)} if ones == "ones"
                                                   else {})}
        got = float(enumerated_log_joint(model, x, data).sum())
        brute = torch.logsumexp(torch.stack([model.log_joint(x, {**data, "s": s}).sum()
                                             for s in values]), 0)
        assert abs(got - float(brute)) < 1e-4, ones
        post = infer_discrete(model, x, data, sample=True,
                              generator=torch.Generator().manual_seed(0))
        assert "z" not in post.marginals  # conditional on `s`: only sampled, given its draw
        assert post.samples["z"].shape == (4,)
