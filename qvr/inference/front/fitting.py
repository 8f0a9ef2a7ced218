"""`fit(program, data=None, config=None, ...) -> FitResult`: the front door of inference.

Every fit — SVI, HMC, NUTS, SMC generation — starts here; `qvr run` and the dashboard's
worker call nothing else.  `fit`

1. validates the options (`FitConfig`, unknown keys and bad values are a `ConfigError`
   listing them), and runs everything below with torch's default dtype set to
   `FitConfig.dtype` (``float32`` or ``float64``, `fit_dtype`; the previous default is
   restored afterwards, also when the fit fails): the model's parameters and buffers are
   cast to it, the data converted to it, and the guide, chains and draws made in it.
   Draws and parameters are saved in the fit's dtype (``samples.npz`` holds float64
   arrays after a float64 fit); a run started from (``start_from``) is cast to it.  The
   program's parameters keep the fit's dtype after it (the next fit casts them again);
2. opens the run record when given ``run_dir`` (`qvr.runs.RunWriter`: ``run.json`` with
   the program's source hash, then every event as it happens);
3. reports `FitStarted` — `fit` alone does, and it alone reports the one terminal event;
4. resolves and checks the data once (`qvr.inference.data.fit_data`), and applies ``start_from``
   (a previous run's fitted parameters, `qvr.inference.front.start`);
5. runs the method's loop (`qvr.inference.methods.svi`, `.mcmc`, `.smc`, `.pathfinder`), which reports
   steps only (progress, draws, particles, warnings);
6. reports exactly one of `FitFinished`, `FitFailed`, `FitCancelled`, saves the results
   in the record (``summary.json``, ``samples.npz``/``params.npz``/``losses.npy``,
   ``sequences.json``) and closes it.

Under torch's launcher (`torchrun`, `qvr run --nproc N`; `qvr.inference.distributed.world`)
every rank calls `fit` with the same config: SVI runs data-parallel (minibatches,
`qvr.inference.data.minibatch`), HMC/NUTS need ``chain_method="distributed"``, other methods
are a `ConfigError`; rank 0 alone writes the record (``run.json`` says ``world_size``),
SIGTERM from the launcher ends it as failed naming the lost rank, and if rank 0 itself
dies a surviving rank ends its abandoned record (`qvr.runs.end_abandoned`).

Errors of the model or its data (`DataError`, `StartError`, the runtime's
`QvrRuntimeError`) are reported as `FitFailed` and raised; a non-finite SVI loss ends
the fit with status ``"failed"`` and no exception; Ctrl-C (`KeyboardInterrupt`) is
reported as `FitCancelled` and raised; `should_stop()` turning true ends the fit cleanly
with status ``"cancelled"`` and everything so far kept.

Example::

    >>> import qvr
    >>> from qvr.inference import fit, FitConfig                     # doctest: +SKIP
    >>> prog = qvr.load("examples/hmm.qvr")                          # doctest: +SKIP
    >>> res = fit(prog, config=FitConfig(method="nuts", num_samples=200),
    ...           run_dir="runs/hmm-try")                            # doctest: +SKIP
    >>> res.status, res.summary                                      # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import traceback
from pathlib import Path
from typing import Callable, Optional, Union

import torch

from qvr.inference.config import ConfigError, FitConfig, split_guide
from qvr.inference.data.fit_data import DataError, FitData, check_data, message_of, numpy_dict, \
    resolve_data, split_data
from qvr.events import (Emitter, EventCallback, FitCancelled, FitEvent,
                        FitFailed, FitFinished, FitNote, FitProgress, FitStarted,
                        FitWarning, never)
from qvr.inference.methods.fit_result import FitContext, FitResult
from qvr.inference.programs.morphism_fit import morphism_program

__all__ = ["fit", "FitConfig", "ConfigError", "DataError", "model_of", "args_error",
           "instantiate"]


def _is_program(obj) -> bool:
    return hasattr(obj, "execute") and hasattr(obj, "log_joint")


def _is_morphism(obj) -> bool:
    return all(hasattr(obj, a) for a in ("domain", "codomain", "log_prob", "rsample"))


def _is_template(obj) -> bool:
    """A parametric program (`qvr.runtime.program.TemplateInvoker`, runtime spec 5.9):
    fitted once instantiated with the fit's `FitConfig.args`."""
    return callable(obj) and hasattr(obj, "params") and hasattr(obj, "template")


