"""`qvr fmt [--check] [--diff] PATH...`: rewrite .qvr files in the canonical style.

Without options each file that is not canonical is rewritten in place (atomically: a
temporary file in the same directory, then `os.replace`) and listed.  `--check` changes
nothing and lists the files that would change; `--diff` prints what would change as a
unified diff and changes nothing.  A statement with a syntax error is left as written and
named in a warning (`file:line`); the rest of its file is still formatted.  The style
itself is `qvr.syntax.format`'s.

Exit status: 0 success (with --check: every file already canonical), 1 with --check or
--diff: some file would change, 2 a path was missing or a file could not be read or
written (the other files are still processed).
"""
from __future__ import annotations

import difflib
import os
import stat
import sys
import tempfile
from pathlib import Path

from qvr.commands.check import collect, read_source

TOOL = "qvr fmt"


def register(sub) -> None:
    p = sub.add_parser("fmt", help="format .qvr files in the canonical style")
    p.add_argument("paths", nargs="+", help="files or directories (searched for *.qvr)")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if some file is not formatted")
    p.add_argument("--diff", action="store_true",
                   help="change nothing; print the changes as a unified diff")
    p.set_defaults(func=run)


def _write_atomic(f: Path, text: str) -> bool:
    """Replace `f` by `text` through a temporary file in the same directory."""
    tmp = None
    try:
        mode = stat.S_IMODE(os.stat(f).st_mode)
        fd, tmp = tempfile.mkstemp(dir=f.parent, prefix=f".{f.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, f)
        return True
    except OSError as exc:
        print(f"{TOOL}: {f}: cannot write file: {exc.strerror or exc}", file=sys.stderr)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def _skipped_lines(text: str, result, written: bool) -> list[int]:
    """1-based line of each skipped statement in the file as it is after the command."""
    lines = []
    pos = 0
    for span in result.skipped:
        line = text.count("\n", 0, span.start) + 1
        if written:  # the statement is in the output verbatim (line ends aside), in order
            piece = text[span.start:span.end].replace("\r\n", "\n")
            k = result.text.find(piece, pos)
            if k >= 0:
                line = result.text.count("\n", 0, k) + 1
                pos = k + len(piece)
        lines.append(line)
    return lines


def run(args) -> int:
    from qvr.syntax.format import format_text

    files, problems = collect(args.paths)
    status = 0
    for msg in problems:
        print(f"{TOOL}: {msg}", file=sys.stderr)
        status = 2
    write = not (args.check or args.diff)
    changed = unchanged = 0
    for f in files:
        text = read_source(f, TOOL)
        if text is None:
            status = 2
            continue
        result = format_text(text)
        written = False
        if result.changed:
            changed += 1
            if args.diff:
                sys.stdout.writelines(difflib.unified_diff(
                    text.splitlines(keepends=True), result.text.splitlines(keepends=True),
                    str(f), f"{f} (formatted)"))
            if write:
                written = _write_atomic(f, result.text)
                if written:
                    print(f"reformatted {f}")
                else:
                    status = 2
            elif args.check:
                print(f"would reformat {f}")
        else:
            unchanged += 1
        for line in _skipped_lines(text, result, written):
            print(f"{f}:{line}: warning: statement left as written: it has a syntax error "
                  f"or is outside the core (see `qvr check {f}`)", file=sys.stderr)
    s = lambda n: "" if n == 1 else "s"  # noqa: E731
    if write:
        print(f"{changed} file{s(changed)} reformatted, {unchanged} file{s(unchanged)} "
              f"left unchanged", file=sys.stderr)
    else:
        print(f"{changed} file{s(changed)} would be reformatted, {unchanged} file{s(unchanged)} "
              f"already formatted", file=sys.stderr)
    if status == 2:
        return 2
    return 1 if changed and not write else 0
