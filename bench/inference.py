"""Inference benchmark: NUTS effective samples per second and SVI steps per second.

    .venv/bin/python bench/inference.py [--warmup 1000] [--samples 1000] [--chains 4]
                                        [--only NAME ...] [--no-pyro] [--svi-steps 20]
                                        [--repeats 3] [--also-spec] [--json FILE]
    .venv/bin/python bench/inference.py --nuts-speed [MODEL ...] [--warmup N] [--samples N]
                                        [--chains 4] [--repeats R] [--no-numpyro]
                                        [--numpyro-no-cache] [--nuts-speed-cache DIR]

NUTS (4 chains, 1000 warmup + 1000 draws by default) on four models written in QVR —
normal-normal (N = 50), eight schools (non-centred), a 10-D funnel, and Bayesian logistic
regression (N = 1000, D = 10) — and a hidden Markov model with its regimes summed out
(`hmm_t100_k4`: T = 100 steps, K = 4 regimes, written as a chain of 100 `sample` steps;
Dirichlet transition rows, per-regime emission means and one emission scale, 21
parameters; the finite regimes enumerated, `qvr.inference.enumeration.enumerate`, against Pyro's NUTS
with `config_enumerate` and `max_plate_nesting=1`; its own smaller budget,
`--hmm-warmup`/`--hmm-samples`, 200 + 200 by default: one Pyro gradient costs about
0.1 s) — reports the *minimum bulk ESS over all parameters divided
by the total wall time* (warmup, compilation and set-up included), with `NUTSKernel()`'s
defaults (`--also-spec` adds the spec's verbatim merge and U-turn rules).  Every NUTS
workload runs with 3 seeds on both sides by default (`--repeats R`; ours: torch seeds
0, 1, 2; Pyro: chains seeded 0-3, 4-7, 8-11) and the figure compared is the *median*
ESS/s over seeds: the minimum ESS of a hard posterior is itself a noisy statistic (the
funnel's, of its log-scale `v`, varies seven-fold between seeds on both sides: Pyro's
seeds give 113, 25 and 17), so one seed says little.  `--repeats 1` is the quick
look (about a third of the time).  SVI (AutoNormalGuide,
ELBO with one particle, Adam) on the seed `transformer_lm` reports steps per second at
batch 2 x 1 and 256 x 16, and on the decoder transformer `decoder_lm` (issue 17: attention,
positions, norms; 8 Monte-Carlo draws as its example is fitted) at 8 x 16 and 64 x 16
against Pyro's SVI driving the same density modules (`svi_decoder_*`).

When `pyro-ppl` is installed (the optional ``bench`` extra), the same workloads run in
Pyro in the same invocation — the same priors and likelihoods written in Pyro's idiom,
Pyro's `NUTS` with its defaults (chains in parallel processes), and for SVI Pyro's
`AutoNormal` + `Trace_ELBO` + Adam on the seed written in Pyro (hand-written torch
densities on the same parameter tensors, the spec's Monte-Carlo estimator per row; checked
equal to ours with the same noise) and, second line, on a model whose densities are the
runtime's own modules — and the script prints our/Pyro ratios (SVI: steps per second of
CPU time).  Both sides run with one intra-op torch thread.  Bulk ESS is computed by the
same function (`qvr.inference.criticism.diagnostics.ess_bulk`) for both.  Each NUTS line also gives
min ESS per CPU second (ours: this process; Pyro: the sum over its chains' processes, the
MCMC runs only): on a shared machine the wall clock measures the load as much as the code.

NUTS speed table (issue 24, "measure first"; `--nuts-speed [MODEL ...]` prints it alone,
or `--only ... nuts_speed` as one section among others; not part of the default run).
On normal_normal, eight_schools, funnel_10d and logistic_1000x10 (or the models named),
with `--warmup/--samples/--chains` and seeds `0 .. --repeats - 1`, it runs in this
process, per model:

* ours with `NUTSKernel(compiler="transition")` twice with seed 0: the 1st run compiles
  the whole NUTS transition (AOTInductor; compiled packages are kept on disk under
  `$QVR_CACHE_DIR/transitions`), the 2nd loads it from that disk cache.  Both walls are
  printed and *compile = 1st - 2nd*; the 2nd run is the *steady state* (with several
  seeds, one more cached run per further seed and the median).  By default
  `QVR_CACHE_DIR` points, for the table only, at a fresh directory (under the ambient
  `$QVR_CACHE_DIR`, else the system's temporary directory) removed at the end, so that
  the 1st run really compiles; `--nuts-speed-cache DIR` uses and keeps DIR instead.
  Every run prints `MCMCResult.compiler` and each of its `compiler_notes` (compiled or
  loaded, and in how many seconds), so a 1st run that found a cached package shows it;
* ours with `compiler="torchscript"` (the leaf-by-leaf path) per seed, the baseline:
  the time ratios transition/torchscript (2nd run, 1st run, per chain-leaf);
* NumPyro's NUTS (when `numpyro` is installed and not `--no-numpyro`) on the same priors,
  likelihoods and data (`numpyro_models`), its settings printed: `NUTS(model)` with its
  defaults, `MCMC(chain_method="sequential", progress_bar=False)`,
  `run(PRNGKey(seed), extra_fields=("num_steps",))`, float32, jax's own thread settings.
  `mcmc.run` runs twice on one MCMC object with the same key: the 1st compiles, the 2nd
  is its steady state.  NumPyro's sequential chains trace and compile their sampling
  loop again in every chain of every run unless jax's persistent compilation cache is
  on, so the table turns it on, in a fresh directory (`--numpyro-no-cache`: jax's
  default, off); with it the 1st run's later chains, and the 2nd run, load what the
  1st chain compiled.  jax's own compile seconds within each run (tracing, lowering,
  compiling or loading: `JAX_COMPILE_EVENTS`, from `jax.monitoring`) are printed, and
  *net* = wall - them.

Per run it prints wall and CPU seconds (CPU: this process only; the C++ compiler that
AOTInductor starts is another process), *leaves per iteration* (ours:
`num_grad_evals / (warmup + draws)`: batched density evaluations, with the whole
transition the loop passes, i.e. the longest chain's leaves), the mean leaves per chain
and draw (`num_steps` of the draws: NumPyro's only leaf count), *time per chain-leaf*
(ours: wall / (num_grad_evals x chains); NumPyro's, marked ~, net wall / (mean
num_steps x (warmup + draws) x chains), its warmup leaves taken as its draws'), min bulk
ESS and divergences.  Per model it then prints the compile times and the time ratios
ours/NumPyro (< 1: ours faster): *steady* (our 2nd run / NumPyro's 2nd run, and / its
net), *end to end* (our 1st run, compile included, / NumPyro's 1st run; our 2nd run,
from the disk cache, / NumPyro's 1st run); and at the end two summary tables, *times*
(`ours 1st`, `ours 2nd`, `compile`, `tscript`, `2nd/ts`, `1st/ts`, `np 1st`, `np 2nd`,
`np net`, `np comp`, `steady`, `1st/np1`, `2nd/np1`) and *work* (`tr leaves/it`,
`tr /chain-draw`, `ts leaves/it`, `tr us/leaf`, `ts us/leaf`, `np /chain-draw`,
`np us/leaf~`).  The one-time imports (Inductor; jax and NumPyro) are paid and printed
before any timed run.  A run that raises is printed as `FAILED: <error>` (its traceback on
stderr) and the table goes on.  `--json` writes the figures under `"nuts_speed"`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qvr import loads, load  # noqa: E402
from qvr.inference import ELBO, MCMC, NUTSKernel, SVI, AutoNormalGuide  # noqa: E402
from qvr.inference.criticism.diagnostics import ess_bulk  # noqa: E402

# ------------------------------------------------------------------ data


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def normal_normal_data():
    y = 1.3 + torch.randn(50, generator=_gen(1))
    return {"y": y}


SCHOOLS_Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
SCHOOLS_SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]


def logistic_data(n=1000, d=10):
    g = _gen(2)
    X = torch.randn(n, d, generator=g)
    beta = torch.randn(d, generator=g)
    y = (torch.rand(n, generator=g) < torch.sigmoid(X @ beta)).float()
    return X, y


# ------------------------------------------------------------------ QVR models

NORMAL_NORMAL = """
object Obs : FinSet 50
program normal_normal : Obs -> Obs
    sample mu <- Normal(0.0, 10.0)
    observe y : Obs <- Normal(mu, 1.0)
    return mu
