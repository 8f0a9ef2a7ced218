"""The kernel protocol between `MCMC` (the driver) and its kernels (`mcmc/kernel.py`):
`init` always receives the planned run, kernels keep their caches themselves, the driver
learns how the steps ran through `compiler_used` / `compiler_notes` only; and the kernel
after the refactor that restored the split is the same NUTS: a seeded run repeats bit for
bit within a process, and the TorchScript ticks sample the exact posteriors of the
benchmark's normal-normal and eight-schools models.

No numbers recorded on another machine are compared: the last bit of float arithmetic
differs between processors, BLAS paths and thread counts, and NUTS turns it into other
U-turn and acceptance decisions, so another machine gives another (equally valid) run."""
import functools
import gc
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import loads
from qvr.inference import MCMC, HMCKernel, NUTSKernel
from qvr.inference.criticism.diagnostics import ess_mean
from qvr.inference.mcmc import tick as T
from qvr.inference.mcmc.potential import make_target

from helpers import check_moments, normal_normal_case

ROOT = Path(__file__).resolve().parents[2]


class RecordingNUTS(NUTSKernel):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.inits = []

    def init(self, target, z0, num_warmup, num_samples):  # no defaults: all four given
        self.inits.append((tuple(z0.shape), num_warmup, num_samples))
        return super().init(target, z0, num_warmup, num_samples)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_init_receives_the_planned_run(chain_method):
    model, x, obs, _ = normal_normal_case()
    k = RecordingNUTS(max_tree_depth=3, compiler="torchscript")
    MCMC(k, num_warmup=7, num_samples=5, num_chains=2, chain_method=chain_method).run(
        model, x, obs)
    want = [((2, 1), 7, 5)] if chain_method == "vectorized" else [((1, 1), 7, 5)] * 2
    assert k.inits == want


def test_the_planned_draws_reach_the_state():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    state = NUTSKernel().init(t, torch.zeros(2, t.dim), 30, 70)
    assert (state.num_warmup, state.num_samples) == (30, 70)
    with pytest.raises(TypeError):  # the plan is not optional
        NUTSKernel().init(t, torch.zeros(2, t.dim), 30)


def test_nuts_keeps_its_ticks_itself_and_forgets_them_with_the_target():
    model, x, obs, _ = normal_normal_case()
    t = make_target(model, x, obs)
    k = NUTSKernel(compiler="torchscript")
    r = MCMC(k, num_warmup=10, num_samples=5, num_chains=2).run(None, target=t)
    assert "_tick_cache" not in vars(t)
    assert not any(isinstance(v, T.TickCache) for v in vars(t).values())
    cache = k.tick_cache(t)
    assert [tk.backend for tk in cache.ticks.values()] == ["torchscript"]
    assert k.compiler_used(t) == r.compiler == "torchscript"
    # a second run of the same kernel on the same target reuses the traced tick
    tick = next(iter(cache.ticks.values()))
    MCMC(k, num_warmup=10, num_samples=5, num_chains=2).run(None, target=t)
    assert next(iter(k.tick_cache(t).ticks.values())) is tick
    # another kernel has its own ticks
    other = NUTSKernel(compiler="torchscript")
    assert other.compiler_used(t) == "" and other.compiler_notes(t) == []
    del t, r
    gc.collect()
    assert k._tick_caches == {}


def test_the_result_reports_what_the_kernel_says():
    """The driver asks the kernel (`compiler_used`, `compiler_notes`), nothing else."""
    model, x, obs, _ = normal_normal_case()

    class Saying(HMCKernel):
        def compiler_used(self, target):
            return "torchscript"

        def compiler_notes(self, target):
            return ["a note", "another"]

    r = MCMC(Saying(num_steps=2), num_warmup=3, num_samples=2, num_chains=1).run(
        model, x, obs)
    assert (r.compiler, r.compiler_notes) == ("torchscript", ["a note", "another"])
    r = MCMC(HMCKernel(num_steps=2), num_warmup=3, num_samples=2, num_chains=1).run(
        model, x, obs)
    assert (r.compiler, r.compiler_notes) == ("", [])


