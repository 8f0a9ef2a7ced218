"""Warmup adaptations side by side: nutpie's Fisher diagonal (``adapt="fisher"``, the
default) against Stan's windows (``adapt="stan"``), per posteriordb-sample posterior; or,
with ``--compare uturn``, NUTS's U-turn criteria (``uturn="momentum"``, the default,
against nutpie's ``"displacement"``), both on the Fisher adaptation.

    .venv/bin/python bench/warmup.py [--warmup 1000] [--samples 1000] [--chains 4]
                                     [--seed 1] [--only NAME ...] [--compare adapt|uturn]
                                     [--json FILE]

Each posterior's example program is fitted with ``qvr.fit`` and NUTS twice in one process,
same seed, once per setting (the compiled transition is loaded from the cache on the
second: run the script twice, or compare warmup/sampling seconds, not the wall).  Printed
per run: warmup and sampling seconds, leapfrog steps summed over chains in warmup and in
sampling, the minimum bulk ESS over all parameters, ESS per 1000 sampling leapfrogs and
per 1000 leapfrogs in all (warmup included), the mean acceptance statistic while sampling
(target 0.8), the divergent transitions while sampling and the largest |mean - reference|
/ MCSE against posteriordb's gold standard; then the ratios (first setting over second)
of warmup leapfrogs and of ESS per leapfrog.
Figures, not pass/fail: issue 37's goals are read from them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from posteriors import POSTERIORS, SHARED, _shipped, compare, flat_draws  # noqa: E402

from qvr import load  # noqa: E402
from qvr.inference import fit  # noqa: E402
from qvr.inference.criticism.diagnostics import ess_bulk  # noqa: E402


def run(example: str, setting: dict, warmup: int, samples: int, chains: int,
        seed: int) -> dict:
    path = ROOT / "examples" / f"{example}.qvr"
    program = load(str(path))
    t0 = time.perf_counter()
    res = fit(program, config={"method": "nuts", "num_warmup": warmup, "num_samples": samples,
                               "num_chains": chains, "seed": seed, **setting,
                               "pointwise": False, **_shipped(path)},
              program_path=str(path))
    wall = time.perf_counter() - t0
    if res.status != "finished":
        raise RuntimeError(f"{example} ({setting}): {res.status}: {res.message}")
    draws = flat_draws(res.samples)
    st = res.stats
    ess = min(float(ess_bulk(v)) for v in draws.values())
    warm, samp = st["warmup_leapfrogs"], st["leapfrogs"]
    return {"wall": wall, "warmup_s": st["warmup_time"], "sampling_s": st["sampling_time"],
            "warmup_leapfrogs": warm, "leapfrogs": samp, "min_ess": ess,
            "ess_per_1k": 1000 * ess / max(samp, 1),
            "ess_per_1k_all": 1000 * ess / max(warm + samp, 1),
            "acceptance": st["mean_acceptance"], "draws": draws,
            "divergences": int(st.get("total_divergences", 0)),
            "step_size": sum(st["step_sizes"]) / len(st["step_sizes"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--compare", choices=("adapt", "uturn"), default="adapt")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    key = args.compare
    values = ("fisher", "stan") if key == "adapt" else ("momentum", "displacement")
    head = (f"{'posterior':42} {key:12} {'warm s':>7} {'samp s':>7} {'warm lf':>8} "
            f"{'samp lf':>8} {'minESS':>7} {'ESS/1k':>7} {'all/1k':>7} {'acc':>5} "
            f"{'div':>4} {'max|z|':>6}")
    print(head, flush=True)
    for name, (example, _) in POSTERIORS.items():
        if args.only and not any(o in name or o == example for o in args.only):
            continue
        ref = json.loads((SHARED / name / "reference.json").read_text())
        got = {}
        for value in values:
            r = run(example, {key: value}, args.warmup, args.samples, args.chains, args.seed)
            r["max_z"] = compare(r.pop("draws"), ref)["max_z"]
            got[value] = r
            print(f"{name:42} {value:12} {r['warmup_s']:7.1f} {r['sampling_s']:7.1f} "
                  f"{r['warmup_leapfrogs']:8d} {r['leapfrogs']:8d} {r['min_ess']:7.0f} "
                  f"{r['ess_per_1k']:7.1f} {r['ess_per_1k_all']:7.1f} "
                  f"{r['acceptance']:5.2f} {r['divergences']:4d} {r['max_z']:6.1f}",
                  flush=True)
        f, s = got[values[0]], got[values[1]]
        print(f"{'':42} {values[0]}/{values[1]}: warmup leapfrogs "
              f"{f['warmup_leapfrogs'] / max(s['warmup_leapfrogs'], 1):.2f}x, ESS per "
              f"leapfrog {f['ess_per_1k'] / max(s['ess_per_1k'], 1e-9):.2f}x, in all "
              f"{f['ess_per_1k_all'] / max(s['ess_per_1k_all'], 1e-9):.2f}x", flush=True)
        rows.append({"posterior": name, **got})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
