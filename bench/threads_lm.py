"""The thread policy of SMC steering a pretrained LM (`qvr.inference.methods.smc_lm`):
the same steering run with one intra-op thread and with torch's default, idle and beside
busy processes, on the shipped tiny model and on a GPT-2-sized one.

    .venv/bin/python bench/threads_lm.py [--particles 32] [--tokens 24] [--load 0 2]
                                         [--big-layers 12] [--repeats 2]

The GPT-2-sized model is GPT-2's shape (12 layers, 768 wide, 12 heads) with random
weights and the tiny model's 64-token tokenizer, made from a config in a temporary
folder (nothing is downloaded): its forward costs what GPT-2's does, less the 50k-row
output layer.  Every particle grows to exactly ``--tokens`` tokens (the end token is
forbidden), so every configuration does the same work; one seed, so the same draws.
Printed per model and load: tokens/s with one thread and with the default, their ratio,
and each loaded figure against the same configuration idle.  Best of ``--repeats``.

Measured 2026-12-07 on the 2-core VM (one thread / two, tokens/s; `--load 0 2`): tiny_lm
24,310 / 23,705 idle, 10,843 / 3,460 busy; GPT-2 shape 2 x 256 (1.7M) 8,169 / 11,379 idle,
5,839 / 2,035 busy; 6 x 512 (19M) 1,158 / 1,587, 760 / 513; 12 x 768 (85M) 280 / 400,
170 / 117.  Two threads win idle from 1.7M parameters up and lose busy at every size:
the policy of `qvr.inference.threads` follows the load, not the size.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from threads import busy_processes  # bench/threads.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny_lm"


def big_model(folder: Path, layers: int, width: int = 768) -> Path:
    """A GPT-2-shaped model with random weights and the tiny model's tokenizer."""
    import shutil

    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_layer=layers, n_embd=width, n_head=width // 64,
                     n_positions=256,
                     bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    for f in TINY.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder / f.name)
    return folder


def tokens_per_s(folder: Path, threads: int, args) -> float:
    from qvr.smc import SMCSteering, forbid_tokens
    from qvr.smc.hf_lm import load_lm
    torch.set_num_threads(threads)
    lm = load_lm(str(folder), prompt="the old dog")
    best = 0.0
    for _ in range(args.repeats):
        smc = SMCSteering(lm, potential=forbid_tokens(lm.eos), num_particles=args.particles,
                          expansion=1, max_len=args.tokens,
                          generator=torch.Generator().manual_seed(1))
        t0 = time.perf_counter()
        smc.run()
        best = max(best, args.particles * args.tokens / (time.perf_counter() - t0))
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--particles", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--load", type=int, nargs="*", default=[0, os.cpu_count() or 1])
    ap.add_argument("--big-layers", type=int, default=12)
    ap.add_argument("--big-width", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    default = torch.get_num_threads()
    tmp = Path(tempfile.mkdtemp(prefix="qvr-threads-lm-"))
    big = big_model(tmp / "big", args.big_layers, args.big_width)
    params = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM
                 .from_pretrained(big).parameters())
    models = {"tiny_lm": TINY, f"gpt2-shaped ({args.big_layers} x {args.big_width}, "
              f"{params / 1e6:.1f}M parameters)": big}
    print(f"SMC steering, {args.particles} particles x {args.tokens} tokens, "
          f"{os.cpu_count()} CPUs, default threads {default}")
    for name, folder in models.items():
        idle = {}
        for load in args.load:
            with busy_processes(load):
                got = {t: tokens_per_s(folder, t, args) for t in (1, default)}
            if load == 0:
                idle = got
            cells = []
            for t in (1, default):
                vs = f" ({idle[t] / got[t]:.2f}x slower than idle)" if load and idle else ""
                cells.append(f"{t} thread{'s' if t > 1 else ''} {got[t]:8.0f} tok/s{vs}")
            print(f"  {name}, load {load}: " + "; ".join(cells)
                  + f"; one / default = {got[1] / got[default]:.2f}")
    torch.set_num_threads(default)


if __name__ == "__main__":
    main()
