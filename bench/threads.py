"""NUTS thread policy (issue 37.1): the same fit with torch's default intra-op threads and
with one, idle and beside busy processes.

    .venv/bin/python bench/threads.py [--model examples/kid_scores.qvr] [--warmup 200]
                                      [--samples 200] [--chains 4] [--load N ...]

Each configuration is a whole `qvr run` (a fresh process: what a user runs), seeded the
same, from the caches (one run first fills them, not timed).  `--threads 0` asks for
torch's default (as many threads as cores), `--threads 1` for one; `--load N` starts N
processes spinning on a core beside the fit (the machine as a laptop or a CI box has
it).  Printed per load: the wall seconds of each side (warmup and sampling from the run
record) and the ratio default / one thread, and the ratio of each loaded fit to the same
fit idle (goal: <= 1.3).

Measured 2026-12-06 on the 2-core VM, kid_scores 4 x (1000 + 1000) from the caches
(compiled transition), default (2 threads) / one thread: idle 12.6 / 13.4 s, beside two
busy processes 18.5 / 18.6 s (1.47x / 1.39x the idle fit); 4 x (200 + 200): idle 10.2 /
9.4 s, loaded 12.2 / 14.0 s — within run-to-run noise.  The eager path (an `ode` model)
gains 8-19 % on one thread: `qvr.inference.methods.mcmc.SAMPLING_THREADS`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _spin(stop):
    while not stop.is_set():
        pass


@contextlib.contextmanager
def busy_processes(n: int):
    """`n` processes spinning on a core each while the block runs (the machine as a
    laptop or a CI box has it); stopped after."""
    stop = mp.Event()
    spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in spinners:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in spinners:
            p.join()


def _fit(model: str, data: str, threads: int, args, run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "qvr", "run", model, "--method", "nuts", "--warmup",
           str(args.warmup), "--samples", str(args.samples), "--chains", str(args.chains),
           "--seed", "3", "--no-pointwise", "--run-dir", str(run_dir)]
    if data:
        cmd += ["--data", data]
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        cmd += ["--threads", str(threads)]
    else:
        cmd += ["--threads", str(os.cpu_count() or 1)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"qvr run failed:\n{out.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text()) if (
        run_dir / "summary.json").is_file() else {}
    stats = summary.get("stats", summary)
    return {"wall": wall, "warmup": stats.get("warmup_time"),
            "sampling": stats.get("sampling_time")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="examples/kid_scores.qvr")
    ap.add_argument("--data", default="")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--load", type=int, nargs="*", default=[0, os.cpu_count() or 1])
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="qvr-threads-"))
    _fit(args.model, args.data, 1, args, tmp / "warm")  # fills the caches, not timed
    print(f"{args.model}: NUTS {args.chains} x ({args.warmup} + {args.samples}), "
          f"{os.cpu_count()} CPUs")
    idle = {}
    for load in args.load:
        with busy_processes(load):
            got = {threads: _fit(args.model, args.data, threads, args,
                                 tmp / f"l{load}t{threads}") for threads in (0, 1)}
        if load == 0:
            idle = got
        for threads in (0, 1):
            r = got[threads]
            name = "default threads" if threads == 0 else "one thread     "
            vs = (f", {r['wall'] / idle[threads]['wall']:.2f}x idle" if load and idle
                  else "")
            print(f"  load {load}: {name} wall {r['wall']:7.1f} s (warmup "
                  f"{r['warmup'] or float('nan'):.1f} s, sampling "
                  f"{r['sampling'] or float('nan'):.1f} s){vs}")
        print(f"  load {load}: default / one thread = {got[0]['wall'] / got[1]['wall']:.2f}")


if __name__ == "__main__":
    main()
