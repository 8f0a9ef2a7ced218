"""`qvr.core.objects`: `FinSet` and the one-point object `Unit` (runtime spec 7.3)."""
from qvr.runtime.objects import FinSet, Unit

__all__ = ["FinSet", "Unit"]
