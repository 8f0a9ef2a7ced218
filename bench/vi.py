"""Variational fits of the posteriordb-sample posteriors against the reference and NUTS
(issue 39.5): qvr's guides and Pathfinder, NumPyro's autoguides, PyMC's ADVI and
pymc-extras' Pathfinder.

    .venv/bin/python bench/vi.py [--only NAME ...] [--steps 1000] [--lr 0.01] [--seed 1]
        [--guides meanfield fullrank lowrank flow map laplace pathfinder]
        [--resample] [--side-methods ...] [--no-side] [--no-nuts] [--nuts-warmup 500]
        [--nuts-samples 500] [--nuts-chains 4] [--venv DIR] [--python PY] [--json FILE]

For each posterior of ``../shared/posteriordb-sample`` (the example programs of
`bench/posteriors.py`) this runs

* qvr: `qvr.fit` with ``method="svi"`` and each ``--guides`` entry as `FitConfig.guide`
  (``steps``, ``lr``), and ``pathfinder`` as ``method="pathfinder"``; `--no-pointwise`
  (the LOO terms are not part of the answer).  A guide or method this checkout does not
  have yet (the config refuses it, the fit fails on an unknown method, or the fit ran the
  mean-field guide instead) is a row that says *not available*;
* with ``--resample``, each guide but map (and not Pathfinder, which resamples its own)
  once more with ``FitConfig.resample="psis"`` (`qvr.inference.methods.guide_resample`),
  a row ``qvr GUIDE +psis`` below the plain one: its figures are of the resampled draws
  (or the guide's own where k-hat >= 0.7; the note says which, with the importance ESS);
  its time includes scoring the 4,000 guide draws; and laplace and pathfinder once more
  with ``resample="amis"`` (`qvr.inference.methods.guide_amis`), a row ``+amis``;
* the side (unless ``--no-side``), in a virtualenv on Python 3.12 that this script makes
  the first time (``DIR/bin/pip install numpyro "jax[cpu]" pymc pymc-extras``; default
  DIR ``~/.cache/qvr/bench-vi``): NumPyro's AutoNormal, AutoMultivariateNormal,
  AutoLowRankMultivariateNormal and AutoIAFNormal (`bench/side/vi_numpyro_models.py`,
  Adam at the same rate and steps), PyMC's ADVI and full-rank ADVI (Adam, same rate and
  steps) and pymc-extras' Pathfinder (its defaults) (`bench/side/vi_pymc_models.py`);
* qvr's NUTS (``--nuts-chains`` x (``--nuts-warmup`` + ``--nuts-samples``), the
  example's shipped options): the time a variational fit has to beat.

Printed per posterior and method: ``time s`` (qvr: the whole `fit` call — compile, the
optimisation, 1000 guide draws and their k-hat; the side: the library's fit call, its
compile included, draws excluded), ``opt s`` (qvr: the optimisation loop alone;
NUTS: warmup + sampling; pymc-extras' Pathfinder: its compute time, its compile excluded),
``steps`` (optimisation steps; Pathfinder, Laplace, MAP: L-BFGS / optimiser iterations,
over all paths; NUTS: iterations over all chains, warmup included), ``grads`` (gradient
evaluations where known: SVI one per step, one ELBO particle; NUTS its leapfrog steps),
the error of the means in reference sds
(``|mean - ref| / sd_ref``: max and mean over the reference's coordinates), the sd ratio
``sd / sd_ref`` (min and max), and the Pareto k-hat of the approximation's draws
(`qvr.inference.criticism.khat`; Pathfinder's own PSIS k-hat on the PyMC side).  Then a
goal line per posterior: which qvr guide or Pathfinder is within 0.2 sd of every reference
mean and 0.8-1.25 of every reference sd, and its time against NUTS's (the side's methods
that meet the same bar are listed for comparison).  Figures, not pass/fail.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SHARED = ROOT.parent / "shared" / "posteriordb-sample"


def _posteriors():
    """`bench/posteriors.py` (imported when needed: it imports qvr and torch, which
    ``--help`` does not need)."""
    import posteriors
    return posteriors

GUIDES = ("meanfield", "fullrank", "lowrank", "flow", "map", "laplace", "pathfinder")
SIDE_METHODS = ("numpyro:AutoNormal", "numpyro:AutoMultivariateNormal",
                "numpyro:AutoLowRankMultivariateNormal", "numpyro:AutoIAFNormal",
                "pymc:advi", "pymc:fullrank_advi", "pymc:pathfinder")
MEAN_GOAL = 0.2          # |mean - ref| / sd_ref
SD_GOAL = (0.8, 1.25)    # sd / sd_ref


class Unavailable(Exception):
    """The guide or method is not in this checkout (yet)."""


# ----------------------------------------------------------------- figures

def errors(draws: dict, reference: dict) -> dict:
    """Mean errors in reference sds and sd ratios over the reference's coordinates."""
    errs, ratios, missing = [], [], []
    for name, ref in reference["params"].items():
        if name not in draws:
            missing.append(name)
            continue
        x = np.asarray(draws[name], dtype=float).reshape(-1)
        errs.append(abs(float(x.mean()) - ref["mean"]) / ref["sd"])
        ratios.append(float(x.std()) / ref["sd"])
    if not errs:
        return {"max_err": math.nan, "mean_err": math.nan, "sd_min": math.nan,
                "sd_max": math.nan, "missing": missing}
    return {"max_err": max(errs), "mean_err": float(np.mean(errs)), "sd_min": min(ratios),
            "sd_max": max(ratios), "missing": missing}


