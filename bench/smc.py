"""SMC steering speed: particle-steps per second with per-particle state caching against
recomputing every prefix from scratch, on a `scan`-based QVR program and on a `LogitsLM`.

Setting (issue 5): N = 64 particles, K = 4, every particle grown to length 32 (the end
token is forbidden by a potential, so each run is 32 steps = 2,048 particle-steps).

* scan program: ``examples/recurrent_lm.qvr`` through `ProgramLM` — ``cache=True`` carries
  each particle's recurrent state (one cell step per token), ``cache=False`` feeds the
  whole ``[bos] + prefix`` of all `K` copies of every live particle through the program
  at every step (spec §8.4; the cell is stochastic, so the copies cannot share work);
* LogitsLM over a 2-layer causal transformer (d = 64, defined below) — ``cache=True``
  carries a preallocated key/value cache per particle (the "CachedTransformer" of the
  user's Algorithm 3), ``cache=False`` runs the causal forward on every live prefix at
  every step, batched (the last layer on the last position only: nothing else of it is
  used); the stateless per-prefix logits cache (no KV cache) is reported too;
* LogitsLM over a GRU (d = 128) — the hidden state per particle (one ``gru_cell`` per
  token) against one ``nn.GRU`` pass over every live prefix, batched.

Both variants of a model run the same SMC (same seed, potential, N, K, length); only the
model's state handling differs.

How "whole run" is measured: the CPU time of one ``SMCSteering.run()`` — the model's
start, all 32 steps (draws, potentials, resampling, state updates) and the result — with
no event listener; particle-steps/s is 2,048 divided by it, and the whole-run speed-up is
the ratio of the two variants' times.  Each configuration runs `--reps` times after a
warm-up round, the configurations interleaved within each round; the best time of each
is reported, and beside the ratio of the bests the median over rounds of the ratio
within a round (robust to load that drifts between rounds).  Times are CPU times of
this process (`time.process_time`) with torch single-threaded — SMC steps are many small
ops — so other load on a shared machine moves them less than wall-clock times (printed
beside them); it still moves them (caches, shared cores), so compare figures from one
run.
Also reported: the speed-up of one late step alone, the one that extends the prefixes from
30 to 31 tokens (the final step only draws: its children all reach the maximum length),
timed between the model's draws of steps 31 and 32.

Run: .venv/bin/python bench/smc.py [--reps 5] [--only scan|transformer|gru|decoder]
[--json FILE]  |  [--lm PATH [--prompt TEXT] [--forbid WORDS] [--particles 64]
[--max-len 32] [--expansion 3] [--seeds 20] [--threads 1] [--venv DIR] [--no-side]]
Goal (issue 5): caching >= 5x at length 32.  Both readings are printed: the whole run to
length 32 (the average step sees half that length) and step 31, the last step at which
both variants do all their work (the recomputed one feeds 31 tokens per row).

Decoder program (issue 17): a QVR decoder-only transformer (`DECODER` below: token and
position embedding, two pre-norm blocks of causal 4-head attention ~ Normal and a
two-kernel feed-forward, a final layer norm, a Categorical head; vocabulary 64, width 64,
feed-forward 256, the sizes of the LogitsLM transformer above) through `ProgramLM`:
``cache=True`` extends each particle's key/value cache by one position per step
(`qvr.smc.kv_cache`), ``cache=False`` recomputes the whole prefix from each particle's
stored noise at every step (the same draws).  N = 64, K = 4, whole runs to lengths 32
and 128, same measurement as above.  Goal (issue 17): >= 5x at 32, >= 15x at 128.

Pretrained LM against llamppl (issue 40, point 6): ``--lm PATH`` (e.g.
``examples/tiny_lm``) runs only this comparison — qvr's `HFCausalLM` (KV cache) under
`SMCSteering` against llamppl 0.2.3's `smc_standard` on the same model folder, start ids
(the start token and ``--prompt``), potential (``--forbid`` words, judged on the
detokenised continuation exactly as `qvr.smc.text_potentials.forbid_words` does; the
llamppl program is `bench/side/llamppl_smc.py`), `N` (``--particles``) and ``--max-len``.
llamppl runs in a side virtualenv (``--venv``, default ``~/.cache/qvr/bench-llamppl``,
made the first time with CPU torch, transformers and llamppl) as a subprocess of the
same bench run, its runs interleaved with qvr's seed by seed (so both see the same load;
the ratios are printed as ratio of medians and median of within-round ratios); the
driver is `bench/side/llamppl_compare.py`.  Settings: qvr K = 1 (its default: no
resampling, weight-0 particles stop) against llamppl with ``ess_threshold=0`` (never
resamples): the same algorithm; qvr K = ``--expansion`` (resampling without replacement every step) against llamppl's
default ``ess_threshold=0.5`` (multinomial when the ESS falls under N/2).  llamppl's
backend batches queries by count and timer (``batch_size=20, timeout=0.02`` s as
shipped): shown as shipped and with ``batch_size=N, timeout=0`` (one forward per step,
its fastest).  Figures: tokens/s (tokens appended to live particles per wall second,
the median over ``--seeds`` runs after a warm-up run; each run includes the prompt's
forward), ``log Ẑ`` mean and variance over those seeds (and `Ẑ`'s mean ± standard
error: the two sides estimate the same `Z`), and memory: qvr's KV bytes per particle at
the longest (and per position), llamppl's token-trie bytes per particle at the end of a
run (logprobs per distinct prefix and the prompt's keys and values: llamppl keeps no
keys and values past the prompt and recomputes each particle's continuation at every
step), and each side's peak RSS growth over one run per particle (page-granular: noise
for a tiny model).  ``--threads 1`` (default) or ``0`` (torch's default).

KV caches of a pretrained LM (issue 40, point 2): ``--lm PATH --cache-only`` runs only
qvr's `HFCausalLM` in its three ways — the shared-prefix cache (`qvr.smc.hf_cache`: the
prompt's keys and values once, each particle's suffix written in place), the
``transformers`` `DynamicCache` (``cache="dynamic"``) and recomputing — at each of
``--lengths`` (default 32,128) with ``--cache-prompt`` (default: 20 tokens on
examples/tiny_lm with the start token), N = ``--particles``, K = ``--expansion``, one
thread; the end token is forbidden so every particle reaches the length (tokens per run:
N × length).  Interleaved rounds after a warm-up round; printed: tokens/s (median over
``--seeds`` rounds, default 3; wall and CPU time), the median within-round ratio against
the `DynamicCache`, and key/value bytes per particle at the end (the shared prompt
counted once).  The three are checked to make the same draws (round 0).  A GPT-2 whose position
table is shorter than prompt + length (examples/tiny_lm has 64) is widened for the bench:
its table's rows repeated (the same compute; the text is not the point).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import qvr  # noqa: E402
from qvr.smc import LogitsLM, ProgramLM, SMCSteering, forbid_tokens  # noqa: E402

N, K, LENGTH = 64, 4, 32


F = nn.functional


def _ln(m, x):
    return F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)


def _lin(m, x):
    return F.linear(x, m.weight, m.bias)


class CausalTransformer(nn.Module):
    """A small pre-norm causal transformer LM, callable on whole prefixes ``(n, t) ->
    (n, V)`` and incrementally (``start`` / ``select`` / ``step``) with a key/value cache.
    Both paths call the layers functionally (no module-call overhead).

    The whole-prefix forward is the efficient one for next-token logits: every layer
    runs on every position, except that the last layer's attention output, feed-forward
    and the head run on the last position only.

    The cache is preallocated for ``max_len`` positions, ``(max_len, slots, heads, dh)``
    buffers of keys and of values per layer; a step writes one position in place and
    attends to the filled part (one query per slot: products and sums, cheaper here than
    batched one-row matrix products).  Particles map to *slots* (``state["slots"]``):
    `select` (the resampling copy) keeps each parent's slot for its first copy and copies
    the filled part of the cache only into free slots for further copies, so a step
    copies only duplicated particles' caches.  The buffers are shared between a state and
    the one `select` returns (each state is used once, as `SMCSteering` does).  A step
    runs on every slot and returns the logits of the particles' slots."""

    def __init__(self, vocab=64, d=64, heads=4, layers=2, max_len=64):
        super().__init__()
        self.h, self.dh, self.max_len = heads, d // heads, max_len
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "out": nn.Linear(d, d),
            "ln2": nn.LayerNorm(d), "ff": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                        nn.Linear(4 * d, d))})
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("scale", torch.full((self.dh,), self.dh ** -0.5), persistent=False)

    @staticmethod
    def _ff(b, x):
        ff = b["ff"]
        return _lin(ff[2], F.gelu(_lin(ff[0], _ln(b["ln2"], x))))

    def _forward(self, tokens):
        """Run every layer on ``(n, t)`` tokens; returns the last position's logits and
        each layer's keys and values ``(n, heads, t, dh)``."""
        n, t = tokens.shape
        x = F.embedding(tokens, self.tok.weight) + self.pos.weight[:t]
        cache, last = [], len(self.blocks) - 1
        for i, b in enumerate(self.blocks):
            q, k, v = _lin(b["qkv"], _ln(b["ln1"], x)).view(n, t, 3, self.h, self.dh) \
                .permute(2, 0, 3, 1, 4)
            cache.append((k, v))
            if i == last:  # only the last position's output is needed from here on
                x = x[:, -1:]
                a = F.scaled_dot_product_attention(q[:, :, -1:], k, v)
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + _lin(b["out"], a.transpose(1, 2).reshape(x.shape))
            x = x + self._ff(b, x)
        return _lin(self.head, _ln(self.ln, x[:, -1])), cache

    @torch.no_grad()
    def __call__(self, prefixes):
        return self._forward(prefixes)[0]

    @torch.no_grad()
    def start(self, tokens):
        n, t = tokens.shape
        logits, cache = self._forward(tokens)
        bufs = []
        for kv in cache:
            for x in kv:
                buf = x.new_empty(self.max_len, n, self.h, self.dh)  # (position, slot, ..)
                buf[:t] = x.permute(2, 0, 1, 3)
                bufs.append(buf)
        return {"kv": bufs, "len": t, "slots": np.arange(n)}, logits

    def select(self, state, rows):
        # (slot bookkeeping on small integer vectors: numpy is cheaper than torch here)
        parent = state["slots"][rows.numpy()]  # the slot of each new particle's parent
        slots = parent.copy()
        _, first = np.unique(parent, return_index=True)  # each parent's first copy keeps it
        if first.size < parent.size:
            again = np.ones(parent.size, dtype=bool)
            again[first] = False
            used = np.zeros(state["kv"][0].shape[1], dtype=bool)
            used[parent] = True
            free = np.flatnonzero(~used)[:parent.size - first.size]
            slots[again] = free
            t, src, dst = state["len"], torch.from_numpy(parent[again]), torch.from_numpy(free)
            for buf in state["kv"]:  # free slots <- the parents' filled cache
                buf[:t].index_copy_(1, dst, buf[:t].index_select(1, src))
        return {**state, "slots": slots}

    def step(self, state, tokens):
        t, slots, bufs = state["len"], state["slots"], state["kv"]
        if t >= self.max_len:
            raise ValueError(f"the cache holds {self.max_len} positions")
        n, h, dh = bufs[0].shape[1], self.h, self.dh
        where = torch.from_numpy(slots)
        x = F.embedding(tokens.new_zeros(n).index_copy_(0, where, tokens), self.tok.weight) \
            + self.pos.weight[t]  # (slots, d)
        for b, kb, vb in zip(self.blocks, bufs[0::2], bufs[1::2]):
            q, kb[t], vb[t] = _lin(b["qkv"], _ln(b["ln1"], x)).view(n, 3, h, dh).unbind(1)
            # one query per slot and head against the t + 1 cached keys: (t + 1, slots, heads)
            scores = torch.mv((kb[:t + 1] * q).view(-1, dh), self.scale)
            p = torch.softmax(scores.view(t + 1, n, h), 0)
            a = (p.unsqueeze(-1) * vb[:t + 1]).sum(0)
            x = x + _lin(b["out"], a.view(n, -1))
            x = x + self._ff(b, x)
        x = x.index_select(0, where)
        return {**state, "len": t + 1}, _lin(self.head, _ln(self.ln, x))


