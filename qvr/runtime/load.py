"""`load` / `loads`: check a module with the front end, then compile it (runtime spec 2.1).

Nothing is compiled when the front end reports an error: one exception lists every error
diagnostic as `file:line:col: error[CODE]: message` (`ParseError` if any of them is
lexical or syntactic, QVR001-QVR009; `CompileError` otherwise).  Failures of the runtime
itself (QVR950, `from_data` problems) also raise `CompileError`.  Warnings never prevent
loading.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from qvr.runtime.compile import compile_module
from qvr.runtime.errors import CompileError, ParseError
from qvr.runtime.program import Program
from qvr.sema.typed import typed_module

_SYNTAX_CODES = {f"QVR{i:03d}" for i in range(1, 11)}  # QVR010: nested too deeply


def _looks_like_path(s: str) -> bool:
    if "\n" in s:
        return False
    return s.endswith(".qvr") or os.path.exists(s)


def load(path_or_source: Union[str, os.PathLike], *, data: Optional[dict] = None) -> Program:
    """Load a QVR module from a file path, or from source text.

    A `Path`, or a one-line string that ends in `.qvr` or names an existing file, is read as
    a path; any other string is QVR source (`loads`).
    """
    if isinstance(path_or_source, os.PathLike) or (
            isinstance(path_or_source, str) and _looks_like_path(path_or_source)):
        with open(Path(path_or_source), encoding="utf-8", newline="") as fh:
            text = fh.read()  # line ends as they are: positions as `qvr check` reports them
        return loads(text, data=data, path=str(path_or_source))
    return loads(str(path_or_source), data=data)


def loads(source: str, *, data: Optional[dict] = None, path: str = "<string>") -> Program:
    """Load a QVR module from source text (`path` is used in messages)."""
    tm = typed_module(source, path)
    errors = tm.errors
    if errors:
        lines = [tm.format_diagnostic(d) for d in errors]
        cls = ParseError if any(d.code in _SYNTAX_CODES for d in errors) else CompileError
        raise cls(path, errors, lines)
    compiled = compile_module(tm, data)
    if compiled.diagnostics:
        diags = sorted(compiled.diagnostics, key=lambda d: (d.span.start, d.code))
        raise CompileError(path, diags, [tm.format_diagnostic(d) for d in diags])
    return Program(compiled.exports, compiled.values, compiled.deductions, path, source)
