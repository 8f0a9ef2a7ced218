"""`qvr.continuous.morphisms`: the public `ContinuousMorphism` base class (runtime spec 3)."""
from qvr.runtime.morphisms.base import ContinuousMorphism

__all__ = ["ContinuousMorphism"]
