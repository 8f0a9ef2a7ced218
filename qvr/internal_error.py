"""Internal errors: a bug in a command becomes one message and a saved traceback.

`qvr.cli.main` (and `qvr-lsp`) hand every exception a command did not expect to `report`
(apart from `qvr.commands`, below both the command line and the language server, which
the command line starts):
the traceback goes to a file, never to the terminal, and the user reads one line saying
what failed, where the traceback is and to report it.  Known failures of a program or its
data are not internal errors: commands print those themselves (exit status 1 or 2).

Where the traceback goes: a command that has a run folder says so by setting
``args.internal_error_dir`` (`FOLDER_ATTR`) to it, and the traceback is written there as
``internal-error.txt``; otherwise (or when that folder cannot be written) to a new
temporary file ``qvr-internal-error-*.txt``.

Exit statuses of every `qvr` command: 0 success, 1 errors found (in the program or its
data), 2 usage or I/O problems, 3 internal error, 130 interrupted.
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Optional

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
FOLDER_ATTR = "internal_error_dir"
FILE_NAME = "internal-error.txt"


def _summary(exc: BaseException) -> str:
    """`Type: first line of the message`, short enough for one terminal line."""
    lines = str(exc).strip().splitlines()
    msg = lines[0] if lines else ""
    if len(msg) > 300:
        msg = msg[:297] + "..."
    name = type(exc).__name__
    return f"{name}: {msg}" if msg else name


def _report_text(exc: BaseException, argv) -> str:
    try:  # from the installed metadata: importing `qvr` here would reach the runtime
        from importlib.metadata import version as dist_version
        version = dist_version("qvr")
    except Exception:  # pragma: no cover - not installed: the report is still written
        version = "unknown"
    head = [
        "qvr internal error report",
        f"command: {' '.join(['qvr', *map(str, argv)])}",
        f"qvr {version}, Python {platform.python_version()}, {platform.platform()}",
        "",
    ]
    return "\n".join(head) + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _write(folder: Optional[Path], text: str) -> Optional[Path]:
    if folder is not None:
        try:
            path = Path(folder) / FILE_NAME
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            pass  # fall back to a temporary file
    try:
        fd, name = tempfile.mkstemp(prefix="qvr-internal-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return Path(name)
    except OSError:
        return None


def report(exc: BaseException, args=None, argv=None, stream=None) -> int:
    """Save the traceback of `exc`, print the one-line message and return `EXIT_INTERNAL`.

    `args` is the command's parsed arguments (its `FOLDER_ATTR`, when set, names the run
    folder); `argv` the command line for the report (default ``sys.argv[1:]``)."""
    stream = stream if stream is not None else sys.stderr
    folder = getattr(args, FOLDER_ATTR, None) if args is not None else None
    text = _report_text(exc, sys.argv[1:] if argv is None else argv)
    path = _write(folder, text)
    if path is None:  # nowhere to save it: the traceback is all the user can report
        print(f"qvr: internal error: {_summary(exc)}; the traceback could not be saved, so "
              f"here it is; please report it with this text\n{text}", file=stream)
    else:
        print(f"qvr: internal error: {_summary(exc)}; the traceback is in {path}; "
              f"please report it with that file", file=stream)
    return EXIT_INTERNAL
