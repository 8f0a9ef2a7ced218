"""`qvr check PATH...`: diagnostics for .qvr files (text or JSON).

Exit status: 0 no errors (warnings allowed), 1 errors found, 2 usage or I/O errors
(an unreadable file is reported and the other files are still checked).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def collect(paths: list[str]) -> tuple[list[Path], list[str]]:
    """Expand files and directories (``*.qvr`` recursively); missing paths become problems."""
    files, problems = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(q for q in path.rglob("*.qvr") if q.is_file()))
        elif path.exists():
            files.append(path)
        else:
            problems.append(f"{p}: no such file or directory")
    return files, problems


def read_source(f: Path, tool: str):
    """The file's text with its line ends as they are (no newline translation: a lone
    `\r` or a `\r\n` stays, so positions are those an editor and the language server
    see), or None after printing a clear message."""
    try:
        with open(f, encoding="utf-8", newline="") as fh:
            return fh.read()
    except UnicodeDecodeError as exc:
        print(f"{tool}: {f}: cannot read file: not UTF-8 text ({exc.reason} at byte {exc.start})",
              file=sys.stderr)
    except OSError as exc:
        print(f"{tool}: {f}: cannot read file: {exc.strerror}", file=sys.stderr)
    return None


def register(sub) -> None:
    p = sub.add_parser("check", help="check .qvr files for errors and warnings")
    p.add_argument("paths", nargs="+", help="files or directories (searched for *.qvr)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def run(args) -> int:
    from qvr.analysis import Document
    from qvr.diagnostics import render_text

    files, problems = collect(args.paths)
    status = 0
    report = []
    for msg in problems:
        print(f"qvr check: {msg}", file=sys.stderr)
        status = 2
    n_err = n_warn = checked = 0
    for f in files:
        text = read_source(f, "qvr check")
        if text is None:
            status = 2
            continue
        checked += 1
        doc = Document(text, str(f))
        diags = doc.diagnostics()
        n_err += sum(d.is_error for d in diags)
        n_warn += sum(not d.is_error for d in diags)
        if args.format == "json":
            items = []
            for d in diags:
                s, e = doc.position(d.span.start), doc.position(d.span.end)
                items.append({"code": d.code, "severity": str(d.severity), "message": d.message,
                              "range": {"start": {"line": s.line, "character": s.character},
                                        "end": {"line": e.line, "character": e.character}}})
            report.append({"path": str(f), "diagnostics": items})
        elif diags:
            print(render_text(str(f), doc.text, diags, doc.line_index))
    if args.format == "json":
        print(json.dumps({"files": report}, indent=2))
    else:
        summary = f"checked {checked} file{'s' if checked != 1 else ''}: {n_err} error" \
                  f"{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}"
        print(summary, file=sys.stderr)
    if status == 2:
        return 2
    return 1 if n_err else 0


