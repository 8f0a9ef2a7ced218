"""The posteriordb-sample posteriors in PyMC, sampled by nutpie (run by `bench/nutpie.py`
in a side virtualenv on Python 3.12: ``python -m venv V && V/bin/pip install nutpie
pymc``; this file imports nothing of qvr).

    V/bin/python bench/side/nutpie_models.py SHARED_DIR OUT.json [--warmup 1000]
        [--samples 1000] [--chains 4] [--seed 1] [--only NAME ...]

Per posterior it writes: compile seconds (PyMC -> numba), sampling seconds (warmup and
draws: nutpie does not time them apart), leapfrog steps in warmup and in sampling
(`n_steps`, warmup kept), min bulk ESS over the parameters (ArviZ), mean acceptance
statistic while sampling, and nutpie's defaults.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def model_of(name: str, d: dict):
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt
    if name == "eight_schools-eight_schools_noncentered":
        with pm.Model() as m:
            theta_trans = pm.Normal("theta_trans", 0, 1, shape=d["J"])
            mu = pm.Normal("mu", 0, 5)
            tau = pm.HalfCauchy("tau", 5)
            theta = pm.Deterministic("theta", theta_trans * tau + mu)
            pm.Normal("y", theta, np.asarray(d["sigma"]), observed=np.asarray(d["y"]))
        return m
    if name == "kidiq-kidscore_momhsiq":
        with pm.Model() as m:
            beta = pm.Flat("beta", shape=3)
            sigma = pm.HalfCauchy("sigma", 2.5)
            mu = beta[0] + beta[1] * np.asarray(d["mom_hs"]) + beta[2] * np.asarray(d["mom_iq"])
            pm.Normal("kid_score", mu, sigma, observed=np.asarray(d["kid_score"]))
        return m
    if name == "arK-arK":
        y, K, T = np.asarray(d["y"]), d["K"], d["T"]
        lagged = np.stack([y[K - k - 1:T - k - 1] for k in range(K)], -1)  # y[t-k-1]
        with pm.Model() as m:
            alpha = pm.Normal("alpha", 0, 10)
            beta = pm.Normal("beta", 0, 10, shape=K)
            sigma = pm.HalfCauchy("sigma", 2.5)
            pm.Normal("y", alpha + pt.dot(lagged, beta), sigma, observed=y[K:])
        return m
    if name == "gp_pois_regr-gp_pois_regr":
        x, k, N = np.asarray(d["x"], float), np.asarray(d["k"]), d["N"]
        with pm.Model() as m:
            rho = pm.Gamma("rho", 25, 4)
            alpha = pm.HalfNormal("alpha", 2)  # Stan: real<lower=0> alpha ~ normal(0, 2)
            f_tilde = pm.Normal("f_tilde", 0, 1, shape=N)
            cov = alpha ** 2 * pt.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho ** 2) \
                + 1e-10 * np.eye(N)
            f = pm.Deterministic("f", pt.linalg.cholesky(cov) @ f_tilde)
            pm.Poisson("k", pt.exp(f), observed=k)
        return m
    if name == "garch-garch11":
        y, s1 = np.asarray(d["y"]), float(d["sigma1"])
        with pm.Model() as m:
            mu = pm.Flat("mu")
            alpha0 = pm.HalfFlat("alpha0")
            alpha1 = pm.Uniform("alpha1", 0, 1)
            raw = pm.Uniform("beta1_raw", 0, 1)
            beta1 = pm.Deterministic("beta1", raw * (1 - alpha1))
            pm.Potential("beta1_flat", pt.log(1 - alpha1))

            def step(y_prev, sig_prev, mu, a0, a1, b1):
                return pt.sqrt(a0 + a1 * (y_prev - mu) ** 2 + b1 * sig_prev ** 2)

            sig = pytensor.scan(step, sequences=[pt.as_tensor(y[:-1])],
                                outputs_info=[pt.as_tensor(np.float64(s1))],
                                non_sequences=[mu, alpha0, alpha1, beta1],
                                return_updates=False)
            sigma = pt.concatenate([pt.as_tensor([s1]), sig])
            pm.Normal("y", mu, sigma, observed=y)
        return m
    if name == "hmm_example-hmm_example":
        y, K = np.asarray(d["y"]), d["K"]
        with pm.Model() as m:
            theta1 = pm.Dirichlet("theta1", np.ones(K))
            theta2 = pm.Dirichlet("theta2", np.ones(K))
            mu = pm.Normal("mu", [3.0, 10.0], 1.0, shape=K,
                           transform=pm.distributions.transforms.ordered,
                           initval=np.array([3.0, 10.0]))
            logtheta = pt.log(pt.stack([theta1, theta2]))  # [j, k]
            emit = -0.5 * (y[:, None] - mu[None, :]) ** 2 - 0.5 * np.log(2 * np.pi)

            def step(e_t, gamma_prev, lt):
                return pm.math.logsumexp(gamma_prev[:, None] + lt, axis=0) + e_t

            gam = pytensor.scan(step, sequences=[emit[1:]], outputs_info=[emit[0]],
                                non_sequences=[logtheta], return_updates=False)
            pm.Potential("lik", pm.math.logsumexp(gam[-1]))
        return m
    raise KeyError(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("shared")
    ap.add_argument("out")
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    import arviz as az
    import nutpie
    rows = {}
    for folder in sorted(Path(args.shared).iterdir()):
        if not (folder / "data.json").is_file():
            continue
        name = folder.name
        if args.only and not any(o in name for o in args.only):
            continue
        d = json.loads((folder / "data.json").read_text())
        try:
            m = model_of(name, d)
        except KeyError:
            continue
        t0 = time.perf_counter()
        compiled = nutpie.compile_pymc_model(m)
        t1 = time.perf_counter()
        tr = nutpie.sample(compiled, draws=args.samples, tune=args.warmup,
                           chains=args.chains, seed=args.seed, progress_bar=False,
                           save_warmup=True)
        t2 = time.perf_counter()
        free = [v.name for v in m.free_RVs]
        ess = az.ess(tr, var_names=free, method="bulk")
        min_ess = float(min(float(ess[v].min()) for v in free))
        groups = [str(g).strip("/") for g in tr.groups]
        warm = tr["warmup_sample_stats"] if "warmup_sample_stats" in groups else None
        rows[name] = {
            "compile_s": t1 - t0, "sampling_s": t2 - t1,
            "warmup_leapfrogs": int(warm["n_steps"].sum()) if warm is not None else None,
            "leapfrogs": int(tr.sample_stats["n_steps"].sum()),
            "min_ess": min_ess,
            "acceptance": float(tr.sample_stats["mean_tree_accept"].mean()),
            "defaults": f"nutpie {nutpie.__version__} defaults (diagonal Fisher metric, "
                        f"target_accept 0.8, chains on all cores); tune {args.warmup}"}
        print(name, {k: v for k, v in rows[name].items() if k != "defaults"}, flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
