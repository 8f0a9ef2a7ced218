"""`open_run(path) -> Run`: the one reader of run records (`layout.py` describes the files).

The reader gives back the typed events of `qvr.events`, the draws as arrays, the
summary and final results, and a status:

* ``finished`` / ``failed`` / ``cancelled`` — the record ends with that terminal event;
* ``running`` — no terminal event yet and the writer is alive (it holds ``writer.lock``):
  `Run.tail()` follows the record as it grows;
* ``interrupted`` — no terminal event and no live writer (``kill -9``, power loss): the
  record reads cleanly up to its last complete line; a torn last line is ignored.

It imports numpy (for draws) but never torch, so the dashboard's UI process uses it.
It imports nothing above the records: what `Run.loo`, `Run.ppc` (when the record lacks
their files) and `Run.predict` compute lives in `qvr.inference`, reached through the table
of `qvr.record_analyses` that the root package `qvr` fills.

Example::

    >>> run = open_run("runs/hmm-20261124-101500")          # doctest: +SKIP
    >>> run.status, run.method, len(run.events())            # doctest: +SKIP
    ('finished', 'nuts', 412)
    >>> run.draws()["mu"].shape                              # doctest: +SKIP
    (4, 500, 1)
    >>> run.recorded_names(), run.draws()["theta"].shape     # doctest: +SKIP
    (['theta'], (4, 500, 8))
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from qvr.events import (DrawsChunk, FitCancelled, FitEvent, FitFailed, FitFinished,
                        FitStarted, from_dict)
from qvr.record_analyses import analysis
from qvr.runs import layout

_STATUS_OF = {FitFinished: "finished", FitFailed: "failed", FitCancelled: "cancelled"}


class RunRecordError(ValueError):
    """The folder is not a readable run record (names the folder and the cause)."""


class Tail:
    """Incremental reader of ``events.jsonl``: `poll()` returns the events appended since
    the previous call (complete lines only; a partial last line waits for its end)."""

    def __init__(self, run: "Run", load_draws: bool = True):
        self.run = run
        self.load_draws = load_draws
        self.offset = 0
        self.buffer = b""
        self.bad_lines = 0
        self.terminal: Optional[FitEvent] = None

    def poll(self, max_bytes: Optional[int] = None) -> list[FitEvent]:
        """`max_bytes`: read at most this much of the file (a long record folded in
        bounded pieces: the dashboard keeps its memory flat); a line cut at the end waits
        in the buffer for the next call, as a line still being written does."""
        path = self.run.path / layout.EVENTS
        try:
            with open(path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(max_bytes) if max_bytes else fh.read()
        except FileNotFoundError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self.buffer + data
        lines = data.split(b"\n")
        self.buffer = lines.pop()  # b"" after a complete last line
        out = []
        for line in lines:
            if not line.strip():
                continue
            ev = self._parse(line)
            if ev is not None:
                out.append(ev)
                if type(ev) in _STATUS_OF:
                    self.terminal = ev
        return out

    def pieces(self, max_bytes: int = 1 << 20, until: Optional[int] = None):
        """The events the file holds now, as lists of at most `max_bytes` of lines each
        (`poll` in a loop), until a read brings nothing new or the offset reaches `until`
        (the size the file had when the caller began: a live writer's later lines wait for
        the next call).  A long record is then never all in memory at once."""
        while until is None or self.offset < until:
            before = self.offset
            n = max_bytes if until is None else min(max_bytes, until - self.offset)
            events = self.poll(max_bytes=n)
            if self.offset == before:
                return
            yield events

    def _parse(self, line: bytes) -> Optional[FitEvent]:
        try:
            d = json.loads(line.decode("utf-8"))
            if d.get("type") == "draws" and not self.load_draws:
                return DrawsChunk(chain=int(d["chain"]), start=int(d["start"]), draws={})
            return from_dict(d, base=self.run.path)
        except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError):
            self.bad_lines += 1
            return None

    @property
    def done(self) -> bool:
        """A terminal event was read, or the writer is gone."""
        return self.terminal is not None or not self.run.writer_alive()


class Run:
    """A run record on disk (see the module docstring)."""

    def __init__(self, path):
        self.path = Path(path)
        meta_path = self.path / layout.RUN_JSON
        if not self.path.is_dir():
            raise RunRecordError(f"{self.path}: no such run folder")
        try:
            self.meta: dict = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunRecordError(f"{self.path}: not a run record (no {layout.RUN_JSON})") \
                from None
        except (OSError, ValueError) as exc:
            raise RunRecordError(f"{meta_path}: unreadable: {exc}") from None
        fmt = self.meta.get("format")
        if fmt != layout.FORMAT:
            raise RunRecordError(f"{meta_path}: record format {fmt!r} is not supported "
                                 f"(this qvr reads format {layout.FORMAT})")

    # ------------------------------------------------------------ facts
    @property
    def run_id(self) -> str:
        return self.meta.get("run_id", self.path.name)

    @property
    def method(self) -> str:
        return self.meta.get("method", "")

    @property
    def config(self) -> dict:
        return dict(self.meta.get("config", {}))

    @property
    def program(self) -> dict:
        """``{"path", "sha256", "export"}`` of the program that was run."""
        return dict(self.meta.get("program", {}))

    @property
    def source_sha256(self) -> Optional[str]:
        return self.program.get("sha256")

    @property
    def started(self) -> str:
        return self.meta.get("started", "")

    def writer_alive(self) -> bool:
        """Whether a live process holds this record's writer lock.

        The writer holds ``writer.lock`` exclusively (``LOCK_EX``) for its life; a reader
        probes with a *shared* lock (``LOCK_SH | LOCK_NB``), which only an exclusive holder
        refuses.  (An exclusive probe would also be refused by another reader's probe at
        the same instant, and a dead run would read as ``running``.)"""
        lock = self.path / layout.LOCK
        if not lock.exists():
            return False
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: fall back on the pid
            return _pid_alive(self.meta.get("pid"))
        try:
            fh = open(lock, "rb")  # a reader never writes the record, not even the lock
        except OSError:
            return False
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True  # the writer holds it
        else:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return False
        finally:
            fh.close()

    # ------------------------------------------------------------ events
    def tail(self, load_draws: bool = True) -> Tail:
        return Tail(self, load_draws)

    def events(self, load_draws: bool = True) -> list[FitEvent]:
        """Every complete event in the record, in order."""
        t = self.tail(load_draws)
        return t.poll()

    def follow(self, poll_interval: float = 0.1, timeout: Optional[float] = None) \
            -> Iterator[FitEvent]:
        """Yield events as they are written until a terminal event, or until the writer
        is gone (then the record is `interrupted`), or `timeout` seconds."""
        import time
        t = self.tail()
        t0 = time.monotonic()
        while True:
            alive = self.writer_alive()  # before reading: no event can be missed
            batch = t.poll()
            yield from batch
            if t.terminal is not None or not alive:
                return
            if timeout is not None and time.monotonic() - t0 > timeout:
                return
            time.sleep(poll_interval)

    @property
    def status(self) -> str:
        alive = self.writer_alive()
        t = self.tail(load_draws=False)
        for _ in t.pieces():  # a megabyte at a time: not all in memory at once
            pass
        if t.terminal is not None:
            return _STATUS_OF[type(t.terminal)]
        return "running" if alive else "interrupted"

    def started_event(self) -> Optional[FitStarted]:
        for ev in self.events(load_draws=False):
            if isinstance(ev, FitStarted):
                return ev
        return None

    # ------------------------------------------------------------ arrays and results
    def draws(self) -> dict[str, Any]:
        """Posterior draws from the chunk files, ``{site: (chains, draws, *shape)}``, the
        shapes of ``samples.npz``: a scalar site is ``(chains, draws, 1)`` there (the
        `MCMCResult` convention), so it is here too, although a chunk holds it as
        ``(count,)`` (the sampler's draw of a scalar, as the live `DrawsChunk` events carry
        it).

        Chains are cut to the draws every chain has (a live or interrupted run may have
        chains of different lengths); `draws_per_chain()` gives each chain's own count.

        Recorded quantities (``record v = e``, design E9.6) come with the sites' draws, under
        their own names (``recorded.v`` in the files); `recorded_names()` says which.
        """
        import numpy as np
        per = self._chunks()
        if not per:
            return {}
        n = min(sum(len(next(iter(c.draws.values()))) for c in chunks) if chunks else 0
                for chunks in per.values())
        out: dict[str, list] = {}
        for chain in sorted(per):
            parts = sorted(per[chain], key=lambda c: c.start)
            for name in parts[0].draws:
                a = np.concatenate([np.asarray(c.draws[name]) for c in parts], axis=0)[:n]
                out.setdefault(name, []).append(a)
        stacked = {k: np.stack(v) for k, v in out.items()}
        return {_plain_name(k): v[..., None] if v.ndim == 2 else v for k, v in stacked.items()}

    def recorded_names(self) -> list[str]:
        """The recorded quantities of the run (``record v = e``), in program order: from
        ``summary.json``, else the arrays of ``samples.npz`` or of the draws chunks (a run
        that ended early, even by ``kill -9``, knows them from its first chunk)."""
        summary = self.summary
        if summary is not None and summary.get("recorded") is not None:
            return list(summary["recorded"])
        keys = self._npz_keys(layout.SAMPLES) or self._first_chunk_keys()
        return [_plain_name(k) for k in keys if k.startswith(layout.RECORDED_PREFIX)]

    def _npz_keys(self, name: str) -> list[str]:
        """The array names of an ``.npz`` of the record (none read), [] when absent."""
        import numpy as np
        p = self.path / name
        if not p.exists():
            return []
        try:
            with np.load(p, allow_pickle=False) as f:
                return list(f.files)
        except (OSError, ValueError) as exc:
            raise RunRecordError(f"{p}: unreadable: {exc}") from None

    def _first_chunk_keys(self) -> list[str]:
        """The array names of the first draws chunk the events name (no array read)."""
        try:
            with open(self.path / layout.EVENTS, "rb") as fh:
                for line in fh:
                    if b'"draws"' not in line:
                        continue
                    try:
                        d = json.loads(line.decode("utf-8"))
                    except (ValueError, UnicodeDecodeError):
                        continue  # a torn last line
                    if d.get("type") == "draws" and d.get("file"):
                        return self._npz_keys(d["file"])
        except FileNotFoundError:
            pass
        return []

    def recorded(self) -> dict[str, Any]:
        """The recorded quantities' draws, ``{name: (chains, draws, *shape)}`` (a scalar
        ``(chains, draws, 1)``): ``samples.npz``'s when the fit saved it, else the draws
        chunks' (`draws`)."""
        p = layout.RECORDED_PREFIX
        out = {k[len(p):]: v for k, v in self.samples().items() if k.startswith(p)}
        if out:
            return out
        names = set(self.recorded_names())
        return {k: v for k, v in self.draws().items() if k in names}

    def draws_per_chain(self) -> dict[int, int]:
        return {c: sum(ch.count for ch in chunks) for c, chunks in self._chunks().items()}

    def _chunks(self) -> dict[int, list[DrawsChunk]]:
        per: dict[int, list[DrawsChunk]] = {}
        for ev in self.events():
            if isinstance(ev, DrawsChunk) and ev.draws:
                per.setdefault(ev.chain, []).append(ev)
        return per

    def _json(self, name: str) -> Optional[dict]:
        p = self.path / name
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise RunRecordError(f"{p}: unreadable: {exc}") from None

    def _npz(self, name: str) -> dict:
        import numpy as np
        p = self.path / name
        if not p.exists():
            return {}
        try:
            with np.load(p, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except (OSError, ValueError) as exc:
            raise RunRecordError(f"{p}: unreadable: {exc}") from None

    @property
    def summary(self) -> Optional[dict]:
        """``summary.json`` (``status``, ``message``, ``stats``, ``parameters``), or None
        while running or when the writer died before writing it."""
        return self._json(layout.SUMMARY)

    def samples(self) -> dict:
        """``samples.npz``: MCMC draws by site and ``sample_stats.*`` arrays."""
        return self._npz(layout.SAMPLES)

    def params(self) -> dict:
        """``params.npz``: fitted parameters (SVI guide ``loc_*``/``log_scale_*``, model
        parameters as ``model.NAME``)."""
        return self._npz(layout.PARAMS)

    def truth(self) -> dict:
        return self._npz(layout.TRUTH)

    def losses(self):
        import numpy as np
        p = self.path / layout.LOSSES
        return np.load(p) if p.exists() else None

    def circuits(self) -> Optional[dict]:
        """``circuits.npz`` of a fitted program with attention: ``{"qk/L": (H, dA, dA),
        "ov/L": (H, dB, dA)}`` per layer L in program order, or None when the record has
        none (no attention layer, or not written: see `layout`)."""
        return self._npz(layout.CIRCUITS) if (self.path / layout.CIRCUITS).exists() else None

    def patterns(self) -> Optional[dict]:
        """``patterns.npz``: ``inputs`` (S, T) tokens or (S, T, d) floats, ``pattern/L``
        (S, H, T, T) per attention layer, ``draws`` and ``tokens`` scalars; None when the
        record has none."""
        return self._npz(layout.PATTERNS) if (self.path / layout.PATTERNS).exists() else None

    # ------------------------------------------------------------ after the fit (issue 25)
    @property
    def data_sha256(self) -> Optional[str]:
        """The hash of the data the fit conditioned on (`layout`), None in older records."""
        return self.meta.get("data_sha256")

    @property
    def pointwise_meta(self) -> Optional[dict]:
        """``run.json``'s ``pointwise`` entry (kind, chains, draws, shapes), or None."""
        return self.meta.get("pointwise")

    def observed(self) -> dict:
        """``observed.npz``: the observed values by site, ``group.NAME`` grouping indices."""
        return self._npz(layout.OBSERVED)

    def _pointwise_chunks(self) -> dict:
        """``{chain: [(start, path), ...]}`` of the complete pointwise chunk files."""
        folder = self.path / layout.POINTWISE_DIR
        per: dict = {}
        if not folder.is_dir():
            return per
        for p in folder.glob("c*-*.npz"):
            name = p.name[:-4]
            try:
                chain, start = name[1:].split("-")
                key = (int(chain), int(start))
            except ValueError:
                continue  # a temp file (a writer killed mid-write), or not ours
            per.setdefault(key[0], []).append((key[1], p))
        return {c: sorted(v) for c, v in sorted(per.items())}

    def _pointwise(self, prefix: Optional[str]) -> dict:
        """Arrays of the pointwise chunks whose key starts with `prefix` (all when None;
        keys kept), ``(chains, draws, *shape)``: chains cut to the shortest one."""
        import numpy as np
        per = self._pointwise_chunks()
        if not per:
            return {}
        chains = []
        for c, files in per.items():
            parts: dict = {}
            expected = 0
            for start, path in files:
                if start != expected:
                    break  # a gap (a chunk not written): keep the prefix that is whole
                try:
                    with np.load(path, allow_pickle=False) as f:
                        arrays = {k: f[k] for k in f.files
                                  if prefix is None or k.startswith(prefix)}
                        n = len(f[f.files[0]]) if f.files else 0
                except (OSError, ValueError) as exc:
                    raise RunRecordError(f"{path}: unreadable: {exc}") from None
                for k, v in arrays.items():
                    parts.setdefault(k, []).append(v)
                expected = start + n
            chains.append({k: np.concatenate(v) for k, v in parts.items()})
        keys = set(chains[0])
        for ch in chains[1:]:
            keys &= set(ch)
        n = min(len(next(iter(ch.values()))) for ch in chains if ch) if keys else 0
        return {k: np.stack([ch[k][:n] for ch in chains]) for k in sorted(keys)}

    def log_likelihood(self) -> dict:
        """``{site: (chains, draws, *shape)}``: the pointwise log-likelihood (float32)."""
        p = layout.LOG_LIK_PREFIX
        return {k[len(p):]: v for k, v in self._pointwise(p).items()}

    def predictive(self) -> dict:
        """``{site: (chains, draws, *shape)}``: the predictive replicates of the observed
        values (posterior, or prior for a ``--method prior`` run)."""
        p = layout.Y_REP_PREFIX
        return {k[len(p):]: v for k, v in self._pointwise(p).items()}

    def predict(self, data, **options):
        """Draws of the program's observed sites (and recorded quantities) at new data
        `data` (a data file or a mapping of arrays), from this run's draws: a
        `qvr.inference.front.predict.Prediction` (``.draws``/``.recorded``: ``{name: (chains,
        draws, *shape)}``, ``.summary``); `options`: ``draws``, ``seed``, ``run_dir`` (write
        a record, method ``predict``), ``program``.  The computation (torch) lives in
        `qvr.inference.front.predict`, above this reader, which asks `qvr.record_analyses` for it
        (set by the root package `qvr`)."""
        return analysis("predict")(self, data, **options)

    def importance(self) -> dict:
        """SVI: ``{"log_p", "log_q"}`` per draw ``(1, draws)``; {} for other methods."""
        return {k: v for k, v in self._pointwise(None).items() if k in ("log_p", "log_q")}

    def loo(self) -> Optional[dict]:
        """PSIS-LOO of the run (``loo.json``; computed from the pointwise terms — not
        written — when the record has them but not the file, e.g. a fit killed before its
        checks); None without pointwise terms.  Fields: `qvr.inference.criticism.checks`."""
        found = self._json(layout.LOO)
        if found is not None:
            return found
        return analysis("loo")(self)

    def ppc(self) -> Optional[dict]:
        """The predictive checks (``ppc.json``; computed like `loo` when absent)."""
        found = self._json(layout.PPC)
        if found is not None:
            return found
        return analysis("ppc")(self)

    @property
    def sequences(self) -> Optional[dict]:
        return self._json(layout.SEQUENCES)

    @property
    def error(self) -> Optional[str]:
        p = self.path / layout.ERROR
        return p.read_text(encoding="utf-8") if p.exists() else None

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"


def _plain_name(k: str) -> str:
    """A draws key without the recorded-quantity prefix (``recorded.theta`` -> ``theta``)."""
    return k[len(layout.RECORDED_PREFIX):] if k.startswith(layout.RECORDED_PREFIX) else k


def open_run(path) -> Run:
    """The run record in folder `path` (raises `RunRecordError` when it is not one)."""
    return Run(path)


def list_runs(root="runs", program: Optional[str] = None) -> list[Run]:
    """The readable records under `root`, newest first; with `program`, only runs of that
    program file (compared as resolved paths)."""
    root = Path(root)
    if not root.is_dir():
        return []
    want = str(Path(program).resolve()) if program else None
    out = []
    for p in root.iterdir():
        if not (p / layout.RUN_JSON).is_file():
            continue
        try:
            run = Run(p)
        except RunRecordError:
            continue
        if want is not None and run.program.get("path") != want:
            continue
        out.append(run)
    out.sort(key=lambda r: (r.started, r.path.name), reverse=True)
    return out


def _pid_alive(pid) -> bool:  # pragma: no cover - non-POSIX fallback
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
