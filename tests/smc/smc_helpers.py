"""Shared fixtures of the SMC tests: a tiny bigram model over {a, b, EOS} and exact
enumeration of its Feynman–Kac target (qvr-runtime.md §8.5 item 1)."""
from __future__ import annotations

import math

import pytest
import torch

A, B, EOS = 0, 1, 2
VOCAB = 3

# p(first token) and p(next | previous): every string has positive probability.
START = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
BIGRAM = torch.tensor([[0.3, 0.4, 0.3],
                       [0.5, 0.2, 0.3],
                       [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)  # row EOS never used


def bigram_logits(prefixes: torch.Tensor) -> torch.Tensor:
    """The logits function of the bigram `LogitsLM` (no bos: the empty prefix is (n, 0))."""
    if prefixes.shape[1] == 0:
        return START.log().expand(prefixes.shape[0], VOCAB)
    return BIGRAM.log()[prefixes[:, -1]]


def next_probs(prefix: tuple[int, ...]) -> torch.Tensor:
    return START if not prefix else BIGRAM[prefix[-1]]


def half_on_a(parent, child, t) -> float:
    """`G(s, s') = 0.5` if the new token is `a`, else 1 (spec §8.5 item 1)."""
    return 0.5 if child[-1] == A else 1.0


def enumerate_target(max_len: int, log_potential=None, eos: int = EOS):
    """Exact `{s: p(s) · Π_t G_t}` over all strings of the model truncated at `max_len`.

    `log_potential(parent, child, t)` is scalar; None means `G ≡ 1`.  Returns the dict of
    unnormalised masses and `Z`.
    """
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix, mass):
        probs = next_probs(prefix)
        for a in range(VOCAB):
            child = prefix + (a,)
            g = 0.0 if log_potential is None else log_potential(prefix, child, len(child))
            m = mass * float(probs[a]) * math.exp(g)
            if m == 0.0:
                continue
            if a == eos or len(child) == max_len:
                out[child] = out.get(child, 0.0) + m
            else:
                walk(child, m)

    walk((), 1.0)
    return out, sum(out.values())


def log_of(potential):
    """A scalar potential as a scalar log-potential (for `enumerate_target`)."""
    def lp(parent, child, t):
        g = potential(parent, child, t)
        return -math.inf if g == 0 else math.log(g)
    return lp


def chi_square_pvalue(stat: float, dof: int) -> float:
    """Upper tail of the chi-square distribution (regularised upper incomplete gamma)."""
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """SMC works on many tiny tensors: intra-op threads only add latency (badly so on a
    loaded 2-core machine), so the SMC tests run torch single-threaded.  (Imported by
    each test module: a `conftest.py` here would shadow the `conftest` module other test
    folders import from.)"""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
