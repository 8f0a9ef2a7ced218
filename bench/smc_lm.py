"""Tokens per second of SMC steering a pretrained causal LM, KV cache against recomputing
prefixes (issue 40, point 2), and the cache's memory per particle.

    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_lm.py [--lm examples/tiny_lm]
        [--particles 64] [--tokens 32] [--expansion 3] [--repeats 3] [--device cpu]
        [--dtype float32]

Every particle grows to exactly ``--tokens`` tokens (the end token is forbidden), so
both paths do the same work; a run's tokens are ``particles x tokens``.  Both paths use
one generator seed and make the same draws (checked here).  Prints the best of
``--repeats`` runs for each path.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lm", default=str(ROOT / "examples" / "tiny_lm"))
    ap.add_argument("--prompt", default="the old dog")
    ap.add_argument("--particles", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--expansion", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    from qvr.smc import SMCSteering, forbid_tokens
    from qvr.smc.hf_lm import HFCausalLM, load_lm

    results = {}
    for cache in (True, False):
        lm = load_lm(args.lm, dtype=args.dtype, device=args.device, prompt=args.prompt,
                     cache=cache)
        best, peak = float("inf"), 0
        for _ in range(args.repeats):
            states = []
            advance = lm.advance

            def spy(*a, **k):
                s = advance(*a, **k)
                states.append(HFCausalLM.cache_bytes(s))
                return s
            lm.advance = spy
            smc = SMCSteering(lm, potential=forbid_tokens(lm.eos), num_particles=args.particles,
                              expansion=args.expansion, max_len=args.tokens,
                              generator=torch.Generator().manual_seed(0))
            t0 = time.perf_counter()
            res = smc.run()
            if args.device == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
            peak = max(states) if states else 0
            lm.advance = advance
        results[cache] = (best, res, peak)
        mode = "kv-cache " if cache else "recompute"
        n = args.particles * args.tokens
        print(f"{mode}: {best:.3f} s, {n / best:,.0f} tokens/s "
              f"({args.particles} particles x {args.tokens} tokens, K={args.expansion}, "
              f"prompt {len(lm.head)} tokens); cache {peak / args.particles / 1024:.1f} KiB "
              f"per particle at the longest")
    same = results[True][1].sequences == results[False][1].sequences
    print(f"speed-up {results[False][0] / results[True][0]:.2f}x; same draws: {same}")


if __name__ == "__main__":
    main()
