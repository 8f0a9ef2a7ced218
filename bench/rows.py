"""A first NUTS run at a new row count (issue 37.3): one compiled transition for every row
count (`qvr.inference.mcmc.transition_rows`) against a cold start and against the row
count's own package.

    .venv/bin/python bench/rows.py [--example kid_scores] [--rows 300] [--warmup 1000]
                                   [--samples 1000] [--chains 4] [--seed 1]

In a fresh cache directory (`QVR_CACHE_DIR`, removed at the end), with ``compiler="auto"``
as a user runs it:

1. the example on its shipped data: a first run (leaf by leaf, the C++ loop compiled in the
   background; with probes, a second worker then builds the package for every row count);
   the script waits for both workers;
2. *cold*: the data cut to `--rows` rows in a second fresh directory holding only the full
   data's own package (what a run at a new row count met before: leaf by leaf while its
   package compiles);
3. *alone*: the same cut data in the first directory: the package built for the full
   data's row count, reused, with no compile beside it (the run's own package's
   background compile switched off in this process); *generic*: the same as a user runs
   it, the cut data's own package compiling in the background meanwhile;
4. *own*: the same again once the cut data's own package (compiled in the background
   by 3) is on disk.

Printed per run: warmup and sampling seconds, their sum, the wall time of `fit`, how the
steps ran, and min bulk ESS; then generic/cold and generic/own.  Figures, not
pass/fail.  One intra-op thread (as `bench/inference.py`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _wait_for_workers(directory: Path, timeout: float = 600.0) -> None:
    """Until no compile worker of `directory` runs (no ``*.compiling`` lock, no
    ``*job*`` file) and a little after: the rows worker starts when the first ends."""
    end = time.time() + timeout
    quiet = 0
    while time.time() < end and quiet < 3:
        busy = list(directory.glob("*.compiling")) + list(directory.glob("*job*"))
        busy += [p for p in directory.glob("*.tmp.pt2")]
        quiet = 0 if busy or _workers() else quiet + 1
        time.sleep(1.0)


def _workers() -> bool:
    import subprocess
    out = subprocess.run(["pgrep", "-f", "qvr.inference.mcmc.compile_worker"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--example", default="kid_scores")
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    os.environ["QVR_MCMC_COMPILER"] = "auto"
    first_dir = Path(tempfile.mkdtemp(prefix="qvr-rows-"))
    cold_dir = Path(tempfile.mkdtemp(prefix="qvr-rows-cold-"))
    os.environ["QVR_CACHE_DIR"] = str(first_dir)
    import torch
    torch.set_num_threads(1)
    from qvr import load
    from qvr.inference import fit
    from qvr.inference.criticism.diagnostics import ess_bulk
    from qvr.inference.data.fit_data import shipped_data, load_data_file
    from qvr.runtime.sizes import sized_values
    from posteriors import flat_draws

    path = ROOT / "examples" / f"{args.example}.qvr"
    data = load_data_file(shipped_data(str(path)))
    program = load(str(path))
    where = sized_values(program.typed)
    name = next(n for n, places in where.items() if all(k in data for k, _, _ in places))
    cut = dict(data)
    for key, axis, _ in where[name]:
        import numpy as np
        a = np.asarray(cut[key])
        cut[key] = np.take(a, np.arange(args.rows), axis=a.ndim + axis).tolist()
    if name in cut:
        cut[name] = args.rows

    def run(label: str, values: dict) -> dict:
        t0 = time.perf_counter()
        res = fit(load(str(path)), values, {
            "method": "nuts", "num_warmup": args.warmup, "num_samples": args.samples,
            "num_chains": args.chains, "seed": args.seed, "pointwise": False})
        wall = time.perf_counter() - t0
        st = res.stats
        ess = min(float(ess_bulk(v)) for v in flat_draws(res.samples).values())
        row = {"run": label, "warmup_s": st["warmup_time"], "sampling_s": st["sampling_time"],
               "wall": wall, "compiler": st.get("compiler"), "min_ess": ess,
               "notes": [n for n in st.get("compiler_notes", []) if "transition" in n]}
        fit_s = row["warmup_s"] + row["sampling_s"]
        print(f"{label:8s} warmup {row['warmup_s']:6.2f} s  sampling {row['sampling_s']:6.2f} s"
              f"  sum {fit_s:6.2f} s  wall {wall:6.2f} s  steps {row['compiler']:12s}"
              f"  min bulk ESS {ess:6.0f}", flush=True)
        for n in row["notes"]:
            print(f"         {n}")
        return row

    try:
        print(f"{args.example}: {name} = {len(next(iter(data.values())))} rows, then "
              f"{args.rows}; {args.chains} x ({args.warmup} + {args.samples}), seed "
              f"{args.seed}")
        run("first", data)
        _wait_for_workers(first_dir / "transitions")
        built = sorted(p.name for p in (first_dir / "transitions").glob("*.pt2"))
        print(f"         packages on disk: {', '.join(built)}")
        for p in (first_dir / "transitions").glob("*"):
            if not p.name.startswith("rows-") and p.suffix in (".pt2", ".pt"):
                (cold_dir / "transitions").mkdir(exist_ok=True)
                shutil.copy(p, cold_dir / "transitions" / p.name)
        shutil.copytree(first_dir / "densities", cold_dir / "densities", dirs_exist_ok=True)
        os.environ["QVR_CACHE_DIR"] = str(cold_dir)
        cold = run("cold", cut)
        _wait_for_workers(cold_dir / "transitions")
        os.environ["QVR_CACHE_DIR"] = str(first_dir)
        from qvr.inference.mcmc import transition_cache
        real = transition_cache.BackgroundCompile
        transition_cache.BackgroundCompile = lambda *a, **k: None  # noqa: E731
        try:  # the generic package alone, with no compile beside it
            alone = run("alone", cut)
        finally:
            transition_cache.BackgroundCompile = real
        generic = run("generic", cut)
        _wait_for_workers(first_dir / "transitions")
        own = run("own", cut)
        total = lambda r: r["warmup_s"] + r["sampling_s"]  # noqa: E731
        print(f"generic / cold: {total(generic) / total(cold):.2f}x (warmup + sampling), "
              f"{generic['wall'] / cold['wall']:.2f}x (wall)")
        print(f"generic / own:  {total(generic) / total(own):.2f}x (warmup + sampling); "
              f"without its own package compiling beside it: "
              f"{total(alone) / total(own):.2f}x")
    finally:
        shutil.rmtree(first_dir, ignore_errors=True)
        shutil.rmtree(cold_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
