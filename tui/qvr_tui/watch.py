"""Reload on save: follow one file with `watchfiles.awatch` and hand over its new text.

`watch_file(path, on_text, on_ready, stop_event)` is a coroutine for a Textual async worker
(`widget.run_worker(watch_file(...), group="watch", exclusive=True)`).  It watches the
file's *directory* (not the file), so editors that save by writing a temporary file and
renaming it over the original (vim, many IDEs) are seen too, and keeps only changes whose
path is the file.  `watchfiles` groups a burst of events and yields `step_ms` after the
last one (capped at `debounce_ms`); the text is then read and passed to `on_text`
(awaited when it is a coroutine) only when it differs from the last text handed over, so a
touch or a save without changes re-checks nothing.  A file that is missing for a moment
(between an editor's delete and rename) is skipped until it is back.  `on_ready` is
called once the watcher is running (tests wait for it instead of sleeping); `on_error`
gets a message naming the file when it cannot be read (not UTF-8, no permission).

It does no checking itself: the caller re-checks (see `qvr_tui.screens.program`).
"""
from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path
from typing import Awaitable, Callable, Optional, Union

from watchfiles import Change, awatch

from qvr_tui.program_model import read_program

__all__ = ["watch_file", "DEBOUNCE_MS", "STEP_MS"]

DEBOUNCE_MS = 200  # the longest a burst of events is grouped
STEP_MS = 30  # quiet time after the last event before the burst is handed over
_TICK_MS = 250  # the watcher wakes this often (readiness signal and stop checks)


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b
    except OSError:
        return False


async def watch_file(path, on_text: Callable[[str], Union[None, Awaitable[None]]],
                     on_ready: Optional[Callable[[], None]] = None, stop_event=None,
                     initial_text: Optional[str] = None,
                     on_error: Optional[Callable[[str], None]] = None) -> None:
    """Call `on_text(text)` after each save of `path` that changes its text (runs until
    cancelled or `stop_event` is set)."""
    target = Path(path).resolve()
    last = hashlib.sha256(initial_text.encode("utf-8")).digest() if initial_text is not None else None
    ready = False

    def mine(change: Change, p: str) -> bool:
        return os.path.basename(p) == target.name and _same_file(p, target)

    async for changes in awatch(target.parent, watch_filter=mine, debounce=DEBOUNCE_MS, step=STEP_MS,
                                stop_event=stop_event, rust_timeout=_TICK_MS, yield_on_timeout=True,
                                recursive=False):
        if not ready:
            ready = True
            if on_ready is not None:
                on_ready()
        if not changes:
            continue
        try:
            text = read_program(target)
        except FileNotFoundError:
            continue  # between an editor's delete and rename: the next event brings it back
        except UnicodeDecodeError as exc:
            if on_error is not None:
                on_error(f"{path}: cannot read file: not UTF-8 text ({exc.reason} at byte {exc.start})")
            continue
        except OSError as exc:
            if on_error is not None:
                on_error(f"{path}: cannot read file: {exc.strerror}")
            continue
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        if digest == last:
            continue
        last = digest
        result = on_text(text)
        if inspect.isawaitable(result):
            await result
