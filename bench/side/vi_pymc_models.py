"""The posteriordb-sample posteriors in PyMC (the models of `nutpie_models.py`), fitted by
PyMC's ADVI (mean-field), full-rank ADVI and pymc-extras' Pathfinder where installed (run
by `bench/vi.py` in a side virtualenv on Python 3.12: ``V/bin/pip install pymc
pymc-extras``; this file imports nothing of qvr).

    V/bin/python bench/side/vi_pymc_models.py SHARED_DIR OUT.json [--steps 1000]
        [--lr 0.01] [--seed 1] [--draws 1000] [--only NAME ...]
        [--methods advi fullrank_advi pathfinder]

ADVI runs `pm.fit(n=steps, method=...)` with Adam(lr) (PyMC's default optimiser is
adagrad_window; Adam at the same rate as the other sides keeps the comparison about the
guide); its k-hat ratios are formed in the flat unconstrained space (the group's Normal
against `model.compile_logp()` with the Jacobians).  Pathfinder runs
`pymc_extras.fit(method="pathfinder")` with its defaults (4 paths, L-BFGS, PSIS
resampling; serial, no progress bar): its own PSIS k-hat, its L-BFGS iterations and its
compute time (its compile excluded, ``compute``) are reported.  Written per posterior and method: see `vi_side_common`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nutpie_models import model_of  # noqa: E402
from vi_side_common import failed, flat, posteriors, reference_names, write  # noqa: E402

METHODS = ("advi", "fullrank_advi", "pathfinder")


def draws_of(posterior, wanted: list) -> dict:
    """An xarray posterior group (chain, draw, *shape) -> flat draws of the wanted names."""
    out = {}
    for name in {w.split("[")[0] for w in wanted}:
        if name in posterior:
            a = np.asarray(posterior[name].values, dtype=float)
            out[name] = a.reshape((-1,) + a.shape[2:])
    return flat(out, wanted)


def advi_log_ratios(model, approx, n: int, seed: int) -> np.ndarray:
    """``log p(z) - log q(z)`` for `n` draws z of the fitted Normal in the flat unconstrained
    space (`model.compile_logp()` includes the transforms' Jacobians)."""
    group = approx.groups[0]
    mean = np.asarray(group.mean.eval(), dtype=float)
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal((n, mean.size))
    if hasattr(group, "L"):
        L = np.asarray(group.L.eval(), dtype=float)
        z = mean + eps @ L.T
        log_det = float(np.sum(np.log(np.abs(np.diag(L)))))
    else:
        sd = np.asarray(group.std.eval(), dtype=float)
        z = mean + eps * sd
        log_det = float(np.sum(np.log(sd)))
    log_q = -0.5 * np.sum(eps ** 2, 1) - log_det - 0.5 * mean.size * np.log(2 * np.pi)
    logp = model.compile_logp()
    ordering = group.ordering  # name -> (name, slice, shape, dtype)
    log_p = np.empty(n)
    for i in range(n):
        point = {v[0]: z[i, v[1]].reshape(v[2]) for v in ordering.values()}
        log_p[i] = logp(point)
    return log_p - log_q


def run_advi(model, method: str, args, wanted: list) -> dict:
    import pymc as pm
    with model:
        t0 = time.perf_counter()
        approx = pm.fit(n=args.steps, method=method, random_seed=args.seed,
                        progressbar=False, obj_optimizer=pm.adam(learning_rate=args.lr))
        elapsed = time.perf_counter() - t0
        idata = approx.sample(args.draws, random_seed=args.seed + 1)
    row = {"time": elapsed, "steps": args.steps, "grad_evals": args.steps,
           "final_loss": float(np.asarray(approx.hist)[-1]),
           "draws": draws_of(idata.posterior, wanted)}
    try:
        row["log_ratios"] = advi_log_ratios(model, approx, args.draws, args.seed + 2).tolist()
    except Exception as exc:  # k-hat is a diagnostic: its failure is a note
        row["khat_note"] = f"{type(exc).__name__}: {exc}"[:200]
    return row


def run_pathfinder(model, args, wanted: list) -> dict:
    import pymc_extras as pmx
    t0 = time.perf_counter()
    idata = pmx.fit(method="pathfinder", model=model, num_draws=args.draws,
                    random_seed=args.seed, progressbar=False, parallel=False)
    elapsed = time.perf_counter() - t0
    row = {"time": elapsed, "steps": None, "draws": draws_of(idata.posterior, wanted)}
    for group in ("pathfinder", "lbfgs"):
        try:
            g = idata[group]
        except (KeyError, TypeError):
            continue
        for var in getattr(g, "data_vars", {}):
            if var == "compute_time":  # Pathfinder's own split: compile, then compute
                row["compute"] = float(np.asarray(g[var].values).reshape(-1)[0])
            if var == "pareto_k":
                row["khat"] = float(np.asarray(g[var].values).reshape(-1)[0])
            if var == "niter":  # L-BFGS iterations, summed over the paths
                row["steps"] = int(np.asarray(g[var].values).sum())
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("shared")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    args = ap.parse_args(argv)
    import logging
    logging.getLogger("pymc").setLevel(logging.ERROR)
    logging.getLogger("pymc_extras").setLevel(logging.ERROR)
    rows = {}
    for folder in posteriors(Path(args.shared), args.only):
        d = json.loads((folder / "data.json").read_text())
        wanted = reference_names(folder)
        for method in args.methods:
            label = {"advi": "pymc ADVI", "fullrank_advi": "pymc fullrank ADVI",
                     "pathfinder": "pymc-extras Pathfinder"}[method]
            try:
                model = model_of(folder.name, d)  # a fresh model per method
            except KeyError:
                break
            try:
                row = run_pathfinder(model, args, wanted) if method == "pathfinder" else \
                    run_advi(model, method, args, wanted)
            except ImportError as exc:
                row = {"error": f"not installed: {exc}", "unavailable": True}
            except Exception as exc:  # a failure is a figure too
                row = failed(exc)
            rows.setdefault(folder.name, {})[label] = row
            print(folder.name, label, {k: v for k, v in row.items()
                                       if k not in ("draws", "log_ratios", "trace")},
                  flush=True)
            write(args.out, rows)
    write(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
