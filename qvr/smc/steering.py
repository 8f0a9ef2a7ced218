"""SMC steering of a next-token model: the driver loop of qvr-runtime.md §8.2 and its
result, with fit events (§8.3 edge cases included).

The algorithm is Algorithm 3 of the user's design document 001 ("Sequential Monte Carlo
Transformer Steering"), itself from Lew et al. (2023), *Sequential Monte Carlo Steering
of Large Language Models using Probabilistic Programs*, arXiv:2306.03081, as restated and
corrected by the spec: `N` particles start at the empty string with weight 1; at each
step every unfinished particle proposes `K` children from the model, weighted by the
potential, a finished (or dead) one carries itself over, and `resample.resample` brings
the population back to `N` without replacement.  The output approximates the
Feynman–Kac posterior `P(s) ∝ E_M[Π_t G_t · 1{S_T = s}]`, and `Ẑ = (1/N) Σ w_i` is an
unbiased estimate of `Z = E_M[Π_t G_t]`.

Log-weights are float64 throughout.  Per-particle model state (cached logits, recurrent
state) is extended by one token per step and copied on resampling, through the stateful
protocol of `model.py`; only survivors are extended, so a step costs one model call for
the draws and one for the `≤ N` survivors' new tokens.  The strings are one padded token
matrix (gathered on resampling); tuples are built only for the result, for snapshots
that someone listens to, and for potentials that take tuples (`potentials.Transitions`),
so the per-step bookkeeping is a few dozen array operations whatever `N`, `K` and the
length.

Reporting follows `qvr.events`: throttled `FitProgress` (metrics ``ess``,
``num_finished``, ``log_Z``, ``num_dead``, ``num_det``, ``resampled``) each with a
`ParticlesSnapshot`.  The start and end of a fit (`FitStarted` and one terminal event)
are reported by `qvr.inference.fit` alone (`fit(..., config=FitConfig(method="smc"))`);
`run` returns a partial result with ``cancelled=True`` when `should_stop` turned true,
and raises on errors.

This module does not implement the resampling numerics (`resample.py`), the models
(`model.py`, `program_lm.py`) or the potentials library (`potentials.py`).

Example::

    >>> import torch
    >>> from qvr.smc import LogitsLM, SMCSteering, forbid_tokens
    >>> lm = LogitsLM(lambda p: torch.zeros(p.shape[0], 3), eos=2)
    >>> smc = SMCSteering(lm, potential=forbid_tokens(1), num_particles=8, expansion=2,
    ...                   max_len=4, generator=torch.Generator().manual_seed(0))
    >>> r = smc.run()
    >>> all(1 not in s for s in r.sequences), len(r.sequences)
    (True, 8)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from qvr.events import (Emitter, EventCallback, FitProgress, ParticlesSnapshot,
                        Throttle, never)

from .model import PrefixBatch, as_stateful
from .potentials import Transitions, log_potential_fn
from .resample import logsumexp, resample

__all__ = ["SMCSteering", "SMCResult"]

Prefix = tuple[int, ...]


@dataclass
class SMCResult:
    """The weighted particles of one SMC run (spec §8.4).

    Fields:
      sequences: the `N` strings (tuples of token ids, including the final EOS if any).
      log_weights: float64 `(N,)` log-weights (``-inf`` for weight 0).
      log_Z: ``log Ẑ`` (``-inf`` when `Ẑ = 0`).
      finished: bool `(N,)`, the string ends in EOS.
      truncated: bool `(N,)`, the string reached ``max_len`` without EOS.
      num_steps: the number of expansion steps run.
      dead: bool `(N,)`, weight-0 fillers (never expanded again).
      cancelled: the run was stopped early by ``should_stop``; the particles are the
        population after the last completed step and may be unfinished.
      history: per step, ``{"step", "ess", "num_finished", "num_dead", "num_det",
        "log_Z"}``.
    """

    sequences: list[Prefix]
    log_weights: torch.Tensor
    log_Z: float
    finished: torch.Tensor
    truncated: torch.Tensor
    num_steps: int
    dead: torch.Tensor = None
    cancelled: bool = False
    history: list[dict] = field(default_factory=list)

    def __post_init__(self):
        if self.dead is None:
            self.dead = torch.zeros(len(self.sequences), dtype=torch.bool)

    @property
    def weights(self) -> torch.Tensor:
        return torch.exp(self.log_weights)

    @property
    def Z(self) -> float:
        return math.exp(self.log_Z)

    def posterior(self) -> dict[Prefix, float]:
        """Normalised weight per distinct sequence (``{}`` when every weight is 0)."""
        total = torch.logsumexp(self.log_weights, 0).item()
        out: dict[Prefix, float] = {}
        if total == -math.inf:
            return out
        probs = torch.exp(self.log_weights - total).tolist()
        for seq, p in zip(self.sequences, probs):
            if p > 0:
                out[seq] = out.get(seq, 0.0) + p
        return out

    def top(self, k: Optional[int] = None) -> list[tuple[Prefix, float]]:
        """The `k` heaviest distinct sequences with their normalised weights."""
        items = sorted(self.posterior().items(), key=lambda kv: (-kv[1], kv[0]))
        return items if k is None else items[:k]


def _log_mean_exp(log_w: np.ndarray) -> float:
    return logsumexp(log_w) - math.log(log_w.size)


def _ess(log_w: np.ndarray) -> float:
    """Kish's effective sample size `(Σw)²/Σw²` (0 when every weight is 0)."""
    return _weight_stats(log_w)[1]