def meets(row: dict) -> bool:
    return (row.get("max_err", math.inf) <= MEAN_GOAL
            and SD_GOAL[0] <= row.get("sd_min", 0) and row.get("sd_max", math.inf) <= SD_GOAL[1])


def distance(row: dict) -> float:
    """How far a row is from the bar: 1 or less meets it (means and sds in one number)."""
    try:
        d = max(row["max_err"] / MEAN_GOAL, SD_GOAL[0] / row["sd_min"],
                row["sd_max"] / SD_GOAL[1])
    except (KeyError, ZeroDivisionError, TypeError):
        return math.inf
    return math.inf if math.isnan(d) else d


def reference_of(name: str) -> dict:
    ref_file = SHARED / name / "reference.json"
    if not ref_file.is_file():  # the copy the tests use
        ref_file = ROOT / "tests" / "inference" / "posteriordb" / f"{name}.json"
    return json.loads(ref_file.read_text())


# ----------------------------------------------------------------- qvr

def _program(example: str):
    from qvr import load
    path = ROOT / "examples" / f"{example}.qvr"
    return load(str(path)), path


def _shipped(path: Path) -> dict:
    fit_json = path.parent / "data" / f"{path.stem}.fit.json"
    return json.loads(fit_json.read_text()) if fit_json.is_file() else {}


def run_qvr_vi(example: str, guide: str, args, resample: str = "none") -> dict:
    """One `qvr.fit` with a guide (or ``pathfinder``): the row's figures, or
    `Unavailable` when this checkout does not have it.  `resample` ``"psis"``: the fit's
    draws resampled by their PSIS weights (`FitConfig.resample`)."""
    from qvr.inference import fit
    from qvr.inference.config import ConfigError
    program, path = _program(example)
    base = {"seed": args.seed, "pointwise": False}
    if "dtype" in _shipped(path):
        base["dtype"] = _shipped(path)["dtype"]
    if guide == "pathfinder":
        config = {**base, "method": "pathfinder"}
        if resample != "none":
            config["resample"] = resample
    else:
        config = {**base, "method": "svi", "guide": guide, "steps": args.steps, "lr": args.lr}
        if resample != "none":
            config["resample"] = resample
    t0 = time.perf_counter()
    try:
        result = fit(program, config=config, program_path=str(path))
    except (ConfigError, NotImplementedError) as exc:
        raise Unavailable(str(exc).splitlines()[0][:120]) from None
    except (KeyError, ValueError) as exc:
        if "pathfinder" in str(exc) or "guide" in str(exc):
            raise Unavailable(str(exc).splitlines()[0][:120]) from None
        raise
    wall = time.perf_counter() - t0
    if result.status != "finished":
        msg = str(result.message or "")
        if any(s in msg.lower() for s in ("unknown method", "not implemented",
                                          "unknown guide")):
            raise Unavailable(msg.splitlines()[0][:120])
        raise RuntimeError(f"{result.status}: {msg[:200]}")
    stats = dict(result.stats or {})
    if guide not in ("meanfield", "pathfinder") and \
            type(getattr(result, "guide", None)).__name__ == "AutoNormalGuide" and \
            stats.get("guide", "meanfield").split(":")[0] == "meanfield":
        raise Unavailable("the fit ran the mean-field guide")
    steps = stats.get("steps")
    grads = steps if guide not in ("map", "laplace", "pathfinder") else None  # 1 particle
    if isinstance(stats.get("iterations"), (int, list)):  # Pathfinder (per path), Laplace
        it = stats["iterations"]
        steps = sum(it) if isinstance(it, list) else it
    if "gradient_evaluations" in stats:
        grads = stats["gradient_evaluations"]
    note = stats.get("khat_note", "")
    done = stats.get("amis_resampled") if resample == "amis" else stats.get("resampled")
    if resample != "none":
        ess = stats.get("resample_ess")
        note = "; ".join(n for n in (note, (
            f"resampled, ESS {ess:.0f}" if done else
            f"not resampled: {stats.get('resample_note')}"
            + (f", ESS {ess:.0f}" if ess is not None else ""))) if n)
    return {"time": wall, "opt": stats.get("elapsed"), "steps": steps, "grads": grads,
            "khat": stats.get("khat"), "draws": _posteriors().flat_draws(result.samples),
            "note": note, "resampled": done if resample != "none" else stats.get("resampled"),
            "ess": stats.get("resample_ess")}


