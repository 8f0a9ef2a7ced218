"""Constructors for the diagnostics of `deduction` declarations (qvr-language.md section 10).

One function per diagnostic; messages follow the catalogue of section 12 (lower-case start,
QVR names in backticks, no trailing period, "did you mean" suffix from `suggest`).  Spans
are relative to the deduction's chunk.  Diagnostics that carry a suggestion record it in
``data`` as ``(("suggest", name),)`` for quick fixes, like the syntax diagnostics do.
"""
from __future__ import annotations

from typing import Optional

from qvr.diagnostics import Diagnostic, Related, error, warning
from qvr.sema.families import SEMIRINGS
from qvr.sema.suggest import did_you_mean
from qvr.syntax.errors import outside_core
from qvr.text import Span


def _data(suggestion: Optional[str]) -> tuple:
    return (("suggest", suggestion),) if suggestion else ()


# ---------------------------------------------------------------- options (QVR2xx)

def unknown_option(span: Span, key: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR201 at the key."""
    return error("QVR201", span, f"unknown option `{key}` for a deduction{did_you_mean(suggestion)}",
                 data=_data(suggestion))


def option_outside_core(span: Span, key: str) -> Diagnostic:
    """QVR900 at the key: `max_iterations`, `axioms`, `signature`, `encoder`."""
    return outside_core(span, f"option `{key}`")


def option_value_outside_core(span: Span, text: str) -> Diagnostic:
    """QVR900 at the value: an option value `f(…)` (outside the core in every position)."""
    return outside_core(span, f"the option value `{text}(…)`")


def duplicate_option(span: Span, key: str) -> Diagnostic:
    """QVR202 at the second key."""
    return error("QVR202", span, f"option `{key}` is given more than once")


def option_wrong_shape(span: Span, key: str, expected: str) -> Diagnostic:
    """QVR203 at the key; `expected` is e.g. "an integer", "a number", "a name"."""
    return error("QVR203", span, f"option `{key}` expects {expected}")


def unknown_semiring(span: Span, value: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR204 at the value."""
    return error("QVR204", span,
                 f"unknown semiring `{value}`; expected one of {', '.join(SEMIRINGS)}"
                 f"{did_you_mean(suggestion)}", data=_data(suggestion))


def option_below(span: Span, key: str, minimum: str, got: str) -> Diagnostic:
    """QVR205: `depth` or `tolerance` below its minimum."""
    return error("QVR205", span, f"`{key}` must be at least {minimum}, got {got}")


# ---------------------------------------------------------------- pragmas

def unknown_pragma(span: Span, key: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR201 at the pragma entry's key."""
    return error("QVR201", span, f"unknown pragma `{key}`{did_you_mean(suggestion)}",
                 data=_data(suggestion))


def pragma_not_for_lexicon(span: Span, key: str) -> Diagnostic:
    """QVR201: a rule-only pragma entry (`bounded`) on a lexicon entry."""
    return error("QVR201", span, f"pragma `{key}` does not apply to a lexicon entry")


def duplicate_pragma(span: Span, key: str) -> Diagnostic:
    """QVR202 at the second entry."""
    return error("QVR202", span, f"pragma `{key}` is given more than once")


def pragma_flag_value(span: Span, key: str) -> Diagnostic:
    """QVR203 at the key of a flag written with a value (`#[learnable=1]`)."""
    return error("QVR203", span, f"pragma flag `{key}` takes no value")


def pragma_outside_core(span: Span, key: str) -> Diagnostic:
    """QVR900 at the key: `parent=…`."""
    return outside_core(span, f"the pragma `{key}`")


def bounded_without_learnable(span: Span) -> Diagnostic:
    """QVR708 (warning) at the `bounded` entry."""
    return warning("QVR708", span, "`bounded` has no effect without `learnable`")


# ---------------------------------------------------------------- body entries

def duplicate_atom(span: Span, name: str, what: str = "atom") -> Diagnostic:
    """QVR710 (warning) at the second occurrence; `what` is "atom" or "binder"."""
    return warning("QVR710", span, f"{what} `{name}` is declared more than once")


def duplicate_rule(span: Span, name: str, first: Span) -> Diagnostic:
    """QVR104 at the later rule name.

    The catalogue's form is "`A` is already declared on line 3", but a deduction body is
    checked on chunk-relative spans and cached independently of where the chunk sits in
    the file, so an absolute line number would go stale when lines are inserted above it.
    The first declaration is given as a related location instead.
    """
    return error("QVR104", span, f"`{name}` is already declared in this deduction",
                 related=(Related(first, "first declared here"),))


def lexicon_file(span: Span) -> Diagnostic:
    """QVR900 at the `lexicon` keyword of `lexicon from "file"`."""
    return outside_core(span, "`lexicon from` files", plural=True)


# ---------------------------------------------------------------- rules (QVR501, QVR704, QVR705)

def undeclared_constructor(span: Span, name: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR501 at the head of an application in a rule pattern."""
    return error("QVR501", span,
                 f"constructor `{name}` is not declared in `atoms` or `binders`{did_you_mean(suggestion)}",
                 data=_data(suggestion))


def lower_case_variable(span: Span, name: str) -> Diagnostic:
    """QVR704 (warning) at the first occurrence of a lower-case pattern variable."""
    return warning("QVR704", span,
                   f"`{name}` is not a declared atom, so it is a pattern variable; "
                   f"did you forget to list it in `atoms`?")


def suspicious_singleton(span: Span, name: str, rule: str, resembles: str) -> Diagnostic:
    """QVR705 (warning) at the only occurrence of a pattern variable."""
    return warning("QVR705", span,
                   f"pattern variable `{name}` occurs only once in rule `{rule}` and resembles "
                   f"`{resembles}`; is it a misspelling?", data=_data(resembles))


# ---------------------------------------------------------------- lexicon (QVR502-QVR504)

def non_atom_in_category(span: Span, name: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR502 at the name."""
    return error("QVR502", span,
                 f"`{name}` in a lexicon category is not a declared atom{did_you_mean(suggestion)}",
                 data=_data(suggestion))


def category_star(span: Span) -> Diagnostic:
    return outside_core(span, "the lexicon category `*`")


def category_set(span: Span) -> Diagnostic:
    return outside_core(span, "lexicon categories `{…}`", plural=True)


def unresolved_lf_name(span: Span, name: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR503 at a NAME or application head of a logical form."""
    return error("QVR503", span,
                 f"`{name}` in a logical form is neither a declared atom nor a bound variable"
                 f"{did_you_mean(suggestion)}", data=_data(suggestion))


def bound_variable_applied(span: Span, name: str) -> Diagnostic:
    """QVR503 at the head: a bound variable used as an application head."""
    return error("QVR503", span,
                 f"`{name}` is a bound variable; only atoms and binders can be applied in a logical form")


def malformed_binder(span: Span, name: str) -> Diagnostic:
    """QVR504 at the binder name."""
    return error("QVR504", span, f"binder `{name}` needs a variable name as first argument and a body")


def lf_outside_core(span: Span, construct: str) -> Diagnostic:
    """QVR900: a logical form other than a name or an application (`construct` is a noun phrase)."""
    return outside_core(span, f"{construct} in a logical form")


# ---------------------------------------------------------------- start (QVR505)

def start_not_atom(span: Span, name: str, suggestion: Optional[str]) -> Diagnostic:
    """QVR505 at the value of `start`."""
    return error("QVR505", span,
                 f"start symbol `{name}` is not a declared atom{did_you_mean(suggestion)}",
                 data=_data(suggestion))
