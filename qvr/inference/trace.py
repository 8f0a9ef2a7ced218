"""`trace(program, x, observations)`: one forward run with every site recorded (spec 6.2).

Every name present in `observations` is clamped (sample and observe sites alike), host
data is bound, and the rest is drawn.  The result lists every step in execution order —
`let`, `score` and `_marg_<c>` entries included, as deterministic sites — with its value
and its row-attributed `(B,)` contribution to the log joint; `Trace.log_joint` is their sum
and equals `program.log_joint(x, values)` at the traced values.

This module only records; it samples nothing itself (the program's executor does).
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass
class SampleSite:
    """One traced step.

    Attributes:
      name: the variable (``_marg_<c>`` for a marginalize block).
      morphism: the step's runtime morphism (None for deterministic entries).
      value: the bound value.
      log_prob: the row-attributed ``(B,)`` contribution (zeros for lets).
      is_observed: the name was supplied in ``observations``.
      is_deterministic: a let, score, alias or marginalize entry.
      kind: ``"sample"``, ``"observe"``, ``"let"``, ``"score"``, ``"marginalize"``, ``"alias"``.
      site_kind: ``"global"``, ``"plate"`` or ``"local"`` for sample/observe sites.
    """

    name: str
    morphism: Any
    value: Any
    log_prob: torch.Tensor
    is_observed: bool
    is_deterministic: bool
    kind: str = "sample"
    site_kind: Optional[str] = None


@dataclass
class Trace:
    """The sites of one run in execution order, its output and its `(B,)` log joint."""

    sites: dict
    output: Any
    log_joint: torch.Tensor

    @property
    def stochastic_sites(self) -> dict:
        return {k: s for k, s in self.sites.items() if not s.is_deterministic}

    @property
    def latent_sites(self) -> dict:
        return {k: s for k, s in self.sites.items()
                if not s.is_deterministic and not s.is_observed}

    @property
    def observed_sites(self) -> dict:
        return {k: s for k, s in self.sites.items()
                if not s.is_deterministic and s.is_observed}


def trace(program, x, observations: Optional[dict] = None) -> Trace:
    """Run `program` forward on `x`, clamping `observations`, and record every site."""
    model = getattr(program, "morphism", None) if not hasattr(program, "execute") else program
    if model is None or not hasattr(model, "execute"):
        raise TypeError(f"trace needs a program (MonadicProgram); got {type(program).__name__}")
    observations = dict(observations or {})
    ex = model.execute(x, observations, score=True)
    B = ex.batch_size
    sites = {}
    for name, rec in ex.sites.items():
        lp = rec.log_prob
        if lp is None:
            lp = torch.zeros(B, dtype=ex.log_joint.dtype, device=ex.log_joint.device)
        deterministic = rec.is_deterministic or rec.step not in ("sample", "observe")
        sites[name] = SampleSite(name, None if deterministic else rec.morphism, rec.value, lp,
                                 name in observations, deterministic, rec.step, rec.site_kind)
    return Trace(sites, ex.output, ex.log_joint)


class _CallableModule(types.ModuleType):
    """Spec 2.3: `from qvr.inference import trace` must give something callable as `trace`.

    Once this submodule is imported, the package attribute `qvr.inference.trace` is the
    module itself (Python's import system sets it); making the module callable keeps both
    `from qvr.inference import trace` and `from qvr.inference.trace import trace` working.
    """

    def __call__(self, program, x, observations=None):
        return trace(program, x, observations)


sys.modules[__name__].__class__ = _CallableModule
