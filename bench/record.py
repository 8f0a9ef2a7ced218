"""The cost of the run record: fits through `qvr.inference.fit` with a run folder against
the same fits without one, in the same invocation, interleaved.

* SVI steps/s on `examples/transformer_lm.qvr` (batch 64 x 16 tokens), progress at the
  `qvr run` rate (every 0.05 s) and the record's every line flushed;
* NUTS draws/s on eight schools (4 chains, TorchScript ticks so both sides do the same
  arithmetic), draws chunks written as ``.npz`` files.

Prints each side's median over `--rounds` paired rounds and the ratio (goal: the record
costs at most 3%).  Run: ``PYTHONPATH=. .venv/bin/python bench/record.py``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QVR_MCMC_COMPILER", "torchscript")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from inference import EIGHT_SCHOOLS, SCHOOLS_SIGMA, SCHOOLS_Y, transformer  # noqa: E402

from qvr import loads  # noqa: E402
from qvr.inference import FitConfig, fit  # noqa: E402


def svi_once(with_record: bool, steps: int, tmp: Path) -> float:
    model, ctx, obs = transformer(64, 16)
    cfg = FitConfig(method="svi", steps=steps, lr=0.01, seed=0, progress_interval=0.05)
    run_dir = tmp / f"svi-{time.monotonic_ns()}" if with_record else None
    t0 = time.perf_counter()
    fit(model, {**obs, "x": ctx}, cfg, on_event=lambda e: None, run_dir=run_dir)
    return steps / (time.perf_counter() - t0)


def nuts_once(with_record: bool, samples: int, tmp: Path) -> float:
    prog = loads(EIGHT_SCHOOLS)
    data = {"y": torch.tensor(SCHOOLS_Y), "sigma": torch.tensor(SCHOOLS_SIGMA),
            "x": torch.zeros(8, 1)}
    cfg = FitConfig(method="nuts", num_warmup=samples, num_samples=samples, num_chains=4,
                    seed=0, progress_interval=0.05)
    run_dir = tmp / f"nuts-{time.monotonic_ns()}" if with_record else None
    t0 = time.perf_counter()
    fit(prog, data, cfg, on_event=lambda e: None, run_dir=run_dir)
    return 4 * samples / (time.perf_counter() - t0)


def paired(fn, n: int, rounds: int, tmp: Path) -> tuple[float, float]:
    fn(False, max(1, n // 10), tmp)  # warm up (imports, traces)
    fn(True, max(1, n // 10), tmp)
    with_r, without = [], []
    for r in range(rounds):
        order = (True, False) if r % 2 else (False, True)
        for flag in order:
            (with_r if flag else without).append(fn(flag, n, tmp))
    return statistics.median(with_r), statistics.median(without)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--svi-steps", type=int, default=300, metavar="N",
                    help="SVI steps per timed fit (default 300)")
    ap.add_argument("--nuts-samples", type=int, default=300, metavar="N",
                    help="NUTS warmup and sampling iterations per chain per timed fit "
                         "(default 300)")
    ap.add_argument("--rounds", type=int, default=5, metavar="K",
                    help="paired rounds (with and without the record, alternating which "
                         "goes first); the medians are compared (default 5)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="qvr-record-bench-"))
    try:
        for name, fn, n, unit in (("SVI transformer_lm 64x16", svi_once, args.svi_steps,
                                   "steps/s"),
                                  ("NUTS eight schools 4 chains", nuts_once, args.nuts_samples,
                                   "draws/s")):
            w, wo = paired(fn, n, args.rounds, tmp)
            print(f"{name:32s} with record {w:9.1f} {unit}   without {wo:9.1f} {unit}   "
                  f"ratio {w / wo:.3f} (overhead {100 * (1 - w / wo):+.1f}%)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
