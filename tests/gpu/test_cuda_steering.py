"""Steering a pretrained causal LM on a CUDA device (issue 40: "float32/bfloat16, CPU and
CUDA"; its goal "throughput ... on a GPU when one is lent" is `bench/gpu.py --lm`).
Marked ``gpu`` and skipped where `torch.cuda.is_available()` is false, as
tests/gpu/test_cuda_fits.py:

    .venv/bin/python -m pytest -m gpu tests/gpu

* the shared-prefix KV cache (`qvr.smc.hf_cache`) serves the model on cuda: at every step
  of a run with resampling (rows duplicated, others dropped) the cached logits equal
  recomputing each whole prefix on cuda, and the CPU's, within float32 rounding;
* `qvr run examples/steer.qvr --method smc --device cuda` (through `fit`): a finished run
  whose particles are text without the forbidden word, with the program's own score
  steps (`examples/steer_potentials.qvr`) applied as on the CPU;
* bfloat16 on cuda: finite log Z-hat, particles of the tokenizer's vocabulary.

The shipped tiny model (`examples/tiny_lm`, a 2-layer GPT-2); seconds on a GPU.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from qvr import load  # noqa: E402
from qvr.inference import FitConfig, fit  # noqa: E402
from qvr.smc.hf_lm import load_lm  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device (torch.cuda.is_available() is false)"),
]

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_lm"
PROMPT = "the old dog"


def test_the_shared_prefix_cache_on_cuda_equals_recomputing_and_the_cpu():
    gpu = load_lm(str(TINY), device="cuda", prompt=PROMPT)
    cpu = load_lm(str(TINY), device="cpu", prompt=PROMPT)
    assert gpu.cache_kind == "shared-prefix", gpu.cache_kind
    gpu.check_length(8)
    n = 4
    state = gpu.start(n)
    prefixes = [()] * n
    g = torch.Generator().manual_seed(0)
    # step 2 duplicates row 0 and drops row 3; step 4 reverses the rows
    orders = {2: [0, 0, 1, 2], 4: [3, 2, 1, 0]}
    for step in range(6):
        rows = torch.tensor(orders.get(step, list(range(n))))
        tokens = torch.randint(0, gpu.writable, (n,), generator=g)
        prefixes = [prefixes[int(r)] + (int(t),) for r, t in zip(rows, tokens)]
        state = gpu.advance(state, rows, tokens, prefixes)
        cached = state[1].float()
        assert torch.allclose(cached, gpu.logits(prefixes).float(), atol=1e-4), step
        assert torch.allclose(cached, cpu.logits(prefixes).float(), atol=1e-3), step


def _smc(path: Path, device: str, **extra):
    cfg = FitConfig(method="smc", particles=16, max_len=12, seed=3, device=device,
                    prompt=PROMPT, pointwise=False, **extra)
    res = fit(load(str(path)), None, cfg, program_path=str(path))
    assert res.status == "finished", res.message
    return res


def _texts(res):
    return [p["text"] for p in res.sequences["particles"] if p["log_weight"] > -math.inf]


def test_steering_the_example_on_cuda_keeps_its_constraints():
    res = _smc(ROOT / "examples" / "steer.qvr", "cuda", forbid=[["cat"]])
    texts = _texts(res)
    assert texts and all("cat" not in t.split() for t in texts)
    assert math.isfinite(res.stats["log_Z"])
    scored = _smc(ROOT / "examples" / "steer_potentials.qvr", "cuda")
    words = [t.split() for t in _texts(scored)]
    assert words and all("cat" not in w and "dog" not in w for w in words)


def test_bfloat16_on_cuda():
    res = _smc(ROOT / "examples" / "steer.qvr", "cuda", lm_dtype="bfloat16")
    assert math.isfinite(res.stats["log_Z"])
    ids = [tok for p in res.sequences["particles"] for tok in p["tokens"]]
    assert ids and all(0 <= t < 64 for t in ids)
