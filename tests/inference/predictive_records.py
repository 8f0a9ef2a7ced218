"""Fake run records with the pointwise terms of a fit (`qvr.runs.layout`, "After the fit"),
built with numpy alone, and models whose exact answers are known — for the tests of
`qvr.inference.criticism.checks`, ``qvr compare`` and ``qvr show`` (torch-free: usable by any test).

* `write_record(path, log_lik=, y_rep=, observed=, ...)` — a finished record: ``run.json``
  (format 1, ``data_sha256``, ``pointwise``), ``events.jsonl`` (started, posterior draws
  chunks, finished), ``summary.json``, ``observed.npz`` (with ``group.NAME``) and the
  ``pointwise/c{chain}-{start}.npz`` chunks;
* `conjugate_normal(y, sigma, ...)` — exact posterior draws of ``mu`` for ``y_i ~
  Normal(mu, sigma)``, ``mu ~ Normal(m0, s0)``, with the pointwise log-likelihood, posterior
  predictive replicates and the exact leave-one-out predictive log densities.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from qvr.events import DrawsChunk, FitFinished, FitStarted
from qvr.runs import layout
from qvr.runs.writer import RunWriter


def write_record(path, *, log_lik: Mapping, y_rep: Mapping, observed: Mapping,
                 groups: Optional[Mapping] = None, kind: str = "posterior",
                 rows: Optional[Mapping] = None, importance: Optional[Mapping] = None,
                 data_sha256: Optional[str] = "d" * 64, method: str = "nuts",
                 program: str = "/models/model.qvr", export: str = "model",
                 posterior: Optional[Mapping] = None, chunk: int = 250,
                 summary: Optional[dict] = None) -> Path:
    """A finished run record in `path` with the given pointwise terms.

    `log_lik`, `y_rep`: ``{site: (chains, draws, *shape)}``; `observed`: ``{site:
    shape}``; `groups`: ``{NAME: (rows,) ints}``; `rows`: ``{site: "local" | ...}``
    (default ``local`` for every log-likelihood site); `importance`: ``{"log_p", "log_q"}``
    ``(1, draws)``; `posterior`: ``{site: (chains, draws, ...)}`` written as draws chunks
    (and ``samples.npz``); `data_sha256` None leaves the hash out."""
    path = Path(path)
    first = next(iter(log_lik.values())) if log_lik else next(iter(y_rep.values()))
    chains, draws = np.shape(first)[:2]
    meta = {"program": {"path": program, "sha256": "0" * 64, "export": export},
            "method": method, "config": {"method": method, "num_chains": int(chains),
                                         "num_samples": int(draws)},
            "seed": 0, "data": {"kind": "given"}, "start_from": None}
    with RunWriter(path, meta) as w:
        w.write(FitStarted(method=method, total_steps=int(draws), num_chains=int(chains)))
        for c in range(chains if posterior else 0):
            w.write(DrawsChunk(chain=c, start=0,
                               draws={k: np.asarray(v)[c] for k, v in posterior.items()}))
        if posterior:
            w.save_arrays(layout.SAMPLES, {k: np.asarray(v) for k, v in posterior.items()})
        summary = summary if summary is not None else {
            "status": "finished", "message": "", "method": method,
            "stats": {"num_chains": int(chains), "num_samples": int(draws)},
            "parameters": {}, "sites": {}}
        w.write_json(layout.SUMMARY, summary)
        w.write(FitFinished(summary={}))
    # the pointwise phase
    obs = {k: np.asarray(v) for k, v in observed.items()}
    obs.update({layout.GROUP_PREFIX + k: np.asarray(v) for k, v in (groups or {}).items()})
    _savez(path / layout.OBSERVED, obs)
    for c in range(chains):
        for start in range(0, draws, chunk):
            arrays = {layout.LOG_LIK_PREFIX + k: np.asarray(v)[c, start:start + chunk]
                      .astype(np.float32) for k, v in log_lik.items()}
            arrays.update({layout.Y_REP_PREFIX + k: np.asarray(v)[c, start:start + chunk]
                           .astype(np.float32) for k, v in y_rep.items()})
            for k, v in (importance or {}).items():
                arrays[k] = np.asarray(v).reshape(chains, draws)[c, start:start + chunk]
            _savez(path / layout.pointwise_file(c, start), arrays)
    run = json.loads((path / layout.RUN_JSON).read_text())
    if data_sha256 is not None:
        run["data_sha256"] = data_sha256
    run["pointwise"] = {
        "kind": kind, "chains": int(chains), "draws": int(draws),
        "log_lik": {k: list(np.shape(v)[2:]) for k, v in log_lik.items()},
        "y_rep": {k: list(np.shape(v)[2:]) for k, v in y_rep.items()},
        "rows": dict(rows) if rows is not None else {k: "local" for k in log_lik},
        "importance": bool(importance)}
    tmp = path / (layout.RUN_JSON + ".tmp")
    tmp.write_text(json.dumps(run, indent=2) + "\n")
    os.replace(tmp, path / layout.RUN_JSON)
    return path


def _savez(target: Path, arrays: Mapping) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, target)


def normal_logpdf(x, loc, scale):
    return -0.5 * np.log(2 * np.pi) - np.log(scale) - 0.5 * ((x - loc) / scale) ** 2


def conjugate_normal(y, sigma: float, m0: float = 0.0, s0: float = 10.0, chains: int = 4,
                     draws: int = 1000, seed: int = 0) -> dict:
    """Exact posterior draws for ``y_i ~ Normal(mu, sigma)`` (sigma known), ``mu ~
    Normal(m0, s0)``: ``{"mu" (chains, draws), "log_lik" (chains, draws, n), "y_rep"
    (chains, draws, n), "exact_loo_i" (n,)}``, the last the log density of ``y_i`` under
    the posterior predictive given the other observations (a normal distribution)."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y, dtype=np.float64)
    n = y.size

    def post(ys):
        prec = 1 / s0 ** 2 + len(ys) / sigma ** 2
        return (m0 / s0 ** 2 + ys.sum() / sigma ** 2) / prec, 1 / np.sqrt(prec)
    mn, sn = post(y)
    mu = rng.normal(mn, sn, size=(chains, draws))
    log_lik = normal_logpdf(y[None, None, :], mu[..., None], sigma)
    y_rep = mu[..., None] + sigma * rng.standard_normal((chains, draws, n))
    exact = np.empty(n)
    for i in range(n):
        m, s = post(np.delete(y, i))
        exact[i] = normal_logpdf(y[i], m, np.sqrt(s ** 2 + sigma ** 2))
    return {"mu": mu, "log_lik": log_lik, "y_rep": y_rep, "exact_loo_i": exact}
