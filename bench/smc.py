"""SMC steering speed: particle-steps per second with per-particle state caching against
recomputing every prefix from scratch, on a `scan`-based QVR program and on a `LogitsLM`.

Setting (issue 5): N = 64 particles, K = 4, every particle grown to length 32 (the end
token is forbidden by a potential, so each run is 32 steps = 2,048 particle-steps).

* scan program: ``examples/recurrent_lm.qvr`` through `ProgramLM` — ``cache=True`` carries
  each particle's recurrent state (one cell step per token), ``cache=False`` feeds the
  whole ``[bos] + prefix`` through the program at every step;
* LogitsLM over a 2-layer causal transformer (d = 64, defined below) — ``cache=True``
  carries its key/value cache per particle (the "CachedTransformer" of the user's
  Algorithm 3), ``cache=False`` runs the full causal forward on every prefix at every
  step; the stateless per-prefix logits cache (no KV cache) is reported too;
* LogitsLM over a GRU (d = 128) — the hidden state per particle against one ``nn.GRU``
  pass over every prefix.

Each configuration runs `--reps` times, interleaved, and the best is reported.  Times are
CPU times of this process (`time.process_time`) with torch single-threaded — SMC steps are
many small ops — so other load on a shared machine barely moves them; wall-clock times
are printed beside them.
Also reported: the speed-up of one late step alone, the one that extends the prefixes from
30 to 31 tokens (the final step only draws: its children all reach the maximum length),
timed from the fit events.

Run: .venv/bin/python bench/smc.py [--reps 5] [--json FILE]
Goal (issue 5): caching >= 5x at length 32.  Both readings are printed: the whole run to
length 32 (the average step sees half that length) and step 31, the last step at which
both variants do all their work (the recomputed one feeds 31 tokens per row).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import qvr  # noqa: E402
from qvr.inference.events import FitProgress  # noqa: E402
from qvr.smc import LogitsLM, ProgramLM, SMCSteering, forbid_tokens  # noqa: E402

N, K, LENGTH = 64, 4, 32


class CausalTransformer(nn.Module):
    """A small pre-norm causal transformer LM, callable on whole prefixes ``(n, t) ->
    (n, V)`` and incrementally (``start`` / ``step``, a per-layer key/value cache)."""

    def __init__(self, vocab=64, d=64, heads=4, layers=2, max_len=64):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "out": nn.Linear(d, d),
            "ln2": nn.LayerNorm(d), "ff": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                        nn.Linear(4 * d, d))})
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def _split(self, x):  # (n, t, d) -> (n, h, t, dh)
        n, t, _ = x.shape
        return x.view(n, t, self.h, self.dh).transpose(1, 2)

    def _block(self, b, x, past=None, causal=True):
        q, k, v = b["qkv"](b["ln1"](x)).chunk(3, dim=-1)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + b["out"](a.transpose(1, 2).reshape(x.shape))
        return x + b["ff"](b["ln2"](x)), (k, v)

    @torch.no_grad()
    def __call__(self, prefixes):
        n, t = prefixes.shape
        x = self.tok(prefixes) + self.pos(torch.arange(t))
        for b in self.blocks:
            x, _ = self._block(b, x)
        return self.head(self.ln(x[:, -1]))

    @torch.no_grad()
    def start(self, tokens):
        n, t = tokens.shape
        x = self.tok(tokens) + self.pos(torch.arange(t))
        cache = []
        for b in self.blocks:
            x, kv = self._block(b, x)
            cache.append(kv)
        return {"kv": cache, "pos": torch.full((n,), t)}, self.head(self.ln(x[:, -1]))

    @torch.no_grad()
    def step(self, state, tokens):
        pos = state["pos"]
        x = (self.tok(tokens) + self.pos(pos)).unsqueeze(1)
        cache = []
        for b, past in zip(self.blocks, state["kv"]):
            x, kv = self._block(b, x, past, causal=False)  # one query attends to all keys
            cache.append(kv)
        return {"kv": cache, "pos": pos + 1}, self.head(self.ln(x[:, -1]))


class RecurrentLM(nn.Module):
    """A GRU language model, callable on whole prefixes (one ``nn.GRU`` pass) and
    incrementally (``start`` / ``step``, the hidden state)."""

    def __init__(self, vocab=64, d=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    @torch.no_grad()
    def __call__(self, prefixes):
        out, _ = self.gru(self.tok(prefixes))
        return self.head(out[:, -1])

    @torch.no_grad()
    def start(self, tokens):
        out, h = self.gru(self.tok(tokens))
        return h[0], self.head(out[:, -1])

    @torch.no_grad()
    def step(self, h, tokens):
        _, h = self.gru(self.tok(tokens).unsqueeze(1), h.unsqueeze(0))
        return h[0], self.head(h[0])


class Stateless:
    """The transformer without its incremental methods (per-prefix logits cache only)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, prefixes):
        return self.model(prefixes)


