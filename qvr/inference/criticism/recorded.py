"""Recorded quantities in fits (`record v = e`, design E9.6; Stan's transformed parameters
and generated quantities, NumPyro's `deterministic`).

A `Recorder` computes a program's recorded values (`MonadicProgram.recorded_values`: only
the steps they need, no density, nothing drawn) for many draws at once: the one-point
function is mapped over the draws with `torch.func.vmap` (in chunks of `chunk` draws), or,
when vmap cannot run the program, one program call per draw (never one per coordinate).

* MCMC (`attach`): the target's `constrain` — what the driver calls for every chunk of
  kept draws it reports (`DrawsChunk`, written to the run record as it goes) and for the
  final draws — also gives each recorded value under ``recorded.v``
  (`qvr.runs.layout.RECORDED_PREFIX`), computed from the same unconstrained positions as
  the sites' values (`Registry.unpack`, the values the density saw).  The record's draws
  chunks, ``samples.npz``, `FitResult.samples` and `MCMCResult.samples` hold them that
  way; summaries (`qvr.inference.criticism.diagnostics.summary`) list them under their own names,
  marked recorded.
* SVI (`Recorder.from_values`): from the S draws of the fitted guide that the fit's
  summary is made of (`qvr.inference.methods.guide_results.guide_summary`).
* SMC generation has no per-particle values of the program's sites (its particles are
  token sequences): nothing is recorded, and the fit says so (`smc_note`).

A recorded value that reads a site the fit does not give a value per draw — a finite
latent summed out exactly (`qvr.inference.enumeration.enumerate`) — is not recorded; `skipped` names
it with the sites it lacks, and the fit reports a `FitWarning` (`warnings`).
"""
from __future__ import annotations

from typing import Optional

import torch

from qvr.runs.layout import RECORDED_PREFIX

PREFIX = RECORDED_PREFIX


def key(name: str) -> str:
    """The flat-dict key of a recorded quantity (``recorded.theta``)."""
    return PREFIX + name


def is_recorded_key(k: str) -> bool:
    return k.startswith(PREFIX)


def names_of(model) -> list:
    """The program's recorded names in order ([] for anything that has none)."""
    return list(getattr(model, "recorded_names", None) or [])


class Recorder:
    """The recorded values of `model` at input `x` with `observations` (observed sites and
    host data), for draws of the sites in `available` (the fit's latent sites)."""

    def __init__(self, model, x, observations: Optional[dict], available, chunk: int = 256):
        self.model = model
        self.x = x
        self.observations = dict(observations or {})
        have = set(available) | set(self.observations)
        self.names: list = []
        self.skipped: dict = {}  # name -> the sites it reads that have no draws
        for n in names_of(model):
            lacking = [s for s in model.recorded_sites([n]) if s not in have]
            if lacking:
                self.skipped[n] = lacking
            else:
                self.names.append(n)
        self.chunk = max(1, int(chunk))
        self.vmap_failed = False

    def __bool__(self) -> bool:
        return bool(self.names)

    def warnings(self, method: str) -> list[str]:
        """One sentence per recorded value left out (see the module docstring)."""
        out = []
        for n, sites in self.skipped.items():
            which = ", ".join(f"`{s}`" for s in sites)
            out.append(f"`{n}` is not recorded: it reads {which}, which {method} sums out "
                       f"exactly (a finite latent has no value per draw); record a quantity "
                       f"of the continuous sites, or recover the finite ones with "
                       f"qvr.inference.enumeration.discrete.infer_discrete")
        return out

    # ------------------------------------------------------------ one point
    def one(self, values: dict) -> dict:
        """The recorded values at one point (`values`: the sites' values of one draw)."""
        out = self.model.recorded_values(self.x, {**self.observations, **values}, self.names)
        return {n: torch.as_tensor(v) for n, v in out.items()}

    # ------------------------------------------------------------ many draws
    def from_z(self, z: torch.Tensor, registry) -> dict:
        """`z (..., D)` unconstrained positions -> `{name: (..., *shape)}`."""
        lead = tuple(z.shape[:-1])
        flat = z.detach().reshape(-1, z.shape[-1])
        out = self._map(lambda z1: self.one(registry.unpack(z1)[0]), flat)
        return {n: v.reshape(*lead, *v.shape[1:]) for n, v in out.items()}

    def from_values(self, values: dict) -> dict:
        """`{site: (N, *shape)}` constrained draws -> `{name: (N, *shape)}`."""
        return self._map(self.one, {k: v.detach() for k, v in values.items()})

    def _map(self, fn, batch) -> dict:
        n = _leading(batch)
        if not self.names or n == 0:
            return {}
        parts = []
        for start in range(0, n, self.chunk):
            part = _slice(batch, start, min(n, start + self.chunk))
            parts.append(self._part(fn, part))
        return {k: torch.cat([p[k] for p in parts]) for k in self.names}

    def _part(self, fn, part) -> dict:
        with torch.no_grad():
            if not self.vmap_failed:
                try:
                    from torch.func import vmap
                    out = vmap(fn, randomness="error")(part)
                    return {k: v.detach() for k, v in out.items()}
                except Exception:  # vmap cannot run this program: one call per draw
                    self.vmap_failed = True
            rows = [fn(_slice(part, i, None)) for i in range(_leading(part))]
            return {k: torch.stack([r[k] for r in rows]).detach() for k in self.names}


