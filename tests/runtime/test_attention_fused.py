"""`Attention.mean` reaches torch's fused SDPA kernel with Monte-Carlo axes too.

The fused CPU kernel takes 4-D `(N, H, T, k)` inputs only; a 5-D input (the joint draws
of a sequence estimator, `(n, B, H, T, k)`) would silently run the unfused math path,
several times slower (qvr/runtime/morphisms/attention.py).  The test reads the operators
that ran from the profiler; it is skipped where a plain 4-D call does not reach a fused
kernel either (a torch build without one)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
import pytest
from torch.profiler import profile

from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.objects import Euclidean


def _ops(fn) -> set:
    with profile() as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def _fused(ops) -> set:
    return {o for o in ops if "flash_attention" in o or "efficient_attention" in o}


def _reference(a, x):
    q, k, v = a.project(x)
    return a.mix(a.attend(q, k, v, causal=a.causal)[0])


def _attention():
    torch.manual_seed(0)
    return Attention(Euclidean("L", 16), Euclidean("L", 16), heads=2, causal=True,
                     family="Normal", label="attn")


def test_five_dim_input_reaches_the_fused_kernel_and_matches():
    q = torch.randn(3, 2, 12, 8)
    if not _fused(_ops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))):
        pytest.skip("this torch build has no fused CPU attention kernel")
    a = _attention()
    x = torch.randn(4, 3, 12, 16)  # (draws, batch, positions, width): q is 5-D
    ops = _ops(lambda: a.mean(x))
    assert _fused(ops), sorted(ops)
    assert "aten::_softmax" not in ops
    assert torch.allclose(a.mean(x), _reference(a, x), atol=1e-5)


def test_five_dim_gradients_match_the_explicit_form():
    a = _attention()
    x = torch.randn(4, 3, 12, 16)
    y = torch.randn(4, 3, 12, 16)
    a.log_prob(x, y).sum().backward()
    fused = {n: p.grad.clone() for n, p in a.named_parameters()}
    a.zero_grad()
    m = _reference(a, x)
    s = a.scale()
    z = (y - m) / s
    (-0.5 * z * z - torch.log(s)).sum().backward()
    for n, p in a.named_parameters():
        assert torch.allclose(fused[n], p.grad, rtol=1e-4, atol=1e-4), n