def timed_run(lm, eos, seed):
    """One SMC run; returns (CPU seconds, particle-steps, CPU seconds of step 31, wall
    seconds)."""
    stamps = []
    smc = SMCSteering(lm, potential=forbid_tokens(eos), num_particles=N, expansion=K,
                      max_len=LENGTH, generator=torch.Generator().manual_seed(seed),
                      progress_interval=0,
                      on_event=lambda e: stamps.append(time.process_time())
                      if isinstance(e, FitProgress) else None)
    w0, t0 = time.perf_counter(), time.process_time()
    r = smc.run()
    total, wall = time.process_time() - t0, time.perf_counter() - w0
    assert r.num_steps == LENGTH and all(len(s) == LENGTH for s in r.sequences)
    return total, N * r.num_steps, stamps[-2] - stamps[-3], wall


def check_incremental(model):
    """The incremental path computes the same logits as the full forward."""
    toks = torch.randint(0, 64, (3, 10), generator=torch.Generator().manual_seed(1))
    state, logits = model.start(toks[:, :1])
    for i in range(1, 10):
        state, logits = model.step(state, toks[:, i])
    full = model(toks)
    assert torch.allclose(logits, full, atol=1e-4), (logits - full).abs().max()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    program = qvr.load(ROOT / "examples" / "recurrent_lm.qvr")
    transformer = CausalTransformer().eval()
    gru = RecurrentLM().eval()
    check_incremental(transformer)
    check_incremental(gru)
    bos, eos = 0, 1
    configs = {
        "scan program, cached state": lambda: ProgramLM(program, bos, eos, cache=True),
        "scan program, recomputed": lambda: ProgramLM(program, bos, eos, cache=False),
        "LogitsLM transformer, KV cache": lambda: LogitsLM(transformer, eos, bos),
        "LogitsLM transformer, per-prefix cache":
            lambda: LogitsLM(Stateless(transformer), eos, bos),
        "LogitsLM transformer, recomputed":
            lambda: LogitsLM(transformer, eos, bos, cache=False),
        "LogitsLM GRU, hidden state": lambda: LogitsLM(gru, eos, bos),
        "LogitsLM GRU, recomputed": lambda: LogitsLM(gru, eos, bos, cache=False),
    }
    assert configs["scan program, cached state"]().mode == "scan-state"
    best = {name: (math.inf, 0, math.inf, math.inf) for name in configs}
    for rep in range(args.reps + 1):  # the first round warms up
        for name, make in configs.items():
            total, steps, last, wall = timed_run(make(), eos, seed=rep)
            if rep:
                b = best[name]
                best[name] = (min(b[0], total), steps, min(b[2], last), min(b[3], wall))
    rates = {name: steps / total for name, (total, steps, _, _) in best.items()}
    print(f"SMC steering, N={N}, K={K}, length {LENGTH} ({N * LENGTH} particle-steps per run), "
          f"best of {args.reps}, torch threads=1, CPU time")
    for name, (total, steps, last, wall) in best.items():
        print(f"  {name:40s} {rates[name]:8.0f} particle-steps/s   run {total * 1e3:7.1f} ms"
              f" (wall {wall * 1e3:7.1f})   step 31 {last * 1e3:6.2f} ms")
    report = {"rates": rates, "speedup": {}, "step31_speedup": {}}
    for kind, cached in (("scan program", "scan program, cached state"),
                         ("LogitsLM transformer", "LogitsLM transformer, KV cache"),
                         ("LogitsLM GRU", "LogitsLM GRU, hidden state")):
        base = f"{kind}, recomputed"
        report["speedup"][kind] = rates[cached] / rates[base]
        report["step31_speedup"][kind] = best[base][2] / best[cached][2]
        print(f"  {kind}: caching is {report['speedup'][kind]:.1f}x faster over the run, "
              f"{report['step31_speedup'][kind]:.1f}x at step 31 (goal >= 5x)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
