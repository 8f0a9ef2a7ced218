"""The six shared posteriors: NUTS wall time, min bulk ESS/s and agreement with posteriordb.

    .venv/bin/python bench/posteriors.py [--warmup 500] [--samples 500] [--chains 4]
                                         [--only NAME ...] [--no-pyro] [--no-numpyro]
                                         [--baseline] [--pyro-warmup N] [--pyro-samples N]
                                         [--json FILE]

For each posterior of ``../shared/posteriordb-sample`` (issue 23) this fits the example
program written with the statistics extension (docs/extensions.md E9; the programs and
their data are in ``examples/``) with ``qvr.fit`` and NUTS (the front door a user calls:
compile, warmup and sampling included in the wall time), and prints

* wall seconds, the minimum bulk ESS over all parameters (recorded quantities included)
  and min bulk ESS per wall second;
* against the reference (``reference.json``: posteriordb's gold-standard draws) the largest
  |mean - ref| / MCSE and the range of sd / ref sd;
* qvr twice: ``qvr`` (a NUTS run of 400+ iterations compiles its whole transition, or
  loads it from ``$QVR_CACHE_DIR/transitions``) and ``qvr-cached`` (the same fit again,
  the transition loaded from disk); with ``--baseline`` first ``qvr-ticks``, the path
  before issue 24 (the tree built from Python one TorchScript leaf at a time), and the
  ratios before / now;
* the same model and data in Pyro and NumPyro (their NUTS, same warmup, draws and chains;
  Pyro's chains in parallel processes where it counts more than one CPU, NumPyro's
  ``chain_method="sequential"``, no progress
  bar; Pyro may get a smaller budget of its own: its Python loops make a 200-step
  recurrence cost minutes) when they are installed — and our/their ratios of ESS/s, all from one run.

ESS and MCSE are computed by ``qvr.inference.criticism.diagnostics`` for every side.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qvr import load  # noqa: E402
from qvr.datafiles import find_data, load_data  # noqa: E402
from qvr.inference import fit  # noqa: E402
from qvr.inference.criticism.diagnostics import ess_bulk  # noqa: E402

SHARED = ROOT.parent / "shared" / "posteriordb-sample"

#: posteriordb name -> (example program, {reference name prefix: our site name})
POSTERIORS = {
    "eight_schools-eight_schools_noncentered": ("eight_schools", {}),
    "kidiq-kidscore_momhsiq": ("kid_scores", {}),
    "arK-arK": ("ar_series", {}),
    "garch-garch11": ("garch_volatility", {}),
    "hmm_example-hmm_example": ("hmm_forward", {}),
    "gp_pois_regr-gp_pois_regr": ("gp_counts", {}),
}


def flat_draws(samples: dict) -> dict:
    """`{site: (C, S, *shape)}` -> `{"site[i,j]" (1-based, Stan's names): (C, S)}`."""
    out = {}
    for name, a in samples.items():
        name = name.removeprefix("recorded.")  # recorded quantities (`record v = e`)
        a = np.asarray(a, dtype=float)
        if a.ndim == 2 or a.shape[2:] == (1,):  # a scalar site ((C, S) or (C, S, 1))
            out[name] = a.reshape(a.shape[0], a.shape[1])
            continue
        for idx in np.ndindex(*a.shape[2:]):
            out[f"{name}[{','.join(str(i + 1) for i in idx)}]"] = a[(slice(None), slice(None)) + idx]
    return out


def mcse_mean(x: np.ndarray) -> float:
    return float(np.std(x) / math.sqrt(max(float(ess_bulk(x)), 1.0)))


def compare(draws: dict, reference: dict) -> dict:
    """Largest |z| of the means and the range of sd ratios over the reference's names."""
    zs, ratios, missing = [], [], []
    for name, ref in reference["params"].items():
        if name not in draws:
            missing.append(name)
            continue
        x = draws[name]
        zs.append(abs(float(x.mean()) - ref["mean"]) / max(mcse_mean(x), 1e-12))
        ratios.append(float(x.std()) / ref["sd"])
    return {"max_z": max(zs) if zs else float("nan"),
            "sd_ratio": (min(ratios), max(ratios)) if ratios else (float("nan"),) * 2,
            "missing": missing}


