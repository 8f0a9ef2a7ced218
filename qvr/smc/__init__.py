"""`qvr.smc`: SMC steering of token programs (qvr-runtime.md §8).

Sequential Monte Carlo over strings drawn from a next-token model (`LogitsLM`,
`ProgramLM`) and reweighted by potentials, per Algorithm 3 of the user's design document
001 (Lew et al. 2023, arXiv:2306.03081).  Submodules: `resample` (the `c*` threshold and
the deterministic / stratified split), `model` (next-token protocol, `LogitsLM`),
`program_lm` (`ProgramLM`), `potentials`, `steering` (`SMCSteering`, `SMCResult`).
Generation from a program goes through `qvr.inference.fit` (``method="smc"``,
`qvr.inference.methods.smc`); ``qvr run --method smc`` is that fit's command line.

Names are imported lazily, so ``import qvr.smc`` does not import torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "SMCSteering": "steering", "SMCResult": "steering",
    "LogitsLM": "model", "NextTokenModel": "model", "StatefulModel": "model",
    "PrefixBatch": "model", "Transitions": "potentials",
    "ProgramLM": "program_lm",
    "Potential": "potentials", "batched": "potentials", "forbid_tokens": "potentials",
    "forbid_patterns": "potentials", "require_token": "potentials",
    "length_limits": "potentials", "product": "potentials", "from_callable": "potentials",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qvr.smc' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"qvr.smc.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
