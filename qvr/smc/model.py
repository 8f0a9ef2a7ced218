"""Next-token models for SMC steering: the protocol, `LogitsLM` and the state adapter
(qvr-runtime.md §8.4).

A *next-token model* gives the Markov kernels `M_t(· | s)` of the Feynman–Kac token model
(design document 001, "Feynman-Kac Transformer model"): it draws iid next tokens for a
prefix.  The SMC driver talks to it through a small *stateful* protocol so that
particles sharing a prefix never recompute it — the "CachedTransformer" of the user's
Algorithm 3 (after Lew et al. 2023, arXiv:2306.03081, §3):

* ``start(num, generator) -> state`` — the state of `num` particles holding the empty
  prefix;
* ``draw(state, n, generator) -> LongTensor (B, n)`` — `n` iid next tokens per row;
* ``advance(state, rows, tokens, prefixes, generator) -> state`` — the state of new
  particles, row `j` being row ``rows[j]`` of `state` extended by ``tokens[j]``
  (``prefixes[j]`` is the new full prefix, for models that need it).  Copying a row
  twice is how resampling duplicates a particle's cache.  The driver passes `prefixes`
  as a `PrefixBatch` — a sequence of tuples built on first access, with the token matrix
  at hand (``.matrix``, ``.tensor()``) for models that feed whole prefixes.

`generator` (possibly None: the global RNG) is the run's source of randomness, for models
whose state transitions are random.

A model that only has the spec's stateless ``sample(prefixes, n, generator)`` is wrapped
by `PrefixStates`, whose state is just the list of prefixes.  `ProgramLM` (compiled QVR
programs) lives in `program_lm.py`.

This module does not run SMC, score potentials or resample.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Callable, Optional, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["NextTokenModel", "StatefulModel", "LogitsLM", "PrefixBatch", "PrefixStates",
           "as_stateful", "take_rows"]

Prefix = tuple[int, ...]


@runtime_checkable
class NextTokenModel(Protocol):
    """The spec's next-token model: `eos` and `sample` (plus, optionally, `log_probs`)."""

    eos: int

    def sample(self, prefixes: Sequence[Prefix], n: int,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`n` iid next tokens per prefix, int64 `(len(prefixes), n)`."""
        ...


@runtime_checkable
class StatefulModel(Protocol):
    """The incremental protocol the SMC driver uses (see the module docstring)."""

    eos: int

    def start(self, num: int, generator: Optional[torch.Generator] = None) -> Any: ...

    def draw(self, state: Any, n: int, generator: Optional[torch.Generator] = None
             ) -> torch.Tensor: ...

    def advance(self, state: Any, rows: torch.Tensor, tokens: torch.Tensor,
                prefixes: Sequence[Prefix], generator: Optional[torch.Generator] = None
                ) -> Any: ...


class PrefixBatch(Sequence):
    """Equal-length prefixes held as an int64 token matrix ``(B, t)``; as a sequence its
    items are tuples, built on first access.

    >>> pb = PrefixBatch(np.array([[3, 4], [5, 6]]))
    >>> len(pb), pb[1], list(pb), pb.tensor(head=(0,)).tolist()
    (2, (5, 6), [(3, 4), (5, 6)], [[0, 3, 4], [0, 5, 6]])
    """

    def __init__(self, matrix: np.ndarray):
        self.matrix = np.asarray(matrix, dtype=np.int64)
        self._tuples: Optional[list[Prefix]] = None

    def tuples(self) -> list[Prefix]:
        if self._tuples is None:
            self._tuples = list(map(tuple, self.matrix.tolist()))
        return self._tuples

    def tensor(self, head: Sequence[int] = ()) -> torch.Tensor:
        """The int64 ``(B, len(head) + t)`` tensor of ``head + prefix`` rows."""
        m = self.matrix
        if head:
            m = np.concatenate([np.broadcast_to(np.asarray(head, dtype=np.int64),
                                                (m.shape[0], len(head))), m], axis=1)
        return torch.from_numpy(np.ascontiguousarray(m))

    def __len__(self) -> int:
        return self.matrix.shape[0]

    def __getitem__(self, i):
        return self.tuples()[i]

    def __iter__(self):
        return iter(self.tuples())

    def __eq__(self, other):
        return list(self) == list(other) if isinstance(other, (list, tuple, PrefixBatch)) \
            else NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"PrefixBatch({self.tuples()!r})"


def take_rows(state: Any, rows: torch.Tensor) -> Any:
    """Rows `rows` of every tensor in a nested tuple / list / dict state (dim 0)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        return state.index_select(0, rows.to(state.device))
    if isinstance(state, dict):
        return {k: take_rows(v, rows) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(take_rows(v, rows) for v in state)
    raise TypeError(f"cannot select rows of a state of type {type(state).__name__}")


class PrefixStates:
    """Stateful view of a stateless next-token model: the state is the list of prefixes,
    and every draw asks the model for the whole prefix again."""

    def __init__(self, model: NextTokenModel):
        self.model = model
        self.eos = model.eos

    def start(self, num: int, generator=None) -> list[Prefix]:
        return [()] * num

    def draw(self, state, n, generator=None):
        return self.model.sample(state, n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        return list(prefixes)


def as_stateful(model) -> StatefulModel:
    """`model` itself if it implements the stateful protocol, else a `PrefixStates` view."""
    if all(callable(getattr(model, m, None)) for m in ("start", "draw", "advance")):
        return model
    if not callable(getattr(model, "sample", None)):
        raise TypeError("a next-token model needs sample(prefixes, n, generator) "
                        "(or start/draw/advance)")
    return PrefixStates(model)


def sample_logits(logits: torch.Tensor, n: int, generator=None) -> torch.Tensor:
    """`n` iid categorical draws per row of `logits` `(B, V)` → int64 `(B, n)`."""
    if logits.shape[0] == 0:
        return torch.empty(0, n, dtype=torch.long)
    logits = logits.detach().to(torch.float64)
    # A NaN or +inf logit, or a row without a finite one, makes a NaN probability, which
    # multinomial rejects: the logits are only inspected then.
    try:
        return torch.multinomial(torch.softmax(logits, -1), n, replacement=True,
                                 generator=generator)
    except RuntimeError:
        if torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise ValueError("the logits function returned NaN or +inf") from None
        if not bool(torch.isfinite(logits.amax(-1)).all()):
            raise ValueError("the logits function returned a row with no finite entry") from None
        raise


class LogitsLM:
    """A next-token model given by a deterministic logits function.

    ``logits_fn(prefixes)`` maps an int64 `(n, t)` tensor of equal-length prefixes to
    `(n, V)` logits (`t` may be 0 for the empty prefix when `bos` is None; otherwise
    every prefix starts with `bos`).  `sample` draws from ``softmax(logits)``, `log_probs`
    returns ``log_softmax(logits)``.

    Caching (``cache=True``, the default), the "cached transformer":

    * if `logits_fn` is *incremental* — it also has ``start(tokens (n, t0)) -> (state,
      logits)`` consuming the start prefix (``[bos]`` or empty) and ``step(state, tokens
      (n,)) -> (state, logits)`` consuming one token per row (a KV-cached transformer, an
      RNN) — each particle carries that state, extended by one token per step and copied
      on resampling (rows are selected with `take_rows`, or ``logits_fn.select(state,
      rows)`` when defined);
    * otherwise logits are cached per prefix (an LRU dict of at most `cache_size`
      prefixes), so each distinct prefix is evaluated once and a particle's K children
      and resampled copies share it.

    ``cache=False`` recomputes every live prefix from scratch at every step (the
    baseline of ``bench/smc.py``).
    """

    def __init__(self, logits_fn: Callable[[torch.Tensor], torch.Tensor], eos: int,
                 bos: Optional[int] = None, *, cache: bool = True, cache_size: int = 65536):
        self.logits_fn = logits_fn
        self.eos = int(eos)
        self.bos = None if bos is None else int(bos)
        self.cache = cache
        self.cache_size = cache_size
        self.incremental = cache and callable(getattr(logits_fn, "start", None)) \
            and callable(getattr(logits_fn, "step", None))
        self._memo: OrderedDict[Prefix, torch.Tensor] = OrderedDict()

    # -- stateless interface (spec §8.4) ---------------------------------------------
    def _inputs(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        head = () if self.bos is None else (self.bos,)
        width = len(head) + (len(prefixes[0]) if prefixes else 0)
        return torch.tensor([head + p for p in prefixes], dtype=torch.long).reshape(
            len(prefixes), width)

    def _compute(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        """Logits for prefixes (any lengths), one `logits_fn` call per length."""
        if isinstance(prefixes, PrefixBatch):  # equal lengths, already a matrix
            with torch.no_grad():
                return self.logits_fn(prefixes.tensor(() if self.bos is None else (self.bos,)))
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prefixes):
            by_len.setdefault(len(p), []).append(i)
        out = None
        for idx in by_len.values():
            with torch.no_grad():
                rows = self.logits_fn(self._inputs([prefixes[i] for i in idx]))
            if out is None:
                out = rows.new_empty((len(prefixes), rows.shape[-1]))
            out[torch.tensor(idx)] = rows
        return out

    def logits(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        """`(len(prefixes), V)` logits, through the per-prefix cache when enabled."""
        if not len(prefixes):
            return torch.empty(0, 0)
        if not self.cache:
            return self._compute(prefixes if isinstance(prefixes, PrefixBatch)
                                 else [tuple(p) for p in prefixes])
        prefixes = [tuple(p) for p in prefixes]
        memo = self._memo
        missing = list(dict.fromkeys(p for p in prefixes if p not in memo))
        fresh = {}
        if missing:
            fresh = dict(zip(missing, self._compute(missing)))
        rows = []
        for p in prefixes:
            row = fresh.get(p)
            if row is None:
                row = memo[p]
                memo.move_to_end(p)
            rows.append(row)
        for p, row in fresh.items():
            memo[p] = row
        while len(memo) > self.cache_size:
            memo.popitem(last=False)
        return torch.stack(rows)

    def log_probs(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        return torch.log_softmax(self.logits(prefixes).to(torch.float64), -1)

    def sample(self, prefixes: Sequence[Prefix], n: int,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return sample_logits(self.logits(prefixes), n, generator)

    # -- stateful interface (used by SMCSteering) --------------------------------------
    # state = (inner state of an incremental logits_fn or None, logits (B, V))
    def start(self, num: int, generator=None):
        if self.incremental:
            head = [] if self.bos is None else [self.bos]
            with torch.no_grad():
                inner, logits = self.logits_fn.start(
                    torch.tensor([head] * num, dtype=torch.long).reshape(num, len(head)))
            return inner, logits
        return None, self.logits([()]).expand(num, -1)

    def draw(self, state, n, generator=None):
        return sample_logits(state[1], n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        if self.incremental:
            select = getattr(self.logits_fn, "select", None)
            inner = select(state[0], rows) if callable(select) else take_rows(state[0], rows)
            with torch.no_grad():
                return self.logits_fn.step(inner, tokens)
        return None, self.logits(prefixes)
