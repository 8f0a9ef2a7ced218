"""qvr: a toolchain for QVR, a typed probabilistic programming language compiling to PyTorch.

`import qvr` is light: it loads neither torch nor the front end.  `qvr.load(...)` and
`qvr.loads(...)` import the runtime (and torch) on first use; `qvr.compare([...])`
compares fitted runs by PSIS-LOO (torch-free; ArviZ's statistics imported on first use);
`qvr.predict(run, data)` (also `qvr.runs.Run.predict`) draws a fitted program's
observations at new data (`qvr.inference.front.predict`, imported on first use).

This package is the layer above the runtime, the inference and the run records: it sets
the analyses `qvr.runs.Run` offers but the record store cannot import
(`qvr.record_analyses`: `Run.loo`, `Run.ppc`, `Run.predict`), before any subpackage runs.
"""
from qvr.version import __version__

__all__ = ["__version__", "compare", "load", "loads", "predict"]


def load(path_or_source, *, data=None, sizes=None):
    """Load a QVR module (a path or source text) into a `qvr.runtime.Program`; sizes
    read from the data (`FinSet N`) come from `data` or `sizes` (``{"N": 434}``), else
    the result is unbound until fitted (`qvr.runtime.load.loads`)."""
    from qvr.runtime.load import load as _load
    return _load(path_or_source, data=data, sizes=sizes)


def loads(source, *, data=None, path="<string>", sizes=None):
    """Load QVR source text into a `qvr.runtime.Program` (`load`)."""
    from qvr.runtime.load import loads as _loads
    return _loads(source, data=data, path=path, sizes=sizes)


def compare(runs):
    """Compare runs (`qvr.runs.Run` objects or run folders) fitted to the same data by
    PSIS-LOO: ``{"runs": [...best first], "verdict", ...}`` (`qvr.inference.criticism.checks.compare`;
    raises `qvr.inference.criticism.checks.CompareError` when they cannot be compared)."""
    from qvr.inference.criticism.checks import compare as _compare
    return _compare(list(runs))


def predict(run, data, **options):
    """Draws of a fitted run's observed sites and recorded quantities at new data (a data
    file or a mapping of arrays): `qvr.inference.front.predict.predict` (`options`: ``draws``,
    ``seed``, ``run_dir``, ``program``, ``data_path``, ``on_event``); `qvr.runs.Run.predict`
    calls it."""
    from qvr.inference.front.predict import predict as _predict
    return _predict(run, data, **options)


def _loo_of_run(run):
    from qvr.inference.criticism.checks import loo_of_run
    return loo_of_run(run)


def _ppc_of_run(run):
    from qvr.inference.criticism.checks import ppc_of_run
    return ppc_of_run(run)


from qvr import record_analyses as _record_analyses  # noqa: E402

_record_analyses.ANALYSES.update(loo=_loo_of_run, ppc=_ppc_of_run, predict=predict)
