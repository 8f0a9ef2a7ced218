"""Fit events: the typed messages every fit (SVI, HMC/NUTS, SMC) reports while it runs.

This is the only part of inference the dashboard and the CLI progress display see.  It sits
below `qvr.runs` (which stores events) and `qvr.smc` (which reports them), and imports no
other qvr module.
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

#: the start of every plain progress line, the text form of these events that `qvr run`
#: prints without a terminal (`qvr.commands.progress`); the dashboard's fit runner leaves
#: such lines out of the worker's stderr it shows as a failure's cause.  Here, below both.
PLAIN_PREFIX = "qvr run: progress: "


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


@dataclass(frozen=True, eq=False)
class DrawsChunk:
    """Posterior draws of one chain, appended in order (values are numpy arrays of shape
    ``(count, *site_shape)``).  Two chunks are equal when their arrays are."""

    chain: int
    start: int  # index of the first draw in this chunk
    draws: Mapping[str, Any]

    @property
    def count(self) -> int:
        return int(len(next(iter(self.draws.values())))) if self.draws else 0

    def __eq__(self, other) -> bool:
        if not isinstance(other, DrawsChunk):
            return NotImplemented
        if (self.chain, self.start) != (other.chain, other.start) or \
                set(self.draws) != set(other.draws):
            return False
        import numpy as np
        return all(np.array_equal(np.asarray(self.draws[k]), np.asarray(other.draws[k]))
                   for k in self.draws)

    __hash__ = None


@dataclass(frozen=True)
class ParticlesSnapshot:
    """The current SMC particles (for live display).  `finished` holds the particles that
    ended (by the end token or at the maximum length); `truncated`, when given, those of
    them stopped by the maximum length; `texts`, when given, each sequence as text (SMC
    steering a pretrained LM, ``--lm``: the detokenised continuation, the prompt and end
    token left out), so that a reader needs no tokenizer."""

    step: int
    sequences: tuple[tuple[int, ...], ...]
    log_weights: tuple[float, ...]
    finished: tuple[bool, ...]
    truncated: tuple[bool, ...] = ()
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class FitWarning:
    message: str
    step: Optional[int] = None


@dataclass(frozen=True)
class FitNote:
    """What the fit is doing when it is not stepping, said once (e.g. that NUTS is
    compiling its transition before the first iteration: tens of seconds on a first run).
    Not a warning: nothing is wrong.  `path`, when the note changes it: how NUTS's
    steps run from now on (`STEPS_LEAF_BY_LEAF`, `STEPS_COMPILED`), which the live view
    shows while the run goes on."""
    message: str
    path: str = ""


#: `FitNote.path` values: the steps run leaf by leaf while the C++ loop compiles in the
#: background, then in that loop (issue 37.4)
STEPS_LEAF_BY_LEAF = "leaf by leaf, C++ loop compiling"
STEPS_COMPILED = "compiled C++ loop"


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
                 FitNote, FitFinished, FitFailed, FitCancelled]
EventCallback = Callable[[FitEvent], None]
TERMINAL = (FitFinished, FitFailed, FitCancelled)

# ---------------------------------------------------------------- JSON form
#
# Every event has a JSON form: an object with a ``"type"`` tag and the event's fields.
# `DrawsChunk` arrays are written inline (``{"dtype", "shape", "data"}``) by `to_dict`,
# or, in a run record, as a reference to a chunk file (``"file"``, relative to the
# record's folder) that `from_dict(..., base=folder)` loads.  Tuples come back as tuples
# where the event declares them (`ParticlesSnapshot`), so ``from_json(to_json(e)) == e``
# for every event whose numbers are not NaN.

_TYPES = {"started": FitStarted, "progress": FitProgress, "draws": DrawsChunk,
          "particles": ParticlesSnapshot, "warning": FitWarning, "note": FitNote,
          "finished": FitFinished,
          "failed": FitFailed, "cancelled": FitCancelled}
_TAGS = {cls: tag for tag, cls in _TYPES.items()}


def event_type(event: FitEvent) -> str:
    """The JSON tag of an event (``"started"``, ``"progress"``, ``"draws"``, ...)."""
    return _TAGS[type(event)]


def _array_to_json(a) -> dict:
    import numpy as np
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.ravel().tolist()}


def _array_from_json(d):
    import numpy as np
    return np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])


def _plain(v):
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0:
        return v.item()  # a numpy scalar
    if hasattr(v, "tolist") and hasattr(v, "dtype"):
        return v.tolist()
    return v


def to_dict(event: FitEvent, draws_file: Optional[str] = None) -> dict:
    """The JSON-ready form of `event`; a `DrawsChunk` is a reference to `draws_file` when
    given (the record's chunk file), its arrays inline otherwise."""
    tag = _TAGS[type(event)]
    if isinstance(event, DrawsChunk):
        out = {"type": tag, "chain": event.chain, "start": event.start, "count": event.count}
        if draws_file is not None:
            out["file"] = draws_file
        else:
            out["draws"] = {k: _array_to_json(v) for k, v in event.draws.items()}
        return out
    out = {"type": tag}
    for name in event.__dataclass_fields__:
        out[name] = _plain(getattr(event, name))
    return out


def from_dict(d: Mapping[str, Any], base=None) -> FitEvent:
    """The event of a JSON object made by `to_dict` (`base`: the folder that chunk-file
    references are relative to).  Raises `ValueError` on an unknown or malformed object."""
    try:
        cls = _TYPES[d["type"]]
    except (KeyError, TypeError):
        raise ValueError(f"not a fit event: {d!r:.200}") from None
    if cls is DrawsChunk:
        if "file" in d:
            import os
            import numpy as np
            path = d["file"] if base is None else os.path.join(str(base), d["file"])
            with np.load(path, allow_pickle=False) as f:
                draws = {k: f[k] for k in f.files}
        else:
            draws = {k: _array_from_json(v) for k, v in d.get("draws", {}).items()}
        return DrawsChunk(chain=int(d["chain"]), start=int(d["start"]), draws=draws)
    kwargs = {k: v for k, v in d.items() if k != "type" and k in cls.__dataclass_fields__}
    if cls is ParticlesSnapshot:
        kwargs["sequences"] = tuple(tuple(s) for s in kwargs.get("sequences", ()))
        kwargs["log_weights"] = tuple(kwargs.get("log_weights", ()))
        kwargs["finished"] = tuple(kwargs.get("finished", ()))
        kwargs["truncated"] = tuple(kwargs.get("truncated", ()))
        kwargs["texts"] = tuple(kwargs.get("texts", ()))
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"malformed {d['type']} event: {exc}") from None


def to_json(event: FitEvent, draws_file: Optional[str] = None) -> str:
    """One line of JSON (NaN and infinities written as ``NaN``/``Infinity``)."""
    import json
    return json.dumps(to_dict(event, draws_file), allow_nan=True, separators=(",", ":"))


def from_json(line: str, base=None) -> FitEvent:
    import json
    return from_dict(json.loads(line), base)


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

    def quiet_for(self, seconds: float) -> bool:
        """Whether nothing was emitted for `seconds` (then an emission is counted now): a
        driver's heartbeat while one slow step runs."""
        now = self.clock()
        if now - self._last >= seconds:
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