class RecurrentLM(nn.Module):
    """A GRU language model, callable on whole prefixes (one ``nn.GRU`` pass) and
    incrementally (``start`` / ``step``: the hidden state, one ``torch.gru_cell`` on the
    GRU's own weights per token)."""

    def __init__(self, vocab=64, d=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    @torch.no_grad()
    def __call__(self, prefixes):
        _, h = self.gru(F.embedding(prefixes, self.tok.weight))
        return _lin(self.head, h[0])

    @torch.no_grad()
    def start(self, tokens):
        _, h = self.gru(F.embedding(tokens, self.tok.weight))
        return h[0], _lin(self.head, h[0])

    def step(self, h, tokens):
        g = self.gru
        h = torch.gru_cell(F.embedding(tokens, self.tok.weight), h, g.weight_ih_l0,
                           g.weight_hh_l0, g.bias_ih_l0, g.bias_hh_l0)
        return h, _lin(self.head, h)


class Stateless:
    """The transformer without its incremental methods (per-prefix logits cache only)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, prefixes):
        return self.model(prefixes)


class Stamped:
    """A model that records the CPU time at each draw (the start of each step)."""

    def __init__(self, lm):
        self.lm, self.eos, self.stamps = lm, lm.eos, []

    def start(self, num, generator=None):
        return self.lm.start(num, generator=generator)

    def draw(self, state, n, generator=None):
        self.stamps.append(time.process_time())
        return self.lm.draw(state, n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        return self.lm.advance(state, rows, tokens, prefixes, generator=generator)


def timed_run(lm, eos, seed, length=LENGTH):
    """One SMC run; returns (CPU seconds, particle-steps, CPU seconds of the step that
    extends the prefixes from ``length - 2`` to ``length - 1`` tokens, wall seconds).
    Events go nowhere (as in a plain ``smc.run()``)."""
    lm = Stamped(lm)
    smc = SMCSteering(lm, potential=forbid_tokens(eos), num_particles=N, expansion=K,
                      max_len=length, generator=torch.Generator().manual_seed(seed))
    w0, t0 = time.perf_counter(), time.process_time()
    r = smc.run()
    total, wall = time.process_time() - t0, time.perf_counter() - w0
    assert r.num_steps == length and all(len(s) == length for s in r.sequences)
    return total, N * r.num_steps, lm.stamps[length - 1] - lm.stamps[length - 2], wall


DECODER = """
object Token : FinSet 64
object Latent : Real 64
object FFHidden : Real 256

morphism tok_embed : Token -> Latent [role=embed, positions=128]
morphism attn : Latent -> Latent [role=attention, heads=4, causal, scale=0.1] ~ Normal
morphism ff_up : Latent -> FFHidden [role=kernel] ~ Normal
morphism ff_down : FFHidden -> Latent [role=kernel, scale=0.1] ~ Normal
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical

let block = residual(layer_norm(Latent) >> attn) >> residual(layer_norm(Latent) >> ff_up >> ff_down)
let model = tok_embed >> stack(block, 2) >> layer_norm(Latent) >> lm_head

program decoder : Token -> Token
    observe next_token : Token <- model
    return next_token

export decoder
"""


def bench_decoder(reps: int) -> dict:
    """KV cache against recomputation on the `DECODER` program at lengths 32 and 128
    (interleaved rounds, the first a warm-up; best CPU time and the median within-round
    ratio).  Both variants are checked to make the same draws first."""
    torch.manual_seed(0)
    program = qvr.loads(DECODER)
    bos, eos = 0, 1
    a = []
    for cache in (True, False):
        lm = ProgramLM(program, bos, eos, cache=cache)
        assert lm.mode == ("kv-cache" if cache else "recompute")
        a.append(SMCSteering(lm, potential=forbid_tokens(eos), num_particles=N,
                                       expansion=K, max_len=16,
                                       generator=torch.Generator().manual_seed(0)).run())
    assert a[0].sequences == a[1].sequences, "cached and recomputed runs differ"
    report = {}
    for length in (32, 128):
        names = {True: "KV cache", False: "recomputed"}
        best = {c: (math.inf, 0, math.inf, math.inf) for c in names}
        ratios = []
        for rep in range(reps + 1):
            times = {}
            for cache in names:
                total, steps, last, wall = timed_run(ProgramLM(program, bos, eos, cache=cache),
                                                     eos, seed=rep, length=length)
                times[cache] = total
                if rep:
                    b = best[cache]
                    best[cache] = (min(b[0], total), steps, min(b[2], last), min(b[3], wall))
            if rep:
                ratios.append(times[False] / times[True])
        print(f"decoder program (QVR, d=64, 2 layers), N={N}, K={K}, length {length} "
              f"({N * length} particle-steps per run), best of {reps}, CPU time")
        for cache, name in names.items():
            total, steps, last, wall = best[cache]
            print(f"  {name:12s} {steps / total:8.0f} particle-steps/s   run "
                  f"{total * 1e3:8.1f} ms (wall {wall * 1e3:8.1f})   step {length - 1} "
                  f"{last * 1e3:6.2f} ms")
        speedup = best[False][0] / best[True][0]
        paired = statistics.median(ratios)
        step = best[False][2] / best[True][2]
        goal = 5 if length == 32 else 15
        print(f"  KV cache is {speedup:.1f}x faster over the run (median within a round "
              f"{paired:.1f}x), {step:.1f}x at step {length - 1} (goal >= {goal}x)")
        report[f"decoder length {length}"] = {"speedup": speedup, "paired_speedup": paired,
                                              "last_step_speedup": step,
                                              "cached_run_s": best[True][0],
                                              "recomputed_run_s": best[False][0]}
    return report


def check_incremental(model):
    """The incremental path (with resampling copies) computes the same logits as the full
    forward."""
    g = torch.Generator().manual_seed(1)
    toks = torch.randint(0, 64, (6, 10), generator=g)
    select = getattr(model, "select", None) or (lambda st, rows: st.index_select(0, rows))
    state, logits = model.start(toks[:, :1])
    with torch.no_grad():
        for i in range(1, 10):
            rows = torch.randint(0, 6, (6,), generator=g)
            toks = toks[rows]
            state, logits = model.step(select(state, rows), toks[:, i])
    full = model(toks)
    assert torch.allclose(logits, full, atol=1e-4), (logits - full).abs().max()


class _Measured:
    """An `HFCausalLM` recording its largest key/value bytes over a run."""

    def __init__(self, lm):
        self.lm, self.eos, self.bytes = lm, lm.eos, 0

    def start(self, num, generator=None):
        return self.lm.start(num, generator=generator)

    def draw(self, state, n, generator=None):
        return self.lm.draw(state, n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        state = self.lm.advance(state, rows, tokens, prefixes, generator=generator)
        self.bytes = max(self.bytes, self.lm.cache_bytes(state))
        return state


def _widened(model, positions: int):
    """`model` (a GPT-2) with a position table of `positions` rows (the old rows
    repeated); `model` itself when it has enough."""
    import transformers
    cfg = model.config
    if getattr(cfg, "n_positions", positions) >= positions or \
            not isinstance(model, transformers.GPT2LMHeadModel):
        return model
    cfg = transformers.GPT2Config.from_dict({**cfg.to_dict(), "n_positions": positions})
    wide = transformers.GPT2LMHeadModel(cfg).eval()
    state = dict(model.state_dict())
    old = state["transformer.wpe.weight"]
    state["transformer.wpe.weight"] = old[torch.arange(positions) % old.shape[0]]
    wide.load_state_dict(state, strict=False)
    return wide.to(dtype=model.dtype)


def bench_caches(args) -> dict:
    """The shared-prefix cache, the `DynamicCache` and recomputing on one model (see the
    module docstring)."""
    from qvr.smc.hf_lm import HFCausalLM, load_lm
    torch.set_num_threads(1)
    base = load_lm(args.lm, prompt=args.cache_prompt)
    lengths = [int(x) for x in args.lengths.split(",")]
    model = _widened(base.model, len(base.head) + max(lengths))
    kinds = {"shared-prefix": True, "DynamicCache": "dynamic", "recompute": False}
    n, k, report = args.particles, args.expansion, {}
    print(f"HFCausalLM caches: {args.lm} ({model.config.model_type}, "
          f"{model.config.num_hidden_layers} layers), prompt {len(base.head)} tokens with the "
          f"start token, N={n}, K={k}, torch threads=1, median of {args.seeds} rounds")
    for length in lengths:
        lms = {name: HFCausalLM(model, base.tokenizer, prompt=base.prompt_ids, cache=c,
                                eos=base.eos, bos=base.bos) for name, c in kinds.items()}
        for lm in lms.values():
            lm.check_length(length)  # (sizes the shared-prefix buffer)
        rows = {name: {"wall": [], "cpu": [], "bytes": 0} for name in lms}
        seqs = {}
        for rnd in range(args.seeds + 1):  # round 0 warms up and checks the draws
            for name, lm in lms.items():
                m = _Measured(lm)
                smc = SMCSteering(m, potential=forbid_tokens(lm.eos), num_particles=n,
                                  expansion=k, max_len=length,
                                  generator=torch.Generator().manual_seed(rnd))
                w0, c0 = time.perf_counter(), time.process_time()
                r = smc.run()
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                assert all(len(x) == length for x in r.sequences)
                if rnd == 0:
                    seqs[name] = r.sequences
                    continue
                rows[name]["wall"].append(wall)
                rows[name]["cpu"].append(cpu)
                rows[name]["bytes"] = m.bytes
        same = all(x == seqs["recompute"] for x in seqs.values())
        kind = lms["shared-prefix"].cache_kind
        assert kind == "shared-prefix", kind
        print(f"  length {length} ({n * length} tokens per run; the three make the same "
              f"draws: {same})")
        out = {}
        for name, row in rows.items():
            wall, cpu = statistics.median(row["wall"]), statistics.median(row["cpu"])
            ratio = statistics.median(d / w for d, w in zip(rows["DynamicCache"]["wall"],
                                                              row["wall"]))
            out[name] = {"tokens_per_s": n * length / wall,
                         "cpu_tokens_per_s": n * length / cpu,
                         "vs_dynamic": ratio, "bytes_per_particle": row["bytes"] / n}
            print(f"    {name:14s} {n * length / wall:8.0f} tokens/s (CPU time: "
                  f"{n * length / cpu:8.0f})  {ratio:5.2f}x the DynamicCache's  "
                  f"KV {row['bytes'] / n / 1024:6.1f} KiB/particle")
        report[f"length {length}"] = {"same_draws": same, **out}
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--only", choices=["scan", "transformer", "gru", "decoder"],
                    help="run one model's configurations only")
    lm_args = ap.add_argument_group("--lm: a pretrained causal LM against llamppl")
    lm_args.add_argument("--lm", help="model folder: run only the llamppl comparison")
    lm_args.add_argument("--prompt", default="the old dog")
    lm_args.add_argument("--forbid", default="the", help="comma-separated words")
    lm_args.add_argument("--particles", type=int, default=64)
    lm_args.add_argument("--max-len", type=int, default=32)
    lm_args.add_argument("--expansion", type=int, default=3)
    lm_args.add_argument("--seeds", type=int, default=None,
                         help="rounds (default 20; 3 with --cache-only)")
    lm_args.add_argument("--threads", type=int, default=1, help="0: torch's default")
    lm_args.add_argument("--venv", default=str(Path.home() / ".cache" / "qvr" /
                                               "bench-llamppl"))
    lm_args.add_argument("--no-side", action="store_true", help="qvr only")
    lm_args.add_argument("--cache-only", action="store_true",
                         help="qvr's KV caches against each other (no llamppl)")
    lm_args.add_argument("--lengths", default="32,128", help="--cache-only: lengths")
    lm_args.add_argument("--cache-prompt",
                         default="the old dog saw the farmer and the cat and the bird",
                         help="--cache-only: the prompt")
    args = ap.parse_args()
    if args.seeds is None:
        args.seeds = 3 if args.cache_only else 20
    if args.lm and args.cache_only:
        report = bench_caches(args)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        return
    if args.lm:
        sys.path.insert(0, str(ROOT / "bench" / "side"))
        from llamppl_compare import bench_lm  # bench/side/llamppl_compare.py
        report = bench_lm(args)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        return
    torch.set_num_threads(1)
    if args.only == "decoder":
        report = {"decoder": bench_decoder(args.reps)}
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        return
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
    if args.only:
        configs = {k: v for k, v in configs.items() if args.only in k.lower()}
    best = {name: (math.inf, 0, math.inf, math.inf) for name in configs}
    rounds = []
    for rep in range(args.reps + 1):  # the first round warms up
        times = {}
        for name, make in configs.items():
            total, steps, last, wall = timed_run(make(), eos, seed=rep)
            times[name] = total
            if rep:
                b = best[name]
                best[name] = (min(b[0], total), steps, min(b[2], last), min(b[3], wall))
        if rep:
            rounds.append(times)
    rates = {name: steps / total for name, (total, steps, _, _) in best.items()}
    print(f"SMC steering, N={N}, K={K}, length {LENGTH} ({N * LENGTH} particle-steps per run), "
          f"best of {args.reps}, torch threads=1, CPU time")
    for name, (total, steps, last, wall) in best.items():
        print(f"  {name:40s} {rates[name]:8.0f} particle-steps/s   run {total * 1e3:7.1f} ms"
              f" (wall {wall * 1e3:7.1f})   step 31 {last * 1e3:6.2f} ms")
    report = {"rates": rates, "speedup": {}, "paired_speedup": {}, "step31_speedup": {}}
    for kind, cached in (("scan program", "scan program, cached state"),
                         ("LogitsLM transformer", "LogitsLM transformer, KV cache"),
                         ("LogitsLM GRU", "LogitsLM GRU, hidden state")):
        base = f"{kind}, recomputed"
        if cached not in rates:
            continue
        report["speedup"][kind] = rates[cached] / rates[base]
        report["paired_speedup"][kind] = statistics.median(r[base] / r[cached] for r in rounds)
        report["step31_speedup"][kind] = best[base][2] / best[cached][2]
        print(f"  {kind}: caching is {report['speedup'][kind]:.1f}x faster over the run "
              f"(median within a round {report['paired_speedup'][kind]:.1f}x), "
              f"{report['step31_speedup'][kind]:.1f}x at step 31 (goal >= 5x)")
    if not args.only:
        report["decoder"] = bench_decoder(args.reps)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
