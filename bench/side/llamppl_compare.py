"""The qvr side and the driver of ``bench/smc.py --lm PATH`` (issue 40, point 6): qvr's
`HFCausalLM` under `SMCSteering` against llamppl 0.2.3's `smc_standard`, whose runs
`bench/side/llamppl_smc.py` makes in the side virtualenv; the two sides' runs are
interleaved seed by seed.  What is compared and how: ``bench/smc.py``'s docstring, last
section.  Runs in qvr's own virtualenv (imported by ``bench/smc.py``).
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]


LLAMPPL_PINS = ("torch==2.13.0", "transformers==5.25.0", "llamppl==0.2.3")


def llamppl_venv(venv: Path) -> Path:
    """The side virtualenv's Python (made the first time: CPU torch pinned first, as
    scripts/setup.sh does, then transformers and llamppl)."""
    import subprocess
    exe = venv / "bin" / "python"
    if not exe.is_file():
        print(f"making the side virtualenv {venv} ({', '.join(LLAMPPL_PINS)}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q"]
        subprocess.run(pip + [LLAMPPL_PINS[0]], check=True)
        subprocess.run(pip + list(LLAMPPL_PINS[1:]), check=True)
    return exe


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Counted:
    """An `HFCausalLM` that counts the tokens appended to live particles (the rows of
    each draw) and, when `track`, the KV bytes per row and position and the peak RSS."""

    def __init__(self, lm):
        self.lm, self.eos, self.tokens, self.track = lm, lm.eos, 0, False
        self.kv_per_token, self.kv_per_particle, self.peak = 0.0, 0.0, 0

    def start(self, num, generator=None):
        return self.lm.start(num, generator=generator)

    def draw(self, state, n, generator=None):
        self.tokens += state[1].shape[0]
        return self.lm.draw(state, n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        state = self.lm.advance(state, rows, tokens, prefixes, generator=generator)
        if self.track:
            self.peak = max(self.peak, _rss())
            keys, total = state[0].layers[0].keys, self.lm.cache_bytes(state)
            per_token = getattr(state[0], "bytes_per_position", None)  # shared-prefix cache
            self.kv_per_token = max(self.kv_per_token, per_token or
                                    total / keys.shape[0] / keys.shape[2])
            self.kv_per_particle = max(self.kv_per_particle, total / keys.shape[0])
        return state


def _qvr_runner(lm, potential, args, expansion):
    """``run(seed, track) -> {"wall", "tokens", "log_Z"}`` of qvr's SMC (warmed up)."""
    from qvr.smc import SMCSteering
    counted = Counted(lm)

    def run(seed, track=False):
        counted.tokens, counted.track = 0, track
        counted.kv_per_token = counted.kv_per_particle = 0.0
        base = counted.peak = _rss()
        smc = SMCSteering(counted, potential=potential, num_particles=args.particles,
                          expansion=expansion, max_len=args.max_len,
                          generator=torch.Generator().manual_seed(seed))
        t0 = time.perf_counter()
        r = smc.run()
        out = {"wall": time.perf_counter() - t0, "tokens": counted.tokens, "log_Z": r.log_Z}
        if track:
            out.update(rss_delta=counted.peak - base, kv_per_token=counted.kv_per_token,
                       kv_per_particle=counted.kv_per_particle,
                       sample=[lm.decode(x) for x in r.sequences[:3]])
        return out
    run(10_000)  # warm-up
    return run