def run_qvr_nuts(example: str, args) -> dict:
    from qvr.inference import fit
    program, path = _program(example)
    config = {"method": "nuts", "num_warmup": args.nuts_warmup,
              "num_samples": args.nuts_samples, "num_chains": args.nuts_chains,
              "seed": args.seed, "pointwise": False, **_shipped(path)}
    t0 = time.perf_counter()
    result = fit(program, config=config, program_path=str(path))
    wall = time.perf_counter() - t0
    if result.status != "finished":
        raise RuntimeError(f"{result.status}: {result.message}")
    st = result.stats or {}
    lf = st.get("warmup_leapfrogs", 0) + st.get("leapfrogs", 0) if "leapfrogs" in st else None
    run_s = (st.get("warmup_time") or 0.0) + (st.get("sampling_time") or 0.0)
    return {"time": wall, "opt": run_s or None, "grads": lf, "khat": None,
            "steps": args.nuts_chains * (args.nuts_warmup + args.nuts_samples),
            "draws": _posteriors().flat_draws(result.samples),
            "note": f"compiler {st.get('compiler')}" if st.get("compiler") else ""}


def warm_up(example: str) -> None:
    """A few untimed SVI steps: the imports and first-call costs that any first fit in a
    process pays, not charged to the first posterior's first guide."""
    from qvr.inference import fit
    program, path = _program(example)
    fit(program, config={"method": "svi", "steps": 5, "seed": 0, "pointwise": False},
        program_path=str(path))


# ----------------------------------------------------------------- the side

def find_python(python: str) -> str:
    """A Python 3.12 for the side virtualenv (`--python`, else pyenv's)."""
    for cand in (python, "python3.12", *sorted(Path("/root/.pyenv/versions").glob(
            "3.12*/bin/python3.12"))):
        try:
            out = subprocess.run([str(cand), "--version"], capture_output=True, text=True)
        except OSError:
            continue
        if out.returncode == 0 and "3.12" in out.stdout + out.stderr:
            return str(cand)
    raise RuntimeError("no Python 3.12 found for the side virtualenv (give --python)")


def side_venv(venv: Path, python: str) -> Path:
    exe = venv / "bin" / "python"
    if exe.is_file():
        return exe
    py = find_python(python)
    print(f"making the side virtualenv {venv} ({py}; numpyro, jax[cpu], pymc, "
          f"pymc-extras) ...", flush=True)
    subprocess.run([py, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "numpyro", "jax[cpu]",
                    "pymc", "arviz"], check=True)
    # Pathfinder is optional: without it its row says "not installed"
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "pymc-extras"])
    return exe


def side_versions(exe: Path) -> str:
    code = ("import importlib.metadata as m\n"
            "out = []\n"
            "for p in ('numpyro', 'jax', 'pymc', 'pymc-extras', 'pytensor'):\n"
            "    try: out.append(f'{p} {m.version(p)}')\n"
            "    except Exception: out.append(f'{p} -')\n"
            "print(', '.join(out))")
    p = subprocess.run([str(exe), "-c", code], capture_output=True, text=True)
    return p.stdout.strip() or p.stderr.strip()[-200:]