def run_qvr(example: str, warmup: int, samples: int, chains: int, seed: int,
            ticks: bool = False) -> dict:
    """`qvr.fit` with NUTS.  `ticks`: the path before issue 24 (the tree built from Python
    one TorchScript leaf at a time, and densities slower than 50 ms per evaluation left
    eager) — the baseline the whole compiled transition is measured against."""
    import os
    from qvr.inference.mcmc.potential import ProgramTarget
    saved = os.environ.get("QVR_MCMC_COMPILER"), ProgramTarget.compile_below_s
    if ticks:
        os.environ["QVR_MCMC_COMPILER"] = "torchscript"
        ProgramTarget.compile_below_s = 0.05
    try:
        return _run_qvr(example, warmup, samples, chains, seed)
    finally:
        if saved[0] is None:
            os.environ.pop("QVR_MCMC_COMPILER", None)
        else:
            os.environ["QVR_MCMC_COMPILER"] = saved[0]
        ProgramTarget.compile_below_s = saved[1]


def _run_qvr(example: str, warmup: int, samples: int, chains: int, seed: int) -> dict:
    path = ROOT / "examples" / f"{example}.qvr"
    program = load(str(path))
    t0 = time.perf_counter()
    result = fit(program, config={"method": "nuts", "num_warmup": warmup,
                                  "num_samples": samples, "num_chains": chains, "seed": seed,
                                  **_shipped(path)},
                 program_path=str(path))
    wall = time.perf_counter() - t0
    if result.status != "finished":
        raise RuntimeError(f"{example}: {result.status}: {result.message}")
    draws = flat_draws(result.samples)
    return {"wall": wall, "draws": draws, "min_ess": min(float(ess_bulk(v)) for v in draws.values())}


def _shipped(path: Path) -> dict:
    fit_json = path.parent / "data" / f"{path.stem}.fit.json"
    return json.loads(fit_json.read_text()) if fit_json.is_file() else {}


# ----------------------------------------------------------------- Pyro and NumPyro

def _data(example: str) -> dict:
    return {k: np.asarray(v) for k, v in load_data(find_data(ROOT / "examples" / f"{example}.qvr")).items()}