export normal_normal
"""

EIGHT_SCHOOLS = """
object School : FinSet 8
program schools : School -> School
    sample mu <- Normal(0.0, 5.0)
    sample tau <- HalfCauchy(5.0)
    sample eta : School <- Normal(0.0, 1.0) [iid_over=School]
    let theta = mu + tau * eta
    let se = 1.0 * sigma
    observe y : School <- Normal(theta, se)
    return theta
export schools
"""

FUNNEL = """
object Dim : FinSet 9
object One : FinSet 1
program funnel : One -> One
    sample v <- Normal(0.0, 3.0)
    let s = exp(v / 2.0)
    sample x : Dim <- Normal(0.0, s) [iid_over=Dim]
    return v
export funnel
"""


def logistic_source(d=10):
    terms = " + ".join(f"beta[{j}] * x{j}" for j in range(d))
    return f"""
object Row : FinSet 1000
object Feature : FinSet {d}
program logistic : Row -> Row
    sample alpha <- Normal(0.0, 1.0)
    sample beta : Feature <- Normal(0.0, 1.0) [iid_over=Feature]
    let eta = alpha + {terms}
    let p = sigmoid(eta)
    observe y : Row <- Bernoulli(p)
    return p
export logistic
"""


HMM_T, HMM_K = 100, 4
HMM_MU = [-3.0, -1.0, 1.0, 3.0]
#: prior scale of the emission means around HMM_MU: tight enough that no chain settles in a
#: relabelled mode (with 1.0, one chain of four swapped two regimes: min ESS 7 of 800); the
#: likelihood is still sharper (about 25 readings per regime, scale 0.6: sd 0.12)
HMM_MU_SD = 0.3


def hmm_data(T=HMM_T, K=HMM_K):
    """One sequence of `T` readings from a sticky 4-regime HMM (stay 0.85, emission means
    -3, -1, 1, 3, scale 0.6) and the priors' host arrays: `y` (T,), `trans_conc` (K, K)
    (Dirichlet concentration of each transition row, 5 on the diagonal, 1 elsewhere),
    `mu_loc` (K,) (prior means of the emission means), `init_probs` (K,) (uniform)."""
    g = _gen(3)
    A = torch.full((K, K), 0.15 / (K - 1)) + torch.eye(K) * (0.85 - 0.15 / (K - 1))
    r = int(torch.randint(0, K, (), generator=g))
    ys = []
    for _ in range(T):
        ys.append(HMM_MU[r] + 0.6 * float(torch.randn((), generator=g)))
        r = int(torch.multinomial(A[r], 1, generator=g))
    return {"y": torch.tensor(ys), "trans_conc": torch.ones(K, K) + 4.0 * torch.eye(K),
            "mu_loc": torch.tensor(HMM_MU), "init_probs": torch.full((K,), 1.0 / K)}


def hmm_source(T=HMM_T, K=HMM_K) -> str:
    """The HMM as QVR text: the continuous parameters with their priors, then one `sample`
    step per time step (`r{t} <- Categorical(trans[r{t-1}])`) and its observation.  The
    regimes are finite latents: NUTS sees their sum (the forward algorithm, O(T K^2))."""
    lines = [f"object Regime : FinSet {K}", f"object From : FinSet {K}",
             "object One : FinSet 1",
             "program hmm : One -> One",
             "    let conc = 1.0 * trans_conc",
             "    sample trans : From <- Dirichlet(conc) [over=Regime, iid_over=From]",
             "    let m0 = 1.0 * mu_loc",
             f"    sample mu : Regime <- Normal(m0, {HMM_MU_SD}) [iid_over=Regime]",
             "    sample sigma <- HalfNormal(1.0)",
             "    let p1 = 1.0 * init_probs",
             "    sample r1 <- Categorical(p1)",
             "    let m1 = mu[r1]",
             "    observe y1 <- Normal(m1, sigma)"]
    for t in range(2, T + 1):
        lines += [f"    let p{t} = trans[r{t - 1}]",
                  f"    sample r{t} <- Categorical(p{t})",
                  f"    let m{t} = mu[r{t}]",
                  f"    observe y{t} <- Normal(m{t}, sigma)"]
    lines += [f"    return y{T}", "export hmm", ""]
    return "\n".join(lines)


def hmm_observations(d=None):
    """The QVR program's data: `y1..yT` (one row each) and the host arrays (the initial
    probabilities as one row, `(1, K)`: the regimes are one value per row)."""
    d = d or hmm_data()
    obs = {f"y{t + 1}": d["y"][t:t + 1] for t in range(len(d["y"]))}
    obs.update(trans_conc=d["trans_conc"], mu_loc=d["mu_loc"],
               init_probs=d["init_probs"].reshape(1, -1))
    return obs


#: workloads with a budget of their own (`--hmm-warmup`, `--hmm-samples`)
HMM_WORKLOADS = ("hmm_t100_k4",)


def qvr_models():
    X, y = logistic_data()
    nn = normal_normal_data()
    return {
        "normal_normal": (NORMAL_NORMAL, torch.zeros(50, 1), nn),
        "eight_schools": (EIGHT_SCHOOLS, torch.zeros(8, 1),
                          {"y": torch.tensor(SCHOOLS_Y), "sigma": torch.tensor(SCHOOLS_SIGMA)}),
        "funnel_10d": (FUNNEL, torch.zeros(1, 1), {}),
        "logistic_1000x10": (logistic_source(), torch.zeros(1000, 1),
                             {"y": y.long(), **{f"x{j}": X[:, j] for j in range(10)}}),
        "hmm_t100_k4": (hmm_source(), torch.zeros(1, 1), hmm_observations()),
    }


def min_bulk_ess(samples: dict) -> float:
    vals = []
    for v in samples.values():
        a = np.asarray(v, dtype=float)
        a = a.reshape(a.shape[0], a.shape[1], -1)
        vals.extend(np.asarray(ess_bulk(a)).reshape(-1).tolist())
    return float(min(vals))


def warm_up():
    """First use of TorchScript/FX in a process costs seconds of one-time initialisation
    (like Pyro's own imports); pay it before timing anything."""
    src, x, obs = qvr_models()["normal_normal"]
    MCMC(NUTSKernel(), num_warmup=5, num_samples=2, num_chains=2).run(loads(src).morphism,
                                                                      x, obs)


def run_ours(name, warmup, samples, chains, seed=0, **kernel):
    src, x, obs = qvr_models()[name]
    torch.manual_seed(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model = loads(src).morphism
    r = MCMC(NUTSKernel(**kernel), num_warmup=warmup, num_samples=samples,
             num_chains=chains).run(model, x, obs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    samples_np = {k: v.numpy() for k, v in r.samples.items()}
    ess = min_bulk_ess(samples_np)
    return {"wall_s": wall, "cpu_s": cpu, "ess_per_cpu_s": ess / cpu,
            "min_ess_bulk": ess, "ess_per_s": ess / wall,
            "divergences": r.total_divergences, "grad_evals": r.num_grad_evals,
            "mean_tree_depth": float(r.tree_depths.float().mean())}


# ------------------------------------------------------------------ Pyro models


def pyro_models():
    import pyro
    import pyro.distributions as dist
    from pyro.infer import config_enumerate

    X, yl = logistic_data()
    nn = normal_normal_data()["y"]
    ys, sig = torch.tensor(SCHOOLS_Y), torch.tensor(SCHOOLS_SIGMA)

    def normal_normal():
        mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
        with pyro.plate("obs", 50):
            pyro.sample("y", dist.Normal(mu, 1.0), obs=nn)

    def eight_schools():
        mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = pyro.sample("tau", dist.HalfCauchy(5.0))
        with pyro.plate("school", 8):
            eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
            pyro.sample("y", dist.Normal(mu + tau * eta, sig), obs=ys)

    def funnel():
        v = pyro.sample("v", dist.Normal(0.0, 3.0))
        with pyro.plate("dim", 9):
            pyro.sample("x", dist.Normal(0.0, torch.exp(v / 2.0)))

    def logistic():
        alpha = pyro.sample("alpha", dist.Normal(0.0, 1.0))
        with pyro.plate("feature", 10):
            beta = pyro.sample("beta", dist.Normal(0.0, 1.0))
        with pyro.plate("row", 1000):
            pyro.sample("y", dist.Bernoulli(logits=alpha + X @ beta), obs=yl)

    hd = hmm_data()
    hy, hconc, hmu, hinit = hd["y"], hd["trans_conc"], hd["mu_loc"], hd["init_probs"]

    @config_enumerate
    def hmm():
        from pyro.ops.indexing import Vindex
        with pyro.plate("from", HMM_K):
            trans = pyro.sample("trans", dist.Dirichlet(hconc))
        with pyro.plate("regime", HMM_K):
            mu = pyro.sample("mu", dist.Normal(hmu, HMM_MU_SD))
        sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
        r = pyro.sample("r1", dist.Categorical(hinit))
        pyro.sample("y1", dist.Normal(Vindex(mu)[r], sigma), obs=hy[0])
        for t in pyro.markov(range(1, len(hy))):
            r = pyro.sample(f"r{t + 1}", dist.Categorical(Vindex(trans)[r]))
            pyro.sample(f"y{t + 1}", dist.Normal(Vindex(mu)[r], sigma), obs=hy[t])

    return {"normal_normal": normal_normal, "eight_schools": eight_schools,
            "funnel_10d": funnel, "logistic_1000x10": logistic, "hmm_t100_k4": hmm}


#: options of Pyro's `NUTS` per workload (enumerated models need the plate nesting)
PYRO_NUTS_OPTIONS = {"hmm_t100_k4": {"max_plate_nesting": 1}}


def check_hmm_density(seed: int = 0) -> float:
    """Our enumerated log joint of the HMM against Pyro's (`TraceEnum_ELBO` on the model
    conditioned on the continuous values: minus the log joint with the regimes summed
    out) at a prior draw of the parameters.  Returns the absolute difference; raises if it
    exceeds 1e-3 (float32 sums of 100 terms)."""
    from pyro import poutine
    from pyro.infer import TraceEnum_ELBO
    from qvr.inference.enumeration.enumerate import enumerated_total
    d = hmm_data()
    g = _gen(seed)
    vals = {"trans": torch.distributions.Dirichlet(d["trans_conc"]).sample(),
            "mu": d["mu_loc"] + torch.randn(HMM_K, generator=g),
            "sigma": torch.tensor(0.5) + torch.rand((), generator=g)}
    src, x, obs = qvr_models()["hmm_t100_k4"]
    ours = float(enumerated_total(loads(src).morphism, x, {**obs, **vals}))
    model = poutine.condition(pyro_models()["hmm_t100_k4"], data=vals)
    theirs = -float(TraceEnum_ELBO(max_plate_nesting=1).loss(model, lambda: None))
    diff = abs(ours - theirs)
    if not diff < 1e-3:
        raise AssertionError(f"the HMM's enumerated log joint differs from Pyro's by "
                             f"{diff:.3g} ({ours:.4f} against {theirs:.4f})")
    return diff


def _pyro_worker(args):
    name, warmup, samples, seed = args
    import pyro
    from pyro.infer import MCMC as PMCMC, NUTS
    torch.set_num_threads(1)
    pyro.set_rng_seed(seed)
    m = PMCMC(NUTS(pyro_models()[name], **PYRO_NUTS_OPTIONS.get(name, {})),
              num_samples=samples, warmup_steps=warmup,
              num_chains=1, disable_progbar=True)
    c0 = time.process_time()
    m.run()
    return ({k: v.numpy() for k, v in m.get_samples().items()}, time.process_time() - c0)


def run_pyro(name, warmup, samples, chains, parallel: bool, seed: int = 0):
    t0 = time.perf_counter()
    jobs = [(name, warmup, samples, seed * chains + c) for c in range(chains)]
    if parallel:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(chains, os.cpu_count() or 1)) as pool:
            outs = pool.map(_pyro_worker, jobs)
    else:
        outs = [_pyro_worker(j) for j in jobs]
    wall = time.perf_counter() - t0
    cpu = sum(c for _, c in outs)  # the chains' CPU time (MCMC runs, in their processes)
    samples_np = {k: np.stack([o[k] for o, _ in outs]) for k in outs[0][0]}
    ess = min_bulk_ess(samples_np)
    return {"wall_s": wall, "cpu_s": cpu, "ess_per_cpu_s": ess / cpu, "min_ess_bulk": ess,
            "ess_per_s": ess / wall}


# ------------------------------------------------------------------ SVI


def transformer(batch, seq):
    torch.manual_seed(0)
    prog = load(str(ROOT / "examples" / "transformer_lm.qvr"))
    model = prog.morphism
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    ctx = torch.randint(0, 32, (batch, seq))
    obs = {"next_token": model.sample(ctx)}
    return model, ctx, obs


def _timed(step):
    """`run(k)`: `k` calls of `step()`, returning their (CPU, wall) seconds."""
    def run(k):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(k):
            step()
        return time.process_time() - c0, time.perf_counter() - t0
    return run


def timed_interleaved(runners: dict, steps: int, rounds: int = 5) -> dict:
    """Time `steps` SVI steps of every variant (`runners[name](k)` runs `k` steps and
    returns their CPU and wall seconds), interleaved: in each of `rounds` rounds every
    variant runs `steps / rounds` steps in turn, so that drifting load on the machine
    hits all variants alike.  Steps per second of process CPU time (the figure compared:
    every variant runs single-threaded in this process) and of wall time."""
    rounds = max(1, min(rounds, steps))
    per = max(1, steps // rounds)
    cpu = dict.fromkeys(runners, 0.0)
    wall = dict.fromkeys(runners, 0.0)
    for _ in range(rounds):
        for name, run in runners.items():
            c, w = run(per)
            cpu[name] += c
            wall[name] += w
    n = per * rounds
    return {name: {"steps_per_s": n / cpu[name], "wall_steps_per_s": n / wall[name],
                   "steps": n} for name in runners}


def svi_ours(batch, seq, default_adam=False):
    """A runner (`timed_interleaved`) of our SVI after one untimed warm-up step, with Adam
    as `qvr run --method svi` builds it (`qvr.inference.vi.svi.adam`: torch's fused
    implementation) or with `torch.optim.Adam`'s default implementation."""
    from qvr.inference.vi.svi import adam
    model, ctx, obs = transformer(batch, seq)
    guide = AutoNormalGuide(model, observed_names={"next_token"})
    params = list(model.parameters()) + list(guide.parameters())
    optim = torch.optim.Adam(params, lr=5e-2) if default_adam else adam(params, 5e-2)
    svi = SVI(model, guide, optim, ELBO(num_particles=1))
    svi.step(ctx, obs)  # warm-up step (lazy initialisation), not timed
    return _timed(lambda: svi.step(ctx, obs))


class HandWrittenTransformer:
    """The seed program's densities written out in plain torch, on the parameter tensors
    of a compiled `transformer_lm` (so that Pyro's optimiser updates the same tensors and
    the two densities can be compared at the same parameters).

    `h ~ backbone(ctx)` with `backbone = tok_embed >> stack(layer, 2)`,
    `layer = fan(head x 4) >> attn_proj >> residual_attn >> ff_up >> ff_down >>
    residual_ff`: every kernel is a Normal whose `(loc, log scale)` come from an MLP
    Linear-tanh-Linear-tanh-Linear, the embedding is a Normal per token.  Its marginal
    density is the estimator of the runtime spec (4.1), written per row:
    `log p(h | ctx) ~= logsumexp_i log N(h; last(y_i)) - log 100` over 100 ancestral
    draws `y_i` of every link but the last, made from a private generator seeded with 0
    at each call (common random numbers).  `next_token ~ Categorical(logits=
    lm_head(h))`."""

    N_DRAWS = 100

    def __init__(self, model):
        from qvr.runtime.combinators import Fan
        links = model._step_h.links()
        assert len(links) == 13 and isinstance(links[1], Fan) and isinstance(links[7], Fan)
        self.centers, self.log_sigma = links[0].centers, links[0].log_sigma
        self.links = [[self._mlp_params(k) for k in link.parts] if isinstance(link, Fan)
                      else self._mlp_params(link) for link in links[1:]]
        self.head = self._mlp_params(model._step_next_token)

    @staticmethod
    def _mlp_params(kernel):
        net = kernel.param_source.net
        return tuple(t for i in (0, 2, 4) for t in (net[i].weight, net[i].bias))

    @staticmethod
    def _mlp(p, x):
        linear = torch.nn.functional.linear
        h = torch.tanh(linear(x, p[0], p[1]))
        h = torch.tanh(linear(h, p[2], p[3]))
        return linear(h, p[4], p[5])

    def _normal(self, p, x):
        raw = self._mlp(p, x)
        d = raw.shape[-1] // 2
        return raw[..., :d], torch.exp(raw[..., d:]).clamp(min=1e-7)

    def _draw(self, p, y, generator):
        if isinstance(p, list):  # fan: the heads side by side, one noise tensor for all
            params = [self._normal(q, y) for q in p]
            loc = torch.stack([m for m, _ in params], -2)
            scale = torch.stack([s for _, s in params], -2)
            eps = torch.randn(loc.shape, generator=generator)
            return (loc + scale * eps).flatten(-2)
        loc, scale = self._normal(p, y)
        return loc + scale * torch.randn(loc.shape, generator=generator)

    def sample_prefix(self, ctx, sample_shape=(), generator=None):
        """Ancestral draws of every link but the last: `(*sample_shape, *ctx.shape, 16)`."""
        mu, sigma = self.centers[ctx], torch.exp(self.log_sigma[ctx]).clamp(min=1e-7)
        y = mu + sigma * torch.randn((*sample_shape, *mu.shape), generator=generator)
        for p in self.links[:-1]:
            y = self._draw(p, y, generator)
        return y

    def sample_backbone(self, ctx, sample_shape=()):
        return self._draw(self.links[-1], self.sample_prefix(ctx, sample_shape), None)

    def backbone_log_prob(self, ctx, h):
        import pyro.distributions as dist
        gen = torch.Generator().manual_seed(0)
        ys = self.sample_prefix(ctx, (self.N_DRAWS,), gen)  # (100, *ctx.shape, 16)
        loc, scale = self._normal(self.links[-1], ys)
        lp = dist.Normal(loc, scale).log_prob(h).sum(-1)
        return torch.logsumexp(lp, 0) - math.log(self.N_DRAWS)

    def head_logits(self, h):
        return self._mlp(self.head, h)


def check_handwritten(model, ctx, rows: int = 8) -> float:
    """The hand-written density against the runtime's on (at most) `rows` rows, with the
    same noise: the runtime's per-row layout (`dedup=False`, spec 9.3 to the letter) draws
    exactly the numbers the hand-written code draws.  Returns the largest difference of
    the log-densities (backbone and head); raises if it exceeds 1e-3."""
    from qvr.runtime.combinators import chain_log_prob
    hw = HandWrittenTransformer(model)
    ctx = ctx.reshape(-1)[:rows].reshape(-1, 1)
    with torch.no_grad():
        torch.manual_seed(1)
        h = model._step_h.sample(ctx)
        y = model._step_next_token.sample(h)
        ours = chain_log_prob(model._step_h.links(), ctx, h, 100, 0, dedup=False)
        theirs = hw.backbone_log_prob(ctx, h)
        head_ours = model._step_next_token.log_prob(h, y)
        head_theirs = torch.distributions.Categorical(logits=hw.head_logits(h)).log_prob(y)
    diff = max(float((ours - theirs).abs().max()), float((head_ours - head_theirs).abs().max()))
    if not diff < 1e-3:
        raise AssertionError(f"the hand-written Pyro density differs from the runtime's "
                             f"by {diff:.3g} with the same noise")
    return diff


def _pyro_svi(pmodel, ctx, y):
    """A runner (`timed_interleaved`) of Pyro's SVI on `pmodel` after one untimed warm-up
    step.  Each variant keeps its parameters in a param-store scope of its own (the
    guides' parameter names are equal), entered outside the timed steps."""
    import pyro
    from pyro.infer import SVI as PSVI, Trace_ELBO
    from pyro.infer.autoguide import AutoNormal
    store = pyro.get_param_store()
    with store.scope() as state:
        guide = AutoNormal(pmodel, init_scale=0.1)
        svi = PSVI(pmodel, guide, pyro.optim.Adam({"lr": 5e-2}), Trace_ELBO())
        svi.step(ctx, y)  # warm-up step (guide initialisation), not timed
    timed = _timed(lambda: svi.step(ctx, y))

    def run(k):
        with store.scope(state):
            return timed(k)
    return run


def _backbone_distribution(rsample, log_prob):
    """A Pyro distribution class for `h ~ backbone(x)` (16 features per position) whose
    sampler and density are `rsample(x, sample_shape)` and `log_prob(x, value)`."""
    import pyro.distributions as dist
    from torch.distributions import constraints

    class Backbone(dist.TorchDistribution):
        arg_constraints = {}
        support = constraints.independent(constraints.real, 1)
        has_rsample = True

        def __init__(self, x):
            self.x = x
            super().__init__(torch.Size(x.shape), torch.Size([16]), validate_args=False)

        def rsample(self, sample_shape=torch.Size()):
            return rsample(self.x, sample_shape)

        def log_prob(self, value):
            return log_prob(self.x, value)

    return Backbone


def svi_pyro(batch, seq):
    """The same workload written in Pyro: the seed's backbone and head as hand-written
    torch code (`HandWrittenTransformer`, the estimator of the spec per row) on the same
    parameter tensors (`pyro.module`), `AutoNormal` + `Trace_ELBO` + Pyro's Adam."""
    import pyro
    import pyro.distributions as dist

    model, ctx, obs = transformer(batch, seq)
    hw = HandWrittenTransformer(model)
    Backbone = _backbone_distribution(hw.sample_backbone, hw.backbone_log_prob)

    def pmodel(x, y):
        pyro.module("transformer", model)
        h = pyro.sample("h", Backbone(x).to_event(2))
        pyro.sample("next_token", dist.Categorical(logits=hw.head_logits(h)).to_event(2),
                    obs=y)

    return _pyro_svi(pmodel, ctx, obs["next_token"])


def svi_pyro_modules(batch, seq):
    """Pyro's SVI driving the runtime's own density modules (`backbone.log_prob`,
    `lm_head.log_prob`): isolates the inference machinery, since every runtime speed-up
    of the densities helps both sides equally."""
    import pyro
    import pyro.distributions as dist
    from torch.distributions import constraints

    model, ctx, obs = transformer(batch, seq)
    backbone, head = model._step_h, model._step_next_token
    Backbone = _backbone_distribution(backbone.rsample, backbone.log_prob)

    class Head(dist.TorchDistribution):
        arg_constraints = {}
        support = constraints.integer_interval(0, 31)

        def __init__(self, h):
            self.h = h
            super().__init__(torch.Size(h.shape[:-1]), torch.Size(), validate_args=False)

        def sample(self, sample_shape=torch.Size()):
            return head.sample(self.h, sample_shape)

        def log_prob(self, value):
            return head.log_prob(self.h, value)

    def pmodel(x, y):
        pyro.module("transformer", model)
        h = pyro.sample("h", Backbone(x).to_event(2))
        pyro.sample("next_token", Head(h).to_event(2), obs=y)

    return _pyro_svi(pmodel, ctx, obs["next_token"])


# ------------------------------------------------------------------ decoder_lm SVI

DECODER_WORKLOADS = ("svi_decoder_8x16", "svi_decoder_64x16")
DECODER_DRAWS = 8  # the draws `examples/decoder_lm.qvr` is fitted with (its header, README)


def decoder(batch, seq):
    """`examples/decoder_lm.qvr` (the issue-17 decoder transformer) with its composites at
    `DECODER_DRAWS` draws, and `batch` rows of `seq` tokens of its shipped corpus."""
    from qvr.datafiles import find_data, load_data
    from qvr.inference.front.fitting import set_draws
    torch.manual_seed(0)
    path = ROOT / "examples" / "decoder_lm.qvr"
    model = load(str(path)).morphism
    set_draws(model, DECODER_DRAWS)
    data = load_data(find_data(path))
    ctx = torch.as_tensor(data["x"][:batch, :seq])
    return model, ctx, {"next_token": torch.as_tensor(data["next_token"][:batch, :seq])}


def svi_decoder_ours(batch, seq):
    """Our SVI as `qvr run --method svi` builds it (empty guide: the decoder has no latent
    site; fused Adam; fresh common random numbers per step)."""
    from qvr.inference.vi.svi import adam
    model, ctx, obs = decoder(batch, seq)
    guide = AutoNormalGuide(model, observed_names=set(obs))
    svi = SVI(model, guide, adam(list(model.parameters()), 1e-2), ELBO(num_particles=1))
    svi.step(ctx, obs)
    return _timed(lambda: svi.step(ctx, obs))


def svi_decoder_pyro(batch, seq):
    """Pyro's SVI (Trace_ELBO, pyro.optim.Adam, an empty guide) driving the same density:
    `next_token` observed under a distribution whose `log_prob` is the runtime's own
    chain density (the same modules and parameters, registered with `pyro.module`)."""
    import pyro
    import pyro.distributions as dist
    from torch.distributions import constraints

    model, ctx, obs = decoder(batch, seq)
    chain = model._step_next_token

    class Decoder(dist.TorchDistribution):
        arg_constraints = {}
        support = constraints.integer_interval(0, 31)

        def __init__(self, x):
            self.x = x
            super().__init__(torch.Size(x.shape), torch.Size(), validate_args=False)

        def sample(self, sample_shape=torch.Size()):
            return chain.sample(self.x, sample_shape)

        def log_prob(self, value):
            return chain.log_prob(self.x, value)

    def pmodel(x, y):
        pyro.module("decoder", model)
        pyro.sample("next_token", Decoder(x).to_event(2), obs=y)

    def pguide(x, y):
        pass

    pyro.clear_param_store()
    svi = pyro.infer.SVI(pmodel, pguide, pyro.optim.Adam({"lr": 1e-2}), pyro.infer.Trace_ELBO())
    y = obs["next_token"]
    svi.step(ctx, y)
    return _timed(lambda: svi.step(ctx, y))


def bench_svi_decoder(key, args, have_pyro) -> dict:
    batch, seq = {"svi_decoder_8x16": (8, 16), "svi_decoder_64x16": (64, 16)}[key]
    runners = {"ours": svi_decoder_ours(batch, seq)}
    if have_pyro:
        runners["pyro"] = svi_decoder_pyro(batch, seq)
    steps = max(5, args.svi_steps if batch <= 8 else args.svi_steps // 2)
    out = timed_interleaved(runners, steps)
    ours = out["ours"]
    print(f"{key:<18} ours  {ours['steps_per_s']:9.2f} steps/s  (CPU time; wall "
          f"{ours['wall_steps_per_s']:.2f})   [decoder_lm, {DECODER_DRAWS} draws]", flush=True)
    if have_pyro:
        p = out["pyro"]
        out["ratio"] = ratio = ours["steps_per_s"] / p["steps_per_s"]
        print(f"{'':<18} pyro  {p['steps_per_s']:9.2f} steps/s  (wall "
              f"{p['wall_steps_per_s']:.2f})   ours/pyro = {ratio:.2f}x   [pyro driving the "
              f"runtime's own decoder density]", flush=True)
    return out


# ------------------------------------------------------------------ NUTS speed (issue 24)

#: the models of the speed table (`--nuts-speed`): written for NumPyro too
SPEED_MODELS = ("normal_normal", "eight_schools", "funnel_10d", "logistic_1000x10")
#: the settings NumPyro runs with, as printed
NUMPYRO_SETTINGS = ('NUTS(model) with its defaults, MCMC(chain_method="sequential", '
                    'progress_bar=False), run(key, extra_fields=("num_steps",))')
#: jax's compile events (seconds) summed as NumPyro's compile time of a run: tracing,
#: lowering to MLIR and the backend compile (which is the load when the persistent
#: compilation cache has the program)
JAX_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                      "/jax/core/compile/jaxpr_to_mlir_module_duration",
                      "/jax/core/compile/backend_compile_duration")
_JAX_COMPILE_S = [0.0]


def numpyro_models() -> dict:
    """The speed table's models in NumPyro's idiom: `pyro_models()`'s priors and
    likelihoods, on the same data (as jax arrays)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    X, yl = logistic_data()
    X, yl = jnp.asarray(X.numpy()), jnp.asarray(yl.numpy())
    nn = jnp.asarray(normal_normal_data()["y"].numpy())
    ys, sig = jnp.asarray(SCHOOLS_Y), jnp.asarray(SCHOOLS_SIGMA)

    def normal_normal():
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("obs", 50):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=nn)

    def eight_schools():
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
        with numpyro.plate("school", 8):
            eta = numpyro.sample("eta", dist.Normal(0.0, 1.0))
            numpyro.sample("y", dist.Normal(mu + tau * eta, sig), obs=ys)

    def funnel():
        v = numpyro.sample("v", dist.Normal(0.0, 3.0))
        with numpyro.plate("dim", 9):
            numpyro.sample("x", dist.Normal(0.0, jnp.exp(v / 2.0)))

    def logistic():
        alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0))
        with numpyro.plate("feature", 10):
            beta = numpyro.sample("beta", dist.Normal(0.0, 1.0))
        with numpyro.plate("row", 1000):
            numpyro.sample("y", dist.Bernoulli(logits=alpha + X @ beta), obs=yl)

    return {"normal_normal": normal_normal, "eight_schools": eight_schools,
            "funnel_10d": funnel, "logistic_1000x10": logistic}


def numpyro_available() -> bool:
    try:
        import numpyro  # noqa: F401
        return True
    except ImportError:
        return False


def setup_jax(cache_dir) -> float:
    """Import jax and NumPyro, start jax's CPU backend, listen to its compile events and,
    unless `cache_dir` is None, turn on its persistent compilation cache there (before
    anything compiles).  Returns the seconds this took (not counted in any run)."""
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpyro  # noqa: F401
    if cache_dir is not None:
        jax.config.update("jax_compilation_cache_dir", str(cache_dir))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    def listen(event, seconds, **_):
        if event in JAX_COMPILE_EVENTS:
            _JAX_COMPILE_S[0] += seconds
    jax.monitoring.register_event_duration_secs_listener(listen)
    jnp.ones(2).block_until_ready()
    return time.perf_counter() - t0


def run_numpyro_twice(name, warmup, samples, chains, seeds=(0,)) -> list:
    """NumPyro's NUTS on `name`: one MCMC object, `mcmc.run` with `PRNGKey(seed)` and
    `extra_fields=("num_steps",)`, first twice with `seeds[0]` (the first run compiles,
    the second reuses what jax kept: in memory, and on disk when the persistent cache is
    on), then once per further seed.  One dict per run: wall and CPU seconds, jax's
    compile seconds within it (`JAX_COMPILE_EVENTS`), mean leaves per chain and draw
    (`num_steps`, post-warmup only: NumPyro records no warmup field here), min bulk ESS,
    divergences."""
    import jax
    from numpyro.infer import MCMC as NMCMC, NUTS as NNUTS
    mcmc = NMCMC(NNUTS(numpyro_models()[name]), num_warmup=warmup, num_samples=samples,
                 num_chains=chains, chain_method="sequential", progress_bar=False)
    out = []
    for seed in (seeds[0], *seeds):
        _JAX_COMPILE_S[0] = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        mcmc.run(jax.random.PRNGKey(seed), extra_fields=("num_steps",))
        draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        extra = mcmc.get_extra_fields(group_by_chain=True)
        steps = np.asarray(extra["num_steps"], dtype=float)
        out.append({"seed": seed, "wall_s": wall, "cpu_s": cpu,
                    "jax_compile_s": _JAX_COMPILE_S[0],
                    "net_s": max(wall - _JAX_COMPILE_S[0], 0.0),
                    "leaves_per_chain_draw": float(steps.mean()),
                    "divergences": int(np.asarray(extra["diverging"]).sum()),
                    "min_ess_bulk": min_bulk_ess({k: np.asarray(v)
                                                  for k, v in draws.items()})})
    return out


def run_ours_speed(name, warmup, samples, chains, compiler, seed=0) -> dict:
    """One run of our NUTS with `NUTSKernel(compiler=compiler)`: wall and CPU seconds
    (loading the QVR text included), the run's `num_grad_evals` (batched density
    evaluations: with ``"transition"`` the loop passes), leaves per iteration
    (`num_grad_evals / (warmup + draws)`), the mean leaves per chain and draw
    (`num_steps`), seconds per chain-leaf (`wall / (num_grad_evals * chains)`), min bulk
    ESS, divergences and `MCMCResult.compiler` / `compiler_notes`."""
    src, x, obs = qvr_models()[name]
    torch.manual_seed(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    model = loads(src).morphism
    r = MCMC(NUTSKernel(compiler=compiler), num_warmup=warmup, num_samples=samples,
             num_chains=chains).run(model, x, obs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    evals = int(r.num_grad_evals)
    notes = list(r.compiler_notes)
    return {"seed": seed, "wall_s": wall, "cpu_s": cpu, "mcmc_s": r.total_time,
            "grad_evals": evals, "leaves_per_iter": evals / (warmup + samples),
            "leaves_per_chain_draw": float(r.num_steps.float().mean()),
            "s_per_chain_leaf": wall / (evals * chains) if evals else math.nan,
            "min_ess_bulk": min_bulk_ess({k: v.numpy() for k, v in r.samples.items()}),
            "divergences": r.total_divergences, "compiler": r.compiler,
            "compiler_notes": notes,
            "cache": ("compiled" if any("compiled by AOTInductor" in n for n in notes) else
                      "loaded" if any("loaded from the disk cache" in n for n in notes) else
                      "none")}


def _try(fn, *a, **kw):
    """`fn(*a, **kw)`, or `{"error": "Type: message"}` (the traceback on stderr)."""
    try:
        return fn(*a, **kw)
    except Exception as exc:  # reported in the table, the other runs go on
        import traceback
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def _med(runs, key):
    vals = [r[key] for r in runs if "error" not in r and key in r]
    return float(np.median(vals)) if vals else math.nan


def _fmt(v, width: int, prec: int) -> str:
    """`v` right-aligned in `width` with `prec` decimals, or "-" (a failed run)."""
    ok = isinstance(v, (int, float)) and math.isfinite(v)
    return f"{v:{width}.{prec}f}" if ok else f"{'-':>{width}}"


def _us(s):
    return s * 1e6


def bench_nuts_speed(names, args) -> dict:
    """The speed table (issue 24, "measure first"), per model of `names`: our NUTS with
    the compiled whole transition twice (cold, then from the disk cache), with
    TorchScript leaves once, and NumPyro's run twice; times, compile times, leaves per
    iteration and time per chain-leaf, and the ratios.  Returns the figures."""
    import shutil
    import tempfile
    W, S, C = args.warmup, args.samples, args.chains
    seeds = list(range(max(1, args.repeats)))
    have_numpyro = not args.no_numpyro and numpyro_available()
    if args.nuts_speed_cache:
        base, fresh = Path(args.nuts_speed_cache), False
        base.mkdir(parents=True, exist_ok=True)
    else:
        parent = os.environ.get("QVR_CACHE_DIR") or tempfile.gettempdir()
        Path(parent).mkdir(parents=True, exist_ok=True)
        base, fresh = Path(tempfile.mkdtemp(prefix="nuts-speed-", dir=parent)), True
    saved_env = os.environ.get("QVR_CACHE_DIR")
    os.environ["QVR_CACHE_DIR"] = str(base)
    out = {"settings": {"warmup": W, "samples": S, "chains": C, "seeds": seeds,
                        "qvr_cache_dir": str(base), "fresh_cache": fresh}, "models": {}}
    try:
        t0 = time.perf_counter()
        import torch._inductor  # noqa: F401  one-time imports, not timed in the runs
        from torch._inductor import aoti_compile_and_package, aoti_load_package  # noqa
        import torch.export  # noqa: F401
        imp_torch = time.perf_counter() - t0
        imp_jax = setup_jax(None if args.numpyro_no_cache else base / "jax") \
            if have_numpyro else None
        out["settings"].update(import_inductor_s=imp_torch, import_jax_s=imp_jax)
        print(f"NUTS speed: {C} chains x ({W} warmup + {S} draws), seeds {seeds}; ours: "
              f"NUTSKernel(compiler=...) otherwise default, torch 1 thread", flush=True)
        print(f"  ours 'transition' runs twice per model in this process: the 1st compiles "
              f"the whole transition (AOTInductor), the 2nd loads it from "
              f"$QVR_CACHE_DIR/transitions = {base / 'transitions'}"
              + (" (fresh, removed at the end)" if fresh else " (as given: a 1st run "
                 "may find it cached)") + "; compile = 1st - 2nd", flush=True)
        if have_numpyro:
            import jax
            import numpyro
            cache = ("off (jax's default: NumPyro's sequential chains then compile their "
                     "loop again in every chain of every run)" if args.numpyro_no_cache else
                     f"jax's persistent compilation cache on, fresh, in {base / 'jax'}")
            out["settings"]["numpyro"] = {"version": numpyro.__version__,
                                          "jax": jax.__version__,
                                          "settings": NUMPYRO_SETTINGS,
                                          "compile_cache": cache}
            print(f"  NumPyro {numpyro.__version__} (jax {jax.__version__}, float32, XLA "
                  f"threads as jax sets them): {NUMPYRO_SETTINGS}; mcmc.run twice on one "
                  f"MCMC object with the same key (the 1st compiles); compile cache: "
                  f"{cache}; jax's compile seconds (trace + lower + compile/load, from "
                  f"jax.monitoring) are given per run, 'net' = wall - them", flush=True)
        else:
            print("  NumPyro: " + ("skipped (--no-numpyro)" if args.no_numpyro else
                                   "not installed"), flush=True)
        print(f"  one-time imports before any timing: torch._inductor {imp_torch:.1f} s"
              + (f", jax + numpyro {imp_jax:.1f} s" if imp_jax is not None else ""),
              flush=True)
        print("  leaves/iter: ours num_grad_evals / (warmup + draws) (batched density "
              "evaluations, all iterations); per chain-draw: mean num_steps of the draws "
              "(NumPyro: num_steps, its only leaf count); us/chain-leaf: ours wall / "
              "(num_grad_evals x chains); NumPyro's (~) net wall / (mean num_steps x "
              "(warmup + draws) x chains), the warmup's leaves taken as the draws'",
              flush=True)
        for name in names:
            out["models"][name] = _nuts_speed_model(name, args, seeds, have_numpyro)
        _print_speed_tables(out["models"], have_numpyro)
    finally:
        if saved_env is None:
            os.environ.pop("QVR_CACHE_DIR", None)
        else:
            os.environ["QVR_CACHE_DIR"] = saved_env
        if fresh:
            shutil.rmtree(base, ignore_errors=True)
    return out


def _nuts_speed_model(name, args, seeds, have_numpyro) -> dict:
    W, S, C = args.warmup, args.samples, args.chains
    tag = f"{name:<18}"
    cold = _try(run_ours_speed, name, W, S, C, "transition", seed=seeds[0])
    warm = [_try(run_ours_speed, name, W, S, C, "transition", seed=s) for s in seeds]
    ts = [_try(run_ours_speed, name, W, S, C, "torchscript", seed=s) for s in seeds]
    res = {"transition_1st": cold, "transition_2nd": warm, "torchscript": ts}

    def line(label, r, extra=""):
        if "error" in r:
            print(f"{tag} {label:<16} FAILED: {r['error']}", flush=True)
            return
        print(f"{tag} {label:<16} {r['wall_s']:8.2f} s (cpu {r['cpu_s']:7.2f})  "
              f"leaves/iter {r['leaves_per_iter']:6.2f}, per chain-draw "
              f"{r['leaves_per_chain_draw']:6.2f}; {_us(r['s_per_chain_leaf']):8.1f} "
              f"us/chain-leaf; min ESS {r['min_ess_bulk']:6.0f}, divergences "
              f"{r['divergences']}; compiler {r['compiler']!r}{extra}", flush=True)
        for note in r["compiler_notes"]:
            print(f"{'':<18} {'':<16}   note: {note}", flush=True)
    line("transition 1st", cold)
    for r in warm:
        line(f"transition 2nd s{r.get('seed', '?')}" if len(seeds) > 1 else
             "transition 2nd", r)
    for r in ts:
        line(f"torchscript s{r.get('seed', '?')}" if len(seeds) > 1 else "torchscript", r)
    first = cold.get("wall_s", math.nan)
    second = warm[0].get("wall_s", math.nan)
    res["compile_s"] = first - second
    if "error" not in cold and cold["cache"] != "compiled":
        how = {"loaded": "found it in the disk cache",
               "none": "did not compile it (see the notes)"}[cold["cache"]]
        print(f"{'':<18} (the 1st run {how}: 1st - 2nd below is not a compile time)",
              flush=True)
    res["steady_s"] = _med(warm, "wall_s")
    res["steady_us_per_chain_leaf"] = _us(_med(warm, "s_per_chain_leaf"))
    res["torchscript_s"] = _med(ts, "wall_s")
    res["torchscript_us_per_chain_leaf"] = _us(_med(ts, "s_per_chain_leaf"))
    res["ratio_transition_torchscript"] = {
        "steady": res["steady_s"] / res["torchscript_s"],
        "first": first / res["torchscript_s"],
        "per_chain_leaf": res["steady_us_per_chain_leaf"] /
        res["torchscript_us_per_chain_leaf"]}
    rt = res["ratio_transition_torchscript"]
    print(f"{'':<18} compile (1st - 2nd) {_fmt(res['compile_s'], 0, 2)} s; transition/"
          f"torchscript time: 2nd {_fmt(rt['steady'], 0, 3)}x, 1st {_fmt(rt['first'], 0, 2)}"
          f"x, per chain-leaf {_fmt(rt['per_chain_leaf'], 0, 3)}x", flush=True)
    if not have_numpyro:
        return res
    np_runs = _try(run_numpyro_twice, name, W, S, C, seeds)
    if isinstance(np_runs, dict):  # failed
        print(f"{tag} {'numpyro':<16} FAILED: {np_runs['error']}", flush=True)
        res["numpyro"] = np_runs
        return res
    for r in np_runs:
        leaves = r["leaves_per_chain_draw"] * (W + S) * C
        r["s_per_chain_leaf"] = r["net_s"] / leaves if leaves else math.nan
    res["numpyro"] = np_runs
    labels = ["numpyro 1st", "numpyro 2nd" + (f" s{seeds[0]}" if len(seeds) > 1 else "")]
    for r, label in zip(np_runs, labels + [f"numpyro s{s}" for s in seeds[1:]]):
        print(f"{tag} {label:<16} {r['wall_s']:8.2f} s (cpu {r['cpu_s']:7.2f}; jax "
              f"compile {r['jax_compile_s']:6.2f} s, net {r['net_s']:7.2f} s)  per "
              f"chain-draw {r['leaves_per_chain_draw']:6.2f} leaves; ~"
              f"{_us(r['s_per_chain_leaf']):7.1f} us/chain-leaf; min ESS "
              f"{r['min_ess_bulk']:6.0f}, divergences {r['divergences']}", flush=True)
    n1, later = np_runs[0], np_runs[1:]
    res["numpyro_1st_s"] = n1["wall_s"]
    res["numpyro_steady_s"] = _med(later, "wall_s")
    res["numpyro_steady_net_s"] = _med(later, "net_s")
    res["numpyro_compile_s"] = n1["wall_s"] - later[0]["wall_s"]
    res["numpyro_us_per_chain_leaf"] = _us(_med(later, "s_per_chain_leaf"))
    res["ours_over_numpyro"] = r_ = {
        "steady": res["steady_s"] / res["numpyro_steady_s"],
        "steady_net": res["steady_s"] / res["numpyro_steady_net_s"]
        if res["numpyro_steady_net_s"] > 0 else math.nan,
        "end_to_end_1st": first / n1["wall_s"],
        "end_to_end_2nd": second / n1["wall_s"]}
    print(f"{'':<18} NumPyro compile (1st - 2nd) {res['numpyro_compile_s']:.2f} s; ours/"
          f"NumPyro time (< 1: ours faster): steady (2nd / 2nd) {_fmt(r_['steady'], 0, 3)}"
          f"x (/ NumPyro's net {_fmt(r_['steady_net'], 0, 3)}x); end to end: our 1st / "
          f"its 1st {_fmt(r_['end_to_end_1st'], 0, 2)}x, our 2nd / its 1st "
          f"{_fmt(r_['end_to_end_2nd'], 0, 3)}x", flush=True)
    return res


def _print_speed_tables(models: dict, have_numpyro: bool) -> None:
    """The two summary tables: times (seconds, and the ratios) and work (leaves per
    iteration, microseconds per chain-leaf).  Medians over seeds where there are several."""
    print("\nNUTS speed, times (s; 2nd and torchscript: median over seeds; ratios are time "
          "ratios, < 1: the first named is faster)", flush=True)
    head = (f"{'model':<18}{'ours 1st':>9}{'ours 2nd':>9}{'compile':>9}{'tscript':>9}"
            f"{'2nd/ts':>8}{'1st/ts':>8}")
    if have_numpyro:
        head += (f"{'np 1st':>9}{'np 2nd':>9}{'np net':>9}{'np comp':>9}{'steady':>8}"
                 f"{'1st/np1':>8}{'2nd/np1':>8}")
    print(head, flush=True)
    for name, m in models.items():
        c = m["transition_1st"].get("wall_s", math.nan)
        rt = m["ratio_transition_torchscript"]
        row = (f"{name:<18}{_fmt(c, 9, 2)}{_fmt(m['steady_s'], 9, 2)}"
               f"{_fmt(m['compile_s'], 9, 2)}{_fmt(m['torchscript_s'], 9, 2)}"
               f"{_fmt(rt['steady'], 8, 3)}{_fmt(rt['first'], 8, 2)}")
        if have_numpyro and "ours_over_numpyro" in m:
            r = m["ours_over_numpyro"]
            row += (f"{m['numpyro_1st_s']:9.2f}{m['numpyro_steady_s']:9.2f}"
                    f"{m['numpyro_steady_net_s']:9.2f}{m['numpyro_compile_s']:9.2f}"
                    f"{_fmt(r['steady'], 8, 3)}{_fmt(r['end_to_end_1st'], 8, 2)}"
                    f"{_fmt(r['end_to_end_2nd'], 8, 3)}")
        print(row, flush=True)
    print("\nNUTS speed, work (leaves per iteration; microseconds per chain-leaf, from the "
          "2nd / torchscript runs)", flush=True)
    head = (f"{'model':<18}{'tr leaves/it':>13}{'tr /chain-draw':>15}{'ts leaves/it':>13}"
            f"{'tr us/leaf':>11}{'ts us/leaf':>11}")
    if have_numpyro:
        head += f"{'np /chain-draw':>15}{'np us/leaf~':>12}"
    print(head, flush=True)
    for name, m in models.items():
        row = (f"{name:<18}{_fmt(_med(m['transition_2nd'], 'leaves_per_iter'), 13, 2)}"
               f"{_fmt(_med(m['transition_2nd'], 'leaves_per_chain_draw'), 15, 2)}"
               f"{_fmt(_med(m['torchscript'], 'leaves_per_iter'), 13, 2)}"
               f"{_fmt(m['steady_us_per_chain_leaf'], 11, 1)}"
               f"{_fmt(m['torchscript_us_per_chain_leaf'], 11, 1)}")
        if have_numpyro and "ours_over_numpyro" in m:
            later = m["numpyro"][1:]
            row += (f"{_fmt(_med(later, 'leaves_per_chain_draw'), 15, 2)}"
                    f"{_fmt(m['numpyro_us_per_chain_leaf'], 12, 1)}")
        print(row, flush=True)


# ------------------------------------------------------------------ main


def bench_nuts(name, args, have_pyro) -> dict:
    out = {"runs": []}
    if name in HMM_WORKLOADS:
        warmup, samples = _budget(name, args)
        print(f"{name:<18} {args.chains} chains x ({warmup} warmup + {samples} draws); the "
              f"regimes summed out on both sides", flush=True)
        if have_pyro:
            out["check_max_abs_diff"] = check_hmm_density()
            print(f"{'':<18} log joint with the regimes summed out: ours = Pyro's "
                  f"TraceEnum_ELBO to {out['check_max_abs_diff']:.1e}", flush=True)
    for rep in range(args.repeats):
        out["runs"].append(_nuts_once(name, args, have_pyro, rep))
    out.update(out["runs"][0])
    if args.repeats > 1:
        med = {side: float(np.median([r[side]["ess_per_s"] for r in out["runs"]]))
               for side in ("ours", "pyro") if side in out["runs"][0]}
        out["median_ess_per_s"] = med
        line = f"{'':<18} median over {args.repeats} seeds: ours {med['ours']:.2f} ESS/s"
        if "pyro" in med:
            out["median_ratio"] = med["ours"] / med["pyro"] if med["pyro"] > 0 else math.inf
            line += f", pyro {med['pyro']:.2f} ESS/s, ours/pyro = {out['median_ratio']:.2f}x"
            per_seed = [r["ratio"] for r in out["runs"]]
            line += " (per seed " + " / ".join(f"{v:.2f}x" for v in per_seed) + ")"
            pooled = {side: sum(r[side]["min_ess_bulk"] for r in out["runs"]) /
                      sum(r[side]["wall_s"] for r in out["runs"]) for side in ("ours", "pyro")}
            out["pooled_ratio"] = pooled["ours"] / pooled["pyro"] if pooled["pyro"] > 0 \
                else math.inf
            line += f"; pooled (all seeds' ESS / all seeds' time) {out['pooled_ratio']:.2f}x"
        print(line, flush=True)
    return out


def _budget(name, args) -> tuple:
    """(warmup, draws) of a workload: the HMM has its own (`--hmm-warmup/--hmm-samples`)."""
    if name in HMM_WORKLOADS:
        return args.hmm_warmup, args.hmm_samples
    return args.warmup, args.samples


def _nuts_once(name, args, have_pyro, seed) -> dict:
    warmup, samples = _budget(name, args)
    ours = run_ours(name, warmup, samples, args.chains, seed=seed)
    tag = f"{name} [seed {seed}]" if args.repeats > 1 else name
    print(f"{tag:<18} ours  {ours['ess_per_s']:9.1f} ESS/s  (min ESS {ours['min_ess_bulk']:7.0f} "
          f"in {ours['wall_s']:6.1f} s, divergences {ours['divergences']}, mean depth "
          f"{ours['mean_tree_depth']:.2f}; {ours['ess_per_cpu_s']:.2f} ESS per CPU second)",
          flush=True)
    out = {"ours": ours}
    if args.also_spec:
        ob = run_ours(name, warmup, samples, args.chains, seed=seed,
                      transition="uniform", uturn="position")
        out["ours_spec"] = ob
        print(f"{'':<18} ours (spec 6.6.5 verbatim: uniform merge, position U-turn) "
              f"{ob['ess_per_s']:9.1f} ESS/s  (min ESS {ob['min_ess_bulk']:7.0f} in "
              f"{ob['wall_s']:6.1f} s)", flush=True)
    if have_pyro:
        p = run_pyro(name, warmup, samples, args.chains,
                     parallel=not args.pyro_sequential, seed=seed)
        ratio = ours["ess_per_s"] / p["ess_per_s"] if p["ess_per_s"] > 0 else math.inf
        out.update(pyro=p, ratio=ratio)
        out["cpu_ratio"] = ours["ess_per_cpu_s"] / p["ess_per_cpu_s"] \
            if p["ess_per_cpu_s"] > 0 else math.inf
        print(f"{'':<18} pyro  {p['ess_per_s']:9.1f} ESS/s  (min ESS {p['min_ess_bulk']:7.0f} "
              f"in {p['wall_s']:6.1f} s; {p['ess_per_cpu_s']:.2f} ESS per CPU second)   "
              f"ours/pyro = {ratio:.2f}x (per CPU second {out['cpu_ratio']:.2f}x)", flush=True)
    return out


def bench_svi(key, args, have_pyro) -> dict:
    batch, seq = (2, 1) if key == "svi_2x1" else (256, 16)
    steps = args.svi_steps if batch * seq <= 16 else max(3, args.svi_steps // 5)
    runners = {"ours": svi_ours(batch, seq),
               "ours_default_adam": svi_ours(batch, seq, default_adam=True)}
    out = {}
    if have_pyro:
        model, ctx, _ = transformer(batch, seq)
        out["check_max_abs_diff"] = check_handwritten(model, ctx)
        runners.update(pyro=svi_pyro(batch, seq), pyro_modules=svi_pyro_modules(batch, seq))
    out.update(timed_interleaved(runners, steps))
    ours, od = out["ours"], out["ours_default_adam"]
    print(f"{key:<18} ours  {ours['steps_per_s']:9.2f} steps/s  (CPU time; wall "
          f"{ours['wall_steps_per_s']:.2f})   [Adam as `qvr run` builds it: fused]",
          flush=True)
    print(f"{'':<18} ours  {od['steps_per_s']:9.2f} steps/s  (wall "
          f"{od['wall_steps_per_s']:.2f})   [torch.optim.Adam's default implementation]",
          flush=True)
    if have_pyro:
        p, pm = out["pyro"], out["pyro_modules"]
        out["ratio"] = ratio = ours["steps_per_s"] / p["steps_per_s"]
        out["ratio_modules"] = ratio_m = ours["steps_per_s"] / pm["steps_per_s"]
        print(f"{'':<18} pyro  {p['steps_per_s']:9.2f} steps/s  (wall "
              f"{p['wall_steps_per_s']:.2f})   ours/pyro = {ratio:.2f}x   [the model "
              f"written in Pyro; same density as ours to {out['check_max_abs_diff']:.1e} "
              f"with the same noise]", flush=True)
        print(f"{'':<18} pyro  {pm['steps_per_s']:9.2f} steps/s  (wall "
              f"{pm['wall_steps_per_s']:.2f})   ours/pyro = {ratio_m:.2f}x   [pyro driving "
              f"the runtime's own density modules]", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--only", nargs="*", help="run only these workloads (model names, "
                    "svi_2x1, svi_256x16, svi_decoder_8x16, svi_decoder_64x16, and "
                    "nuts_speed: the NUTS speed table of --nuts-speed on its four models)")
    ap.add_argument("--nuts-speed", nargs="*", metavar="MODEL", default=None,
                    help="print only the NUTS speed table (issue 24): our compiled whole "
                         "transition cold and from the disk cache, TorchScript leaves, "
                         "NumPyro twice; on these models (default: "
                         + ", ".join(SPEED_MODELS) + ")")
    ap.add_argument("--no-numpyro", action="store_true",
                    help="speed table: skip NumPyro")
    ap.add_argument("--numpyro-no-cache", action="store_true",
                    help="speed table: leave jax's persistent compilation cache off "
                         "(default: on, in a fresh directory, so that NumPyro's 2nd run "
                         "does not compile again)")
    ap.add_argument("--nuts-speed-cache", metavar="DIR",
                    help="speed table: use DIR as QVR_CACHE_DIR (and DIR/jax for jax) and "
                         "keep it (default: a fresh directory under $QVR_CACHE_DIR or the "
                         "system's temporary directory, removed at the end, so that the "
                         "1st run compiles)")
    ap.add_argument("--no-pyro", action="store_true", help="skip the Pyro comparison")
    ap.add_argument("--pyro-sequential", action="store_true",
                    help="run Pyro's chains one after the other (default: parallel processes)")
    ap.add_argument("--svi-steps", type=int, default=20)
    ap.add_argument("--hmm-warmup", type=int, default=200,
                    help="warmup iterations of the HMM workload (default 200: one Pyro "
                         "gradient of it costs about 0.1 s)")
    ap.add_argument("--hmm-samples", type=int, default=200,
                    help="draws of the HMM workload (default 200)")
    ap.add_argument("--also-spec", action="store_true",
                    help="also run our NUTS with the spec's verbatim rules (uniform subtree "
                         "merge, position U-turn criterion); the default kernel uses "
                         "Stan/Pyro's biased progressive merge and generalised criterion")
    ap.add_argument("--repeats", type=int, default=3,
                    help="NUTS: run every workload with this many seeds (ours: torch seed "
                         "0, 1, ...; Pyro: chain seeds 0-3, 4-7, ...) and compare the "
                         "median ESS/s (default 3); min-ESS of a hard posterior (the "
                         "funnel) varies several-fold between seeds on both sides")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        import pyro  # noqa: F401
        have_pyro = not args.no_pyro
    except ImportError:
        have_pyro = False
    print(f"torch {torch.__version__}, 1 thread; pyro: "
          f"{'yes' if have_pyro else 'not installed (pip install -e .[bench])' if not args.no_pyro else 'skipped'}")
    results = {}
    models = qvr_models()
    if args.nuts_speed is not None:
        speed = list(args.nuts_speed) or list(SPEED_MODELS)
        for name in speed:
            if name not in SPEED_MODELS:
                ap.error(f"--nuts-speed: {name!r} is not one of {', '.join(SPEED_MODELS)}")
        order = ["nuts_speed"]
    else:
        speed = list(SPEED_MODELS)
        order = list(args.only) if args.only else [*models, "svi_2x1", "svi_256x16",
                                                   *DECODER_WORKLOADS]
    if args.nuts_speed is None:  # the ESS/s workloads' line, as before
        print(f"NUTS: {args.chains} chains x ({args.warmup} warmup + {args.samples} draws);"
              " metric: min bulk ESS / total wall time")
    warm_up()
    for name in order:
        if name == "nuts_speed":
            results[name] = bench_nuts_speed(speed, args)
        elif name in models:
            results[name] = bench_nuts(name, args, have_pyro)
        elif name in ("svi_2x1", "svi_256x16"):
            results[name] = bench_svi(name, args, have_pyro)
        elif name in DECODER_WORKLOADS:
            results[name] = bench_svi_decoder(name, args, have_pyro)
        else:
            ap.error(f"unknown workload {name!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