FITTABLE = ("program", "morphism", "template")


def _is_sized(obj) -> bool:
    """An export (or module) whose sizes are read from the data, not bound yet
    (`qvr.runtime.sizes`): `fit` binds it with its data."""
    from qvr.runtime.sizes import needs_sizes
    return needs_sizes(obj)


def export_kind(obj) -> str:
    """``program``, ``morphism``, ``template`` (a parametric program; the three can be
    fitted) or the value's type name.  An export whose sizes are read from the data
    is of the kind it will be once bound."""
    if _is_sized(obj):
        return obj.kind
    return "program" if _is_program(obj) else "morphism" if _is_morphism(obj) else \
        "template" if _is_template(obj) else type(obj).__name__


def choose_export(program) -> str:
    """The export a fit uses when none is named: the first one if it is a program, a
    morphism or a parametric program; otherwise the only fittable one; otherwise a
    `ValueError` listing them."""
    exports = getattr(program, "exports", {})
    names = list(exports)
    if not names:
        raise ValueError("the module exports nothing to fit")
    if export_kind(exports[names[0]]) in FITTABLE:
        return names[0]
    fittable = [n for n in names if export_kind(exports[n]) in FITTABLE]
    if len(fittable) == 1:
        return fittable[0]
    listed = ", ".join(f"`{n}` ({export_kind(exports[n])})" for n in names)
    raise ValueError(f"choose the export to fit with --export NAME; exports: {listed}")


def template_params(template) -> list[tuple[str, str]]:
    """``[(name, type)]`` of a parametric program's parameters, in order (the type as the
    checker read it; every parameter of the core language is ``Real``)."""
    t = template.template
    sym = getattr(getattr(t, "td", None), "bindings", {}).get(("value", t.name))
    types = dict(getattr(sym, "params", ()) or ())
    return [(p, types.get(p) or "Real") for p in template.params]


def _spell_params(params) -> str:
    return ", ".join(f"{n} : {t}" for n, t in params)


def _label(obj, name: Optional[str]) -> str:
    if name is None and _is_template(obj):
        name = obj.template.name
    return name or getattr(obj, "label", None) or getattr(obj, "name", None) or \
        type(obj).__name__


def args_error(obj, args: Optional[dict], name: Optional[str] = None) -> Optional[str]:
    """Why `args` (`FitConfig.args`) do not fit the export `obj` (named `name`), or None:
    a parametric program needs every parameter and knows no other name; any other export
    takes none.  `qvr run` asks before it makes a run folder; `model_of` raises it."""
    args = dict(args or {})
    label = _label(obj, name)
    if _is_sized(obj):  # checked once its sizes are bound (`model_of` in `fit`)
        return None
    if not _is_template(obj):
        if not args:
            return None
        kind = export_kind(obj)
        kind = {"program": "a program", "morphism": "a morphism"}.get(kind, f"a {kind}")
        return (f"`{label}` is {kind}, not a parametric program: it takes no --arg "
                f"(given: {', '.join(args)})")
    params = template_params(obj)
    names = [n for n, _ in params]
    unknown = [k for k in args if k not in names]
    if unknown:
        import difflib
        close = [m for k in unknown for m in difflib.get_close_matches(k, names, 1)]
        hint = f" (did you mean {', '.join(f'`{m}`' for m in close)}?)" \
            if close and len(unknown) == 1 else ""
        which = "parameter" if len(unknown) == 1 else "parameters"
        return (f"`{label}` has no {which} {', '.join(f'`{k}`' for k in unknown)}{hint}; "
                f"its parameters: {_spell_params(params)}")
    missing = [(n, t) for n, t in params if n not in args]
    if missing:
        return (f"`{label}` is a parametric program: give its parameters with "
                f"--arg NAME=VALUE (missing: {_spell_params(missing)})")
    return None


