"""Front-end speed: cold check of a generated 5,000-line program, and re-analysis after a
one-character edit inside one declaration versus a from-scratch analysis of the same text.

Run: .venv/bin/python bench/frontend.py [--lines 5000] [--edits 500]
Goals (issue 2): cold < 1 s, incremental p95 < 5 ms, incremental >= 50x faster.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qvr.analysis import Document, Edit  # noqa: E402
from qvr.sema.module import CheckCache  # noqa: E402
from qvr.syntax import parser as P  # noqa: E402


def generate(lines: int) -> str:
    out = ["## generated benchmark module", "object Tok : FinSet 64", "object Lat : Real 16",
           "object Half : Real 8", ""]
    i = 0
    while len(out) < lines:
        out += [
            f"## block {i}",
            f"morphism emb_{i} : Tok -> Lat [role=embed]",
            f"morphism head_{i} : Lat -> Half [role=kernel, replicate=2, scale=0.1] ~ Normal",
            f"morphism mix_{i} : Lat -> Lat [role=kernel, scale=0.05] ~ Normal",
            f"morphism out_{i} : Lat -> Tok [role=kernel] ~ Categorical",
            f"let layer_{i} = fan(head_{i}) >> mix_{i}",
            f"let net_{i} = emb_{i} >> stack(layer_{i}, 2)",
            f"program lm_{i} : Tok -> Tok",
            f"    sample h <- net_{i}",
            f"    sample s <- HalfNormal(1.0)",
            f"    let z = s * 2.0 + offset_{i}",
            f"    score bonus = z * 0.5",
            f"    observe y : Tok <- out_{i}(h)",
            f"    return y",
            "",
        ]
        i += 1
    return "\n".join(out[:lines]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=5000)
    ap.add_argument("--edits", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    text = generate(args.lines)
    t0 = time.perf_counter()
    P._lark()  # grammar load (from lark's cache) is start-up cost, reported separately
    grammar = time.perf_counter() - t0
    colds = []
    for _ in range(3):  # cold = no parse or check result cached
        P._parse_cached.cache_clear()
        t0 = time.perf_counter()
        doc = Document(text)
        colds.append(time.perf_counter() - t0)
    cold = min(colds)
    assert not [d for d in doc.diagnostics() if d.is_error], "generated program must check clean"

    rng = random.Random(args.seed)
    targets = [i for i, ch in enumerate(text) if ch in "0123456789" and text[i - 1] == "."]
    inc, scratch = [], []
    for k in range(args.edits):
        at = rng.choice(targets)
        digit = str((int(doc.text[at]) + 1) % 10)
        t = time.perf_counter()
        doc.apply_edits([Edit(at, at + 1, digit)])
        doc.diagnostics()
        inc.append(time.perf_counter() - t)
        if k % 25 == 0:  # from scratch on the same text, cold caches
            P._parse_cached.cache_clear()
            t = time.perf_counter()
            Document(doc.text, cache=CheckCache()).diagnostics()
            scratch.append(time.perf_counter() - t)

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    p50, p95 = pct(inc, 0.5), pct(inc, 0.95)
    s50 = statistics.median(scratch)
    print(f"program: {args.lines} lines, {len(doc.chunks)} statements")
    print(f"grammar load:             {grammar * 1000:8.1f} ms")
    print(f"cold check (best of 3):   {cold * 1000:8.1f} ms   (goal < 1000 ms; runs: "
          f"{', '.join(f'{c * 1000:.0f}' for c in colds)})")
    print(f"incremental edit  p50:    {p50 * 1000:8.2f} ms")
    print(f"incremental edit  p95:    {p95 * 1000:8.2f} ms   (goal < 5 ms)")
    print(f"from scratch      p50:    {s50 * 1000:8.1f} ms")
    print(f"speed-up (p50 scratch / p50 incremental): {s50 / p50:6.1f}x   (goal >= 50x)")


if __name__ == "__main__":
    main()
