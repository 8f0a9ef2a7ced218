"""What recording the pointwise terms costs (issue 25, point 8).

For each example, one NUTS fit with ``pointwise=False`` and one with ``pointwise=True``
(same seed, same process, both writing a run record; a first short fit warms the
density's compilation so that neither side pays for it; arviz-stats imported before, its
import time printed apart): wall time of each, the extra time as a share of the
fit, and the record's size.  Then the size of the record of a 4 x 1,000-draw fit over
10,000 observed rows (a normal-mean model on synthetic data), split into draws,
pointwise chunks and the rest.

    .venv/bin/python bench/predictive.py [--samples 1000] [--warmup 1000] [--only NAME]

Figures are printed, never asserted (timings depend on the machine and its load).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = [("eight_schools", None), ("count_regression", "rentals"),
            ("count_regression", "rentals_poisson"), ("regression_plates", None),
            ("kid_scores", None), ("gp_counts", None)]

BIG = textwrap.dedent("""\
    object Row : FinSet 10000
    program normal_mean : Row -> Row
        sample mu <- Normal(0.0, 10.0)
        sample sigma <- HalfNormal(2.0)
        observe y : Row <- Normal(mu, sigma)
        return mu
    export normal_mean
    """)


def _size(path: Path, sub: str = "") -> int:
    base = path / sub if sub else path
    if base.is_file():
        return base.stat().st_size
    return sum(p.stat().st_size for p in base.rglob("*") if p.is_file())


def _fit(prog, path, export, cfg, run_dir, data=None):
    from qvr.inference import fit
    t0 = time.perf_counter()
    res = fit(prog, data=data, config=cfg, run_dir=run_dir, program_path=path,
              export=export)
    return time.perf_counter() - t0, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--only", default=None)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args(argv)
    import numpy as np
    import qvr
    from qvr.inference import FitConfig
    tmp = Path(tempfile.mkdtemp(prefix="qvr-bench-predictive-"))
    t0 = time.perf_counter()
    import arviz_stats  # noqa: F401 - once per process (xarray, scipy.stats): apart
    print(f"import arviz_stats (once per process, paid by the first fit's checks): "
          f"{time.perf_counter() - t0:.2f} s")
    print(f"torch threads {__import__('torch').get_num_threads()}, "
          f"{args.chains} chains x ({args.warmup} + {args.samples}) draws, NUTS")
    print(f"{'example':34} {'off s':>8} {'on s':>8} {'extra':>7} {'record MB':>10} "
          f"{'pointwise MB':>13}")
    for name, export in EXAMPLES:
        if args.only and args.only not in name:
            continue
        path = str(ROOT / "examples" / f"{name}.qvr")
        prog = qvr.load(path)
        cfg = dict(method="nuts", num_chains=args.chains, num_warmup=args.warmup,
                   num_samples=args.samples, seed=1)
        _fit(prog, path, export, FitConfig(**{**cfg, "num_warmup": 200, "num_samples": 200,
                                              "pointwise": False}), None)  # warm caches
        off, _ = _fit(prog, path, export, FitConfig(**cfg, pointwise=False),
                      tmp / f"{name}-{export}-off")  # a record too: only the phase differs
        run_dir = tmp / f"{name}-{export}"
        on, _ = _fit(prog, path, export, FitConfig(**cfg), run_dir)
        label = f"{name}" + (f" ({export})" if export else "")
        print(f"{label:34} {off:8.2f} {on:8.2f} {100 * (on - off) / off:6.1f}% "
              f"{_size(run_dir) / 1e6:10.1f} {_size(run_dir, 'pointwise') / 1e6:13.1f}",
              flush=True)
    if not args.skip_big:
        rng = np.random.default_rng(0)
        y = rng.normal(1.0, 2.0, 10000)
        run_dir = tmp / "big"
        cfg = FitConfig(method="nuts", num_chains=4, num_warmup=300, num_samples=1000,
                        seed=0)
        t, _ = _fit(qvr.loads(BIG), None, None, cfg, run_dir, data={"y": y})
        print(f"\n4 x 1,000 draws over 10,000 rows (float32 chunks): record "
              f"{_size(run_dir) / 1e6:.1f} MB (pointwise {_size(run_dir, 'pointwise') / 1e6:.1f}"
              f" MB, draws {(_size(run_dir, 'draws') + _size(run_dir, 'samples.npz')) / 1e6:.2f}"
              f" MB), fit {t:.1f} s")
    if not os.environ.get("QVR_BENCH_KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