def instantiate(obj, args: Optional[dict], name: Optional[str] = None):
    """The `Program` of a parametric program at `args` (its ``.morphism`` is the program
    to fit); a `DataError` (`args_error`) when they do not fit."""
    problem = args_error(obj, args, name)
    if problem:
        raise DataError(problem)
    return obj(**{k: float(v) for k, v in dict(args).items()})


def model_of(program, args: Optional[dict] = None, name: Optional[str] = None):
    """The program to fit: a `MonadicProgram`; a `Program`'s chosen export
    (`choose_export`); an exported morphism, wrapped by `morphism_program`; a parametric
    program instantiated with `args` (`FitConfig.args`, `instantiate`).  `args` given
    for anything but a parametric program are a `DataError` (`args_error`)."""
    if isinstance(getattr(program, "exports", None), dict) and not _is_program(program):
        exports = program.exports  # a loaded module
        if name is not None:  # `fit(module, export=NAME)`: that export, not the first
            if name not in exports:
                raise DataError(f"no export named `{name}` (exports: "
                                f"{', '.join(exports) or 'none'})")
            return model_of(exports[name], args, name)
        try:
            name = choose_export(program)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        return model_of(exports[name], args, name)
    if _is_sized(program):
        raise DataError(f"`{_label(program, name)}` has sizes read from the data "
                        f"({', '.join(program.size_names)}): bind them first "
                        f"(qvr.runtime.bind_sizes, or fit with data)")
    if _is_template(program):
        return instantiate(program, args, name).morphism
    problem = args_error(program, args, name)
    if problem:
        raise DataError(problem)
    if _is_program(program):
        return program
    if _is_morphism(program):
        return morphism_program(program)
    raise DataError(f"a {type(program).__name__} cannot be fitted: give a program or a "
                    f"morphism (an export of a module)")


def _smc_program(program, args: Optional[dict]):
    """What SMC generates from: `program` as given, or — when it is a parametric program,
    or a module whose first export is one — that program instantiated with `args`."""
    target, name = program, None
    exports = getattr(program, "exports", None)
    if isinstance(exports, dict) and exports and not _is_program(program):
        name = next(iter(exports))
        target = exports[name]
    if _is_template(target):
        return instantiate(target, args, name)
    problem = args_error(target, args, name)
    if problem:
        raise DataError(problem)
    return program


def _source_info(program, source: Optional[str], path: Optional[str],
                 export: Optional[str]) -> dict:
    path = path if path is not None else getattr(program, "path", None)
    text = source if source is not None else getattr(program, "source", None)
    if text is None and path and not str(path).startswith("<") and Path(path).is_file():
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    resolved = str(Path(path).resolve()) if path and not str(path).startswith("<") else path
    return {"path": resolved,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None
            else None,
            "export": export}


