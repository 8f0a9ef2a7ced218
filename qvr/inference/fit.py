"""`fit(program, data, config, on_event=None, should_stop=None) -> FitResult`: the single
entry point the dashboard and `qvr run` use for SVI, HMC and NUTS.

`fit` validates the data against the program *before* any fitting (unknown names, shapes
that do not fit a site: a `DataError` with the runtime's message), then runs

* ``svi`` — `AutoNormalGuide` + `ELBO(num_particles)` + Adam on the model's and guide's
  parameters; every step's loss is reported; a non-finite loss stops the fit with a
  message naming the step (status ``"failed"``, no exception);
* ``hmc`` / ``nuts`` — `MCMC` with `HMCKernel` / `NUTSKernel`.

It reports through the fit events of `qvr.inference.events` (one `FitStarted`, throttled
`FitProgress`, `DrawsChunk`s, then exactly one of `FitFinished` / `FitFailed` /
`FitCancelled`) and stops cleanly, keeping what it has, when `should_stop()` turns true
(a `StopToken` can be cancelled from another thread).

Data conventions: `data` maps observed site names and host-data names to arrays; the key
``"x"`` (if present) is the program input, otherwise the input is `zeros(N, 1)` with `N`
the leading size of the first observed value (1 without data) — the convention of the
regression snippets.  Everything not in `data` is latent.

What `fit` does not do: files, run folders or printing (`qvr.inference.cli` does).
"""
from __future__ import annotations

import math
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch

from qvr.inference.events import (Emitter, EventCallback, FitCancelled, FitFailed,
                                  FitFinished, FitProgress, FitStarted, Throttle, never)

METHODS = ("svi", "hmc", "nuts")


class DataError(ValueError):
    """The data does not fit the program (unknown name, wrong shape, missing host data)."""


@dataclass
class FitConfig:
    """Options of a fit (every field has a default; unknown methods are rejected).

    Attributes:
      method: ``"svi"``, ``"hmc"`` or ``"nuts"``.
      steps, lr, num_particles: SVI optimisation steps, Adam learning rate, ELBO particles.
      num_warmup, num_samples, num_chains: MCMC budget.
      step_size, num_steps, max_tree_depth, target_accept, mass_matrix: kernel options
        (`target_accept`/`mass_matrix` None = the kernel's default).
      init_strategy, chain_method: `MCMC` options.
      seed: `torch.manual_seed` before fitting (None: leave the RNG alone).
      device: ``"cpu"`` or ``"cuda"``; the program and data are moved there.
      progress_interval: minimum seconds between progress events.
    """

    method: str = "nuts"
    steps: int = 1000
    lr: float = 0.01
    num_particles: int = 1
    num_warmup: int = 500
    num_samples: int = 500
    num_chains: int = 4
    step_size: float = 0.1
    num_steps: int = 10
    max_tree_depth: int = 10
    target_accept: Optional[float] = None
    mass_matrix: Optional[str] = None
    init_strategy: str = "prior"
    chain_method: str = "vectorized"
    seed: Optional[int] = None
    device: str = "cpu"
    progress_interval: float = 0.1

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {METHODS}")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class FitResult:
    """What a fit produced.

    Attributes:
      method, status: ``"finished"``, ``"cancelled"`` or ``"failed"``.
      message: why it failed (e.g. "loss is nan at step 12").
      losses: SVI losses, one per step done.
      samples: MCMC draws `{site: (chains, draws, *shape)}` as numpy arrays.
      params: fitted values as numpy arrays (SVI: guide `loc_*`/`log_scale_*`, model
        parameters under `model.<name>`; MCMC: nothing).
      summary: `qvr.inference.diagnostics.Summary` of the posterior (MCMC draws, or draws
        from the fitted guide for SVI).
      stats: scalar facts (acceptance, divergences, step sizes, final loss, times).
      mcmc: the `MCMCResult` (MCMC only); guide: the fitted guide (SVI only).
      elapsed: seconds.
    """

    method: str
    status: str = "finished"
    message: str = ""
    losses: list = field(default_factory=list)
    samples: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    summary: Any = None
    stats: dict = field(default_factory=dict)
    mcmc: Any = None
    guide: Any = None
    elapsed: float = 0.0
    step: Optional[int] = None


