"""Starting a fit from a saved run (`fit(..., start_from=RUN)`, `qvr run --from RUN`).

What a run gives the next fit:

* its **model parameters** (``params.npz``, ``model.NAME``: every method saves them) are
  loaded into the program — so SMC generates from an SVI-fitted language model, and any
  fit continues from fitted weights;
* an **SVI run's guide** (``loc_*``, ``log_scale_*``) initialises the next SVI guide (to
  continue fitting) or the initial positions of HMC/NUTS (one guide draw per chain);
* an **MCMC run's posterior means** (``samples.npz``) initialise the next guide's
  locations, or HMC/NUTS's initial positions.

A program whose parameters no longer match the run's (a renamed morphism, a changed
width) is a `StartError` naming the QVR declaration the parameter belongs to (the
morphism, and the parameter within it: `declaration_of`), and saying when the program's
text changed since the run.  The record of the new run names the run it started from and that
run's source hash (`StartState.record`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch


class StartError(ValueError):
    """The run to start from cannot be used (unreadable, or its parameters do not match)."""


@dataclass
class StartState:
    run: Any  # qvr.runs.Run
    model_params: dict = field(default_factory=dict)
    guide_params: dict = field(default_factory=dict)
    posterior_means: dict = field(default_factory=dict)
    current_sha256: Optional[str] = None  # the hash of the program being fitted now

    def record(self) -> dict:
        return {"run": str(self.run.path.resolve()), "run_id": self.run.run_id,
                "method": self.run.method, "sha256": self.run.source_sha256}

    def _where(self) -> str:
        return f"start from {self.run.path}"

    def apply_to_model(self, module) -> None:
        """Load the run's model parameters into `module` (names and shapes must match)."""
        if not self.model_params:
            return
        own = dict(module.named_parameters())
        changed = self._changed_note()
        for name, value in self.model_params.items():
            if name not in own:
                raise StartError(f"{self._where()}: the run has a parameter of "
                                 f"{declaration_of(module, name)}, which this program does "
                                 f"not{changed}")
            if tuple(own[name].shape) != tuple(value.shape):
                raise StartError(f"{self._where()}: {declaration_of(module, name)} has shape "
                                 f"{tuple(value.shape)} in the run but "
                                 f"{tuple(own[name].shape)} in this program{changed}")
        missing = [n for n in own if n not in self.model_params]
        if missing:
            raise StartError(f"{self._where()}: this program's "
                             f"{declaration_of(module, missing[0])} is not in the run"
                             f"{changed}")
        with torch.no_grad():
            for name, value in self.model_params.items():
                p = own[name]
                p.copy_(torch.as_tensor(value, dtype=p.dtype, device=p.device))

    def _changed_note(self) -> str:
        sha = self.current_sha256
        if sha and self.run.source_sha256 and sha != self.run.source_sha256:
            return " (the program's text has changed since that run)"
        return ""

    def apply_to_guide(self, guide, x=None, observations=None) -> None:
        """Initialise an `AutoNormalGuide` from the run: an SVI run's guide as it was, or an
        MCMC run's posterior means mapped to the guide's unconstrained space (through the
        sites' transforms, which need the guide's program, its input and observations)."""
        own = dict(guide.named_parameters())
        with torch.no_grad():
            if self.guide_params:
                for name, value in self.guide_params.items():
                    p = own.get(name)
                    if p is None:
                        continue  # a site the new data observes: nothing to start
                    if tuple(p.shape) != tuple(value.shape):
                        raise StartError(f"{self._where()}: guide parameter `{name}` has shape "
                                         f"{tuple(value.shape)} in the run but "
                                         f"{tuple(p.shape)} here (different data size?)")
                    p.copy_(torch.as_tensor(value, dtype=p.dtype, device=p.device))
            elif self.posterior_means:
                from qvr.inference.sites import build_registry
                obs = dict(observations or {})
                reg = build_registry(guide.model[0], x, obs, observed_names=set(obs))
                for site, mean in self.posterior_means.items():
                    p = own.get(f"loc_{site}")
                    spec = reg.by_name.get(site)
                    if p is None or spec is None:
                        continue
                    value = torch.as_tensor(mean, dtype=p.dtype, device=p.device)
                    if value.numel() != p.numel() and value.numel() != \
                            int(torch.Size(spec.batch_shape).numel()) * spec.d:
                        raise StartError(f"{self._where()}: site `{site}` has "
                                         f"{value.numel()} values in the run but a different "
                                         f"shape here (different data size?)")
                    value = spec.transform.inv(value.reshape(*spec.batch_shape, spec.d))
                    if value.numel() != p.numel():
                        raise StartError(f"{self._where()}: site `{site}` has "
                                         f"{value.numel()} values in the run but {p.numel()} "
                                         f"here (different data size?)")
                    p.copy_(value.reshape(p.shape))

    def init_guide(self, model, x, observations):
        """A guide to draw HMC/NUTS initial positions from (None: nothing to start from)."""
        if not (self.guide_params or self.posterior_means):
            return None
        from qvr.inference.guides import AutoNormalGuide
        guide = AutoNormalGuide(model, observed_names=set(observations)).to(x.device)
        self.apply_to_guide(guide, x, observations)
        if self.posterior_means and not self.guide_params:
            with torch.no_grad():
                for name, p in guide.named_parameters():
                    if name.startswith("log_scale_"):
                        p.fill_(-6.0)  # start at the means, barely jittered
        return guide


