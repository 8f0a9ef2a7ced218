"""The attention circuits of a run record as plain data (torch-free: numpy and `qvr.runs`).

A fit of a program with attention layers leaves ``circuits.npz`` and ``patterns.npz`` in
its record (`qvr.runs.layout`); `load_circuits(run, program_path)` turns them into a
`Circuits`: one `CircuitLayer` per layer (its QK circuits (H, dA, dA), OV circuits
(H, dB, dA) and attention patterns (S, H, T, T) on the saved input sequences), the saved
inputs, and the labels of the positions of each sequence:

* token inputs ((S, T) ids): the program's vocabulary when one is shipped beside it
  (`qvr.datafiles.find_vocab`), else the ids as text;
* real inputs ((S, T, d) floats): the position numbers.

A record without ``circuits.npz`` gives None.  A ``patterns.npz`` whose layers or shapes
do not match the circuits is read as "no patterns" rather than failing: the circuits are
still worth showing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

__all__ = ["CircuitLayer", "Circuits", "load_circuits", "token_labels"]


@dataclass(frozen=True)
class CircuitLayer:
    """One attention layer: ``qk`` (H, dA, dA), ``ov`` (H, dB, dA), ``pattern`` (S, H, T, T)
    or None when the record holds no patterns for it."""

    name: str
    qk: np.ndarray
    ov: np.ndarray
    pattern: Optional[np.ndarray] = None

    @property
    def heads(self) -> int:
        return int(self.qk.shape[0])

    @property
    def d_in(self) -> int:
        return int(self.qk.shape[-1])

    @property
    def d_out(self) -> int:
        return int(self.ov.shape[1])


@dataclass
class Circuits:
    """Everything the Circuits view shows (see the module docstring)."""

    layers: tuple                       # CircuitLayer, in program order
    inputs: Optional[np.ndarray] = None  # (S, T) ids or (S, T, d) floats
    tokens: bool = False                 # whether `inputs` are token ids
    vocab: Optional[list] = None
    draws: int = 0                       # forward draws the patterns are averaged over
    labels: tuple = field(default_factory=tuple)  # per sequence: a tuple of T labels
    note: str = ""                       # why the record has no patterns, when it says

    @property
    def num_sequences(self) -> int:
        return 0 if self.inputs is None else int(self.inputs.shape[0])

    @property
    def has_patterns(self) -> bool:
        return self.num_sequences > 0 and any(l.pattern is not None for l in self.layers)

    def layer(self, name: str) -> Optional[CircuitLayer]:
        return next((l for l in self.layers if l.name == name), None)


def token_labels(ids, vocab: Optional[list]) -> tuple:
    """The labels of token ids: vocabulary entries when there is a vocabulary (an id
    outside it shows as ``#id``), else the ids.  Whitespace inside a word is made
    visible (a label is one line)."""
    out = []
    for t in np.asarray(ids).reshape(-1):
        t = int(t)
        if vocab is None:
            out.append(str(t))
        elif 0 <= t < len(vocab):
            word = str(vocab[t])
            out.append(word.replace("\n", "⏎").replace(" ", "·") or "∅")
        else:
            out.append(f"#{t}")
    return tuple(out)


def _vocab_of(program_path: Optional[str]) -> Optional[list]:
    if not program_path:
        return None
    from qvr.datafiles import DataFileError, find_vocab, load_vocab
    try:
        found = find_vocab(program_path)
        return load_vocab(found) if found is not None else None
    except (DataFileError, OSError, ValueError):
        return None


def load_circuits(run, program_path: Optional[str] = None) -> Optional[Circuits]:
    """The `Circuits` of a `qvr.runs.Run` (None when it recorded none)."""
    raw = run.circuits()
    if not raw:
        return None
    names = []
    for key in raw:
        kind, _, name = key.partition("/")
        if kind == "qk" and f"ov/{name}" in raw and name not in names:
            names.append(name)
    pats = run.patterns() or {}
    inputs = pats.get("inputs")
    layers = []
    for name in names:
        qk, ov = np.asarray(raw[f"qk/{name}"], float), np.asarray(raw[f"ov/{name}"], float)
        p = pats.get(f"pattern/{name}")
        if p is not None:
            p = np.asarray(p, float)
            ok = (inputs is not None and p.ndim == 4 and p.shape[0] == inputs.shape[0]
                  and p.shape[1] == qk.shape[0] and p.shape[2] == p.shape[3]
                  and (inputs.ndim < 2 or p.shape[2] == inputs.shape[1]))
            p = p if ok else None
        layers.append(CircuitLayer(name, qk, ov, p))
    tokens = bool(int(np.asarray(pats.get("tokens", 0)).reshape(-1)[0])) if "tokens" in pats \
        else (inputs is not None and np.issubdtype(np.asarray(inputs).dtype, np.integer))
    note = str(raw["note"]) if "note" in raw else ""
    out = Circuits(tuple(layers), inputs=None if inputs is None else np.asarray(inputs),
                   tokens=tokens, note=note,
                   draws=int(np.asarray(pats.get("draws", 0)).reshape(-1)[0]) if "draws" in pats
                   else 0)
    if out.inputs is not None:
        if tokens:
            # the vocabulary recorded with the patterns; else the one beside the program
            out.vocab = ([str(t) for t in np.asarray(pats["vocab"]).tolist()]
                         if "vocab" in pats else _vocab_of(program_path))
            out.labels = tuple(token_labels(seq, out.vocab) for seq in out.inputs)
        else:
            t = out.inputs.shape[1] if out.inputs.ndim >= 2 else 1
            out.labels = tuple(tuple(str(i) for i in range(t)) for _ in out.inputs)
    return out
