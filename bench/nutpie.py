"""qvr's NUTS against nutpie (and PyMC's model compiler) on the posteriordb-sample
posteriors, side by side in one run (issue 37.4).

    .venv/bin/python bench/nutpie.py [--warmup 1000] [--samples 1000] [--chains 4]
        [--seed 1] [--only NAME ...] [--load N] [--venv DIR] [--python python3.12]

nutpie runs in a side virtualenv on Python 3.12 that this script makes the first time
(``DIR/bin/pip install nutpie pymc``; default DIR ``~/.cache/qvr/bench-nutpie``), with
the models of `bench/side/nutpie_models.py`.  qvr runs `qvr.fit` with NUTS and its
defaults (nutpie's Fisher warmup, one torch thread, chains vectorised) twice: a *first
run* with an empty cache directory (the C++ loop compiled in the background while the
first iterations run leaf by leaf) and a *second run* from the caches.  With ``--load N``
both sides run beside N busy processes.

Printed per posterior and side: compile s (nutpie: PyMC -> numba), warmup + sampling s,
leapfrogs in warmup and in sampling, min bulk ESS, ESS/s (sampling wall), leapfrogs per
ESS (warmup included); then qvr/nutpie ratios for issue 37's goals: leapfrogs per ESS
(goal <= 1.2), warmup leapfrogs (goal <= 1), second-run wall against nutpie's sampling
wall, first-run wall against nutpie's compile + sampling.  Figures, not pass/fail.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from posteriors import POSTERIORS, SHARED  # noqa: E402


def side_venv(venv: Path, python: str) -> Path:
    """The side virtualenv's python, made (nutpie and PyMC from the registry) if absent."""
    exe = venv / "bin" / "python"
    if exe.is_file():
        return exe
    print(f"making the side virtualenv {venv} ({python}; nutpie, pymc) ...", flush=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "nutpie", "pymc"],
                   check=True)
    return exe


def run_nutpie(exe: Path, args) -> dict:
    out = Path(tempfile.mkdtemp()) / "nutpie.json"
    cmd = [str(exe), str(ROOT / "bench" / "side" / "nutpie_models.py"), str(SHARED),
           str(out), "--warmup", str(args.warmup), "--samples", str(args.samples),
           "--chains", str(args.chains), "--seed", str(args.seed)]
    if args.only:  # the posteriors' full names (the side script knows no example names)
        cmd += ["--only", *[name for name, (example, _) in POSTERIORS.items()
                            if any(o in name or o == example for o in args.only)]]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_qvr(name: str, example: str, args, cache: Path) -> dict:
    """One `qvr.fit` in a fresh process (so that the first run compiles from nothing),
    with `QVR_CACHE_DIR=cache`."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'bench')!r})
from warmup import run
t0 = time.perf_counter()
r = run({example!r}, {{}}, {args.warmup}, {args.samples}, {args.chains}, {args.seed})
r.pop("draws", None)
r["wall"] = time.perf_counter() - t0
print("RESULT" + json.dumps(r))
"""
    env = dict(os.environ, QVR_CACHE_DIR=str(cache))
    env.pop("QVR_MCMC_COMPILER", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"{name}: qvr failed: {p.stderr[-2000:]}")
    return json.loads(line[len("RESULT"):])


def wait_for_workers(cache: Path, limit: float = 1800.0) -> None:
    """Until no background compile (`transition.BackgroundCompile`) of the first run is
    still working in `cache` (its lock names a live process)."""
    from qvr.inference.mcmc.transition_cache import _alive
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not any(_alive(lock) for lock in cache.glob("transitions/*.compiling")):
            return
        time.sleep(0.5)


def busy(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--venv", default=str(Path.home() / ".cache" / "qvr" / "bench-nutpie"))
    ap.add_argument("--python", default="python3.12")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    exe = side_venv(Path(args.venv), args.python)
    hogs = busy(args.load)
    try:
        nut = run_nutpie(exe, args)
        rows = []
        for name, (example, _) in POSTERIORS.items():
            if args.only and not any(o in name or o == example for o in args.only):
                continue
            cache = Path(tempfile.mkdtemp(prefix="qvr-bench-cache-"))
            try:
                first = run_qvr(name, example, args, cache)
                wait_for_workers(cache)  # the second run is the one from the caches
                second = run_qvr(name, example, args, cache)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            rows.append((name, nut.get(name), first, second))
    finally:
        for h in hogs:
            h.kill()
    print(f"\n{args.chains} chains x ({args.warmup} + {args.samples}), seed {args.seed}, "
          f"{args.load} busy processes beside; qvr: one torch thread, chains vectorised, "
          f"adapt=fisher; nutpie: its defaults (chains on all cores)")
    print(f"{'posterior':40} {'side':13} {'compile':>7} {'run s':>6} {'warm lf':>8} "
          f"{'samp lf':>8} {'minESS':>7} {'ESS/s':>8} {'lf/ESS':>7}")
    for name, n, first, second in rows:
        for side, r, comp in (("nutpie", n, None), ("qvr first", first, None),
                              ("qvr second", second, None)):
            if r is None:
                print(f"{name:40} {side:13} (no model)")
                continue
            run_s = r["sampling_s"] if side == "nutpie" else r["wall"]
            comp = r.get("compile_s", float("nan")) if side == "nutpie" else float("nan")
            lf = r["warmup_leapfrogs"] + r["leapfrogs"]
            print(f"{name:40} {side:13} {comp:7.1f} {run_s:6.2f} {r['warmup_leapfrogs']:8d} "
                  f"{r['leapfrogs']:8d} {r['min_ess']:7.0f} {r['min_ess'] / run_s:8.0f} "
                  f"{lf / max(r['min_ess'], 1):7.1f}")
        if n is not None:
            lfe = lambda r: (r["warmup_leapfrogs"] + r["leapfrogs"]) / max(r["min_ess"], 1)
            print(f"{'':40} qvr/nutpie: lf/ESS {lfe(second) / lfe(n):.2f}x (goal <= 1.2), "
                  f"warmup lf {second['warmup_leapfrogs'] / n['warmup_leapfrogs']:.2f}x "
                  f"(goal <= 1), second run {second['wall'] / n['sampling_s']:.1f}x nutpie's "
                  f"sampling, first run {first['wall'] / (n['compile_s'] + n['sampling_s']):.1f}x "
                  f"its compile + sampling")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
