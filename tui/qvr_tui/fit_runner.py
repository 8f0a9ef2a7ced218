"""`FitRunner`: runs one fit in a worker process and follows its run record.

The worker is the headless command line, a new process (not a fork of the UI):

    python -m qvr.cli run FILE --method M --config CFG.json --run-dir DIR
                             [--from RUN] [--export NAME]

started with ``start_new_session=True`` (so a Ctrl-C typed in the terminal never reaches
it: only the dashboard's cancel does), its stdout and stderr going to files in a private
temporary folder.  It writes the run record into DIR; `poll()` returns what it appended
since the last call (`qvr.runs.Tail.poll`, complete lines only).  The UI calls `poll()`
from a ~10 Hz timer on its own thread: nothing here blocks or uses threads.

`cancel()` sends SIGINT (the fit stops after the current step, saves everything and ends
the record with `FitCancelled`); a second `cancel()` sends SIGINT again (the worker aborts
at once).  When the worker has exited and the record has no terminal event, the run is
*interrupted*: `outcome` says so with the exit status and the last lines of its stderr
(a worker that could not start — a bad data file, an unwritable run folder — leaves no
record at all, only its message).

Torch-free: imports `qvr.runs`, `qvr.inference.config` and the prefix of `qvr run`'s
plain progress lines (`qvr.events.PLAIN_PREFIX`: left out of the stderr shown as a
failure's cause); nothing of `qvr.commands`, which opens the dashboard.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from qvr.events import PLAIN_PREFIX, FitEvent
from qvr.inference.config import FitConfig

__all__ = ["FitRequest", "FitRunner", "worker_command"]

STDERR_TAIL_LINES = 12


@dataclass
class FitRequest:
    """What to fit: a program file, its export, the options and where the record goes."""

    program: str
    config: FitConfig
    run_dir: str
    export: Optional[str] = None
    start_from: Optional[str] = None
    vocab: Optional[list] = field(default=None, repr=False)
    vocab_path: Optional[str] = None  # the file `vocab` came from (given to the worker)


def worker_command(req: FitRequest, config_path: str, python: str = sys.executable) -> list[str]:
    cmd = [python, "-m", "qvr.cli", "run", str(req.program), "--method", req.config.method,
           "--config", str(config_path), "--run-dir", str(req.run_dir)]
    if req.start_from:
        cmd += ["--from", str(req.start_from)]
    if req.export:
        cmd += ["--export", req.export]
    if req.vocab_path:
        cmd += ["--vocab", str(req.vocab_path)]
    return cmd


class FitRunner:
    """One worker process and the record it writes (see the module docstring)."""

    def __init__(self, request: FitRequest, python: str = sys.executable,
                 env: Optional[dict] = None) -> None:
        self.request = request
        self.python = python
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self.tail = None
        self.run = None
        self.cancel_requests = 0
        self.exit_code: Optional[int] = None
        self.outcome: Optional[str] = None  # None while running; then a status word
        self.message = ""
        self.terminal: Optional[FitEvent] = None
        self.tmp = Path(tempfile.mkdtemp(prefix="qvr-dash-"))
        self.stdout_path = self.tmp / "worker.out"
        self.stderr_path = self.tmp / "worker.err"

    @property
    def run_dir(self) -> Path:
        return Path(self.request.run_dir)

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.outcome is None

    def start(self) -> "FitRunner":
        cfg_path = self.tmp / "config.json"
        cfg_path.write_text(json.dumps(self.request.config.to_dict()), encoding="utf-8")
        cmd = worker_command(self.request, str(cfg_path), self.python)
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, env=env,
                                         close_fds=True)
        return self

    # ------------------------------------------------------------ following
    def poll(self) -> list[FitEvent]:
        """The events appended since the last call; settles `outcome` when the worker is
        gone.  Never blocks."""
        if self.proc is None or self.outcome is not None:
            return []
        code = self.proc.poll()  # before reading: an event written before exit is not missed
        events = self._read()
        if code is not None:
            events += self._read()  # what was flushed at the very end
            self.exit_code = code
            self._settle(code)
        return events

    def _read(self) -> list[FitEvent]:
        if self.tail is None:
            if not (self.run_dir / "run.json").exists():
                return []
            from qvr.runs import RunRecordError, open_run
            try:
                self.run = open_run(self.run_dir)
            except RunRecordError:
                return []  # run.json is being written
            self.tail = self.run.tail()
        out = self.tail.poll()
        if self.tail.terminal is not None:
            self.terminal = self.tail.terminal
        return out

    def _settle(self, code: int) -> None:
        from qvr.events import FitCancelled, FitFailed, FitFinished
        t = self.terminal
        if isinstance(t, FitFinished):
            self.outcome, self.message = "finished", ""
        elif isinstance(t, FitCancelled):
            self.outcome = "cancelled"
            self.message = f"cancelled at step {t.step}" if t.step is not None else "cancelled"
        elif isinstance(t, FitFailed):
            self.outcome = "failed"
            self.message = t.message
        elif self.tail is None:
            self.outcome = "failed"
            self.message = self._start_failure(code)
        else:
            self.outcome = "interrupted"
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            tail = self.stderr_tail()
            self.message = f"the worker stopped ({how}) without finishing the record" + \
                (f": {tail}" if tail else "")

    def _start_failure(self, code: int) -> str:
        tail = self.stderr_tail()
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return tail or f"the worker stopped before writing a record ({how})"

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        """The last meaningful lines of the worker's stderr (progress bars dropped)."""
        try:
            data = self.stderr_path.read_bytes()[-16384:].decode("utf-8", "replace")
        except OSError:
            return ""
        keep = []
        for line in data.replace("\r", "\n").splitlines():
            line = line.strip()
            if not line or line.startswith("qvr run: run folder") or \
                    line.startswith("qvr run: results in") or \
                    line.startswith(PLAIN_PREFIX) or "stopping after this step" in line:
                continue
            keep.append(line)
        return "\n".join(keep[-lines:])

    # ------------------------------------------------------------ control
    def cancel(self) -> bool:
        """SIGINT to the worker (the first stops it cleanly, a second aborts).  False when
        there is nothing running."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        self.cancel_requests += 1
        try:
            os.kill(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL (tests and the last resort: the record is then `interrupted`)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