def fit(program, data: Optional[dict] = None, config: Union[FitConfig, dict, None] = None,
        on_event: Optional[EventCallback] = None,
        should_stop: Optional[Callable[[], bool]] = None, *,
        run_dir=None, start_from=None, potential=None, source: Optional[str] = None,
        program_path: Optional[str] = None, export: Optional[str] = None,
        vocab: Optional[list] = None) -> FitResult:
    """Fit `program` with `config.method` (see the module docstring).

    Args:
      program: a `qvr.load` result (its first export is fitted) or an export of one; a
        parametric program (a template) is fitted at `config.args` (`model_of`).
      data: arrays by observed-site / host-data name (``x``: the input); see
        `qvr.inference.data.fit_data` for what is used when it is None.
      config: a `FitConfig` or a mapping of its options (default: NUTS with defaults).
      on_event, should_stop: the event callback and the cancellation poll
        (`qvr.events`).
      run_dir: write the run record there (`qvr.runs`); `FitStarted.run_dir` names it.
      start_from: a run folder (or `qvr.runs.Run`) whose fitted parameters this fit starts
        from (`qvr.inference.front.start`); from an HMC/NUTS run, `config.start_at` says whether
        from its posterior means (default) or its draws.
      potential: SMC only: a Python potential (`qvr.smc.potentials`), multiplied with the
        constraints of the config.
      source, program_path, export: the program's text, file and export name for the
        record (default: what `qvr.load` kept on the program).
      vocab: SMC only: token id -> text, for the record and displays (default: the
        vocabulary shipped beside the program).
    """
    if isinstance(config, dict):
        config = FitConfig.from_dict(config)
    from qvr.inference.front.pretrained import with_pretrained_lm  # E10: as --lm
    config = with_pretrained_lm(program, config or FitConfig(), export).validate()
    world = _world_of(config)
    rank0_record = None
    if world.distributed:  # every rank knows rank 0's record: to end it if rank 0 dies
        from qvr.inference.distributed.world import broadcast_object
        rank0_record = broadcast_object(world, str(Path(run_dir).resolve()) if (
            run_dir is not None and world.is_writer) else None)
    if not world.is_writer:  # rank 0 alone writes the record (`qvr.inference.distributed.world`)
        run_dir = None
    with fit_dtype(config.dtype), _launcher_stop(world):
        return _fit(program, data, config, on_event, should_stop, run_dir, start_from,
                    potential, source, program_path, export, vocab, world, rank0_record)


@contextlib.contextmanager
def _launcher_stop(world):
    """Under a launch: torchrun stops the other ranks with SIGTERM when one exits; during
    the fit that becomes `RankLost` (naming the lost rank, `lost_message`), so rank 0's
    record ends as failed instead of being cut off.  Outside the main thread, or in a
    world of one, nothing changes."""
    import signal
    import threading
    if not world.distributed or threading.current_thread() is not threading.main_thread():
        yield
        return
    from qvr.inference.distributed.world import RankLost, lost_message

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
        raise RankLost(lost_message(world, "(the launcher stopped this process)"))
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _hold_launcher_stop(world) -> None:
    """While a failed distributed fit ends its record: ignore the launcher's SIGTERM.
    When one rank dies, a surviving rank's collective fails at once and torchrun sends it
    SIGTERM a moment later; raised inside this failure path, `RankLost` would cut the
    record short (seen in CI: rank 0's abandoned record left ``interrupted``).  The path
    takes at most a few seconds (`lost_ranks` waits 2 s) and then re-raises, well inside
    the launcher's 30 s grace before SIGKILL; `_launcher_stop` restores the handler."""
    import signal
    import threading
    if world.distributed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _world_of(config: FitConfig):
    """This process's `World` for the fit: a launch by torchrun (``WORLD_SIZE`` > 1) runs
    SVI data-parallel and HMC/NUTS with ``chain_method="distributed"``; any other method
    under a launch would run N copies of one fit, and is refused."""
    from qvr.inference.distributed import world as distributed
    if not distributed.launched():
        return distributed.World()
    refused = distributed.launch_refusal(config.method, config.chain_method,
                                         os.environ.get("WORLD_SIZE"))
    if refused is not None:
        option, message = refused
        raise ConfigError({option: f"this process was started by torchrun: {message}"})
    return distributed.world(config.device)


