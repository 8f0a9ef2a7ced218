"""An exported morphism as a program to fit: `x ↦ observe y <- f(x)`.

A fit needs a program (`MonadicProgram`); an exported morphism `f : A -> B` becomes one
whose data are the input `x` (A) and the output `y` (B).  Synthetic input is drawn from A's
type and the output from `f` (`qvr.inference.data.synthesize`).
"""
from __future__ import annotations


def morphism_program(morphism):
    """`x ↦ observe y <- f(x)` around a morphism `f : A -> B` (see the module docstring)."""
    from qvr.runtime.monadic import MonadicProgram
    prog = MonadicProgram(morphism.domain, morphism.codomain,
                          [(("y",), morphism, None, True)], ("y",))
    prog.wrapped_morphism = morphism
    return prog
