"""SVI at scale (issue 26, point 6): minibatch throughput, processes, and memory.

On `examples/decoder_lm.qvr` fitted to a generated corpus (``examples/data/make_corpus.py
--tokens N --out DIR``: ``x.npy``/``next_token.npy``, rows of 16 tokens, read
memory-mapped), with the shipped options (8 Monte-Carlo draws per composite):

1. **Batch sizes** 16..1024 rows, one process: steps/s and rows/s (= samples/s; tokens/s
   is 16 times that), measured from the fit's own progress events after two warm-up
   steps (`FitConfig.progress_interval = 0`: one event per step).
2. **Processes**: the same fit at a few batch sizes with 1 process (torch's threads left
   at their default, and pinned to 1) and with 2 processes (`qvr run --nproc 2`:
   torchrun, gloo, one thread each — torchrun's default), each in a fresh process, rates
   read from the run records' events; the ratios 2 procs / 1 proc are the speed-ups (a
   single process already spreads its matrix work over torch's intra-op threads, so the
   gain over it is smaller than over one thread).
3. **Memory**: peak RSS of a minibatch fit (batch 256) over corpora of two sizes — the
   small one and ``--tokens`` — next to the size of the files: bounded by the batch, the
   peak does not grow with the file.

    .venv/bin/python bench/scale.py [--tokens 50000000] [--steps 20] [--quick]

Figures are printed, never asserted (timings depend on the machine and its load).  The
corpora are kept in ``$QVR_CACHE_DIR/corpora`` (default ``~/.cache/qvr/corpora``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROGRAM = ROOT / "examples" / "decoder_lm.qvr"
CORPUS = ROOT / "examples" / "data" / "make_corpus.py"


def cache_dir() -> Path:
    base = os.environ.get("QVR_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "qvr")
    return Path(base) / "corpora"


def corpus(tokens: int) -> Path:
    out = cache_dir() / f"decoder_lm-{tokens}"
    if not (out / "next_token.npy").is_file():
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(CORPUS), "--tokens", str(tokens), "--out",
                        str(out)], check=True)
        print(f"  generated {tokens:,} tokens in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.npy")) / 2 ** 20


def rate_of(events, skip: int = 2) -> float:
    """Steps per second between the `skip`-th progress event and the last."""
    from qvr.events import FitProgress
    prog = [e for e in events if isinstance(e, FitProgress)]
    if len(prog) <= skip + 1:
        return float("nan")
    a, b = prog[skip], prog[-1]
    return (b.step - a.step) / max(b.elapsed - a.elapsed, 1e-9)


def in_process(data: Path, batch: int, steps: int) -> float:
    import qvr
    from qvr.inference import FitConfig, fit
    events = []
    fit(qvr.load(str(PROGRAM)), config=FitConfig(
        method="svi", steps=steps, batch_size=batch, draws=8, data=str(data), seed=0,
        pointwise=False, progress_interval=0.0), on_event=events.append,
        program_path=str(PROGRAM))
    return rate_of(events)


PEAK = ("import resource, runpy, sys\n"
        "sys.argv = ['qvr'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module('qvr', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "file=sys.stderr)\n")


def launched(data: Path, batch: int, steps: int, nproc: int, threads, run_dir: Path):
    """``(steps/s, peak RSS MB)`` of a `qvr run` in a new process (with ``nproc`` > 1,
    the rate of the launch; the peak is then not measured: NaN)."""
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    args = ["run", str(PROGRAM), "--method", "svi", "--steps", str(steps), "--batch-size",
            str(batch), "--draws", "8", "--data", str(data), "--no-pointwise", "--run-dir",
            str(run_dir)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "qvr", *args, "--nproc", str(nproc)]
    else:  # the fit's own process, reporting its peak RSS (ru_maxrss, KiB on Linux)
        cmd = [sys.executable, "-c", PEAK, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0 or not (run_dir / "run.json").is_file():
        print(out.stderr[-2000:])
        return float("nan"), float("nan")
    peak = float("nan")
    for line in out.stderr.splitlines():
        if line.startswith("PEAK_RSS_KB"):
            peak = int(line.split()[1]) / 1024
    from qvr.runs import open_run
    events = open_run(run_dir).events(load_draws=False)
    return rate_of(events), peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=50_000_000,
                    help="tokens of the large corpus (default 50,000,000)")
    ap.add_argument("--small", type=int, default=1_000_000,
                    help="tokens of the small corpus (default 1,000,000)")
    ap.add_argument("--steps", type=int, default=20, help="steps per measurement")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: small corpora, few steps, few sizes")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.small, args.steps = 400_000, 100_000, 6
    import tempfile

    import torch
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}")
    small, large = corpus(args.small), corpus(args.tokens)

    print("\n1. batch sizes (one process, in this process; decoder_lm, 8 draws)")
    print(f"{'batch':>6} {'steps/s':>9} {'rows/s':>9} {'tokens/s':>10}")
    sizes = (16, 64, 256) if args.quick else (16, 32, 64, 128, 256, 512, 1024)
    for b in sizes:
        r = in_process(small, b, args.steps)
        print(f"{b:>6} {r:>9.2f} {r * b:>9.0f} {r * b * 16:>10.0f}")

    print("\n2. processes (each a fresh `qvr run`; rates from the run records)")
    print(f"{'batch':>6} {'1 proc':>9} {'1 proc 1 thr':>13} {'2 procs':>9} {'2 / 1':>7} "
          f"{'2 / 1 thr':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, b in enumerate((64,) if args.quick else (64, 256, 1024)):
            one, _ = launched(small, b, args.steps, 1, None, tmp / f"a{i}")
            one1, _ = launched(small, b, args.steps, 1, 1, tmp / f"b{i}")
            two, _ = launched(small, b, args.steps, 2, None, tmp / f"c{i}")
            print(f"{b:>6} {one:>9.2f} {one1:>13.2f} {two:>9.2f} {two / one:>7.2f} "
                  f"{two / one1:>10.2f}")

        print("\n3. memory (batch 256; peak RSS of the fit's process against the files)")
        print(f"{'tokens':>12} {'files MB':>9} {'peak RSS MB':>12}")
        for tokens, folder in ((args.small, small), (args.tokens, large)):
            _, peak = launched(folder, 256, max(4, args.steps // 2), 1, None,
                               tmp / f"m{tokens}")
            print(f"{tokens:>12,} {size_mb(folder):>9.0f} {peak:>12.0f}")


if __name__ == "__main__":
    main()
