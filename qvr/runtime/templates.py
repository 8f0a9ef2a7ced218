"""Parametric program templates and the signal of a declaration left uncompiled.

`Template` is a parametric program (`program f(n: Real) ...`): the module compiler
(`qvr.runtime.compile`) keeps one per declaration and compiles it at each instantiation,
with numbers for its params, through the compiler that made it.  `Skip` is raised by the
module and program compilers (`qvr.runtime.compile_program`) when a declaration could
not be compiled; its diagnostics are already recorded.  Both compilers import them from
here, so that the program compiler need not import the module compiler back.
"""
from __future__ import annotations

from dataclasses import dataclass


class Skip(Exception):
    """A declaration could not be compiled; its diagnostics are already recorded."""


@dataclass
class Template:
    """A parametric program: compiled at each instantiation with numbers for its params."""

    name: str
    td: object
    params: tuple
    values: dict  # the value namespace visible at the declaration
    deductions: dict
    compiler: object  # the `qvr.runtime.compile.ModuleCompiler` that declared it

    def instantiate(self, args: dict):
        return self.compiler.instantiate(self, args)
