"""Exceptions raised by the QVR runtime, with the facts of each failure as attributes.

Two groups:

* load-time errors (`ParseError`, `CompileError`): a module that the front end rejects, or
  that this runtime cannot compile (QVR950, `from_data` problems).  They carry the list of
  diagnostics as `.diagnostics` and their rendered lines (`file:line:col: error[CODE]:
  message`) as `.lines`; `str()` lists every line.
* run-time errors (`QvrRuntimeError` subclasses): bad inputs or observations.  Each keeps
  `program`, `step`, `site`, `morphism`, `expected` and `actual` as attributes; the
  message is composed from them, so context added while the error propagates (the
  program and step it happened in) shows up in `str()`.  Each also derives from the
  builtin class a caller would expect (`ValueError`, `TypeError`, `KeyError`), as the
  runtime spec requires (e.g. a missing value is a `KeyError`).

This module does not decide *when* to raise: that is the job of `qvr.runtime.values`
(input coercion) and of the program executor.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence


class QvrError(Exception):
    """Base class of every exception the qvr runtime raises on purpose."""


# ---------------------------------------------------------------- load time

class QvrLoadError(QvrError):
    """A module could not be loaded; `.diagnostics` lists why (one entry per error)."""

    def __init__(self, path: str, diagnostics: Sequence, lines: Sequence[str]):
        self.path = path
        self.diagnostics = list(diagnostics)
        self.lines = list(lines)
        n = len(self.lines)
        head = f"{path}: {n} error{'s' if n != 1 else ''}; nothing was compiled"
        super().__init__("\n".join([head, *self.lines]))

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


class ParseError(QvrLoadError):
    """At least one lexical or syntactic error (QVR001-QVR009)."""


class CompileError(QvrLoadError):
    """Checking errors (names, types, ...) or a runtime compile failure (QVR950, data)."""


# ---------------------------------------------------------------- run time

class QvrRuntimeError(QvrError):
    """A failure while running a compiled program, described by attributes.

    `what` is the one-line description of the problem; `program`, `step`, `site` and
    `morphism` locate it; `expected` and `actual` are the two sides of a mismatch.
    """

    def __init__(self, what: str, *, program: Optional[str] = None, step: Optional[str] = None,
                 site: Optional[str] = None, morphism: Optional[str] = None,
                 expected: Any = None, actual: Any = None, **facts):
        self.what = what
        self.program = program
        self.step = step
        self.site = site
        self.morphism = morphism
        self.expected = expected
        self.actual = actual
        self.facts = facts
        for k, v in facts.items():
            setattr(self, k, v)
        super().__init__(what)

    def add_context(self, *, program: Optional[str] = None, step: Optional[str] = None,
                    site: Optional[str] = None) -> "QvrRuntimeError":
        """Fill in the location fields that are still empty (inner context wins)."""
        if self.program is None and program is not None:
            self.program = program
        if self.step is None and step is not None:
            self.step = step
        if self.site is None and site is not None:
            self.site = site
        return self

    def location(self) -> str:
        parts = []
        if self.program is not None:
            parts.append(f"program `{self.program}`")
        if self.step is not None:
            parts.append(f"step `{self.step}`")
        if self.site is not None and self.site != self.step:
            parts.append(f"site `{self.site}`")
        if self.morphism is not None:
            parts.append(f"morphism `{self.morphism}`")
        return ", ".join(parts)

    def __str__(self) -> str:
        loc = self.location()
        msg = f"{loc}: {self.what}" if loc else self.what
        if self.expected is not None or self.actual is not None:
            msg += f" (expected {self.expected}, got {self.actual})"
        return msg


class InputShapeError(QvrRuntimeError, ValueError):
    """An input or value has the wrong rank or width."""


class InputDtypeError(QvrRuntimeError, TypeError):
    """An input has the wrong dtype (e.g. non-integral floats where indices are expected)."""


class IndexRangeError(QvrRuntimeError, ValueError):
    """Index values (token ids, classes) outside `[0, n)`."""


class ObservationShapeError(QvrRuntimeError, ValueError):
    """A supplied site value cannot be coerced to the site's shape (runtime spec 5.7)."""


class PlateRowsError(QvrRuntimeError, ValueError):
    """The arguments of a plate site `sample v : I <- F(args)` have a leading size other
    than |I| (runtime spec 5.3: they broadcast against the plate's leading |I| axis), e.g.
    host data with one row per data row where the plate is longer than the rows.
    Facts: `plate` (|I|), `plate_name`, `rows` (the arguments' leading size)."""


class UnknownSiteError(QvrRuntimeError, KeyError):
    """An observations key that is neither a variable of the program nor host data it reads."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return QvrRuntimeError.__str__(self)


class MissingValueError(QvrRuntimeError, KeyError):
    """A value the computation needs was not supplied (a site in `log_joint`, host data)."""

    def __str__(self) -> str:
        return QvrRuntimeError.__str__(self)


class IncompatibleMorphismsError(QvrRuntimeError, TypeError):
    """Morphisms combined from Python whose types or algebras do not fit."""


class PositionLimitError(QvrRuntimeError, ValueError):
    """A sequence longer than the learned positions of an embed (`positions=N`, design E3).

    Facts: `limit` (N) and `length` (the sequence's length)."""

    def __init__(self, *, morphism: str, limit: int, length: int, **kw):
        super().__init__(f"a sequence of {length} positions is longer than the {limit} "
                         f"positions it learned (`positions={limit}`)", morphism=morphism,
                         expected=f"at most {limit} positions", actual=f"length {length}",
                         limit=limit, length=length, **kw)


class NamedInMessage:
    """Mixin for errors whose message itself starts with the morphism ("`ln` is
    deterministic: ..."): the location prefix leaves the morphism out, so it is not
    named twice."""

    def location(self) -> str:
        saved, self.morphism = self.morphism, None
        try:
            return super().location()
        finally:
            self.morphism = saved


class DeterministicError(NamedInMessage, QvrRuntimeError, ValueError):
    """`log_prob` of a deterministic morphism (attention without a family, `layer_norm`,
    `rms_norm`, `residual` of a deterministic morphism, chains ending in one): it has no
    density (design E4).  The front end reports an observed deterministic target before
    run time; this error is for Python callers."""

    HINT = ("it has no density; end the chain with a kernel or give the attention a family "
            "(`~ Normal`)")

    def __init__(self, *, morphism: str, **kw):
        super().__init__(f"`{morphism}` is deterministic: {self.HINT}", morphism=morphism, **kw)
