"""The attention circuits a fit leaves in its run record (design E7; files in
`qvr.runs.layout`): ``circuits.npz`` and ``patterns.npz``.

`record_circuits(model, x)` → `CircuitRecord` or None (no attention layer):

* ``circuits`` — per layer L of `qvr.runtime.attention_layers` (program order; ``label#i``
  for the copies a ``stack`` made): ``qk/L`` (H, dA, dA) and ``ov/L`` (H, dB, dA), exactly
  `qvr.runtime.circuits(model)` of the fitted weights;
* ``patterns`` — ``inputs``: the first S <= 8 input sequences of the data ((S, T) int64
  tokens or (S, T, d) floats; an input of one batch axis is S sequences of length 1), and
  ``pattern/L`` (S, H, T, T): layer L's attention weights on them.

How a pattern is taken.  An attention layer's input is not the data but what the links
before it made of it (an embedding, a norm, earlier layers), and those draw (an embed's
spread, an attention's family).  The program is run forward on the S sequences
(`execute(..., score=False)`: every site drawn from the fitted model, nothing observed),
the input each layer receives is caught (a wrapper around its `mean`, the one call every
path of `Attention` makes), and `Attention.pattern` of it is averaged over
``PATTERN_DRAWS`` such runs done as one batch: the expected pattern given the tokens.
Rows still sum to 1 (0 for a strictly causal layer's first row) and causal zeros stay
zero.  A layer applied several times in one run (`repeat` shares one module) keeps the
pattern of its first application.  The runs use
their own seeded random stream (`torch.random.fork_rng`), so recording never changes the
draws a caller makes after the fit, and the same fitted model gives the same patterns.

Latent sites are drawn from the model, not from the fitted guide: the patterns describe
what the fitted network does to an input sequence (for a language model every attention
sits in the chain from the tokens, where no latent enters).  When the inputs cannot be
cut into sequences (no tensor input) or the forward run fails, the patterns are left out
and ``note`` in ``circuits.npz`` says why; the circuits are written all the same.

Which fits record them: SVI (the fitted weights; a cancelled fit's weights where it
stopped; none after a non-finite loss), HMC/NUTS only when started from a run
(``start_from``): MCMC samples latent sites and never moves the weights, so without a
start they are the random initialisation, not a fit.  SMC fits nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

__all__ = ["CircuitRecord", "record_circuits", "MAX_SEQUENCES", "PATTERN_DRAWS"]

MAX_SEQUENCES = 8
PATTERN_DRAWS = 8
PATTERN_SEED = 0


@dataclass
class CircuitRecord:
    """The arrays of ``circuits.npz`` and ``patterns.npz`` (empty `patterns`: none)."""

    circuits: dict
    patterns: dict = field(default_factory=dict)
    note: str = ""

    def circuit_arrays(self) -> dict:
        out = dict(self.circuits)
        if self.note:
            out["note"] = np.array(self.note)
        return out


def record_circuits(model, x, *, sequences: int = MAX_SEQUENCES,
                    draws: int = PATTERN_DRAWS, vocab=None) -> Optional[CircuitRecord]:
    """See the module docstring; None when `model` has no attention layer.  With a
    `vocab` (token id -> text) the patterns carry it (`vocab`), so a reader labels the
    token axes without finding the program's files."""
    from qvr.runtime import attention_layers, circuits
    layers = attention_layers(model)
    if not layers:
        return None
    rec = CircuitRecord({f"{kind}/{name}": t.cpu().numpy()
                         for name, d in circuits(model).items() for kind, t in d.items()})
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[0] == 0:
        rec.note = "no attention patterns: the program's input is not a batch of sequences"
        return rec
    try:
        rec.patterns = _patterns(model, layers, x[:sequences], draws)
        if vocab and not x.is_floating_point():
            rec.patterns["vocab"] = np.array([str(t) for t in vocab])
    except Exception as exc:  # the circuits are worth keeping whatever the forward run does
        rec.note = f"no attention patterns: the forward run failed: {type(exc).__name__}: {exc}"
        rec.patterns = {}
    return rec


def _patterns(model, layers, xs: torch.Tensor, draws: int) -> dict:
    S = int(xs.shape[0])
    tokens = not torch.is_floating_point(xs)
    batch = xs.repeat(draws, *([1] * (xs.dim() - 1)))  # draw-major: (draws * S, ...)
    caught: dict = {}

    def catch(name, a):
        original = a.mean

        def mean(inp, *args, **kw):
            if name not in caught:
                caught[name] = a.pattern(inp).detach()
            return original(inp, *args, **kw)
        return mean

    devices = [batch.device.index or 0] if batch.device.type == "cuda" else []
    try:
        for name, a in layers:
            a.mean = catch(name, a)  # an instance attribute shadows the method
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(PATTERN_SEED)
            model.execute(batch, score=False)
    finally:
        for _, a in layers:
            a.__dict__.pop("mean", None)
    out = {"inputs": _inputs(xs), "draws": np.array(draws, dtype=np.int64),
           "tokens": np.array(int(tokens), dtype=np.int64)}
    for name, _ in layers:
        p = caught.get(name)
        if p is None or p.dim() < 3 or p.shape[0] != draws * S:
            continue  # not applied on the sequences (or not along their batch axis)
        if p.dim() > 4:  # extra axes between the batch and the heads: averaged
            p = p.flatten(1, -4).mean(1)
        p = p.reshape(draws, S, *p.shape[1:]).mean(0)
        out[f"pattern/{name}"] = p.float().cpu().numpy()
    return out


def _inputs(xs: torch.Tensor) -> np.ndarray:
    a = xs.detach().cpu().numpy()
    if not torch.is_floating_point(xs):
        a = a.astype(np.int64)
        return a[:, None] if a.ndim == 1 else a
    return a[:, None, :] if a.ndim == 2 else a
