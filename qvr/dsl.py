"""`qvr.dsl`: the loading API under the module path of the user's snippets (runtime spec 2.3).

Re-exports `load`, `loads`, `ParseError` and `CompileError` from `qvr.runtime`; importing
this module imports torch.
"""
from qvr.runtime.errors import CompileError, ParseError
from qvr.runtime.load import load, loads

__all__ = ["load", "loads", "ParseError", "CompileError"]