def run_side(exe: Path, names: list, args) -> dict:
    """Both side scripts (one process each, all posteriors): ``{name: {label: row}}``."""
    numpyro = [m.split(":", 1)[1] for m in args.side_methods if m.startswith("numpyro:")]
    pymc = [m.split(":", 1)[1] for m in args.side_methods if m.startswith("pymc:")]
    rank = next((int(g.split(":")[1]) for g in args.guides if g.startswith("lowrank:")), None)
    rows: dict = {}
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    for script, methods, extra in (
            ("vi_numpyro_models.py", numpyro,
             ["--guides", *numpyro] + (["--rank", str(rank)] if rank else [])),
            ("vi_pymc_models.py", pymc, ["--methods", *pymc])):
        if not methods:
            continue
        out = Path(tempfile.mkdtemp(prefix="qvr-bench-vi-")) / "side.json"
        cmd = [str(exe), str(ROOT / "bench" / "side" / script), str(SHARED), str(out),
               "--steps", str(args.steps), "--lr", str(args.lr), "--seed", str(args.seed),
               "--only", *names, *extra]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0 and not out.is_file():
            print(f"{script} failed: {p.stderr[-1500:]}", flush=True)
            continue
        for name, by_method in json.loads(out.read_text()).items():
            rows.setdefault(name, {}).update(by_method)
    return rows


def side_row(row: dict) -> dict:
    """A side script's row -> the figures of a table row (k-hat fitted here)."""
    from qvr.inference.criticism.khat import pareto_khat
    if "error" in row:
        raise Unavailable(row["error"]) if row.get("unavailable") else RuntimeError(row["error"])
    khat = row.get("khat")
    if khat is None and row.get("log_ratios"):
        k = pareto_khat(np.asarray(row["log_ratios"]))
        khat = None if math.isnan(k) else k
    return {"time": row["time"], "opt": row.get("compute"), "steps": row.get("steps"),
            "grads": row.get("grad_evals"), "khat": khat,
            "draws": row["draws"], "note": row.get("khat_note", "")}


# ----------------------------------------------------------------- printing

HEADER = (f"{'method':38} {'time s':>7} {'opt s':>6} {'steps':>6} {'grads':>7} {'maxerr':>6} "
          f"{'meanerr':>7} {'sd min':>6} {'sd max':>6} {'k-hat':>6}")


