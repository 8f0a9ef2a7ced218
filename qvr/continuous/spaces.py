"""`qvr.continuous.spaces`: `Euclidean`, the continuous object R^dim (runtime spec 7.3)."""
from qvr.runtime.objects import Euclidean

__all__ = ["Euclidean"]