def pyro_model(example: str):
    """The same model in Pyro (torch), in Stan's parameterisation."""
    import torch
    import pyro
    import pyro.distributions as dist

    d = {k: torch.as_tensor(v, dtype=torch.float64 if example == "gp_counts" else torch.float32)
         for k, v in _data(example).items()}

    def flat(support, batch_shape, event_shape):
        """A flat density on `support` (Stan's unbounded parameter without a prior):
        a proper distribution with that support, masked so that its log density is 0.
        Pyro's `ImproperUniform` cannot be drawn from, and Pyro's NUTS draws every site
        once while setting up, whatever the init strategy."""
        shape = tuple(batch_shape) + tuple(event_shape)
        base = {dist.constraints.real: dist.Normal(torch.zeros(shape), 1.0),
                dist.constraints.positive: dist.HalfNormal(torch.ones(shape))}[support]
        return base.to_event(len(event_shape)).mask(False)

    if example == "eight_schools":
        def model():
            mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = pyro.sample("tau", dist.HalfCauchy(5.0))
            with pyro.plate("school", 8):
                tt = pyro.sample("theta_trans", dist.Normal(0.0, 1.0))
                theta = pyro.deterministic("theta", mu + tau * tt)
                pyro.sample("y", dist.Normal(theta, d["sigma"]), obs=d["y"])
    elif example == "kid_scores":
        def model():
            beta = pyro.sample("beta", flat(dist.constraints.real, (), (3,)))
            sigma = pyro.sample("sigma", dist.HalfCauchy(2.5))
            with pyro.plate("child", d["design"].shape[0]):
                pyro.sample("kid_score", dist.Normal(d["design"] @ beta, sigma), obs=d["kid_score"])
    elif example == "ar_series":
        y = d["y"]
        lagged = torch.stack([y[4 - k:195 + 4 - k] for k in range(5)], -1)

        def model():
            alpha = pyro.sample("alpha", dist.Normal(0.0, 10.0))
            beta = pyro.sample("beta", dist.Normal(0.0, 10.0).expand([5]).to_event(1))
            sigma = pyro.sample("sigma", dist.HalfCauchy(2.5))
            pyro.sample("y", dist.Normal(alpha + lagged @ beta, sigma).to_event(1), obs=y[5:])
    elif example == "garch_volatility":
        y, s1 = d["y"], d["sigma1"]

        def model():
            mu = pyro.sample("mu", flat(dist.constraints.real, (), ()))
            alpha0 = pyro.sample("alpha0", flat(dist.constraints.positive, (), ()))
            alpha1 = pyro.sample("alpha1", dist.Uniform(0.0, 1.0))
            # Stan's flat beta1 on (0, 1 - alpha1), written as a scaled unit uniform plus the
            # log(1 - alpha1) that makes its density 1 there (an ImproperUniform with this
            # dependent interval gave NumPyro a wrong posterior for beta1)
            raw = pyro.sample("beta1_raw", dist.Uniform(0.0, 1.0))
            beta1 = pyro.deterministic("beta1", raw * (1.0 - alpha1))
            pyro.factor("beta1_flat", torch.log(1.0 - alpha1))
            sig = [s1 * torch.ones(())]
            for t in range(1, len(y)):
                sig.append(torch.sqrt(alpha0 + alpha1 * (y[t - 1] - mu) ** 2 + beta1 * sig[-1] ** 2))
            pyro.sample("y", dist.Normal(mu, torch.stack(sig)).to_event(1), obs=y)
    elif example == "hmm_forward":
        y = d["y"]

        def model():
            t1 = pyro.sample("theta1", dist.Dirichlet(torch.ones(2)))
            t2 = pyro.sample("theta2", dist.Dirichlet(torch.ones(2)))
            # positive-ordered mu, flat, through its bijector and log-Jacobian
            to_ordered = dist.transforms.biject_to(dist.constraints.positive_ordered_vector)
            raw = pyro.sample("mu_raw", flat(dist.constraints.real, (), (2,)))
            mu = pyro.deterministic("mu", to_ordered(raw))
            pyro.factor("mu_jacobian", to_ordered.log_abs_det_jacobian(raw, mu).sum())
            pyro.factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0])
                        + dist.Normal(10.0, 1.0).log_prob(mu[1]))
            log_theta = torch.log(torch.stack([t1, t2]))
            emit = dist.Normal(mu, 1.0).log_prob(y[:, None])
            a = emit[0]
            for t in range(1, len(y)):
                a = torch.logsumexp(log_theta.T + a, -1) + emit[t]
            pyro.factor("likelihood", torch.logsumexp(a, -1))
    elif example == "gp_counts":
        x, k = d["x"], d["k"]

        def model():
            rho = pyro.sample("rho", dist.Gamma(torch.tensor(25.0, dtype=x.dtype), 4.0))
            alpha = pyro.sample("alpha", dist.HalfNormal(torch.tensor(2.0, dtype=x.dtype)))
            ft = pyro.sample("f_tilde", dist.Normal(torch.zeros(11, dtype=x.dtype), 1.0).to_event(1))
            cov = alpha ** 2 * torch.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho ** 2)
            L = torch.linalg.cholesky(cov + 1e-10 * torch.eye(11, dtype=x.dtype))
            f = pyro.deterministic("f", L @ ft)
            pyro.sample("k", dist.Poisson(torch.exp(f)).to_event(1), obs=k)
    else:  # pragma: no cover
        raise KeyError(example)
    return model


