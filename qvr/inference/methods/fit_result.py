"""`FitResult` and `FitContext`: what a method's loop gets from `fit` and what it gives back.

Apart from `qvr.inference.front.fitting` so that the loops (`qvr.inference.methods`), which
`fit` calls, import them without importing `fit` (no import circle).  Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from qvr.inference.config import FitConfig
from qvr.events import FitEvent

__all__ = ["FitResult", "FitContext"]


@dataclass
class FitResult:
    """What a fit produced.

    Attributes:
      method, status: ``"finished"``, ``"cancelled"`` or ``"failed"``; message: why it
        failed (e.g. "the loss is nan at step 12 ...").
      losses: SVI losses, one per step done.
      samples: draws `{site: (chains, draws, *shape)}` as numpy arrays (MCMC draws, or
        independent draws from the fitted guide for SVI).
      params: fitted values as numpy arrays (SVI guide ``loc_*``/``log_scale_*``; model
        parameters under ``model.NAME`` for every method).
      summary: `qvr.inference.criticism.diagnostics.Summary` of the posterior.
      stats: scalar facts (final loss, acceptance, divergences, step sizes, log Z...).
      mcmc: the `MCMCResult` (MCMC); guide: the fitted guide (SVI); smc: the `SMCResult`.
      circuits: the attention circuits and patterns to record
        (`qvr.inference.methods.circuits.CircuitRecord`), None without attention layers.
      run_dir: the run record's folder, when one was written.
      elapsed: seconds; step: the last step done.
    """

    method: str
    status: str = "finished"
    message: str = ""
    losses: list = field(default_factory=list)
    samples: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    summary: Any = None
    stats: dict = field(default_factory=dict)
    mcmc: Any = None
    guide: Any = None
    smc: Any = None
    sequences: Optional[dict] = None
    circuits: Any = None
    run_dir: Optional[str] = None
    elapsed: float = 0.0
    step: Optional[int] = None
    config: Optional[FitConfig] = None


@dataclass
class FitContext:
    """What a method's loop gets from `fit` (the loops live in `qvr.inference.methods`)."""

    program: Any  # the `Program` (or export) as given
    model: Any  # the program to fit (`MonadicProgram`), None for SMC
    x: Any
    observations: dict
    config: FitConfig
    report: Callable[[FitEvent], None]  # steps only: progress, draws, particles, warnings
    stop: Callable[[], bool]
    start: Any = None  # `qvr.inference.front.start.StartState` or None
    potential: Any = None  # SMC: a Python potential (multiplied with the config's)
    vocab: Optional[list] = None  # token id -> text (SMC's text, attention patterns' axes)
    world: Any = None  # `qvr.inference.distributed.world.World` (None: one process)
    rows: Any = None  # `qvr.inference.data.minibatch.RowData`: the data as rows (minibatch SVI)
    batches: Any = None  # `qvr.inference.data.minibatch.Batches`, None for full-data steps
    #: NUTS on a program with a row count read from the data: `resize(drop) -> (rows,
    #: model, x, observations)` with `drop` rows fewer (`qvr.inference.front.resize`)
    resize: Any = None