def declaration_of(module, name: str) -> str:
    """The QVR declaration a torch parameter path belongs to, for messages: "morphism
    `ff` (parameter `param_source.net.4.weight`)" for
    ``_step_h.right.left.right.param_source.net.4.weight``.

    The declaration is the nearest module on the path that carries the name it was bound
    to (`qvr.runtime.compile` marks it ``_qvr_named``: a declared morphism, a replicated
    copy ``head_0``, a ``let``, the program); when several distinct modules carry that
    name (the deep copies `stack` makes) the message says which copy, in order of
    application.  A path that does not lead into `module` (a parameter of a run whose
    program has since changed shape) is resolved as far as it goes, else given as is."""
    from torch import nn
    modules = dict(module.named_modules())
    parts = name.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        path = ".".join(parts[:cut])
        m = modules.get(path)
        if m is None or not getattr(m, "_qvr_named", False) or not getattr(m, "label", None):
            continue
        rest = ".".join(parts[cut:])
        kind = "program" if hasattr(m, "log_joint") else "morphism"
        same = []
        for other in module.modules():
            if isinstance(other, nn.Module) and getattr(other, "_qvr_named", False) and \
                    getattr(other, "label", None) == m.label and \
                    all(o is not other for o in same):
                same.append(other)
        copy = ""
        if len(same) > 1:
            i = next(k for k, o in enumerate(same) if o is m)
            copy = f"copy {i + 1} of {len(same)}, "
        return f"{kind} `{m.label}` ({copy}parameter `{rest}`)"
    return f"parameter `{name}`"


def load_start(start_from, config=None) -> StartState:
    """The `StartState` of a run folder (or `qvr.runs.Run`)."""
    from qvr.runs import Run, RunRecordError, open_run
    try:
        run = start_from if isinstance(start_from, Run) else open_run(start_from)
    except RunRecordError as exc:
        raise StartError(f"cannot start from {start_from}: {exc}") from None
    status = run.status
    if status == "running":
        raise StartError(f"cannot start from {run.path}: that run is still running")
    try:
        params = run.params()
        samples = run.samples()
    except RunRecordError as exc:
        raise StartError(f"cannot start from {run.path}: {exc}") from None
    model = {k[len("model."):]: v for k, v in params.items() if k.startswith("model.")}
    guide = {k: v for k, v in params.items() if k.startswith(("loc_", "log_scale_"))}
    means = {}
    if run.method in ("hmc", "nuts"):
        means = {k: np.asarray(v).mean(axis=(0, 1)) for k, v in samples.items()
                 if not k.startswith("sample_stats.") and np.asarray(v).ndim >= 2}
    if not (model or guide or means):
        raise StartError(f"cannot start from {run.path}: the run saved no parameters or "
                         f"draws (status {status})")
    return StartState(run, model, guide, means)