def _leading(batch) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    return int(next(iter(batch.values())).shape[0]) if batch else 0


def _slice(batch, start: int, end: Optional[int]):
    """`batch[start:end]`, or the one draw `batch[start]` when `end` is None."""
    if isinstance(batch, torch.Tensor):
        return batch[start] if end is None else batch[start:end]
    return {k: (v[start] if end is None else v[start:end]) for k, v in batch.items()}


def attach(target, recorder: Recorder) -> None:
    """Make `target.constrain` (the MCMC driver's map from positions to draws) also give
    the recorded values, under ``recorded.v`` (see the module docstring)."""
    if not recorder or getattr(target, "registry", None) is None:
        return
    base = target.constrain
    registry = target.registry

    def constrain(z: torch.Tensor) -> dict:
        out = base(z)
        out.update({key(n): v for n, v in recorder.from_z(z, registry).items()})
        return out

    target.constrain = constrain
    target.recorder = recorder


def for_mcmc(ctx, target) -> Optional[Recorder]:
    """The `Recorder` of an HMC/NUTS fit (None when the program records nothing),
    attached to `target`; a recorded value it cannot compute is reported (`FitWarning`)."""
    if not names_of(ctx.model) or getattr(target, "registry", None) is None:
        return None
    rec = Recorder(ctx.model, target.x if hasattr(target, "x") else ctx.x,
                   getattr(target, "observations", ctx.observations), target.registry.names)
    _warn(ctx, rec, ctx.config.method.upper())
    attach(target, rec)
    return rec


def for_guide(model, guide, x, observations, report=None) -> Optional[Recorder]:
    """The `Recorder` of an SVI fit: its draws are the fitted guide's."""
    if not names_of(model):
        return None
    rec = Recorder(model, x, observations, getattr(guide, "latent_names", ()))
    if report is not None:
        from qvr.events import FitWarning
        for w in rec.warnings("SVI"):
            report(FitWarning(w))
    return rec


def smc_note(program) -> Optional[str]:
    """What an SMC generation says when its program records values (it cannot)."""
    names = []
    for obj in [program, *getattr(program, "exports", {}).values()]:
        for n in names_of(getattr(obj, "morphism", obj)):
            if n not in names:
                names.append(n)
    if not names:
        return None
    return ("SMC generation records token sequences only: its particles carry no value of "
            "the program's sites per particle, so the recorded quantities "
            + ", ".join(f"`{n}`" for n in names) + " are not recorded (fit the program "
            "with NUTS, HMC or SVI to record them)")


def _warn(ctx, rec: Recorder, method: str) -> None:
    from qvr.events import FitWarning
    for w in rec.warnings(method):
        ctx.report(FitWarning(w))
