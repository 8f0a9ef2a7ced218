"""The posteriordb-sample posteriors in NumPyro, fitted by its SVI with AutoNormal,
AutoMultivariateNormal, AutoLowRankMultivariateNormal and AutoIAFNormal (run by
`bench/vi.py` in a side virtualenv on Python 3.12: ``V/bin/pip install numpyro
"jax[cpu]"``; this file imports nothing of qvr).

    V/bin/python bench/side/vi_numpyro_models.py SHARED_DIR OUT.json [--steps 1000]
        [--lr 0.01] [--seed 1] [--rank K] [--draws 1000] [--only NAME ...]
        [--guides AutoNormal ...]

The models are written from each folder's `model.stan` and `data.json` (Stan's
parameterisation, flat priors as `ImproperUniform`); jax runs in float64 (the GP's
Cholesky).  Every guide gets Adam(lr) for `steps` steps, one ELBO particle
(`Trace_ELBO`), NumPyro's default initialisation.  Written per posterior and guide: see
`vi_side_common`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vi_side_common import failed, flat, posteriors, reference_names, write  # noqa: E402

GUIDES = ("AutoNormal", "AutoMultivariateNormal", "AutoLowRankMultivariateNormal",
          "AutoIAFNormal")


def model_of(name: str, d: dict):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    flat_prior = dist.ImproperUniform
    real, positive = dist.constraints.real, dist.constraints.positive

    if name == "eight_schools-eight_schools_noncentered":
        y, sigma = jnp.asarray(d["y"], float), jnp.asarray(d["sigma"], float)

        def model():
            theta_trans = numpyro.sample("theta_trans", dist.Normal(0.0, 1.0).expand([d["J"]]).to_event(1))
            mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
            theta = numpyro.deterministic("theta", theta_trans * tau + mu)
            numpyro.sample("y", dist.Normal(theta, sigma).to_event(1), obs=y)
        return model
    if name == "kidiq-kidscore_momhsiq":
        ks, hs, iq = (jnp.asarray(d[k], float) for k in ("kid_score", "mom_hs", "mom_iq"))

        def model():
            beta = numpyro.sample("beta", flat_prior(real, (), (3,)))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
            numpyro.sample("kid_score", dist.Normal(beta[0] + beta[1] * hs + beta[2] * iq,
                                                    sigma).to_event(1), obs=ks)
        return model
    if name == "arK-arK":
        y, K, T = jnp.asarray(d["y"], float), d["K"], d["T"]
        lagged = jnp.stack([y[K - k - 1:T - k - 1] for k in range(K)], -1)  # y[t-k-1]

        def model():
            alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
            beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([K]).to_event(1))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
            numpyro.sample("y", dist.Normal(alpha + lagged @ beta, sigma).to_event(1), obs=y[K:])
        return model
    if name == "garch-garch11":
        y, s1 = jnp.asarray(d["y"], float), float(d["sigma1"])

        def model():
            mu = numpyro.sample("mu", flat_prior(real, (), ()))
            alpha0 = numpyro.sample("alpha0", flat_prior(positive, (), ()))
            alpha1 = numpyro.sample("alpha1", dist.Uniform(0.0, 1.0))
            # Stan's flat beta1 on (0, 1 - alpha1): a scaled unit uniform and the
            # log(1 - alpha1) that makes its density 1 there
            raw = numpyro.sample("beta1_raw", dist.Uniform(0.0, 1.0))
            beta1 = numpyro.deterministic("beta1", raw * (1.0 - alpha1))
            numpyro.factor("beta1_flat", jnp.log1p(-alpha1))

            def step(s, yp):
                s = jnp.sqrt(alpha0 + alpha1 * (yp - mu) ** 2 + beta1 * s ** 2)
                return s, s
            _, rest = jax.lax.scan(step, jnp.asarray(s1), y[:-1])
            numpyro.sample("y", dist.Normal(mu, jnp.concatenate([jnp.array([s1]), rest]))
                           .to_event(1), obs=y)
        return model
    if name == "hmm_example-hmm_example":
        y, K = jnp.asarray(d["y"], float), d["K"]

        def model():
            t1 = numpyro.sample("theta1", dist.Dirichlet(jnp.ones(K)))
            t2 = numpyro.sample("theta2", dist.Dirichlet(jnp.ones(K)))
            mu = numpyro.sample("mu", flat_prior(dist.constraints.positive_ordered_vector,
                                                 (), (K,)))
            numpyro.factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0])
                           + dist.Normal(10.0, 1.0).log_prob(mu[1]))
            log_theta = jnp.log(jnp.stack([t1, t2]))  # [j, k]
            emit = dist.Normal(mu, 1.0).log_prob(y[:, None])

            def step(a, e):
                return jax.nn.logsumexp(log_theta.T + a, -1) + e, None
            a, _ = jax.lax.scan(step, emit[0], emit[1:])
            numpyro.factor("likelihood", jax.nn.logsumexp(a))
        return model
    if name == "gp_pois_regr-gp_pois_regr":
        x, k, N = jnp.asarray(d["x"], float), jnp.asarray(d["k"]), d["N"]

        def model():
            rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
            alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))
            f_tilde = numpyro.sample("f_tilde", dist.Normal(0.0, 1.0).expand([N]).to_event(1))
            cov = alpha ** 2 * jnp.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho ** 2) \
                + 1e-10 * jnp.eye(N)
            f = numpyro.deterministic("f", jnp.linalg.cholesky(cov) @ f_tilde)
            numpyro.sample("k", dist.Poisson(jnp.exp(f)).to_event(1), obs=k)
        return model
    raise KeyError(name)


def make_guide(kind: str, model, rank):
    from numpyro.infer import autoguide
    if kind == "AutoLowRankMultivariateNormal" and rank:
        return autoguide.AutoLowRankMultivariateNormal(model, rank=rank)
    return getattr(autoguide, kind)(model)


def log_ratios(model, guide, params, key, n: int):
    """``log p(z) - log q(z)`` of `n` independent draws of the fitted guide, both densities
    on the constrained values (the guide's sites carry their Jacobians, as in the ELBO)."""
    import jax
    from numpyro import handlers
    from numpyro.infer.util import log_density

    def one(k):
        log_q, tr = log_density(handlers.seed(guide, k), (), {}, params)
        values = {name: s["value"] for name, s in tr.items() if s["type"] == "sample"}
        log_p, _ = log_density(model, (), {}, values)
        return log_p - log_q
    return np.asarray(jax.vmap(one)(jax.random.split(key, n)))


def run_one(folder: Path, kind: str, args) -> dict:
    import jax
    from numpyro.infer import SVI, Predictive, Trace_ELBO
    from numpyro.optim import Adam
    d = json.loads((folder / "data.json").read_text())
    model = model_of(folder.name, d)
    guide = make_guide(kind, model, args.rank)
    svi = SVI(model, guide, Adam(args.lr), Trace_ELBO())
    key = jax.random.PRNGKey(args.seed)
    t0 = time.perf_counter()
    res = svi.run(key, args.steps, progress_bar=False)
    params = jax.block_until_ready(res.params)
    elapsed = time.perf_counter() - t0
    losses = np.asarray(res.losses)
    wanted = reference_names(folder)
    k1, k2 = jax.random.split(jax.random.PRNGKey(args.seed + 1))
    pred = Predictive(model, guide=guide, params=params, num_samples=args.draws,
                      return_sites=sorted({w.split("[")[0] for w in wanted}))(k1)
    row = {"time": elapsed, "steps": args.steps, "grad_evals": args.steps,
           "final_loss": float(losses[-1]),
           "draws": flat({k: np.asarray(v) for k, v in pred.items()}, wanted)}
    try:
        row["log_ratios"] = log_ratios(model, guide, params, k2, args.draws).tolist()
    except Exception as exc:  # k-hat is a diagnostic: its failure is a note
        row["khat_note"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("shared")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--guides", nargs="*", default=list(GUIDES))
    args = ap.parse_args(argv)
    import jax
    jax.config.update("jax_enable_x64", True)
    rows = {}
    for folder in posteriors(Path(args.shared), args.only):
        for kind in args.guides:
            try:
                row = run_one(folder, kind, args)
            except KeyError:
                break  # no model for this posterior
            except Exception as exc:  # a failure is a figure too
                row = failed(exc)
            rows.setdefault(folder.name, {})[f"numpyro {kind}"] = row
            print(folder.name, kind, {k: v for k, v in row.items()
                                      if k not in ("draws", "log_ratios", "trace")}, flush=True)
            write(args.out, rows)
    write(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
