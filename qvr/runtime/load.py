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
from qvr.runtime.sizes import (Binding, SizedExport, UnboundProgram, bind_types, export_kinds,
                               resolve_sizes, size_objects)
from qvr.sema.typed import typed_module

_SYNTAX_CODES = {f"QVR{i:03d}" for i in range(1, 11)}  # QVR010: nested too deeply


def _looks_like_path(s: str) -> bool:
    if "\n" in s:
        return False
    return s.endswith(".qvr") or os.path.exists(s)


def load(path_or_source: Union[str, os.PathLike], *, data: Optional[dict] = None,
         sizes: Optional[dict] = None):
    """Load a QVR module from a file path, or from source text.

    A `Path`, or a one-line string that ends in `.qvr` or names an existing file, is read as
    a path; any other string is QVR source (`loads`).
    """
    if isinstance(path_or_source, os.PathLike) or (
            isinstance(path_or_source, str) and _looks_like_path(path_or_source)):
        with open(Path(path_or_source), encoding="utf-8", newline="") as fh:
            text = fh.read()  # line ends as they are: positions as `qvr check` reports them
        return loads(text, data=data, path=str(path_or_source), sizes=sizes)
    return loads(str(path_or_source), data=data, sizes=sizes)


def loads(source: str, *, data: Optional[dict] = None, path: str = "<string>",
          sizes: Optional[dict] = None):
    """Load a QVR module from source text (`path` is used in messages).

    `data` holds the `from_data` tables; a module with sizes read from the data (`object
    Child : FinSet N`, `qvr.runtime.sizes`) takes them from `data` (its `N` entry, or the
    values typed by `Child`) and `sizes` (``{"N": 434}``).  When neither gives them, the
    result is an `UnboundProgram` whose exports `fit` (or `qvr.runtime.bind_sizes`)
    binds with the fit's data."""
    tm = typed_module(source, path)
    errors = tm.errors
    if errors:
        lines = [tm.format_diagnostic(d) for d in errors]
        cls = ParseError if any(d.code in _SYNTAX_CODES for d in errors) else CompileError
        raise cls(path, errors, lines)
    bound = {}
    if size_objects(tm):
        bound = resolve_sizes(tm, data, sizes, require=False)
        if len(bound) < len(size_objects(tm)):  # bound later, with the fit's data
            return UnboundProgram(tm, data, path, source, export_kinds(tm))
    return compile_checked(tm, data, bound, source)


def compile_checked(tm, data: Optional[dict] = None, sizes: Optional[dict] = None,
                    source: Optional[str] = None) -> Program:
    """Compile a checked module (no errors) with its sizes bound to `sizes` (``{N: 434}``,
    `qvr.runtime.sizes`); the `Program` keeps `typed`, `relations` and `sizes`, and each
    export its `qvr_binding`."""
    sizes = dict(sizes or {})
    compiled = compile_module(bind_types(tm, sizes) if sizes else tm, data)
    if compiled.diagnostics:
        diags = sorted(compiled.diagnostics, key=lambda d: (d.span.start, d.code))
        raise CompileError(tm.path, diags, [tm.format_diagnostic(d) for d in diags])
    program = Program(compiled.exports, compiled.values, compiled.deductions, tm.path,
                      source if source is not None else tm.text)
    program.typed, program.relations, program.sizes = tm, dict(data or {}), sizes
    for name, value in program.exports.items():
        if hasattr(value, "__dict__"):  # not registered as a submodule (no module cycle)
            value.__dict__["qvr_binding"] = Binding(tm, dict(data or {}), name, sizes)
    return program


def bind_sizes(program, data: Optional[dict] = None, sizes: Optional[dict] = None):
    """`program` compiled with its sizes read from `data` (and `sizes`, given by the
    user: ``{"N": 100}``); the one place sizes are bound (`qvr.runtime.sizes` resolves
    them; it lives here, beside the compile, so that `sizes` never imports `load`).

    `program` is what `qvr.load` returned — an `UnboundProgram`, or a `Program` already
    bound (re-bound here on other data: another row count, new rows to predict) — or one
    of their exports (a `SizedExport`, or a compiled export, which keeps its module as
    ``qvr_binding``).  The result is of the same kind: a `Program` for a module, the
    export of the new `Program` for an export.  A module without size names is returned
    as it is.  Raises `SizeError` when a size is missing or its sources disagree."""
    name = None
    if isinstance(program, SizedExport):
        tm, relations, name = program.owner.typed, program.owner.relations, program.name
    elif getattr(program, "qvr_binding", None) is not None:
        b = program.qvr_binding
        tm, relations, name = b.typed, b.relations, b.name
    elif getattr(program, "typed", None) is not None:
        tm, relations = program.typed, getattr(program, "relations", None)
    else:
        raise TypeError(f"bind_sizes needs what qvr.load returned (or an export of it), "
                        f"got {type(program).__name__}")
    if not size_objects(tm):
        return program
    out = compile_checked(tm, relations, resolve_sizes(tm, data, sizes))
    return out.exports[name] if name is not None else out
