"""The guide a fit asks for (`FitConfig.guide`, ``--guide``), made fresh or rebuilt from a
run's saved parameters.

`make_guide(spec, model, observed_names)`: ``meanfield`` (`AutoNormalGuide`),
``fullrank``, ``lowrank[:K]``, ``flow`` (`qvr.inference.vi.joint_guides`).  ``map`` and
``laplace`` are fitted by their own method (`qvr.inference.methods.laplace`);
`rebuild_guide` hands them to `qvr.inference.vi.laplace.rebuild`.  A guide that cannot
serve a program is a `GuideError` with a one-line reason.

Runs made before the guide was an option have no ``guide`` in their config: they are
mean-field (`run_guide`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from qvr.inference.vi.joint_guides import GuideError

__all__ = ["GuideError", "make_guide", "rebuild_guide", "run_guide", "load_params"]

JOINT_PREFIX = "joint_"


def run_guide(config: Optional[dict]) -> str:
    """The guide of a run's saved config (``meanfield`` when it has none)."""
    return str((config or {}).get("guide") or "meanfield")


def make_guide(spec: Optional[str], model, observed_names, *, init_scale: float = 0.1,
               rank: Optional[int] = None):
    """A fresh guide of family `spec` over `model`'s latent sites (not `observed_names`).
    `rank` overrides a ``lowrank`` spec's (a rebuilt run's own rank)."""
    from qvr.inference.config import split_guide
    try:
        name, spec_rank = split_guide(spec or "meanfield")
    except ValueError as exc:
        raise GuideError(str(exc)) from None
    observed = set(observed_names or ())
    if name == "meanfield":
        from qvr.inference.vi.guides import AutoNormalGuide
        return AutoNormalGuide(model, observed_names=observed, init_scale=init_scale)
    from qvr.inference.vi import joint_guides as jg
    if name == "fullrank":
        return jg.FullRankGuide(model, observed, init_scale)
    if name == "lowrank":
        return jg.LowRankGuide(model, observed, init_scale,
                               rank=rank if rank is not None else spec_rank)
    if name == "flow":
        return jg.FlowGuide(model, observed, init_scale)
    raise GuideError(f"the {name} guide is fitted by its own method, not by SVI steps "
                     f"(--guide {name} runs it)")


def load_params(guide, params: dict, skip_sites=(), where: str = "the run") -> None:
    """Copy a run's saved guide parameters into `guide` (names and shapes must match; a
    local site in `skip_sites` keeps its initial pair).  Raises `GuideError`."""
    own = dict(guide.named_parameters())
    skip = {f"{p}{s}" for s in skip_sites for p in ("loc_", "log_scale_")}
    with torch.no_grad():
        for name, p in own.items():
            if name in skip:
                continue
            if name not in params:
                raise GuideError(f"{where} has no guide parameter `{name}` (a different "
                                 f"guide, or the program has changed since)")
            value = np.asarray(params[name])
            if tuple(p.shape) != tuple(value.shape):
                raise GuideError(f"{where}: guide parameter `{name}` has shape "
                                 f"{tuple(value.shape)} there but {tuple(p.shape)} here "
                                 f"(different data size?)")
            p.copy_(torch.as_tensor(value, dtype=p.dtype, device=p.device))


def rebuild_guide(spec: Optional[str], model, observed_names, params: dict, x=None,
                  observations=None, *, skip_sites=(), where: str = "the run"):
    """The guide `spec` of a run, with the run's saved `params` (``params.npz``'s guide
    entries); ``map``/``laplace`` are rebuilt by `qvr.inference.vi.laplace.rebuild`."""
    from qvr.inference.config import split_guide
    try:
        kind, _ = split_guide(spec or "meanfield")
    except ValueError as exc:
        raise GuideError(str(exc)) from None
    if kind in ("map", "laplace"):
        from qvr.inference.vi.laplace import rebuild
        return rebuild(kind, model, observed_names, params, x, observations)
    rank = None
    if kind == "lowrank" and "joint_cov_factor" in params:
        rank = int(np.shape(params["joint_cov_factor"])[-1])
    guide = make_guide(spec, model, observed_names, rank=rank)
    if x is not None:
        guide = guide.to(x.device)
    load_params(guide, params, skip_sites, where)
    return guide
