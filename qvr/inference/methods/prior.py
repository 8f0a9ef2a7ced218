"""``--method prior``: the prior predictive, drawn before any fit (Gelman et al. 2020,
"Bayesian workflow", section 2.4).

`num_samples` independent draws of every latent site from its prior — the program run
forward with the observed values left out and the host data given — are the run's draws
(``{site: (1, N, *shape)}``, summarised like SVI's guide draws: mean, sd and quantiles,
no ESS or R-hat).  The replicates of the observed values and their checks against the
data are recorded after it, as for a fit (`qvr.inference.criticism.pointwise`, kind ``prior``: no
log-likelihood, no LOO).  Nothing is fitted: the program's parameters stay as they are.
"""
from __future__ import annotations

import time

import torch

from qvr.events import FitProgress
from qvr.inference.methods.fit_result import FitContext, FitResult

#: draws per vectorised program run
CHUNK = 256


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.criticism.diagnostics import summary
    from qvr.inference.criticism.pointwise import observed_sites
    model, x, config = ctx.model, ctx.x, ctx.config
    observed = set(observed_sites(model, ctx.observations))
    host = {k: v for k, v in ctx.observations.items() if k not in observed}
    latent = [s.name for s in getattr(model, "morphism", model).latent_sites(observed)
              if s.step == "sample"]
    n = int(config.num_samples)
    t0 = time.perf_counter()
    result = FitResult("prior")
    parts, done, vmapped = [], 0, True
    while done < n:
        if ctx.stop():
            result.status = "cancelled"
            break
        k = min(CHUNK, n - done)
        parts.append(_draws(model, x, host, latent, k, vmapped))
        vmapped = parts[-1].pop("__vmapped__")
        done += k
        ctx.report(FitProgress(method="prior", phase="sampling", step=done, total=n,
                               elapsed=time.perf_counter() - t0))
    draws = {s: torch.cat([p[s] for p in parts]) for s in latent} if parts else {}
    result.samples = {k: v.detach().cpu().numpy()[None] for k, v in draws.items()}
    result.summary = summary(result.samples, columns=("mean", "sd", "q5", "q50", "q95"))
    result.elapsed = time.perf_counter() - t0
    result.step = done
    result.params = {f"model.{k}": p.detach().cpu().numpy()
                     for k, p in model.named_parameters()}
    result.stats = {"num_samples": done, "elapsed": result.elapsed}
    return result


def _draws(model, x, host: dict, latent: list, k: int, vmapped: bool) -> dict:
    """`k` prior draws of the latent sites (vectorised when the program allows it)."""
    def one(_):
        ex = model.execute(x, host, score=False)
        return {s: torch.as_tensor(ex.sites[s].value) for s in latent}
    with torch.no_grad():
        if vmapped:
            try:
                from torch.func import vmap
                out = vmap(one, randomness="different")(torch.arange(k))
                return {**out, "__vmapped__": True}
            except Exception:
                pass
        rows = [one(None) for _ in range(k)]
        return {**{s: torch.stack([r[s] for r in rows]) for s in latent},
                "__vmapped__": False}
