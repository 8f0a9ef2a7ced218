"""Fit every program of a corpus as a new user would, and say which fit and why others stop.

    .venv/bin/python scripts/fit_corpus.py examples/ more/programs/ [--methods svi nuts]

For each ``.qvr`` file (directories are searched recursively) that checks clean, runs
``qvr run FILE --method M --synthetic N`` (short settings: SVI 30 steps; HMC/NUTS one
chain of 30 + 30) in a subprocess with a time limit, and classifies the outcome:

* ``fit`` — exit 0 (a fit, or an MCMC fit with nothing to sample that reports its
  likelihood);
* ``stop`` — exit 1/2 with a message (the last line of stderr is shown);
* ``INTERNAL`` — an internal error (a traceback went to ``internal-error.txt``): a bug;
* ``timeout`` — still running at the limit.

Programs that do not check clean are listed as ``skip``.  Prints one line per program and
method, then the share that fit per method.  Exit status 1 when any internal error was
seen.  Use it on the programs we keep to check a change against them (issue 22).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"svi": ["--steps", "30"],
            "hmc": ["--warmup", "30", "--samples", "30", "--chains", "1"],
            "nuts": ["--warmup", "30", "--samples", "30", "--chains", "1"]}


def programs(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.qvr")) if p.is_dir() else [p]
    return out


def qvr(*args, timeout=None, cwd=None):
    exe = [sys.executable, "-m", "qvr.cli"] if not (ROOT / ".venv/bin/qvr").exists() else \
        [str(ROOT / ".venv/bin/qvr")]
    return subprocess.run([*exe, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)


def fit_one(path: Path, method: str, rows: int, limit: float, runs: Path) -> tuple[str, str]:
    try:
        r = qvr("run", path.resolve(), "--method", method, "--synthetic", rows,
                *SETTINGS[method], "--runs-dir", runs, timeout=limit)
    except subprocess.TimeoutExpired:
        return "timeout", f"still running after {limit:.0f} s"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not any(
        w in ln for w in ("progress:", ": results in ", ": run folder "))]
    last = lines[-1] if lines else ""
    if r.returncode == 0:
        return "fit", ""
    if "internal error" in r.stderr:
        return "INTERNAL", last
    return "stop", last


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help=".qvr files or folders")
    ap.add_argument("--methods", nargs="+", default=["svi", "nuts"],
                    choices=sorted(SETTINGS))
    ap.add_argument("--synthetic", type=int, default=20, metavar="N")
    ap.add_argument("--timeout", type=float, default=300.0, metavar="S",
                    help="seconds per fit (default 300)")
    args = ap.parse_args(argv)
    counts = {m: [0, 0] for m in args.methods}
    internal = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in programs(args.paths):
            if qvr("check", path).returncode != 0:
                print(f"skip      {path}: does not check clean")
                continue
            for m in args.methods:
                kind, why = fit_one(path, m, args.synthetic, args.timeout, Path(tmp))
                counts[m][1] += 1
                counts[m][0] += kind == "fit"
                internal += kind == "INTERNAL"
                print(f"{kind:<9} {m:<5} {path}" + (f": {why}" if why else ""), flush=True)
    for m, (ok, n) in counts.items():
        share = f"{100 * ok / n:.0f}%" if n else "n/a"
        print(f"{m}: {ok} of {n} fit ({share})")
    if internal:
        print(f"{internal} internal error(s)")
    return 1 if internal else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