def run_pyro(example: str, warmup: int, samples: int, chains: int, seed: int) -> dict:
    import pyro
    from pyro.infer import MCMC, NUTS, Predictive

    pyro.set_rng_seed(seed)
    model = pyro_model(example)
    t0 = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_samples=samples, warmup_steps=warmup,
                num_chains=chains,
                mp_context="spawn" if chains > 1 else None, disable_progbar=True)
    mcmc.run()
    wall = time.perf_counter() - t0
    grouped = {k: v.detach().numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    det = Predictive(model, posterior_samples=mcmc.get_samples(), return_sites=["theta", "f", "beta1", "mu"])()
    for k, v in det.items():
        grouped[k] = v.detach().numpy().reshape(chains, samples, *v.shape[1:])
    draws = flat_draws(grouped)
    return {"wall": wall, "draws": draws, "min_ess": min(float(ess_bulk(v)) for v in draws.values())}


def numpyro_available() -> bool:
    try:
        import numpyro  # noqa: F401
        return True
    except ImportError:
        return False


def pyro_available() -> bool:
    try:
        import pyro  # noqa: F401
        return True
    except ImportError:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="posteriordb names or example names")
    ap.add_argument("--no-pyro", action="store_true")
    ap.add_argument("--no-numpyro", action="store_true")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    ap.add_argument("--baseline", action="store_true",
                    help="also run qvr as before issue 24 (TorchScript leaves from Python)")
    ap.add_argument("--pyro-warmup", type=int, default=None,
                    help="Pyro's own warmup (its Python loops make a recurrence slow)")
    ap.add_argument("--pyro-samples", type=int, default=None)
    args = ap.parse_args(argv)
    names = [n for n, (ex, _) in POSTERIORS.items()
             if not args.only or n in args.only or ex in args.only]
    sides = (["qvr-ticks"] if args.baseline else []) + ["qvr", "qvr-cached"] + (["pyro"] if not args.no_pyro and pyro_available() else []) \
        + (["numpyro"] if not args.no_numpyro and numpyro_available() else [])
    print(f"NUTS, {args.chains} chains x ({args.warmup} warmup + {args.samples} draws), seed "
          f"{args.seed}; sides: {', '.join(sides)}"
          + ("" if "pyro" in sides else " (Pyro not installed: pip install pyro-ppl)")
          + ("" if "numpyro" in sides else " (NumPyro not installed)"))
    header = f"{'posterior':42} {'side':10} {'wall s':>8} {'minESS':>7} {'ESS/s':>8} " \
             f"{'max|z|':>7} {'sd/ref':>11}"
    print(header)
    out = {}
    for name in names:
        example = POSTERIORS[name][0]
        ref_file = SHARED / name / "reference.json"
        if not ref_file.is_file():  # the copy the tests use
            ref_file = ROOT / "tests" / "inference" / "posteriordb" / f"{name}.json"
        reference = json.loads(ref_file.read_text()) if ref_file.is_file() else None
        for side in sides:
            try:
                if side in ("qvr", "qvr-cached", "qvr-ticks"):
                    # "qvr" may compile the whole NUTS transition (cold: seconds of C++);
                    # "qvr-cached" is the same fit again, the transition loaded from disk
                    r = run_qvr(example, args.warmup, args.samples, args.chains, args.seed,
                                ticks=side == "qvr-ticks")
                elif side == "pyro":
                    r = run_pyro(example, args.pyro_warmup or args.warmup,
                                 args.pyro_samples or args.samples, args.chains, args.seed)
                else:
                    r = run_numpyro(example, args.warmup, args.samples, args.chains, args.seed)
            except Exception as exc:  # a failure is a figure too
                print(f"{name:42} {side:10} failed: {type(exc).__name__}: {exc}")
                continue
            cmp = compare(r["draws"], reference) if reference else None
            rate = r["min_ess"] / r["wall"]
            out.setdefault(name, {})[side] = {"wall": r["wall"], "min_ess": r["min_ess"],
                                              "ess_per_s": rate, **(cmp or {})}
            zs = f"{cmp['max_z']:7.2f}" if cmp else "      -"
            sd = f"{cmp['sd_ratio'][0]:.2f}-{cmp['sd_ratio'][1]:.2f}" if cmp else "-"
            print(f"{name:42} {side:10} {r['wall']:8.1f} {r['min_ess']:7.0f} {rate:8.2f} {zs} "
                  f"{sd:>11}" + (f"  missing {cmp['missing']}" if cmp and cmp["missing"] else ""),
                  flush=True)
        ours = out.get(name, {}).get("qvr-cached")
        before = out.get(name, {}).get("qvr-ticks")
        if ours and before:
            print(f"{'':42} wall before / now (cached): {before['wall'] / ours['wall']:.1f}x, "
                  f"ESS/s now / before: {ours['ess_per_s'] / before['ess_per_s']:.1f}x")
        for side in [x for x in sides if not x.startswith("qvr")]:
            theirs = out.get(name, {}).get(side)
            if ours and theirs:
                print(f"{'':42} ESS/s ours (cached) / {side}: "
                      f"{ours['ess_per_s'] / theirs['ess_per_s']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def run_numpyro(example: str, warmup: int, samples: int, chains: int, seed: int) -> dict:
    """NumPyro's NUTS on the same models (written for jax; sequential chains)."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    if example == "gp_counts":
        jax.config.update("jax_enable_x64", True)
    d = {k: jnp.asarray(v) for k, v in _data(example).items()}
    flat = dist.ImproperUniform

    if example == "eight_schools":
        def model():
            mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
            with numpyro.plate("school", 8):
                tt = numpyro.sample("theta_trans", dist.Normal(0.0, 1.0))
                theta = numpyro.deterministic("theta", mu + tau * tt)
                numpyro.sample("y", dist.Normal(theta, d["sigma"]), obs=d["y"])
    elif example == "kid_scores":
        def model():
            beta = numpyro.sample("beta", flat(dist.constraints.real, (), (3,)))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
            numpyro.sample("kid_score", dist.Normal(d["design"] @ beta, sigma).to_event(1),
                           obs=d["kid_score"])
    elif example == "ar_series":
        y = d["y"]
        lagged = jnp.stack([y[4 - k:195 + 4 - k] for k in range(5)], -1)

        def model():
            alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
            beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([5]).to_event(1))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
            numpyro.sample("y", dist.Normal(alpha + lagged @ beta, sigma).to_event(1), obs=y[5:])
    elif example == "garch_volatility":
        y, s1 = d["y"], d["sigma1"]

        def model():
            mu = numpyro.sample("mu", flat(dist.constraints.real, (), ()))
            alpha0 = numpyro.sample("alpha0", flat(dist.constraints.positive, (), ()))
            alpha1 = numpyro.sample("alpha1", dist.Uniform(0.0, 1.0))
            raw = numpyro.sample("beta1_raw", dist.Uniform(0.0, 1.0))  # as in pyro_model
            beta1 = numpyro.deterministic("beta1", raw * (1.0 - alpha1))
            numpyro.factor("beta1_flat", jnp.log(1.0 - alpha1))

            def step(s, yp):
                s = jnp.sqrt(alpha0 + alpha1 * (yp - mu) ** 2 + beta1 * s ** 2)
                return s, s
            _, rest = jax.lax.scan(step, s1 * jnp.ones(()), y[:-1])
            numpyro.sample("y", dist.Normal(mu, jnp.concatenate([jnp.array([s1]), rest])).to_event(1), obs=y)
    elif example == "hmm_forward":
        y = d["y"]

        def model():
            t1 = numpyro.sample("theta1", dist.Dirichlet(jnp.ones(2)))
            t2 = numpyro.sample("theta2", dist.Dirichlet(jnp.ones(2)))
            mu = numpyro.sample("mu", flat(dist.constraints.positive_ordered_vector, (), (2,)))
            numpyro.factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0])
                           + dist.Normal(10.0, 1.0).log_prob(mu[1]))
            log_theta = jnp.log(jnp.stack([t1, t2]))
            emit = dist.Normal(mu, 1.0).log_prob(y[:, None])

            def step(a, e):
                a = jax.nn.logsumexp(log_theta.T + a, -1) + e
                return a, None
            a, _ = jax.lax.scan(step, emit[0], emit[1:])
            numpyro.factor("likelihood", jax.nn.logsumexp(a))
    elif example == "gp_counts":
        x, k = d["x"], d["k"]

        def model():
            rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
            alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))
            ft = numpyro.sample("f_tilde", dist.Normal(jnp.zeros(11), 1.0).to_event(1))
            cov = alpha ** 2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho ** 2)
            f = numpyro.deterministic("f", jnp.linalg.cholesky(cov + 1e-10 * jnp.eye(11)) @ ft)
            numpyro.sample("k", dist.Poisson(jnp.exp(f)).to_event(1), obs=k)
    else:  # pragma: no cover
        raise KeyError(example)
    t0 = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_warmup=warmup, num_samples=samples, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed))
    wall = time.perf_counter() - t0
    grouped = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    draws = flat_draws(grouped)
    return {"wall": wall, "draws": draws, "min_ess": min(float(ess_bulk(v)) for v in draws.values())}


if __name__ == "__main__":
    sys.exit(main())
