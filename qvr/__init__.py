"""qvr: a toolchain for QVR, a typed probabilistic programming language compiling to PyTorch.

`import qvr` is light: it loads neither torch nor the front end.  `qvr.load(...)` and
`qvr.loads(...)` import the runtime (and torch) on first use.
"""
__version__ = "0.1.0"

__all__ = ["__version__", "load", "loads"]


def load(path_or_source, *, data=None):
    """Load a QVR module (a path or source text) into a `qvr.runtime.Program`."""
    from qvr.runtime.load import load as _load
    return _load(path_or_source, data=data)


def loads(source, *, data=None, path="<string>"):
    """Load QVR source text into a `qvr.runtime.Program`."""
    from qvr.runtime.load import loads as _loads
    return _loads(source, data=data, path=path)
