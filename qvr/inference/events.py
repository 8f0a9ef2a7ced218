"""Fit events: the typed messages every fit (SVI, HMC/NUTS, SMC) reports while it runs.

This is the only part of `qvr.inference` the dashboard and the CLI progress display see.
It deliberately imports nothing heavy (no torch): events hold plain floats, ints, strings,
tuples and (for draws) numpy arrays, so a consumer can type-check and render them without
loading torch.

Protocol (a generalisation of Pyro's ``hook_fn``):

* a driver calls ``on_event(event)`` from its own thread; callbacks must be quick and must
  not raise (a raising callback is reported once as a `FitWarning` and then ignored);
* the driver polls ``should_stop()`` between steps; when it returns true the driver stops
  cleanly, keeps everything already reported, emits `FitCancelled` and returns a partial
  result;
* progress is throttled by the driver (`Throttle`), so a consumer never floods;
* every fit emits exactly one `FitStarted` first and exactly one of `FitFinished`,
  `FitFailed` or `FitCancelled` last.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Union


@dataclass(frozen=True)
class FitStarted:
    method: str  # "svi" | "hmc" | "nuts" | "smc"
    total_steps: int  # per chain: warmup + samples, SVI steps, or SMC max length
    num_chains: int = 1
    config: Mapping[str, Any] = field(default_factory=dict)
    run_dir: Optional[str] = None


@dataclass(frozen=True)
class FitProgress:
    """One step (or a throttled batch of steps) of one chain.

    `metrics` holds what the method knows, by name: ``loss`` (SVI), ``accept_prob``,
    ``step_size``, ``tree_depth``, ``divergences`` (cumulative, MCMC), ``ess``,
    ``num_finished``, ``log_Z`` (SMC), ...
    """

    method: str
    phase: str  # "optimization" | "warmup" | "sampling" | "smc"
    step: int  # 1-based, within the phase's chain
    total: int
    chain: int = 0
    metrics: Mapping[str, float] = field(default_factory=dict)
    elapsed: float = 0.0  # seconds since FitStarted


@dataclass(frozen=True)
class DrawsChunk:
    """Posterior draws of one chain, appended in order (values are numpy arrays)."""

    chain: int
    start: int  # index of the first draw in this chunk
    draws: Mapping[str, Any]


@dataclass(frozen=True)
class ParticlesSnapshot:
    """The current SMC particles (for live display)."""

    step: int
    sequences: tuple[tuple[int, ...], ...]
    log_weights: tuple[float, ...]
    finished: tuple[bool, ...]


@dataclass(frozen=True)
class FitWarning:
    message: str
    step: Optional[int] = None


@dataclass(frozen=True)
class FitFinished:
    summary: Mapping[str, Any] = field(default_factory=dict)
    elapsed: float = 0.0


@dataclass(frozen=True)
class FitFailed:
    """The fit stopped on an error of the model or data (e.g. a NaN loss at a step)."""

    message: str
    step: Optional[int] = None
    error_type: str = ""
    elapsed: float = 0.0


@dataclass(frozen=True)
class FitCancelled:
    step: Optional[int] = None
    elapsed: float = 0.0


FitEvent = Union[FitStarted, FitProgress, DrawsChunk, ParticlesSnapshot, FitWarning,
                 FitFinished, FitFailed, FitCancelled]
EventCallback = Callable[[FitEvent], None]


class StopToken:
    """A thread-safe cancellation flag; pass ``token`` (it is callable) as ``should_stop``."""

    def __init__(self):
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def __call__(self) -> bool:
        return self._event.is_set()


def never() -> bool:
    """The default ``should_stop``."""
    return False


class Throttle:
    """Decides when a driver emits progress: at most every `interval` seconds, plus always
    on the first and the last step of a phase."""

    def __init__(self, interval: float = 0.1, clock: Callable[[], float] = time.monotonic):
        self.interval = interval
        self.clock = clock
        self._last = -float("inf")

    def due(self, step: int, total: int) -> bool:
        now = self.clock()
        if step <= 1 or step >= total or now - self._last >= self.interval:
            self._last = now
            return True
        return False


class Emitter:
    """Wraps a user callback: never lets a consumer's exception kill the fit."""

    def __init__(self, on_event: Optional[EventCallback]):
        self.on_event = on_event
        self.broken = False
        self.t0 = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, event: FitEvent) -> None:
        if self.on_event is None or self.broken:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # a consumer bug must not stop the fit
            self.broken = True
            try:
                self.on_event(FitWarning(f"event callback raised {type(exc).__name__}: {exc}; "
                                         f"further events are not delivered"))
            except Exception:
                pass