def _weight_stats(log_w: np.ndarray) -> tuple[float, float]:
    """``(log mean weight, Kish ESS)`` from one exponentiation (``log_mean`` exactly as
    `_log_mean_exp`)."""
    top = float(log_w.max())
    if top == -math.inf:
        return -math.inf, 0.0
    e = np.exp(log_w - top)
    s1 = float(e.sum())
    return top + math.log(s1) - math.log(log_w.size), s1 * s1 / float(e @ e)


class SMCSteering:
    """Sequential Monte Carlo steering of a next-token model (spec §8.2–§8.4).

    Parameters:
      lm: a next-token model — `LogitsLM`, `ProgramLM`, or any object with ``eos`` and
        ``sample(prefixes, n, generator)`` (or the stateful ``start/draw/advance``).
      potential / log_potential: at most one; a scalar ``(parent, child, t)`` callable, a
        batched one (``.batched = True``), or a `qvr.smc.potentials.Potential`.  Neither
        means `G ≡ 1` (plain sampling; `Ẑ = 1`).
      num_particles: `N ≥ 1`.
      expansion: `K ≥ 1`, children per unfinished particle (`K = 1` is sequential
        importance sampling: nothing is ever dropped).
      max_len: `≥ 1`; a string reaching this many tokens without EOS is finalised as
        truncated (the target is then the model truncated at ``max_len``).
      generator: source of every random draw of the run (token draws and the
        stratification uniforms); the global torch RNG when None.
      on_event, should_stop: the fit event callback and cancellation poll
        (`qvr.events`); `run` may override both.
      progress_interval: seconds between progress events (first and last steps are
        always reported); 0 reports every step.

    References: design document 001, Algorithm 3; Lew et al. (2023), arXiv:2306.03081.
    """

    def __init__(self, lm, *, potential=None, log_potential=None, num_particles: int,
                 expansion: int = 1, max_len: int,
                 generator: Optional[torch.Generator] = None,
                 on_event: Optional[EventCallback] = None,
                 should_stop: Optional[Callable[[], bool]] = None,
                 progress_interval: float = 0.1):
        if potential is not None and log_potential is not None:
            raise TypeError("give at most one of potential= and log_potential=")
        for name, value in (("num_particles", num_particles), ("expansion", expansion),
                            ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.lm = lm
        self.eos = int(lm.eos)
        self.log_potential = None if potential is None and log_potential is None else \
            log_potential_fn(potential=potential, log_potential=log_potential)
        self.num_particles = num_particles
        self.expansion = expansion
        self.max_len = max_len
        self.generator = generator
        self.on_event = on_event
        self.should_stop = should_stop
        self.progress_interval = progress_interval

    def config(self) -> dict[str, Any]:
        return {"num_particles": self.num_particles, "expansion": self.expansion,
                "max_len": self.max_len, "eos": self.eos}

    def run(self, on_event: Optional[EventCallback] = None,
            should_stop: Optional[Callable[[], bool]] = None) -> SMCResult:
        """One SMC run; see the class docstring for events and cancellation."""
        emit = Emitter(on_event if on_event is not None else self.on_event)
        stop = should_stop or self.should_stop or never
        return _Run(self, emit, stop).loop()


class _Run:
    """The mutable state of one run: the population (numpy arrays, cheap on small
    vectors; the strings as one token matrix, turned into tuples only for results and
    snapshots), the model state of its live particles, the step counter."""

    def __init__(self, smc: SMCSteering, emit: Emitter, stop: Callable[[], bool]):
        self.smc, self.emit, self.stop = smc, emit, stop
        self.lm = as_stateful(smc.lm)
        n = smc.num_particles
        # row i: string i, padded; columns added as strings grow (doubling, up to max_len)
        self.tokens = np.zeros((n, min(smc.max_len, 64)), dtype=np.int64)
        self.lengths = np.zeros(n, dtype=np.int64)
        self._seqs: Optional[list[Prefix]] = None
        self.log_w = np.zeros(n)
        self.finished = np.zeros(n, dtype=bool)
        self.truncated = np.zeros(n, dtype=bool)
        self.dead = np.zeros(n, dtype=bool)
        self.t = 0
        self.num_det = 0
        self.resampled = False
        self.history: list[dict] = []
        self.throttle = Throttle(smc.progress_interval)
        self.reported = 0
        k = smc.expansion
        # every particle unfinished (the common case): child c = i·K + k has parent i
        self.all_parents = np.repeat(np.arange(n), k)
        self.log_k = -math.log(k)

    @property
    def seqs(self) -> list[Prefix]:
        """The strings as tuples (built once per step, on demand)."""
        if self._seqs is None:
            self._seqs = [tuple(row[:n]) for row, n in
                          zip(self.tokens.tolist(), self.lengths.tolist())]
        return self._seqs

    def result(self, cancelled=False) -> SMCResult:
        return SMCResult(list(self.seqs), torch.from_numpy(self.log_w.copy()),
                         _log_mean_exp(self.log_w), torch.from_numpy(self.finished.copy()),
                         torch.from_numpy(self.truncated.copy()), self.t,
                         torch.from_numpy(self.dead.copy()), cancelled, self.history)

    def loop(self) -> SMCResult:
        state = self.lm.start(self.smc.num_particles, generator=self.smc.generator)
        active = np.ones(self.smc.num_particles, dtype=bool)
        while active.any():
            if self.stop():
                self.report(force=True)
                return self.result(cancelled=True)
            self.t += 1
            state, active = self.step(active, state)
            self.history.append({"step": self.t, **self.metrics()})
            self.report()
        self.report(force=True)
        return self.result()

    def step(self, active: np.ndarray, state):
        """Expand, weight, resample; returns the model state of the new live particles and
        which particles are live (unfinished and not dead)."""
        smc, t, K, N = self.smc, self.t, self.smc.expansion, self.smc.num_particles
        everyone = bool(active.all())
        act = None if everyone else np.flatnonzero(active)
        drawn = self.lm.draw(state, K, smc.generator)
        tok = np.asarray(drawn.detach().cpu()).astype(np.int64, copy=False).reshape(-1)
        # Children in lexicographic (i, k) order: K per active particle, 1 per other.
        # Every active particle has length t - 1, so its children have length t.
        inc = self.log_k  # log(G / K) of the new children
        if smc.log_potential is not None:
            prefixes = self.tokens[:, :t - 1] if everyone else self.tokens[act, :t - 1]
            inc = smc.log_potential.batch(Transitions(prefixes, tok, K)) + self.log_k
        ends = tok == smc.eos
        if everyone:  # no carried-over child: skip the masks
            parent, is_new, child_tok = self.all_parents, None, tok
            log_u = self.log_w[parent] + inc
            fin = ends
            trunc = ~ends if t >= smc.max_len else np.zeros(tok.size, dtype=bool)
        else:
            parent = np.repeat(np.arange(N), np.where(active, K, 1))
            is_new = active[parent]
            child_tok = np.full(parent.size, -1, dtype=np.int64)
            child_tok[is_new] = tok
            log_u = self.log_w[parent]
            log_u[is_new] += inc
            fin = self.finished[parent]
            fin[is_new] = ends
            trunc = self.truncated[parent]
            trunc[is_new] = ~ends & (t >= smc.max_len)

        r = resample(log_u, N, smc.generator)
        idx = r.indices
        self.num_det = r.num_det
        self.resampled = log_u.size > N  # children were dropped: a resampling step
        src = parent[idx]  # the population row each survivor comes from
        tokens = self.tokens[src]
        if tokens.shape[1] < t:
            wider = min(smc.max_len, 2 * tokens.shape[1])
            tokens = np.concatenate([tokens, np.zeros((N, wider - tokens.shape[1]),
                                                      dtype=np.int64)], axis=1)
        if is_new is None:
            new_tok = tokens[:, t - 1] = tok[idx]
            self.lengths = np.full(N, t, dtype=np.int64)
        else:
            grown = is_new[idx]
            tokens[grown, t - 1] = child_tok[idx[grown]]
            self.lengths = self.lengths[src] + grown
        self.tokens, self._seqs = tokens, None
        self.finished, self.truncated = fin[idx], trunc[idx]
        self.dead = self.dead[src] | r.dead
        self.log_w = r.log_weights
        if r.log_total == -math.inf:  # every child has weight 0 (step 3): stop with Ẑ = 0
            self.dead = np.ones(N, dtype=bool)
            return None, ~self.dead
        live = ~(self.finished | self.truncated | self.dead)
        if not live.any():
            return None, live
        # (a live survivor is a new child; its parent's row in `state` is the parent's
        # rank among the active particles)
        if everyone and live.all():  # the common case: no mask needed
            rows, new_tok, prefixes = src, new_tok, tokens[:, :t]
        else:
            rows, new_tok, prefixes = src[live], child_tok[idx[live]], tokens[live, :t]
            if not everyone:
                row_of = np.full(N, -1, dtype=np.int64)
                row_of[act] = np.arange(act.size)
                rows = row_of[rows]
        return self.lm.advance(state, torch.from_numpy(rows), torch.from_numpy(new_tok),
                               PrefixBatch(prefixes), generator=smc.generator), live

    def metrics(self) -> dict[str, float]:
        log_z, ess = _weight_stats(self.log_w)
        return {"ess": ess,
                "num_finished": float(((self.finished | self.truncated) & ~self.dead).sum()),
                "num_dead": float(self.dead.sum()),
                "num_det": float(self.num_det),
                "resampled": float(self.resampled),
                "log_Z": log_z}

    def report(self, force: bool = False) -> None:
        """Emit progress and a snapshot for the current step if due (or forced), once."""
        if self.t == 0 or self.reported == self.t:
            return
        if not (force or self.throttle.due(self.t, self.smc.max_len)):
            return
        self.reported = self.t
        emit = self.emit
        if emit.on_event is None or emit.broken:  # nobody listens: build nothing
            return
        emit(FitProgress(method="smc", phase="smc", step=self.t, total=self.smc.max_len,
                         metrics={k: v for k, v in self.history[-1].items() if k != "step"},
                         elapsed=emit.elapsed))
        emit(ParticlesSnapshot(step=self.t, sequences=tuple(self.seqs),
                               log_weights=tuple(self.log_w.tolist()),
                               finished=tuple((self.finished | self.truncated).tolist()),
                               truncated=tuple(self.truncated.tolist())))
