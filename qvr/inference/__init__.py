"""Inference for compiled QVR programs (SVI, HMC/NUTS, lifts) and the fit event API.

Public names (runtime spec 2.3, 6; loaded lazily, PEP 562, so that `qvr.inference.config`
stays importable without torch):

* `trace`, `Trace`, `SampleSite` — one recorded forward run (`trace.py`);
* `AutoNormalGuide`, `ELBO`, `SVI` (`vi/`);
* `MCMC`, `MCMCResult`, `HMCKernel`, `NUTSKernel` (`mcmc/`);
* `bayesian_lift_parameters`, `lift_to_bayesian_program`, `lift_from_log_prob`
  (`programs/lifts.py`);
* `summary`, `split_rhat`, `ess_bulk`, `ess_tail`, `to_arviz` (`criticism/diagnostics.py`);
* `fit` (`front/fitting.py`), `FitResult` (`methods/fit_result.py`), `FitConfig`,
  `ConfigError` (`config.py`, torch-free) — the front door the dashboard and `qvr run`
  call for SVI, HMC, NUTS and SMC;
  `DataError` (`data/fit_data.py`), `StartError` (`front/start.py`).

Layout: rooms named for what they hold, each importing only the floors below it
(ARCHITECTURE.md, "Inference rooms"): `config.py`, `trace.py`, `distributed/`,
`enumeration/`; `programs/`, `data/`, `criticism/`; `vi/`, `mcmc/`; `methods/`; `front/`.
No room re-exports another's names: the public names are this file's.  The fit events are
`qvr.events` (torch-free, below the run records, which store them).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "trace": "qvr.inference.trace",
    "Trace": "qvr.inference.trace",
    "SampleSite": "qvr.inference.trace",
    "AutoNormalGuide": "qvr.inference.vi.guides",
    "ELBO": "qvr.inference.vi.elbo",
    "SVI": "qvr.inference.vi.svi",
    "MCMC": "qvr.inference.mcmc.driver",
    "MCMCResult": "qvr.inference.mcmc.driver",
    "HMCKernel": "qvr.inference.mcmc.hmc",
    "NUTSKernel": "qvr.inference.mcmc.nuts",
    "bayesian_lift_parameters": "qvr.inference.programs.lifts",
    "lift_to_bayesian_program": "qvr.inference.programs.lifts",
    "lift_from_log_prob": "qvr.inference.programs.lifts",
    "summary": "qvr.inference.criticism.diagnostics",
    "split_rhat": "qvr.inference.criticism.diagnostics",
    "ess_bulk": "qvr.inference.criticism.diagnostics",
    "ess_tail": "qvr.inference.criticism.diagnostics",
    "to_arviz": "qvr.inference.criticism.diagnostics",
    "fit": "qvr.inference.front.fitting",
    "FitConfig": "qvr.inference.config",
    "FitResult": "qvr.inference.methods.fit_result",
    "ConfigError": "qvr.inference.config",
    "DataError": "qvr.inference.data.fit_data",
    "StartError": "qvr.inference.front.start",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qvr.inference' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if name != "trace":  # `trace` stays the (callable) submodule once imported, spec 2.3
        globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
