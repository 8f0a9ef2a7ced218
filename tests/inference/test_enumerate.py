"""Enumeration of finite latents against exact answers computed independently here:
brute force over all K^T paths, a direct numpy forward algorithm, forward-backward."""
import itertools
import math

import numpy as np
import pytest
import torch

import qvr
from qvr.inference import AutoNormalGuide, ELBO, trace
from qvr.inference.enumeration.discrete import infer_discrete
from qvr.inference.enumeration.enumerate import (EnumerationError, enumerated_log_joint,
                                     enumerated_total, prepare)
from qvr.inference.mcmc.potential import make_target
from qvr.inference.programs.sites import build_registry


def chain_source(T: int) -> str:
    """An HMM written step by step: the start regime is the input, `r2..rT` latent."""
    lines = ["object Regime : FinSet 3", "object Symbol : FinSet 4",
             "morphism transition : Regime -> Regime [role=kernel]",
             "morphism emission : Regime -> Symbol [role=kernel]",
             "program chain : Regime -> Symbol",
             "    observe y1 <- emission"]
    prev = None
    for t in range(2, T + 1):
        lines.append(f"    sample r{t} <- transition" + (f"({prev})" if prev else ""))
        lines.append(f"    observe y{t} <- emission(r{t})")
        prev = f"r{t}"
    lines += [f"    return y{T}", "export chain", ""]
    return "\n".join(lines)


def matrices(model):
    """Transition and emission matrices read off the model's kernels (probabilities)."""
    K, S = 3, 4
    idx = torch.arange(K)
    with torch.no_grad():
        A = torch.stack([model._step_r2.log_prob(idx, torch.full((K,), j)) for j in range(K)],
                        -1).exp().numpy()
        E = torch.stack([model._step_y1.log_prob(idx, torch.full((K,), s)) for s in range(S)],
                        -1).exp().numpy()
    return A.astype(np.float64), E.astype(np.float64)


def make_chain(T, B=5, seed=0):
    torch.manual_seed(seed)
    model = qvr.loads(chain_source(T)).morphism
    with torch.no_grad():  # learnable tables away from their uniform start
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.randint(0, 3, (B,))
    with torch.no_grad():
        tr = trace(model, x)
    obs = {k: s.value for k, s in tr.sites.items() if s.kind == "observe"}
    ys = np.stack([obs[f"y{t}"].reshape(-1).numpy() for t in range(1, T + 1)], 1)
    return model, x, obs, ys


def brute_force(A, E, start, ys):
    """log p(y) per row by summing all K^(T-1) paths."""
    T = ys.shape[1]
    out = []
    for n in range(len(start)):
        total = 0.0
        for path in itertools.product(range(3), repeat=T - 1):
            states = (int(start[n]),) + path
            p = E[states[0], ys[n, 0]]
            for t in range(1, T):
                p *= A[states[t - 1], states[t]] * E[states[t], ys[n, t]]
            total += p
        out.append(math.log(total))
    return np.array(out)


def forward_backward(A, E, start, ys):
    """Per row: log p(y) by the forward algorithm and p(r_t = k | y) for t = 2..T."""
    T = ys.shape[1]
    logz, margs = [], []
    for n in range(len(start)):
        alpha = np.zeros((T, 3))
        alpha[0] = np.eye(3)[int(start[n])] * E[:, ys[n, 0]]
        for t in range(1, T):
            alpha[t] = (alpha[t - 1] @ A) * E[:, ys[n, t]]
        beta = np.ones((T, 3))
        for t in range(T - 2, -1, -1):
            beta[t] = A @ (E[:, ys[n, t + 1]] * beta[t + 1])
        z = alpha[-1].sum()
        logz.append(math.log(z))
        margs.append(alpha * beta / z)
    return np.array(logz), np.stack(margs)  # (B,), (B, T, K)


@pytest.mark.parametrize("T", [2, 4, 6])
def test_chain_marginal_likelihood_equals_brute_force_and_forward_algorithm(T):
    model, x, obs, ys = make_chain(T)
    A, E = matrices(model)
    start = x.numpy()
    lj = enumerated_log_joint(model, x, obs).detach().double().numpy()
    np.testing.assert_allclose(lj, brute_force(A, E, start, ys), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lj, forward_backward(A, E, start, ys)[0], rtol=1e-5,
                               atol=1e-5)


def test_chain_is_eliminated_in_program_order_with_k_squared_passes():
    model, x, obs, _ = make_chain(6)
    st = prepare(model, x, obs)
    assert list(st.sites) == ["r2", "r3", "r4", "r5", "r6"]
    assert st.colors == 2 and len(st.passes) == 9  # K^2, not K^5
    scopes = {f.key: f.scope for f in st.factors}
    assert scopes["r4"] == ("r3", "r4") and scopes["y4"] == ("r4",)
    assert st.constant == ["y1"]


