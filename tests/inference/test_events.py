"""The fit event API: torch-free, throttling, cancellation, callback isolation."""
import subprocess
import sys
import threading
from pathlib import Path

from qvr.events import (Emitter, FitProgress, FitStarted, StopToken,
                        Throttle)

ROOT = Path(__file__).resolve().parents[2]


def test_events_module_does_not_import_torch():
    code = "import sys, qvr.events; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False", out.stderr


def test_throttle_emits_first_last_and_by_interval():
    t = [0.0]
    th = Throttle(interval=1.0, clock=lambda: t[0])
    due = []
    for step in range(1, 11):
        t[0] = step * 0.3
        due.append(th.due(step, 10))
    # first step, then every >= 1 s (steps 5 and 9 at 1.5 s and 2.7 s), and the last one
    assert [i + 1 for i, d in enumerate(due) if d] == [1, 5, 9, 10]


def test_stop_token_is_thread_safe_callable():
    tok = StopToken()
    assert tok() is False
    th = threading.Thread(target=tok.cancel)
    th.start()
    th.join()
    assert tok() is True and tok.cancelled


def test_emitter_isolates_a_broken_callback():
    seen = []

    def cb(ev):
        seen.append(ev)
        if isinstance(ev, FitProgress):
            raise RuntimeError("boom")

    emit = Emitter(cb)
    emit(FitStarted("svi", 10))
    emit(FitProgress("svi", "optimization", 1, 10))
    emit(FitProgress("svi", "optimization", 2, 10))  # not delivered any more
    assert [type(e).__name__ for e in seen] == ["FitStarted", "FitProgress", "FitWarning"]
    assert "RuntimeError: boom" in seen[-1].message


def test_a_note_round_trips_through_json():
    from qvr.events import FitNote, event_type, from_json, to_json
    e = FitNote("compiling the NUTS transition to C++")
    assert event_type(e) == "note"
    assert from_json(to_json(e)) == e
