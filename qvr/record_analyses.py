"""The analyses a run record offers that are computed above the record store.

`qvr.runs.Run.loo()` and `.ppc()` read ``loo.json`` / ``ppc.json``, and compute them from the
record's pointwise terms when it lacks them (`qvr.inference.criticism.checks.loo_of_run`,
`ppc_of_run`); `Run.predict(data)` runs the fitted program at new data
(`qvr.inference.front.predict`).  Those computations live in `qvr.inference`, which imports
`qvr.runs`, never the reverse: the reader asks this table for them (`analysis(name)`), and
the root package `qvr` — the layer above both, always imported before any of its
subpackages — fills it at import time with functions that import the computation on first
use (decision of issue 38: a hook set from above, not an upward import; README's
`qvr.runs.open(path).loo()` and `.predict(...)` keep working).

Imports nothing; `ANALYSES` maps a name (``"loo"``, ``"ppc"``, ``"predict"``) to a function
whose first argument is the `Run`.
"""
ANALYSES: dict = {}


def analysis(name: str):
    """The function registered for `name` (LookupError when nothing set it)."""
    try:
        return ANALYSES[name]
    except KeyError:
        raise LookupError(f"no `{name}` analysis of run records is registered (the `qvr` "
                          f"package sets them when it is imported)") from None
