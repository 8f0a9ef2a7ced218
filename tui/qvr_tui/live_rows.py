"""The rows the live screen's tables show, kept by `qvr_tui.state.RunState`: one
`ChainRow` per MCMC chain, the worst parameters' `WorstRow`s, SMC's `ParticleRow`s (their
text through `tokens_text`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["ChainRow", "ParticleRow", "WorstRow", "tokens_text"]


def tokens_text(tokens: Sequence[int], vocab: Optional[Sequence[str]]) -> str:
    """Token ids as text: joined without spaces when every vocabulary entry but ``<...>``
    markers is one character (a character model), with spaces otherwise; ids when no
    vocabulary is known (or an id is outside it)."""
    if not vocab or any(not (0 <= t < len(vocab)) for t in tokens):
        return " ".join(str(t) for t in tokens)
    chars = all(len(w) == 1 for w in vocab if not (w.startswith("<") and w.endswith(">")))
    words = [vocab[t] for t in tokens]
    return "".join(words) if chars else " ".join(words)


@dataclass
class ChainRow:
    """One MCMC chain's live facts (what the chain table shows)."""

    chain: int
    phase: str = "warmup"
    step: int = 0  # within the phase
    total: int = 0  # of the phase
    draws_per_s: float = 0.0
    accept: float = math.nan
    step_size: float = math.nan
    tree_depth: float = math.nan
    num_steps: float = math.nan
    max_depth_hits: int = 0  # sampling phase (warmup's kept apart)
    warmup_max_depth_hits: int = 0
    divergences: int = 0  # sampling phase
    warmup_divergences: int = 0
    first_divergence: Optional[int] = None  # sampling iteration of the first divergence
    eta: Optional[float] = None
    # rates, for the ETA
    warmup_rate: Optional[float] = None
    sampling_rate: Optional[float] = None
    phase_t0: float = 0.0  # elapsed when the phase began (the last event of the previous one)
    last_elapsed: float = 0.0

    @property
    def diverged(self) -> bool:
        return self.divergences > 0


@dataclass
class ParticleRow:
    text: str
    tokens: tuple
    weight: float
    finished: bool  # ended: by the end token or at the maximum length
    truncated: bool = False  # ended at the maximum length


@dataclass
class WorstRow:
    name: str
    r_hat: float
    ess_bulk: float
    ess_tail: float
