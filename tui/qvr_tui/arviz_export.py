"""MCMC draws and sampler statistics to NetCDF through ArviZ (`export_arviz`) when it is
installed, else `ArvizMissing` with a message saying how to get it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from qvr_tui.results_data import Results

__all__ = ["ArvizMissing", "ARVIZ_MISSING", "export_arviz"]


class ArvizMissing(RuntimeError):
    """ArviZ is not installed (the message says how to install it)."""


ARVIZ_MISSING = "Export to ArviZ needs the arviz package: pip install arviz (into .venv)."


def export_arviz(res: Results, path=None, importer: Callable = None) -> Path:
    """Write the MCMC draws and sampler statistics to NetCDF through ArviZ
    (``RUN/posterior.nc`` by default) and return the path.  Raises `ArvizMissing` when
    ArviZ cannot be imported, ValueError when the run has no draws."""
    if not res.is_mcmc:
        raise ValueError(f"{res.path}: only MCMC draws can be exported to ArviZ "
                         f"(this run used {res.method})")
    if not res.draws:
        raise ValueError(f"{res.path}: the run has no draws to export")
    if importer is None:
        import importlib
        importer = importlib.import_module
    try:
        az = importer("arviz")
    except ImportError:
        raise ArvizMissing(ARVIZ_MISSING) from None
    posterior = {k: (v[..., 0] if v.ndim == 3 and v.shape[2] == 1 else v)
                 for k, v in res.draws.items()}
    names = {"log_density": "lp", "diverging": "diverging", "accept_prob": "acceptance_rate",
             "tree_depth": "tree_depth", "num_steps": "n_steps", "energy": "energy"}
    stats = {names[k]: np.asarray(v) for k, v in res.sample_stats.items()
             if k in names and np.asarray(v).ndim == 2}
    if "diverging" in stats:
        stats["diverging"] = stats["diverging"].astype(bool)
    try:
        data = az.from_dict(posterior=posterior, sample_stats=stats or None)
    except TypeError:  # ArviZ >= 1.0: one dict of groups
        groups = {"posterior": posterior}
        if stats:
            groups["sample_stats"] = stats
        data = az.from_dict(groups)
    out = Path(path) if path is not None else res.path / "posterior.nc"
    data.to_netcdf(str(out))
    return out