@functools.lru_cache(maxsize=None)
def _bench():
    spec = importlib.util.spec_from_file_location("qvr_bench_inference",
                                                  ROOT / "bench" / "inference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = ("normal_normal", "eight_schools")


def _run(name, seed, warmup, samples, chains, kernel=None, target=None):
    if target is None:
        src, x, obs = _bench().qvr_models()[name]
        target = make_target(loads(src).morphism, x, obs)
    torch.manual_seed(seed)
    return MCMC(kernel or NUTSKernel(compiler="torchscript"), num_warmup=warmup,
                num_samples=samples, num_chains=chains).run(None, target=target)


def _same_run(a, b) -> bool:
    return (a.num_grad_evals == b.num_grad_evals
            and all(torch.equal(getattr(a, f), getattr(b, f))
                    for f in ("unconstrained", "tree_depths", "num_steps", "step_sizes",
                              "accept_probs", "diverging")))


@pytest.mark.parametrize("name", BENCH)
def test_a_seeded_torchscript_run_repeats_bit_for_bit(name):
    """The same seed in the same process gives the same run — draws, gradient
    evaluations, tree depths, leapfrog steps, step sizes — whether the kernel and target
    are new or the kernel's cached tick is reused; another seed gives another run."""
    first = _run(name, 0, 40, 20, 2)
    assert first.compiler == "torchscript"
    kernel = NUTSKernel(compiler="torchscript")
    src, x, obs = _bench().qvr_models()[name]
    target = make_target(loads(src).morphism, x, obs)
    again = _run(name, 0, 40, 20, 2, kernel, target)
    cached = _run(name, 0, 40, 20, 2, kernel, target)  # the tick traced by `again`
    assert again.compiler == cached.compiler == "torchscript"
    assert _same_run(first, again) and _same_run(first, cached)
    assert not _same_run(first, _run(name, 1, 40, 20, 2))


def _eight_schools_exact(y, sigma):
    """Posterior means and sds of `mu`, `log tau` and `eta` of the non-centred eight
    schools (`mu ~ N(0, 5)`, `tau ~ HalfCauchy(5)`, `eta_j ~ N(0, 1)`,
    `y_j ~ N(mu + tau eta_j, sigma_j)`), by quadrature over `log tau`: given `tau`,
    `y_j ~ N(mu, sigma_j^2 + tau^2)` and `mu` is conjugate, and given `mu, tau` each
    `eta_j` is Gaussian with mean `a_j (y_j - mu)`, `a_j = v_j / (sigma_j^2 tau)`, and
    variance `v_j / tau^2`, `v_j = 1 / (1/sigma_j^2 + 1/tau^2)`."""
    y, s2 = np.asarray(y, float), np.asarray(sigma, float) ** 2
    lt = np.linspace(math.log(1e-5), math.log(1e5), 200_001)
    tau = np.exp(lt)[:, None]
    V = s2 + tau ** 2
    P = 1 / 25 + (1 / V).sum(1)  # precision and mean of mu given tau
    M = (y / V).sum(1) / P
    log_w = (-0.5 * np.log(V).sum(1) - 0.5 * np.log(P) - 0.5 * ((y ** 2 / V).sum(1) - P * M ** 2)
             - np.log1p((tau[:, 0] / 5) ** 2) + lt)  # HalfCauchy, d tau = tau d log tau
    w = np.exp(log_w - log_w.max())
    w /= w.sum()

    def mean_sd(m, var):  # mixture over the grid of conditional means and variances
        mean = (w[:, None] * m).sum(0)
        return mean, np.sqrt((w[:, None] * (var + m ** 2)).sum(0) - mean ** 2)

    v = 1 / (1 / s2 + 1 / tau ** 2)
    a = v / (s2 * tau)
    return {"mu": mean_sd(M[:, None], 1 / P[:, None]),
            "log_tau": mean_sd(lt[:, None], 0 * lt[:, None]),
            "eta": mean_sd(a * (y - M[:, None]), v / tau ** 2 + a ** 2 / P[:, None])}


def test_the_eight_schools_quadrature():
    """The exact values the sampler is held to: the known posterior of eight schools
    (mu about 4.4, tau about 3.6) and a prior-only check (no data: the prior's moments)."""
    bench = _bench()
    ex = _eight_schools_exact(bench.SCHOOLS_Y, bench.SCHOOLS_SIGMA)
    assert 4.3 < ex["mu"][0][0] < 4.5 and 3.2 < ex["mu"][1][0] < 3.4
    prior = _eight_schools_exact([0.0], [1e6])  # one school, no information
    assert abs(prior["mu"][0][0]) < 1e-9 and prior["mu"][1][0] == pytest.approx(5.0, rel=1e-6)
    assert prior["eta"][1][0] == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("name", BENCH)
def test_torchscript_nuts_samples_the_exact_posterior(name):
    """The TorchScript-tick NUTS of the benchmark's models against their exact posteriors
    (normal-normal: conjugate; eight schools: quadrature): means and sds within 5 Monte
    Carlo standard errors (from the run's own ESS), for any machine's stream of draws."""
    bench = _bench()
    if name == "normal_normal":
        y = bench.normal_normal_data()["y"].double()
        prec = 1 / 10.0 ** 2 + len(y) / 1.0 ** 2  # mu ~ N(0, 10), y_i ~ N(mu, 1)
        exact = {"mu": ([float(y.sum()) / prec], [prec ** -0.5])}
        r = _run(name, 0, 150, 300, 4)
        check_moments(r.samples, exact, n_mcse=5.0)
    else:
        exact = _eight_schools_exact(bench.SCHOOLS_Y, bench.SCHOOLS_SIGMA)
        r = _run(name, 0, 150, 200, 4)
        check_moments({k: r.samples[k] for k in ("mu", "eta")},
                      {k: exact[k] for k in ("mu", "eta")}, n_mcse=5.0)
        # log tau: its mean only (the sd of a funnel's neck has an unreliable MCSE)
        lt = r.samples["tau"].double().log().reshape(4, 200).numpy()
        mcse = lt.std() / math.sqrt(np.asarray(ess_mean(lt[..., None])).item())
        assert abs(lt.mean() - exact["log_tau"][0][0]) < 5 * mcse
    assert r.compiler == "torchscript"


def test_blocks_are_recorded_whole_and_the_first_divergence_is_named_exactly():
    """A kernel answering `sample_block` with blocks of 5: every iteration is recorded
    (the draws equal the blocks' positions), and a chain's first divergence is reported as
    its draw (`first_divergence`), not as the step of the report that saw it."""
    from qvr.events import FitProgress
    from qvr.inference.mcmc.kernel import Steps

    fields = ("z", "log_density", "accept_prob", "accepted", "diverging", "num_steps",
              "tree_depth", "energy")
    seen = []

    class Fives(NUTSKernel):
        def sample_block(self, state, target, max_n):
            out = []
            for _ in range(min(5, max_n)):
                state = self.sample(state, target)
                out.append(Steps.of(state))
            steps = Steps(*(torch.cat([getattr(o, f) for o in out]) for f in fields))
            k = len(steps)
            for j in range(k):  # chain 1 diverges at its 13th draw (W = 20)
                if state.i - k + j == 20 + 12:
                    steps.diverging[j, 1] = True
            seen.append(steps.z)
            return state, steps

    model, x, obs, _ = normal_normal_case()
    events = []
    torch.manual_seed(0)
    r = MCMC(Fives(compiler="torchscript"), num_warmup=20, num_samples=30, num_chains=2,
             on_event=events.append, progress_interval=1e9).run(
        None, target=make_target(model, x, obs))
    assert torch.equal(r.unconstrained.transpose(0, 1), torch.cat(seen)[20:])
    assert r.diverging[1, 12] and int(r.diverging.sum()) >= 1
    reports = [e for e in events if isinstance(e, FitProgress) and e.phase == "sampling"]
    assert [e.step for e in reports if e.chain == 1] == [5, 30]  # first block, last step
    last = [e for e in reports if e.chain == 1][-1]
    assert last.metrics["first_divergence"] == 13.0
    assert "first_divergence" not in [e for e in reports if e.chain == 1][0].metrics