def fmt(x, spec: str, width: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return f"{'-':>{width}}"
    if spec.endswith("f") and abs(x) >= 10 ** (width - 3):  # keeps the columns
        return f"{x:{width}.0e}"
    return f"{x:{width}{spec}}"


def print_row(label: str, r: dict) -> None:
    if "unavailable" in r:
        print(f"  {label:38} not available: {r['unavailable']}", flush=True)
        return
    if "failed" in r:
        print(f"  {label:38} failed: {r['failed']}", flush=True)
        return
    extra = []
    if r.get("missing"):
        extra.append(f"missing {r['missing']}")
    if r.get("note"):
        extra.append(r["note"])
    print(f"  {label:38} {fmt(r['time'], '.1f', 7)} {fmt(r['opt'], '.1f', 6)} "
          f"{fmt(r['steps'], 'd', 6) if isinstance(r['steps'], int) else fmt(None, '', 6)} "
          f"{fmt(r['grads'], 'd', 7) if isinstance(r['grads'], int) else fmt(None, '', 7)} "
          f"{fmt(r['max_err'], '.2f', 6)} {fmt(r['mean_err'], '.2f', 7)} "
          f"{fmt(r['sd_min'], '.2f', 6)} {fmt(r['sd_max'], '.2f', 6)} "
          f"{fmt(r['khat'], '.2f', 6)}" + (f"  ({'; '.join(extra)})" if extra else ""),
          flush=True)


def figures(label: str, run, reference: dict) -> dict:
    try:
        r = run()
    except Unavailable as exc:
        return {"unavailable": str(exc)}
    except Exception as exc:  # a failure is a figure too
        return {"failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
    r.update(errors(r.pop("draws"), reference))
    return r


def goal_line(rows: dict, nuts: dict) -> str:
    t_nuts = nuts.get("time") if nuts and "time" in nuts else None
    ours = [(k, r) for k, r in rows.items() if k.startswith("qvr ") and k != "qvr NUTS"
            and "time" in r]
    good = [(k, r) for k, r in ours if meets(r)]
    faster = [(k, r) for k, r in good if t_nuts is None or r["time"] < t_nuts]
    vs = (lambda r: f"{r['time']:.1f} s vs NUTS {t_nuts:.1f} s") if t_nuts else \
        (lambda r: f"{r['time']:.1f} s, no NUTS time")
    if faster:
        k, r = min(faster, key=lambda kr: kr[1]["time"])
        line = f"goal met: {k} ({vs(r)})" + (
            f"; also {', '.join(k2 for k2, _ in faster if k2 != k)}" if len(faster) > 1 else "")
    elif good:
        k, r = min(good, key=lambda kr: kr[1]["time"])
        line = f"goal not met in time: {k} is within the bar but slower ({vs(r)})"
    elif ours:
        k, r = min(ours, key=lambda kr: distance(kr[1]))
        line = (f"goal not met: closest {k} (max err {r['max_err']:.2f} sd, sd ratio "
                f"{r['sd_min']:.2f}-{r['sd_max']:.2f}, {vs(r)})")
    else:
        line = "goal not met: no qvr variational fit ran"
    side = [k for k, r in rows.items() if not k.startswith("qvr ") and "time" in r
            and meets(r) and (t_nuts is None or r["time"] < t_nuts)]
    if side:
        line += f" | side within the bar and faster than NUTS: {', '.join(side)}"
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="posteriordb or example names")
    ap.add_argument("--steps", type=int, default=1000,
                    help="SVI / ADVI steps (all sides; qvr's default)")
    ap.add_argument("--lr", type=float, default=0.01, help="Adam's rate (all sides)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--guides", nargs="*", default=list(GUIDES),
                    help="qvr guides (meanfield fullrank lowrank[:K] flow map laplace) and "
                         "pathfinder (method)")
    ap.add_argument("--resample", action="store_true",
                    help="each guide but map also with --resample psis, and laplace and "
                         "pathfinder with --resample amis (rows beside them)")
    ap.add_argument("--side-methods", nargs="*", default=list(SIDE_METHODS))
    ap.add_argument("--no-side", action="store_true", help="qvr only")
    ap.add_argument("--no-nuts", action="store_true")
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-samples", type=int, default=500)
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--venv", default=str(Path.home() / ".cache" / "qvr" / "bench-vi"))
    ap.add_argument("--python", default="python3.12")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    POSTERIORS = _posteriors().POSTERIORS
    names = [n for n, (ex, _) in POSTERIORS.items()
             if not args.only or any(o in n or o == ex for o in args.only)]
    if not names:
        ap.error(f"no posterior matches {args.only}")
    side: dict = {}
    versions = "side: off"
    if not args.no_side:
        exe = side_venv(Path(args.venv), args.python)
        versions = "side: " + side_versions(exe)
        t0 = time.perf_counter()
        side = run_side(exe, names, args)
        print(f"(side runs: {time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"SVI {args.steps} steps, Adam lr {args.lr}, seed {args.seed}; NUTS "
          f"{args.nuts_chains} x ({args.nuts_warmup} + {args.nuts_samples}); goal: max "
          f"|mean - ref| <= {MEAN_GOAL} sd_ref, sd/sd_ref in {SD_GOAL[0]}-{SD_GOAL[1]}, "
          f"time < NUTS; {versions}", flush=True)
    warm_up(POSTERIORS[names[0]][0])
    out = {}
    for name in names:
        example = POSTERIORS[name][0]
        reference = reference_of(name)
        print(f"\n{name} ({example}.qvr)\n  {HEADER}", flush=True)
        rows = {}
        for guide in args.guides:
            label = f"qvr {guide}"
            rows[label] = figures(label, lambda g=guide: run_qvr_vi(example, g, args), reference)
            print_row(label, rows[label])
            if args.resample and guide.split(":")[0] not in ("map", "pathfinder"):
                label = f"qvr {guide} +psis"
                rows[label] = figures(label, lambda g=guide: run_qvr_vi(example, g, args,
                                                                        "psis"), reference)
                print_row(label, rows[label])
            if args.resample and guide in ("laplace", "pathfinder"):
                label = f"qvr {guide} +amis"
                rows[label] = figures(label, lambda g=guide: run_qvr_vi(example, g, args,
                                                                        "amis"), reference)
                print_row(label, rows[label])
        for method in args.side_methods if not args.no_side else ():
            lib, kind = method.split(":", 1)
            label = {"pymc:advi": "pymc ADVI", "pymc:fullrank_advi": "pymc fullrank ADVI",
                     "pymc:pathfinder": "pymc-extras Pathfinder"}.get(method, f"{lib} {kind}")
            got = side.get(name, {}).get(label)
            rows[label] = figures(label, (lambda g=got: side_row(g)) if got else
                                  (lambda: (_ for _ in ()).throw(Unavailable("no result"))),
                                  reference)
            print_row(label, rows[label])
        nuts = None
        if not args.no_nuts:
            nuts = rows["qvr NUTS"] = figures("qvr NUTS", lambda: run_qvr_nuts(example, args),
                                              reference)
            print_row("qvr NUTS", nuts)
        print(f"  {goal_line(rows, nuts)}", flush=True)
        out[name] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