# ---------------------------------------------------------------- data


def model_of(program):
    """The program to fit: a `MonadicProgram`, or a `Program`'s first export."""
    if hasattr(program, "execute") and hasattr(program, "log_joint"):
        return program
    inner = getattr(program, "morphism", None)
    if inner is not None and hasattr(inner, "execute"):
        return inner
    raise DataError("this module's first export is not a program with sample/observe steps; "
                    "only programs can be fitted")


def split_data(model, data: Optional[dict], device="cpu") -> tuple:
    """`(x, observations)` from a data dict (see the module docstring)."""
    data = {k: (v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v)))
            for k, v in (data or {}).items()}
    data = {k: v.to(device) for k, v in data.items()}
    x = data.pop("x", None)
    if x is None:
        n = 1
        observed = [s for s in getattr(model, "site_names", []) if s in data]
        for name in observed:
            v = data[name]
            if v.dim() >= 1:
                n = int(v.shape[0])
                break
        x = torch.zeros(n, 1, device=device)
    return x, data


def check_data(model, x, observations: dict) -> None:
    """Run the program once with the data clamped; raise `DataError` on any mismatch."""
    from qvr.runtime.errors import QvrRuntimeError
    try:
        with torch.no_grad():
            model.execute(x, observations, score=True)
    except (QvrRuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise DataError(f"the data does not fit the program: {_message(exc)}") from None
    except RuntimeError as exc:
        raise DataError(f"the data does not fit the program: {exc}") from None


def _message(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError) and text.startswith("'") and text.endswith("'"):
        text = text[1:-1]
    return text


# ---------------------------------------------------------------- entry


def fit(program, data: Optional[dict] = None, config: Optional[FitConfig] = None,
        on_event: Optional[EventCallback] = None,
        should_stop: Optional[Callable[[], bool]] = None) -> FitResult:
    """Fit `program` to `data` with `config.method` (see the module docstring)."""
    config = config or FitConfig()
    emit = Emitter(on_event)
    stop = should_stop or never
    if config.seed is not None:
        torch.manual_seed(config.seed)
    device = torch.device(config.device)
    model = model_of(program)
    model.to(device)
    total = config.steps if config.method == "svi" else config.num_warmup + config.num_samples
    emit(FitStarted(method=config.method, total_steps=total,
                    num_chains=1 if config.method == "svi" else config.num_chains,
                    config=config.to_dict()))
    try:
        x, observations = split_data(model, data, device)
        check_data(model, x, observations)
        if config.method == "svi":
            return _fit_svi(model, x, observations, config, emit, stop)
        return _fit_mcmc(model, x, observations, config, emit, stop)
    except KeyboardInterrupt:
        emit(FitCancelled(step=None, elapsed=emit.elapsed))
        raise
    except BaseException as exc:
        if not getattr(exc, "_qvr_reported", False):
            emit(FitFailed(message=_message(exc), step=getattr(exc, "step", None),
                           error_type=type(exc).__name__, elapsed=emit.elapsed))
        raise


def _fit_svi(model, x, observations, config: FitConfig, emit: Emitter, stop) -> FitResult:
    from qvr.inference.elbo import ELBO
    from qvr.inference.guides import AutoNormalGuide
    from qvr.inference.svi import SVI, adam
    guide = AutoNormalGuide(model, observed_names=set(observations)).to(x.device)
    params = list(model.parameters()) + list(guide.parameters())
    if not params:
        raise DataError("nothing to fit: the program has no parameters and no latent sites")
    optim = adam(params, config.lr)
    svi = SVI(model, guide, optim, ELBO(num_particles=config.num_particles))
    throttle = Throttle(config.progress_interval)
    result = FitResult("svi", guide=guide)
    t0 = time.perf_counter()
    for step in range(1, config.steps + 1):
        if stop():
            result.status = "cancelled"
            break
        loss = svi.step(x, observations)
        result.losses.append(loss)
        result.step = step
        if not math.isfinite(loss):
            result.status = "failed"
            result.message = (f"the loss is {loss} at step {step}: the model's log density "
                              f"or the guide's draws are not finite there (try a smaller "
                              f"--lr, or check the data)")
            emit(FitProgress(method="svi", phase="optimization", step=step,
                             total=config.steps, metrics={"loss": loss},
                             elapsed=emit.elapsed))
            break
        if throttle.due(step, config.steps):
            emit(FitProgress(method="svi", phase="optimization", step=step,
                             total=config.steps, metrics={"loss": loss},
                             elapsed=emit.elapsed))
    result.elapsed = time.perf_counter() - t0
    result.params = _svi_params(model, guide)
    if result.status != "failed":
        result.samples, result.summary = _guide_summary(guide, x, observations)
    result.stats = {"final_loss": result.losses[-1] if result.losses else float("nan"),
                    "steps": len(result.losses), "elapsed": result.elapsed}
    if result.status == "failed":
        emit(FitFailed(message=result.message, step=result.step, error_type="NonFiniteLoss",
                       elapsed=emit.elapsed))
    elif result.status == "cancelled":
        emit(FitCancelled(step=result.step, elapsed=emit.elapsed))
    else:
        emit(FitFinished(summary=result.stats, elapsed=emit.elapsed))
    return result


def _svi_params(model, guide) -> dict:
    out = {}
    for name, p in guide.named_parameters():
        out[name] = p.detach().cpu().numpy()
    for name, p in model.named_parameters():
        out[f"model.{name}"] = p.detach().cpu().numpy()
    return out


def _guide_summary(guide, x, observations, n: int = 1000):
    from qvr.inference.diagnostics import summary
    columns = ("mean", "sd", "q5", "q50", "q95")  # independent draws: no ESS or R-hat
    if not guide.latent_names:
        return {}, summary({}, columns=columns)
    with torch.no_grad():
        draws = guide.rsample(x, observations, sample_shape=(n,))
    samples = {k: v.detach().cpu().numpy()[None] for k, v in draws.items()}
    return samples, summary(samples, max_coordinates=200, columns=columns)


def _kernel(config: FitConfig):
    from qvr.inference.mcmc.hmc import HMCKernel
    from qvr.inference.mcmc.nuts import NUTSKernel
    kw = {"step_size": config.step_size}
    if config.target_accept is not None:
        kw["target_accept"] = config.target_accept
    if config.mass_matrix is not None:
        kw["mass_matrix"] = config.mass_matrix
    if config.method == "hmc":
        return HMCKernel(num_steps=config.num_steps, **kw)
    return NUTSKernel(max_tree_depth=config.max_tree_depth, **kw)


def _fit_mcmc(model, x, observations, config: FitConfig, emit: Emitter, stop) -> FitResult:
    from qvr.inference.mcmc.driver import MCMC
    mc = MCMC(_kernel(config), num_warmup=config.num_warmup, num_samples=config.num_samples,
              num_chains=config.num_chains, init_strategy=config.init_strategy,
              chain_method=config.chain_method, progress_interval=config.progress_interval)

    # the driver reports its own FitStarted; the one `fit` sent already opened the fit
    def forward(event):
        if not isinstance(event, FitStarted):
            emit(event)

    try:
        res = mc.run(model, x, observations, on_event=forward, should_stop=stop)
    except BaseException as exc:
        exc._qvr_reported = True  # the driver has emitted FitFailed/FitCancelled
        raise
    out = FitResult(config.method, status="cancelled" if res.cancelled else "finished",
                    mcmc=res, elapsed=res.total_time)
    out.samples = {k: v.detach().cpu().numpy() for k, v in res.samples.items()}
    out.summary = res.summary()
    out.stats = {"mean_acceptance": res.mean_acceptance,
                 "total_divergences": res.total_divergences,
                 "acceptance_rates": res.acceptance_rates.tolist(),
                 "divergence_counts": res.divergence_counts.tolist(),
                 "step_sizes": res.step_sizes.tolist(), "num_samples": res.num_samples,
                 "warmup_time": res.warmup_time, "sampling_time": res.sampling_time,
                 "mean_tree_depth": float(res.tree_depths.float().mean())
                 if res.tree_depths.numel() else float("nan"),
                 "compiler": res.compiler, **out.summary.worst()}
    return out


class _CallableModule(types.ModuleType):
    """`from qvr.inference import fit` gives this module once `qvr.inference.fit` has been
    imported (Python's import system sets the package attribute); calling it runs `fit`."""

    def __call__(self, *args, **kwargs):
        return fit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