class _Side:
    """The llamppl side script as a subprocess, one run per request."""

    def __init__(self, exe, job):
        import subprocess
        self.p = subprocess.Popen([str(exe), str(ROOT / "bench" / "side" / "llamppl_smc.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.ready = self._ask(job)

    def _ask(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            self.p.kill()
            raise RuntimeError(f"the llamppl side failed:\n{self.p.stderr.read()[-3000:]}")
        return json.loads(line)

    def runner(self, setting):
        return lambda seed, track=False: self._ask({"setting": setting, "seed": seed,
                                                    "track": track})

    def close(self):
        self.p.stdin.write("\n")
        self.p.stdin.close()
        self.p.wait(timeout=60)


def _z_stats(log_zs):
    z = np.exp(np.array(log_zs))
    finite = np.array([x for x in log_zs if x > -math.inf])
    return (float(finite.mean()) if finite.size else -math.inf,
            float(finite.var(ddof=1)) if finite.size > 1 else math.nan,
            float(z.mean()), float(z.std(ddof=1) / math.sqrt(z.size)), int(z.size - finite.size))


def bench_lm(args) -> dict:
    """qvr's `HFCausalLM` + `SMCSteering` against llamppl's `smc_standard` on the same
    model, start ids, potential, N and max length; the two sides' runs interleaved seed
    by seed (each round runs every configuration once)."""
    from qvr.smc.hf_lm import load_lm
    from qvr.smc.text_potentials import forbid_words
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    words = [w for w in args.forbid.split(",") if w]
    lm = load_lm(args.lm, prompt=args.prompt)
    lm.check_length(args.max_len)
    potential = forbid_words(*words, decode=lm.decode, eos=lm.eos, max_len=args.max_len)
    seeds = list(range(1, args.seeds + 1))
    n, k = args.particles, args.expansion
    runners = {"qvr K=1 (default)": _qvr_runner(lm, potential, args, 1)}
    side = None
    if not args.no_side:
        settings = {"llamppl ess=0, batched": {"ess_threshold": 0.0, "batch_size": n,
                                               "timeout": 0.0},
                    f"qvr K={k}": None,
                    "llamppl ess=0.5, batched": {"ess_threshold": 0.5, "batch_size": n,
                                                 "timeout": 0.0},
                    "llamppl ess=0.5, as shipped": {"ess_threshold": 0.5, "batch_size": 20,
                                                    "timeout": 0.02}}
        side = _Side(llamppl_venv(Path(args.venv)), {
            "lm": str(Path(args.lm).resolve()), "head": list(lm.head), "N": n,
            "phrases": [[w] for w in words], "max_len": args.max_len, "threads": threads,
            "settings": {a: b for a, b in settings.items() if b}})
        for name, setting in settings.items():
            runners[name] = side.runner(name) if setting else \
                _qvr_runner(lm, potential, args, k)
    else:
        runners[f"qvr K={k}"] = _qvr_runner(lm, potential, args, k)
    rows = {name: {"walls": [], "rates": [], "log_Z": []} for name in runners}
    try:
        for seed in seeds:  # one round: every configuration once, in turn
            for name, run in runners.items():
                r = run(seed)
                rows[name]["walls"].append(r["wall"])
                rows[name]["rates"].append(r["tokens"] / r["wall"])
                rows[name]["log_Z"].append(r["log_Z"])
        for name, run in runners.items():  # memory: one more run each
            rows[name].update({a: b for a, b in run(20_000, True).items()
                               if a not in ("wall", "tokens", "log_Z")})
    finally:
        if side is not None:
            side.close()
    print(f"SMC steering {args.lm} ({lm.vocab_size} tokens), prompt {args.prompt!r} "
          f"({len(lm.head)} ids with the start token), forbid {words}, N={n}, "
          f"max_len {args.max_len}, {len(seeds)} seeds, torch threads {threads}, wall time "
          f"(runs interleaved)" + (f"; side: {side.ready['versions']}" if side else ""))
    print(f"  {'':30s} {'tokens/s':>9s} {'run ms':>7s} {'log Z mean':>10s} {'log Z var':>9s}"
          f" {'Z mean ± se':>15s} {'Z=0':>4s} {'cache B/particle':>23s} {'RSS+/particle':>13s}")
    for name, r in rows.items():
        mean, var, z, se, zeros = _z_stats(r["log_Z"])
        state = f"KV {r['kv_per_particle']:.0f} ({r['kv_per_token']:.0f}/pos)" \
            if "kv_per_token" in r else f"trie {r['trie_bytes'] / n:.0f}"
        print(f"  {name:30s} {statistics.median(r['rates']):9.0f} "
              f"{statistics.median(r['walls']) * 1e3:7.1f} {mean:10.4f} {var:9.4f} "
              f"{z:7.4f} ± {se:.4f} {zeros:4d} {state:>23s} {r['rss_delta'] / n:11.0f} B")
        r.update(tokens_per_s=statistics.median(r["rates"]), log_Z_mean=mean,
                 log_Z_var=var, Z_mean=z, Z_se=se)
    ratios = {}
    if side is not None:
        for q, l in (("qvr K=1 (default)", "llamppl ess=0, batched"),
                     (f"qvr K={k}", "llamppl ess=0.5, batched"),
                     ("qvr K=1 (default)", "llamppl ess=0.5, as shipped")):
            a, b = rows[q], rows[l]
            paired = statistics.median(x / y for x, y in zip(a["rates"], b["rates"]))
            ratios[f"{q} / {l}"] = paired
            print(f"  {q} / {l}: {a['tokens_per_s'] / b['tokens_per_s']:.2f}x tokens/s "
                  f"(median within a round {paired:.2f}x)")
    return {"threads": threads, "rows": rows, "paired_ratios": ratios}