@contextlib.contextmanager
def fit_dtype(name: str):
    """Run the block with torch's default dtype `name` (``"float32"`` or ``"float64"``,
    `FitConfig.dtype`), restoring the previous default afterwards, whether the block
    returns or raises.  Everything a fit creates — data tensors (`split_data`), guides,
    MCMC positions, momenta, step sizes and mass matrices, traced ticks — follows the
    default dtype, and `_prepare` casts the model's parameters and buffers to it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, name))
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _fit(program, data, config: FitConfig, on_event, should_stop, run_dir, start_from,
         potential, source, program_path, export, vocab, world,
         rank0_record=None) -> FitResult:
    emit = Emitter(on_event)
    stop = should_stop or never
    info = _source_info(program, source, program_path, export)
    writer = None
    if run_dir is not None:
        from qvr.runs import RunWriter
        meta = {"program": info, "method": config.method, "config": config.to_dict(),
                "seed": config.seed, "data": None, "start_from": None}
        if world.distributed:
            meta["world_size"] = world.size
        writer = RunWriter(run_dir, meta)
    last_step = [None]

    def report(event: FitEvent) -> None:
        if isinstance(event, FitProgress):
            last_step[0] = event.step
        if writer is not None:
            writer.write(event)
        emit(event)

    chains = config.num_chains if config.method in ("hmc", "nuts") else \
        config.paths if config.method == "pathfinder" else 1
    total = {"svi": config.steps, "smc": config.max_len,
             "pathfinder": config.lbfgs_iters}.get(
        config.method, config.num_warmup + config.num_samples)
    report(FitStarted(method=config.method, total_steps=total, num_chains=chains,
                      config=config.to_dict(),
                      run_dir=str(writer.path) if writer is not None else None))
    result = FitResult(config.method, config=config,
                       run_dir=str(writer.path) if writer is not None else None)
    try:
        if config.seed is not None:
            torch.manual_seed(config.seed)
        ctx = _prepare(program, data, config, info, report, stop, writer, start_from,
                       potential, vocab, world)
        result = _run_method(ctx)
        result.config = config
        if writer is not None and result.status == "finished":
            _after_fit(ctx, result, writer)
        result.run_dir = str(writer.path) if writer is not None else None
    except KeyboardInterrupt:
        _save(writer, result, "cancelled", "interrupted (Ctrl-C)")
        report(FitCancelled(step=last_step[0], elapsed=emit.elapsed))
        _release(writer)
        raise
    except BaseException as exc:
        _hold_launcher_stop(world)  # the launcher's SIGTERM must not cut this record short
        msg = message_of(exc)
        if world.distributed and _is_collective_failure(exc):
            from qvr.inference.distributed.world import lost_message
            msg = lost_message(world, "during the fit", exc)
        report(FitFailed(message=msg, step=last_step[0], error_type=type(exc).__name__,
                         elapsed=emit.elapsed))
        if writer is not None:
            known = _is_user_error(exc)
            writer.write_text("error.txt", f"{type(exc).__name__}: {msg}\n" if known else
                              "".join(traceback.format_exception(exc)))
        _save(writer, result, "failed", msg)
        _release(writer)
        if rank0_record is not None and not world.is_writer:
            _end_rank0_record(world, rank0_record, msg, last_step[0], exc, emit.elapsed)
        raise
    if writer is not None and writer.failed:
        emit(FitWarning(writer.failed))
    # the results are in the record before the terminal event says so: a reader that sees
    # "finished" (the dashboard, a script tailing the record) finds them
    _save(writer, result, result.status, result.message)
    if result.status == "failed":
        report(FitFailed(message=result.message, step=result.step,
                         error_type=result.stats.get("error_type", ""), elapsed=emit.elapsed))
    elif result.status == "cancelled":
        report(FitCancelled(step=result.step, elapsed=emit.elapsed))
    else:
        report(FitFinished(summary=_plain_stats(result.stats), elapsed=emit.elapsed))
    _release(writer)
    return result


def _end_rank0_record(world, record: str, msg: str, step, exc, elapsed) -> None:
    """Another rank's failure because rank 0 died: rank 0's record, left without its
    terminal event, is ended as failed with the message naming rank 0
    (`qvr.runs.end_abandoned` writes only if no live process holds the record)."""
    from qvr.inference.distributed.world import lost_ranks
    if 0 not in lost_ranks(world):
        return
    from qvr.runs import end_abandoned
    try:
        end_abandoned(record, FitFailed(message=msg, step=step, error_type=type(exc).__name__,
                                        elapsed=elapsed))
    except OSError:
        pass


def _is_collective_failure(exc: BaseException) -> bool:
    """A torch.distributed collective that failed (its peer is gone), not our own
    `RankLost` (which already names the rank)."""
    from qvr.inference.distributed.world import RankLost
    if isinstance(exc, RankLost):
        return False
    dist_error = getattr(getattr(torch, "distributed", None), "DistError", None)
    return (dist_error is not None and isinstance(exc, dist_error)) or (
        isinstance(exc, RuntimeError) and any(w in str(exc) for w in (
            "Connection closed by peer", "Connection reset", "Broken pipe", "gloo")))


def _is_user_error(exc: BaseException) -> bool:
    from qvr.inference.distributed.world import RankLost
    from qvr.inference.front.start import StartError
    from qvr.runtime.errors import QvrRuntimeError
    return isinstance(exc, (DataError, StartError, ConfigError, QvrRuntimeError, RankLost))


def _plain_stats(stats: dict) -> dict:
    out = {}
    for k, v in stats.items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [float(x) if isinstance(x, (int, float)) and not isinstance(x, bool)
                      else x for x in v]
    return out


def set_draws(model, n: int) -> None:
    """Every composite of `model` estimates its density with `n` Monte-Carlo draws of its
    intermediate (`Compose.n_intermediate`, runtime spec 4.1: 100 by default).  Fewer
    draws make a step of a deep stochastic chain (a transformer's backbone) proportionally
    cheaper, at the price of a noisier (more biased downward) log-density estimate."""
    from qvr.runtime.combinators import composites
    for m in composites(model):
        m.n_intermediate = int(n)


def _prepare(program, data, config, info, report, stop, writer, start_from, potential,
             vocab, world=None) -> FitContext:
    from qvr.inference.front.start import load_start, require_start
    program = _bind_sizes(program, data, config, info, writer)
    if config.method == "smc":
        model, program = None, _smc_program(program, config.args)
    else:
        model = model_of(program, config.args, info.get("export"))
        from qvr.inference.front.pretrained import refuse_fitting
        refuse_fitting(model, config)  # E10: a pretrained LM is steered, not fitted
    device = torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DataError("device cuda: no CUDA device is available")
    start = None
    if start_from is None:
        require_start(config, None)  # start_at="draws" needs a run (ConfigError)
    else:
        start = load_start(start_from, config)
        start.current_sha256 = info.get("sha256")
        if model is not None:
            start.apply_to_model(model)
    x, observations = None, {}
    rows = batches = resize = None
    if model is not None and config.draws is not None:
        set_draws(model, config.draws)
    if model is not None:
        model.to(device=device, dtype=torch.get_default_dtype())  # FitConfig.dtype
        fd: FitData = resolve_data(model, config, data, info.get("path"))
        for note in fd.notes:
            report(FitWarning(note))
        if writer is not None:
            writer.meta["data"] = fd.source
            if fd.truth:
                writer.save_arrays("synthetic_truth.npz",
                                   {**numpy_dict(fd.truth),
                                    **{f"data.{k}": v for k, v in numpy_dict(fd.values).items()}})
        batched = config.method == "svi" and (config.batch_size is not None or (
            world is not None and world.distributed))
        if batched:
            x, observations, rows, batches = _minibatches(model, fd, config, device, world,
                                                          report, writer)
        else:
            whole = _read_whole(fd, report)
            x, observations = split_data(model, whole, device)
            if config.method == "nuts":  # probes for one compiled transition of any rows
                resize = _resizer(program, whole, config, info, device)
        check_data(model, x, observations)
        if writer is not None:  # `qvr compare` refuses runs on different data
            from qvr.inference.criticism.pointwise import data_sha256, observed_sites
            # the observed values only: two models of the same observations compare, also
            # when they read different covariates (host data, the input)
            whole = rows.values if rows is not None else observations  # mapped: streamed
            writer.meta["data_sha256"] = data_sha256(None, {
                k: whole[k] for k in observed_sites(model, whole)})
    if writer is not None:
        if start is not None:
            writer.meta["start_from"] = start.record()
        writer.write_json("run.json", writer.meta)
    if vocab is None:  # the record's text (SMC) and pattern axes (attention) use it
        vocab = _shipped_vocab(info.get("path"))
    return FitContext(program, model, x, observations, config, report, stop, start, potential,
                      vocab, world, rows, batches, resize)


def _resizer(program, whole: dict, config, info, device):
    """`resize(drop)` of `qvr.inference.front.resize` for this fit: the model and split
    data built from the cut data as `_prepare` built them from the whole."""
    from qvr.inference.front.resize import resizer

    def make(bound, cut):
        model = model_of(bound, config.args, info.get("export"))
        model.to(device=device, dtype=torch.get_default_dtype())
        return (model, *split_data(model, cut, device))

    return resizer(program, typed_of(program), whole, make)


def typed_of(program):
    """The checked module of `program` (a compiled module, a `qvr.load` result or an
    export waiting for its sizes), None when it has none."""
    return getattr(getattr(program, "qvr_binding", None), "typed", None) or \
        getattr(getattr(program, "owner", None), "typed", None) or \
        getattr(program, "typed", None)


def _bind_sizes(program, data, config, info, writer):
    """`program` with its sizes read from the fit's data (`object Child : FinSet N`,
    `qvr.runtime.load.bind_sizes`; synthetic data: `FitConfig.sizes`); the sizes go to
    the run record (`run.json`'s `sizes`).  A program without sizes is returned as is."""
    from qvr.runtime.load import bind_sizes
    from qvr.runtime.sizes import SizeError, bound_sizes, size_objects
    from qvr.inference.data.fit_data import data_for_sizes
    typed = typed_of(program)
    if typed is None or not size_objects(typed):
        if config.sizes:
            raise DataError(f"the program reads no size from the data: "
                            f"{', '.join(f'--size {k}={v}' for k, v in config.sizes.items())} "
                            f"does not apply")
        return program
    if _is_sized(program) or config.sizes or config.data is not None or data is not None:
        sizes = dict(config.sizes)
        if config.synthetic is not None:  # R synthetic rows: the sizes that count rows
            from qvr.runtime.sizes import row_sizes
            sizes = {**{n: config.synthetic for n in row_sizes(typed)}, **sizes}
        try:
            program = bind_sizes(program, data_for_sizes(config, data, info.get("path")),
                                 sizes)
        except SizeError as exc:
            raise DataError(str(exc)) from None
    if writer is not None:
        writer.meta["sizes"] = bound_sizes(program)
    return program


def _read_whole(fd: FitData, report) -> dict:
    """The data with memory-mapped arrays read into memory (every method but minibatch
    SVI needs the data whole), said in a note when there were any."""
    from qvr.inference.data.minibatch import is_mapped
    mapped = [k for k, v in fd.values.items() if is_mapped(v)]
    if not mapped:
        return fd.values
    import numpy as np
    report(FitWarning(f"the memory-mapped {', '.join(f'`{k}`' for k in mapped)} "
                      f"{'is' if len(mapped) == 1 else 'are'} read whole into memory: only "
                      f"SVI with --batch-size reads a batch at a time"))
    return {k: np.asarray(v) if k in mapped else v for k, v in fd.values.items()}


def _minibatches(model, fd: FitData, config, device, world, report, writer) -> tuple:
    """``(x, observations, rows, batches)`` of a minibatch (or data-parallel) SVI fit
    (`qvr.inference.data.minibatch`).  `x`/`observations` are the whole data when it is in
    memory; with memory-mapped data they are one batch of rows (what the data check,
    the guide's shapes and the summaries after the fit read)."""
    import numpy as np
    from qvr.inference.distributed.world import World, broadcast_object
    from qvr.inference.data.minibatch import Batches, RowData, check_supported, describe, \
        split_rows
    world = world or World()
    x_all, obs_all = split_rows(model, fd.values, device)
    rows = RowData(x_all, obs_all, device)
    check_supported(model, obs_all)
    seed = config.seed if config.seed is not None else int(torch.randint(0, 2 ** 62, ()))
    seed = int(broadcast_object(world, seed))  # the same batches on every rank
    batches = Batches(rows.n, config.batch_size or rows.n, seed, world.rank, world.size)
    if config.batch_size is not None and batches.full:
        report(FitWarning(f"--batch-size {config.batch_size} is at least the {rows.n} rows "
                          f"of the data: every step uses all of them"))
    if not rows.row_keys and rows.n == 1 and not batches.full:
        raise DataError("--batch-size: the data has no rows to draw batches from")
    if writer is not None:
        writer.meta["batch"] = {**describe(batches), "mapped": rows.mapped}
    if rows.mapped:
        x, observations = rows.take(np.arange(min(batches.batch_size, rows.n)))
    else:
        x, observations = x_all, obs_all
    return x, observations, rows, batches


def _shipped_vocab(path: Optional[str]) -> Optional[list]:
    if not path:
        return None
    from qvr.datafiles import find_vocab, load_vocab
    found = find_vocab(path)
    return load_vocab(found) if found is not None else None


def _run_method(ctx: FitContext) -> FitResult:
    if ctx.config.method == "svi" and split_guide(ctx.config.guide)[0] in ("map", "laplace"):
        from qvr.inference.methods.laplace import run  # the mode, not an ELBO
    elif ctx.config.method == "svi":
        from qvr.inference.methods.svi import run
    elif ctx.config.method == "smc" and ctx.config.lm is not None:
        from qvr.inference.front.pretrained import lm_replaces
        note = lm_replaces(ctx.program, ctx.config)  # E10: --lm beside a pretrained export
        if note:
            ctx.report(FitWarning(note))
        from qvr.inference.methods.smc_lm import run  # a pretrained causal LM (--lm)
    elif ctx.config.method == "smc":
        from qvr.inference.front.pretrained import refuse_fitting
        refuse_fitting(ctx.program, ctx.config)  # E10: a pretrained LM it does not steer
        from qvr.inference.methods.smc import run
    elif ctx.config.method == "prior":
        from qvr.inference.methods.prior import run
    elif ctx.config.method == "pathfinder":
        from qvr.inference.methods.pathfinder import run
    else:
        from qvr.inference.methods.mcmc import run
        return run(ctx)  # samples on its own threads (`methods/mcmc.py`)
    from qvr.inference.threads import compute_threads
    with compute_threads(ctx.config.threads) as (threads, why):  # one on a busy machine
        if why.startswith("busy"):
            ctx.report(FitNote(f"computing on one thread: {why} (--threads N to choose)"))
        result = run(ctx)
    result.stats.setdefault("threads", threads)
    return result


#: the methods whose finished fits record pointwise terms (`qvr.inference.criticism.pointwise`)
POINTWISE_METHODS = ("hmc", "nuts", "svi", "prior", "pathfinder")


def _after_fit(ctx: FitContext, result: FitResult, writer) -> None:
    """The pointwise log-likelihood, predictive replicates and checks of a finished fit
    (issue 25); a failure there is a warning, never the fit's failure."""
    if ctx.config.method not in POINTWISE_METHODS or ctx.model is None \
            or not ctx.config.pointwise:
        return
    if ctx.rows is not None and ctx.rows.mapped:
        ctx.report(FitWarning(f"the pointwise log-likelihood and predictive checks were not "
                              f"recorded: the data is memory-mapped ({ctx.rows.n:,} rows), "
                              f"and its terms would hold draws x rows values"))
        return
    from qvr.inference.criticism.pointwise import record
    try:
        note = record(ctx, result, writer)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        note = (f"the pointwise log-likelihood and predictive checks were not recorded: "
                f"{type(exc).__name__}: {message_of(exc)}")
    if note:
        ctx.report(FitWarning(note))


def _save(writer, result: FitResult, status: str, message: str) -> None:
    """Save the results into the record (whatever the status)."""
    if writer is None:
        return
    try:
        from qvr.inference.front.save import save_results
        save_results(writer, result, status, message)
    except Exception as exc:  # never lose the terminal event for a failed save
        try:
            writer.write_text("error.txt", f"saving the results failed: {exc}\n"
                              + "".join(traceback.format_exception(exc)))
        except OSError:
            pass


def _release(writer) -> None:
    if writer is not None:
        writer.close()

