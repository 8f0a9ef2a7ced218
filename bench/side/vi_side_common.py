"""What the variational side scripts of `bench/vi.py` share (run in the side virtualenv:
imports nothing of qvr).

Each side script writes one JSON file ``{posterior: {method: row}}``, a row being

* ``time`` — seconds of the fit (the library's compile included, draws excluded);
* ``steps`` — optimisation steps, ``grad_evals`` — gradient evaluations where the method
  counts them (Pathfinder's L-BFGS iterations summed over its paths);
* ``draws`` — ``{"beta[2]": [...]}``: draws of the approximation under Stan's 1-based
  names, only the parameters `reference.json` lists;
* ``log_ratios`` — ``log p(z) - log q(z)`` of independent draws (the main process fits
  the Pareto k-hat to them with qvr's `pareto_khat`), or ``khat`` where the library gives
  its own (Pathfinder's PSIS);
* ``error`` — the exception, where the method failed.
"""
from __future__ import annotations

import json
import traceback
from pathlib import Path

import numpy as np


def reference_names(folder: Path) -> list:
    return list(json.loads((folder / "reference.json").read_text())["params"])


def flat(draws: dict, wanted: list) -> dict:
    """``{site: (S, *shape)}`` -> ``{"site[i,j]": [S floats]}`` for the names in `wanted`."""
    bases = {w.split("[")[0] for w in wanted}
    out = {}
    for name, a in draws.items():
        if name not in bases:
            continue
        a = np.asarray(a, dtype=float)
        if a.ndim == 1:
            out[name] = a.tolist()
            continue
        for idx in np.ndindex(*a.shape[1:]):
            key = f"{name}[{','.join(str(i + 1) for i in idx)}]"
            if key in wanted:
                out[key] = a[(slice(None),) + idx].tolist()
    return out


def posteriors(shared: Path, only) -> list:
    """The sample's folders (those with data and a reference), filtered by `only`."""
    out = []
    for folder in sorted(Path(shared).iterdir()):
        if not (folder / "data.json").is_file() or not (folder / "reference.json").is_file():
            continue
        if only and not any(o in folder.name for o in only):
            continue
        out.append(folder)
    return out


def failed(exc: BaseException) -> dict:
    tb = traceback.format_exc(limit=3)
    return {"error": f"{type(exc).__name__}: {exc}"[:300], "trace": tb[-1500:]}


def write(path: str, rows: dict) -> None:
    Path(path).write_text(json.dumps(rows))
