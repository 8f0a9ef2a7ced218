"""Potentials `G_t(s, s')` for SMC steering: validation of user callables and a small
library of ready-made constraints (qvr-runtime.md §8.1, §8.3, §8.4).

A potential scores the transition from a parent string `s` to a child `s' = s·a` at step
`t` (1-based; `t = len(s')`).  The user's design document (001, "Feynman-Kac Transformer
model") asks only that it be non-negative; Lew et al. (2023, arXiv:2306.03081, §2.2)
show how hard constraints (`G ∈ {0, 1}`) and soft preferences are both expressed this
way.  Users give one of

* ``potential(parent, child, t) -> float ≥ 0`` or ``log_potential(...) -> float``
  (may be ``-inf``), called once per child; or
* the batched form ``f(parents: list, children: list, t) -> (n,)`` when ``f.batched`` is
  true (decorate with `batched`).

`log_potential_fn` turns either into one batched float64 log-potential, raising
``ValueError`` on negative, NaN or ``+inf`` potentials (NaN or ``+inf`` log-potentials).

The SMC driver does not build the tuples above unless a potential asks for them: it
hands each step's children over as `Transitions` — the live prefixes as one token matrix,
the drawn tokens, `K` — whose ``parents`` / ``children`` tuple lists are built on first
access.  A `Potential` may override `Potential.log_potential_batch` to score the arrays
directly (every library potential does); the default converts to tuples and calls
`Potential.log_potential`, and user callables always get tuples.  Both paths give the
same values (tests/smc/test_smc_potentials.py).

The library (`forbid_tokens`, `forbid_patterns`, `require_token`, `length_limits`,
`product`) builds `Potential` objects: batched, combinable with ``*``, and usable as
``potential=`` directly.  Strings are tuples of int token ids; library potentials that
must recognise the end of a string take the end token ``eos`` explicitly.

This module does not sample, resample or know about language models.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import torch

__all__ = ["Potential", "Transitions", "batched", "log_potential_fn", "forbid_tokens",
           "forbid_patterns", "require_token", "length_limits", "product", "from_callable"]

Prefix = tuple[int, ...]


def batched(fn):
    """Mark `fn(parents, children, t) -> (n,)` as a batched potential (sets ``fn.batched``)."""
    fn.batched = True
    return fn


def _vector(values: list) -> torch.Tensor:
    """A float64 tensor from a list (through numpy: much cheaper than ``torch.tensor``)."""
    return torch.from_numpy(np.array(values, dtype=np.float64))


class Transitions:
    """The children of one SMC step, as arrays; tuples only on demand.

    Child ``k`` of live prefix ``i`` (row ``i`` of `prefixes`) is number ``i·K + k``, its
    string ``prefixes[i] + (tokens[i·K + k],)``.  Every prefix has length ``t − 1``, so
    every child has length ``t``.

    Attributes:
      t: the step (the children's length).
      prefixes: int64 numpy ``(A, t − 1)``, the distinct parents.
      tokens: int64 numpy ``(A·K,)``, the new tokens.
      expansion: `K`.
    Built on first access (then kept): ``parent_index`` (``(A·K,)``, each child's row of
    `prefixes`), ``parent_tokens`` ``(A·K, t − 1)``, ``child_tokens`` ``(A·K, t)``, and
    the tuple lists ``parents`` and ``children`` the scalar and batched callables take.

    >>> tr = Transitions(np.array([[4], [5]]), np.array([1, 2, 3, 4]), 2)
    >>> tr.t, len(tr), tr.children
    (2, 4, [(4, 1), (4, 2), (5, 3), (5, 4)])
    """

    def __init__(self, prefixes: np.ndarray, tokens: np.ndarray, expansion: int):
        self.prefixes = np.asarray(prefixes, dtype=np.int64)
        if self.prefixes.ndim != 2:
            raise ValueError("prefixes must be a 2-d token matrix")
        self.tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        self.expansion = int(expansion)
        if self.tokens.size != self.prefixes.shape[0] * self.expansion:
            raise ValueError(f"{self.tokens.size} tokens for {self.prefixes.shape[0]} prefixes "
                             f"and K = {self.expansion}")
        self.t = self.prefixes.shape[1] + 1
        self._parents = self._children = None

    @classmethod
    def from_lists(cls, parents: Sequence[Prefix], children: Sequence[Prefix]) -> "Transitions":
        """`Transitions` of equal-length ``(parent, child = parent + (a,))`` pairs (K = 1)."""
        if not children:
            return cls(np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64), 1)
        width = len(parents[0])
        if any(len(p) != width or len(c) != width + 1 or tuple(c[:-1]) != tuple(p)
               for p, c in zip(parents, children)):
            raise ValueError("Transitions need children extending equal-length parents by "
                             "one token")
        prefixes = np.array([tuple(p) for p in parents], dtype=np.int64).reshape(-1, width)
        return cls(prefixes, np.array([c[-1] for c in children], dtype=np.int64), 1)

    def __len__(self) -> int:
        return self.tokens.size

    @property
    def parent_index(self) -> np.ndarray:
        return np.repeat(np.arange(self.prefixes.shape[0]), self.expansion)

    @property
    def parent_tokens(self) -> np.ndarray:
        return np.repeat(self.prefixes, self.expansion, axis=0)

    @property
    def child_tokens(self) -> np.ndarray:
        return np.concatenate([self.parent_tokens, self.tokens[:, None]], axis=1)

    @property
    def parents(self) -> list[Prefix]:
        if self._parents is None:
            k = self.expansion
            self._parents = [p for p in map(tuple, self.prefixes.tolist()) for _ in range(k)]
        return self._parents

    @property
    def children(self) -> list[Prefix]:
        if self._children is None:
            self._children = [p + (a,) for p, a in zip(self.parents, self.tokens.tolist())]
        return self._children

    def tail_matches(self, pattern: Sequence[int]) -> np.ndarray:
        """bool ``(A·K,)``: the child ends with `pattern` (a non-empty token run)."""
        n = len(pattern)
        if n > self.t:
            return np.zeros(len(self), dtype=bool)
        last = self.tokens == pattern[-1]
        if n == 1:
            return last
        head = (self.prefixes[:, self.t - n:] == np.asarray(pattern[:-1])).all(axis=1)
        return last & np.repeat(head, self.expansion)


class Potential:
    """A batched potential.  Subclasses implement `log_potential`; calling the object
    gives the (non-log) batched potential, so it can be passed as ``potential=``.
    ``p * q`` is the product potential."""

    batched = True

    def log_potential(self, parents: Sequence[Prefix], children: Sequence[Prefix],
                      t: int) -> torch.Tensor:
        raise NotImplementedError

    def log_potential_batch(self, batch: Transitions):
        """Log-potentials of one step's children (`Transitions`), `(len(batch),)`.

        The default builds the tuple lists and calls `log_potential`; override it to work
        on ``batch.prefixes`` / ``batch.tokens`` directly.  Both must agree."""
        return self.log_potential(batch.parents, batch.children, batch.t)

    def __call__(self, parents, children, t) -> torch.Tensor:
        return torch.exp(self.log_potential(parents, children, t))

    def __mul__(self, other) -> "Potential":
        return product(self, other)

    __rmul__ = __mul__


class _Indicator(Potential):
    """`G = 0` where `violates(child)` is true, else 1."""

    def violates(self, child: Prefix) -> bool:
        raise NotImplementedError

    def log_potential(self, parents, children, t):
        return _vector([-math.inf if self.violates(c) else 0.0 for c in children])

    def violations(self, batch: Transitions) -> Optional[np.ndarray]:
        """bool ``(len(batch),)``: `violates` on every child, from the arrays (None: use
        the tuples)."""
        return None

    def log_potential_batch(self, batch):
        bad = self.violations(batch)
        if bad is None:
            return self.log_potential(batch.parents, batch.children, batch.t)
        return np.where(bad, -math.inf, 0.0)


class _ForbidTokens(_Indicator):
    def __init__(self, tokens: Iterable[int]):
        self.tokens = frozenset(int(a) for a in tokens)

    def violates(self, child):
        return bool(child) and child[-1] in self.tokens

    def log_potential(self, parents, children, t):  # the common case, without a call per child
        toks = self.tokens
        return _vector([-math.inf if c[-1] in toks else 0.0 for c in children])

    def violations(self, batch):
        if len(self.tokens) == 1:
            return batch.tokens == next(iter(self.tokens))
        return np.isin(batch.tokens, np.fromiter(self.tokens, dtype=np.int64))

    def __repr__(self):
        return f"forbid_tokens({', '.join(map(str, sorted(self.tokens)))})"


def forbid_tokens(*tokens: int) -> Potential:
    """`G = 0` when the new token is one of `tokens`.

    >>> forbid_tokens(3).log_potential([(), ()], [(1,), (3,)], 1).tolist()
    [0.0, -inf]
    """
    return _ForbidTokens(tokens)


class _ForbidPatterns(_Indicator):
    def __init__(self, patterns: Iterable[Sequence[int]]):
        self.patterns = tuple(tuple(int(a) for a in p) for p in patterns)
        if any(not p for p in self.patterns):
            raise ValueError("a forbidden pattern must have at least one token")

    def violates(self, child):
        # The child grows by one token per step, so a pattern is caught the step it completes.
        return any(len(child) >= len(p) and child[-len(p):] == p for p in self.patterns)

    def violations(self, batch):
        bad = np.zeros(len(batch), dtype=bool)
        for p in self.patterns:
            bad |= batch.tail_matches(p)
        return bad

    def __repr__(self):
        return f"forbid_patterns({', '.join(map(str, self.patterns))})"


def forbid_patterns(*patterns: Sequence[int]) -> Potential:
    """`G = 0` when the string comes to contain one of `patterns` (contiguous token runs).

    >>> forbid_patterns((1, 2)).log_potential([(1,), (2,)], [(1, 2), (2, 2)], 2).tolist()
    [-inf, 0.0]
    """
    return _ForbidPatterns(patterns)


class _RequireToken(_Indicator):
    def __init__(self, token: int, within: int, eos: Optional[int]):
        if within < 1:
            raise ValueError(f"`within` must be at least 1, got {within}")
        self.token, self.within, self.eos = int(token), int(within), eos

    def violates(self, child):
        decided = len(child) == self.within or (
            self.eos is not None and child[-1] == self.eos and len(child) < self.within)
        return decided and self.token not in child[:self.within]

    def violations(self, batch):
        t, w = batch.t, self.within
        if t > w:  # decided earlier
            return np.zeros(len(batch), dtype=bool)
        if t == w:
            decided = np.ones(len(batch), dtype=bool)
        elif self.eos is None:
            return np.zeros(len(batch), dtype=bool)
        else:
            decided = batch.tokens == self.eos
        # t <= within: the child's first `within` tokens are the whole child
        seen = np.repeat((batch.prefixes == self.token).any(axis=1), batch.expansion)
        return decided & ~(seen | (batch.tokens == self.token))

    def __repr__(self):
        return f"require_token({self.token}, within={self.within}, eos={self.eos})"


def require_token(token: int, within: int, *, eos: Optional[int]) -> Potential:
    """`G = 0` unless `token` occurs among the first `within` tokens.

    The verdict falls on the step where it is decided: when the string reaches length
    `within`, or when it ends (with `eos`) earlier.  Pass ``eos=None`` only if strings
    cannot end early.

    >>> p = require_token(7, within=2, eos=0)
    >>> p.log_potential([(1,), (1,), ()], [(1, 7), (1, 2), (0,)], 2).tolist()
    [0.0, -inf, -inf]
    """
    return _RequireToken(token, within, eos)


class _LengthLimits(_Indicator):
    def __init__(self, min_len: Optional[int], max_len: Optional[int], eos: int):
        self.min_len, self.max_len, self.eos = min_len, max_len, int(eos)

    def violates(self, child):
        if child[-1] == self.eos:
            return self.min_len is not None and len(child) - 1 < self.min_len
        return self.max_len is not None and len(child) > self.max_len

    def violations(self, batch):
        ends = batch.tokens == self.eos
        early = self.min_len is not None and batch.t - 1 < self.min_len
        late = self.max_len is not None and batch.t > self.max_len
        return np.where(ends, early, late)

    def __repr__(self):
        return f"length_limits(min_len={self.min_len}, max_len={self.max_len}, eos={self.eos})"


def length_limits(*, eos: int, min_len: Optional[int] = None,
                  max_len: Optional[int] = None) -> Potential:
    """`G = 0` for strings whose length without the final `eos` leaves
    `[min_len, max_len]`: ending too early, or growing past `max_len` tokens.

    (The sampler's own ``max_len`` truncates instead: a truncated string keeps its
    weight.)

    >>> p = length_limits(eos=0, min_len=2, max_len=3)
    >>> p.log_potential([(), (5,), (5, 5, 5)], [(0,), (5, 0), (5, 5, 5, 5)], 0).tolist()
    [-inf, -inf, -inf]
    """
    if min_len is None and max_len is None:
        raise ValueError("length_limits needs min_len, max_len or both")
    return _LengthLimits(min_len, max_len, eos)


class _Product(Potential):
    def __init__(self, sources: Sequence):
        self.sources = tuple(sources)
        self.factors = tuple(log_potential_fn(potential=p) for p in self.sources)

    def log_potential(self, parents, children, t):
        total = np.zeros(len(children))
        for f in self.factors:
            total = total + f(parents, children, t)
        return torch.from_numpy(total)

    def log_potential_batch(self, batch):
        total = np.zeros(len(batch))
        for f in self.factors:
            total = total + f.batch(batch)
        return total

    def __repr__(self):
        return " * ".join(repr(p) if isinstance(p, Potential) else getattr(p, "__name__", repr(p))
                          for p in self.sources)


def product(*potentials) -> Potential:
    """The product of potentials (`Potential` objects or plain ``potential`` callables,
    scalar or batched): ``log G = Σ log G_i``.

    >>> (forbid_tokens(1) * forbid_tokens(2)).log_potential([()] * 3, [(1,), (2,), (3,)], 1)
    tensor([-inf, -inf, 0.], dtype=torch.float64)
    """
    sources = []
    for p in potentials:
        sources.extend(p.sources if isinstance(p, _Product) else (p,))
    return _Product(sources)


class _FromCallable(Potential):
    def __init__(self, fn, log: bool):
        self.fn = log_potential_fn(log_potential=fn) if log else log_potential_fn(potential=fn)
        self.source = fn

    def log_potential(self, parents, children, t):
        return torch.from_numpy(self.fn(parents, children, t))

    def log_potential_batch(self, batch):
        return self.fn.batch(batch)

    def __repr__(self):
        return f"from_callable({getattr(self.source, '__name__', self.source)!r})"


def from_callable(fn, *, log: bool = False) -> Potential:
    """Wrap a user potential (``log=True``: a log-potential) as a `Potential`."""
    return _FromCallable(fn, log)


def _describe(children, t, i) -> str:
    return f"child {children[i]!r} at step {t}"


def _as_values(out, n: int) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        out = out.detach().cpu()
    values = np.asarray(out, dtype=np.float64).reshape(-1)
    if values.size != n:
        raise ValueError(f"a batched potential returned {values.size} values for {n} children")
    return values


def log_potential_fn(*, potential=None, log_potential=None) -> "CheckedLogPotential":
    """One validated, batched log-potential (returning a float64 numpy array) from exactly
    one of the two forms: called as ``f(parents, children, t)`` on tuple lists, or as
    ``f.batch(transitions)`` on a `Transitions` (tuples built only if the potential needs
    them).

    Raises ``ValueError`` (naming the child and the step) when a potential is negative,
    NaN or ``+inf``, or a log-potential is NaN or ``+inf``.
    """
    if (potential is None) == (log_potential is None):
        raise TypeError("give exactly one of potential= and log_potential=")
    if isinstance(potential, Potential):
        return CheckedLogPotential(potential.log_potential, True, potential.log_potential_batch)
    if isinstance(log_potential, Potential):
        raise TypeError(f"{log_potential!r} is a potential; pass it as potential=")
    fn = potential if potential is not None else log_potential
    if not callable(fn):
        raise TypeError(f"a potential must be callable, got {type(fn).__name__}")
    if getattr(fn, "batched", False):
        raw = fn
    else:
        def raw(parents, children, t, fn=fn):
            return [float(fn(p, c, t)) for p, c in zip(parents, children)]
    return CheckedLogPotential(raw, log_potential is not None, None)


class CheckedLogPotential:
    """The validated log-potential `log_potential_fn` returns (see there)."""

    def __init__(self, raw, is_log: bool, raw_batch=None):
        self.raw, self.is_log, self.raw_batch = raw, is_log, raw_batch

    def __call__(self, parents, children, t) -> np.ndarray:
        return self._check(self.raw(parents, children, t), len(children), lambda: children, t)

    def batch(self, batch: Transitions) -> np.ndarray:
        if self.raw_batch is not None:
            out = self.raw_batch(batch)
        else:
            out = self.raw(batch.parents, batch.children, batch.t)
        return self._check(out, len(batch), lambda: batch.children, batch.t)

    def _check(self, out, n: int, children, t) -> np.ndarray:
        """`out` as float64 log-potentials, validated (`children()`: the tuples, for
        error messages only)."""
        values = _as_values(out, n)
        if values.size == 0:
            return values
        if self.is_log:
            if values.max() < math.inf:  # False for NaN and +inf
                return values
            bad = np.isnan(values) | np.isposinf(values)
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"log-potential is {values[i]} for "
                             f"{_describe(children(), t, i)}; it must be < +inf and not NaN")
        if not (values.min() >= 0 and values.max() < math.inf):
            bad = np.isnan(values) | (values < 0) | np.isinf(values)
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"potential is {values[i]} for {_describe(children(), t, i)}; "
                             f"it must be finite and >= 0")
        with np.errstate(divide="ignore"):
            return np.log(values)