def test_long_chain_costs_k_squared_passes_and_matches_forward_algorithm():
    model, x, obs, ys = make_chain(40, B=3)
    st = prepare(model, x, obs)
    assert len(st.passes) == 9
    A, E = matrices(model)
    lj = enumerated_log_joint(model, x, obs).detach().double().numpy()
    np.testing.assert_allclose(lj, forward_backward(A, E, x.numpy(), ys)[0], rtol=1e-4)


def test_recovered_regime_marginals_match_forward_backward():
    model, x, obs, ys = make_chain(6)
    A, E = matrices(model)
    _, margs = forward_backward(A, E, x.numpy(), ys)
    post = infer_discrete(model, x, obs)
    for t in range(2, 7):
        got = post.marginals[f"r{t}"].double().numpy()
        assert got.shape == (5, 3)
        np.testing.assert_allclose(got, margs[:, t - 1], atol=1e-5)


def test_recovered_samples_follow_the_joint_posterior():
    # T = 3: p(r2, r3 | y) per row by brute force; 2000 joint draws, frequencies within
    # 4.5 binomial standard errors of every cell
    model, x, obs, ys = make_chain(3, B=2, seed=1)
    A, E = matrices(model)
    gen = torch.Generator().manual_seed(7)
    n = 2000
    counts = np.zeros((2, 3, 3))
    for _ in range(n):
        s = infer_discrete(model, x, obs, sample=True, generator=gen).samples
        r2, r3 = s["r2"].reshape(-1).numpy(), s["r3"].reshape(-1).numpy()
        for row in range(2):
            counts[row, r2[row], r3[row]] += 1
    for row in range(2):
        start = int(x[row])
        p = np.array([[E[start, ys[row, 0]] * A[start, i] * E[i, ys[row, 1]] * A[i, j]
                       * E[j, ys[row, 2]] for j in range(3)] for i in range(3)])
        p /= p.sum()
        se = np.sqrt(p * (1 - p) / n)
        assert np.all(np.abs(counts[row] / n - p) <= 4.5 * se + 1e-9), (counts[row] / n, p)


def test_guide_and_target_leave_finite_sites_out():
    model, x, obs, _ = make_chain(4)
    guide = AutoNormalGuide(model, observed_names=set(obs))
    assert guide.latent_names == [] and list(guide.parameters()) == []
    target = make_target(model, x, obs)
    assert target.dim == 0 and target.enumeration is not None
    assert build_registry(model, x, obs).names == []
    # the ELBO is minus the exact marginal likelihood (no continuous latents)
    loss = ELBO()(model, guide, x, obs)
    assert torch.allclose(loss, -enumerated_log_joint(model, x, obs).sum())


MIXTURE = """
object Row : FinSet 30
program mix : Row -> Row
    sample mu1 <- Normal(-2.0, 1.0)
    sample mu2 <- Normal(2.0, 1.0)
    let pz = 0.7 * ones
    sample z <- Bernoulli(pz)
    let loc = mu1 + (mu2 - mu1) * z
    observe y : Row <- Normal(loc, 1.0)
    return y
export mix
"""


def mixture_data(n=30, seed=3):
    g = np.random.default_rng(seed)
    z = g.random(n) < 0.7
    y = np.where(z, g.normal(1.5, 1.0, n), g.normal(-1.0, 1.0, n))
    return torch.tensor(y, dtype=torch.float32)


def test_per_row_bernoulli_mixture_density_and_gradient():
    model = qvr.loads(MIXTURE).morphism
    y = mixture_data()
    obs = {"y": y, "ones": torch.ones(30)}
    mu1 = torch.tensor(-0.8, requires_grad=True)
    mu2 = torch.tensor(1.2, requires_grad=True)
    total = enumerated_total(model, torch.zeros(30, 1), {**obs, "mu1": mu1, "mu2": mu2})
    yy = y.double()
    m1, m2 = mu1.double(), mu2.double()
    ref = (torch.distributions.Normal(-2.0, 1.0).log_prob(m1)
           + torch.distributions.Normal(2.0, 1.0).log_prob(m2)
           + torch.logsumexp(torch.stack([
               math.log(0.3) + torch.distributions.Normal(m1, 1.0).log_prob(yy),
               math.log(0.7) + torch.distributions.Normal(m2, 1.0).log_prob(yy)]), 0).sum())
    assert abs(total.item() - ref.item()) < 1e-3
    g = torch.autograd.grad(total, (mu1, mu2))
    gr = torch.autograd.grad(ref, (m1, m2))
    assert all(abs(a.item() - b.item()) < 1e-3 for a, b in zip(g, gr))


