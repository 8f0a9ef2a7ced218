"""`RunWriter`: the one writer of run records (`layout.py` describes the files).

`qvr.inference.fit` writes a record when it is given a run folder (`qvr run` and the
dashboard's worker give one).  The writer holds ``writer.lock`` for its lifetime so that a
reader can tell a live run from one whose process died; it appends each event as one
JSON line and flushes it, writes each `DrawsChunk` to its own ``.npz`` before the line
that refers to it, and writes final results atomically.  Nothing here imports torch.
"""
from __future__ import annotations

import json
import os
import platform
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from qvr.events import DrawsChunk, FitEvent, to_json
from qvr.runs import layout


class RecordError(OSError):
    """The run folder cannot be created or written (names the folder and the cause)."""


def new_run_dir(root, name: str) -> Path:
    """A fresh folder ``root/NAME-YYYYmmdd-HHMMSS`` (``-2``, ``-3``... on a clash)."""
    root = Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "run"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"cannot create the runs folder {root}: {exc.strerror or exc}") \
            from None
    i = 1
    while True:
        path = root / (f"{base}-{stamp}" if i == 1 else f"{base}-{stamp}-{i}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            i += 1
        except OSError as exc:
            raise RecordError(f"cannot create the run folder {path}: {exc.strerror or exc}") \
                from None


def versions() -> dict:
    from qvr.version import __version__
    out = {"qvr": __version__, "python": platform.python_version()}
    for mod in ("torch", "numpy"):
        m = sys.modules.get(mod)
        out[mod] = getattr(m, "__version__", None) if m is not None else None
    return out


class RunWriter:
    """Writes one run record into `folder` (created if needed; must not hold a record).

    `meta` is the content of ``run.json`` beyond what the writer adds itself (format,
    run id, versions, start time, host, pid).
    """

    def __init__(self, folder, meta: Mapping[str, Any]):
        self.path = Path(folder)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if (self.path / layout.RUN_JSON).exists():
                raise RecordError(f"{self.path} already holds a run record")
            self._lock = open(self.path / layout.LOCK, "a+")
            _lock(self._lock)
            full = {"format": layout.FORMAT, "run_id": self.path.name, **dict(meta),
                    "versions": versions(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "host": socket.gethostname(), "pid": os.getpid()}
            self.meta = full
            self.write_json(layout.RUN_JSON, full)
            self._events = open(self.path / layout.EVENTS, "a", encoding="utf-8")
        except RecordError:
            raise
        except OSError as exc:
            raise RecordError(f"cannot write the run record in {self.path}: "
                              f"{exc.strerror or exc}") from None
        self.closed = False
        self.failed: Optional[str] = None  # set when a write failed (disk full...)

    # ------------------------------------------------------------ events
    def write(self, event: FitEvent) -> None:
        """Append `event` (a `DrawsChunk` goes to its own file first); never raises: a
        failed write is remembered in `failed` and later writes are skipped."""
        if self.closed or self.failed:
            return
        try:
            ref = None
            if isinstance(event, DrawsChunk):
                ref = layout.draws_file(event.chain, event.start)
                self._save_npz(ref, event.draws)
            self._events.write(to_json(event, draws_file=ref) + "\n")
            self._events.flush()
        except (OSError, ValueError) as exc:
            self.failed = f"writing the run record failed: {exc}"

    # ------------------------------------------------------------ results
    def write_json(self, name: str, obj) -> Path:
        target = self.path / name
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=True, default=json_default) + "\n",
                       encoding="utf-8")
        os.replace(tmp, target)
        return target

    def save_arrays(self, name: str, arrays: Mapping[str, Any]) -> Optional[Path]:
        """``name.npz`` of `arrays` (numpy-convertible), atomically; None when empty."""
        if not arrays:
            return None
        return self._save_npz(name, arrays)

    def save_array(self, name: str, array) -> Path:
        import numpy as np
        target = self.path / name
        tmp = target.with_name(target.name + ".tmp.npy")
        np.save(tmp, np.asarray(array))
        os.replace(tmp, target)
        return target

    def write_text(self, name: str, text: str) -> Path:
        target = self.path / name
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
        return target

    def _save_npz(self, name: str, arrays: Mapping[str, Any]) -> Path:
        import numpy as np
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp.npz")
        with open(tmp, "wb") as fh:
            np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, target)
        return target

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fh in (getattr(self, "_events", None), getattr(self, "_lock", None)):
            try:
                if fh is not None:
                    fh.close()  # closing the lock file releases the lock
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def json_default(v):
    """`json.dumps(..., default=json_default)`: arrays and tensors as lists, sets and tuples
    as lists, paths as text, anything else by its repr (what every record file uses)."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, Path):
        return str(v)
    return repr(v)


def _lock(fh) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: the pid in run.json is used
        return
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def end_abandoned(path, event: FitEvent) -> bool:
    """End a record whose writer died without its terminal event (rank 0 of a
    distributed fit, killed: another rank says why, `qvr.inference.front.fitting`): append
    `event` (a `FitFailed`) to ``events.jsonl`` — only if no live process holds the
    writer lock, which this call then holds while it writes.  Returns whether it wrote."""
    path = Path(path)
    events = path / layout.EVENTS
    if not events.is_file():
        return False
    try:
        lock = open(path / layout.LOCK, "a+")
    except OSError:
        return False
    try:
        try:
            _lock(lock)
        except OSError:  # the writer lives: it ends its own record
            return False
        from qvr.runs.reader import Tail, open_run
        tail = Tail(open_run(path), load_draws=False)
        for _ in tail.pieces():
            pass
        if tail.terminal is not None:  # it ended before it went (finished, cancelled...)
            return False
        with open(events, "a", encoding="utf-8") as fh:
            fh.write("\n" + to_json(event) + "\n")  # after a torn last line, if any
        return True
    finally:
        lock.close()
