"""The `qvr` command line: `qvr check` now; `run`, `lsp`, `dash` and `fmt` come later.

Heavy imports (torch, pygls, textual) are deferred into the command functions so that
`qvr check` stays fast.  Exit status: 0 no errors, 1 errors found, 2 usage or I/O errors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _collect(paths: list[str]) -> tuple[list[Path], list[str]]:
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


def cmd_check(args) -> int:
    from qvr.analysis import Document
    from qvr.diagnostics import render_text

    files, problems = _collect(args.paths)
    status = 0
    report = []
    for msg in problems:
        print(f"qvr check: {msg}", file=sys.stderr)
        status = 2
    n_err = n_warn = checked = 0
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"qvr check: {f}: cannot read file: {exc.strerror if isinstance(exc, OSError) else exc}",
                  file=sys.stderr)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="qvr", description="The QVR toolchain")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check .qvr files for errors and warnings")
    p.add_argument("paths", nargs="+", help="files or directories (searched for *.qvr)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_check)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("qvr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