def test_nuts_mixture_means_match_quadrature_within_4_mcse():
    from qvr.inference import MCMC, NUTSKernel
    torch.manual_seed(0)
    model = qvr.loads(MIXTURE).morphism
    y = mixture_data()
    obs = {"y": y, "ones": torch.ones(30)}
    # The posterior has a second, label-switched mode (mu1 ~ 1.7, mu2 ~ -0.4) whose density
    # is e^-18 of the first's.  Chains started between the modes (the default start, near
    # 0) may settle in either, and one held in the second for part of the run fails the
    # check on some machines (NUTS turns rounding differences into other draws); started
    # at the prior means, every chain samples the mode that holds all the mass (below).
    initial = torch.tensor([[-2.0, 2.0]]).expand(4, 2)
    res = MCMC(NUTSKernel(), 300, 600, num_chains=4).run(model, torch.zeros(30, 1), obs,
                                                         initial=initial)
    assert list(res.samples) == ["mu1", "mu2"]  # the coordinates of `initial`
    # reference: the exact posterior by quadrature on a grid (independent of MCMC)
    grid = np.linspace(-6, 6, 601)
    m1, m2 = np.meshgrid(grid, grid, indexing="ij")
    yy = y.double().numpy()[:, None, None]
    lik = np.log(0.3 * np.exp(-0.5 * (yy - m1) ** 2) + 0.7 * np.exp(-0.5 * (yy - m2) ** 2))
    logp = lik.sum(0) - 0.5 * (m1 + 2) ** 2 - 0.5 * (m2 - 2) ** 2
    w = np.exp(logp - logp.max())
    w /= w.sum()
    assert w[m1 < m2].sum() > 1 - 1e-6  # the second mode (mu1 > mu2) holds no mass
    for name, grid_v in (("mu1", m1), ("mu2", m2)):
        mean = (w * grid_v).sum()
        sd = math.sqrt((w * (grid_v - mean) ** 2).sum())
        draws = res.samples[name].reshape(-1).double()
        ess = float(res.ess[name].reshape(-1)[0])
        mcse = sd / math.sqrt(ess)
        assert ess > 100
        assert abs(draws.mean().item() - mean) < 4 * mcse, (name, draws.mean(), mean, mcse)


GLOBAL = """
object Row : FinSet 10
program g : Row -> Row
    sample w <- Beta(2.0, 2.0)
    sample z <- Bernoulli(w)
    let loc = 3.0 * z
    observe y : Row <- Normal(loc, 1.0)
    return y
export g
"""


def test_global_finite_site_is_summed_once_for_all_rows():
    model = qvr.loads(GLOBAL).morphism
    y = torch.tensor([2.5, 3.1, 0.2, 2.9, 3.3, 2.2, 3.8, 2.7, 3.0, 2.4])
    w = torch.tensor(0.4)
    x = torch.zeros(10, 1)
    st = prepare(model, x, {"y": y, "w": w})
    # a global finite site keeps the passes one by one (no wide run over them)
    assert [s.kind for s in st.sites.values()] == ["global"] and not st.wide
    total = enumerated_total(model, x, {"y": y, "w": w}).item()
    N = torch.distributions.Normal
    ref = torch.distributions.Beta(2.0, 2.0).log_prob(w) + torch.logsumexp(torch.stack([
        math.log(0.6) + N(0.0, 1.0).log_prob(y).sum(),
        math.log(0.4) + N(3.0, 1.0).log_prob(y).sum()]), 0)
    assert abs(total - ref.item()) < 1e-4
    post = infer_discrete(model, x, {"y": y, "w": w})
    p1 = math.exp(math.log(0.4) + N(3.0, 1.0).log_prob(y).sum().item() - ref.item()
                  + torch.distributions.Beta(2.0, 2.0).log_prob(w).item())
    assert post.marginals["z"].shape == (2,)
    assert abs(post.marginals["z"][1].item() - p1) < 1e-5


def test_exponential_enumeration_names_the_site_and_the_remedy():
    lines = ["object S : FinSet 4", "morphism step : S -> S [role=kernel]",
             "program c : S -> S"]
    # every site feeds the last observation: one factor over all of them (4^6 per row)
    names = [f"a{i}" for i in range(7)]
    for n in names:
        lines.append(f"    sample {n} <- step")
    lines.append("    let t = " + " + ".join(names))
    lines.append("    score s = t")
    lines += ["    return a0", "export c", ""]
    model = qvr.loads("\n".join(lines)).morphism
    with pytest.raises(EnumerationError) as ei:
        prepare(model, torch.zeros(3, dtype=torch.long), {})
    msg = str(ei.value)
    assert "marginalize" in msg and "`a" in msg
    assert ei.value.site is not None and ei.value.site.startswith("a")
    assert isinstance(ei.value, ValueError)


def test_infinite_discrete_latent_is_a_clear_error():
    src = """
object Row : FinSet 4
program c : Row -> Row
    sample n <- Poisson(3.0)
    let r = n + 1.0
    observe y : Row <- Normal(r, 1.0)
    return y
export c
"""
    model = qvr.loads(src).morphism
    with pytest.raises(EnumerationError, match="latent site `n` has an infinite discrete"):
        AutoNormalGuide(model, observed_names={"y"})
