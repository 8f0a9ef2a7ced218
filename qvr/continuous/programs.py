"""`qvr.continuous.programs`: `MonadicProgram`, compiled or built from Python (spec 5.11)."""
from qvr.runtime.monadic import MonadicProgram

__all__ = ["MonadicProgram"]
