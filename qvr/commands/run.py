"""`qvr run FILE --method M [options]`: fit a QVR program from the command line and keep
everything in a run record (`qvr.runs`).

The options, their defaults, help texts and value checks are those of
`qvr.inference.config.FitConfig` (one declaration for the command line, the dashboard and
`fit`); an option of another method is a usage error.  The command loads the program,
creates ``RUNS/NAME-TIMESTAMP/``, calls `qvr.inference.fit` with it, shows live progress
on a terminal (`qvr.commands.progress`, rich), and prints the run's summary from the
record (`qvr.commands.report`, the same text as ``qvr show RUN``).

A parametric program (``program p(spread : Real) : A -> B``, a template) is fitted at
the numbers given with ``--arg NAME=VALUE``, once per parameter (`FitConfig.args`; the
record keeps them); a missing or unknown name, or ``--arg`` for an export that is not a
template, is a usage error found before a run folder is made.

Data: ``--data FILE`` or ``--synthetic N``; without either, the data shipped beside the
program (``data/NAME.json``) is used when there is one.  ``--from RUN`` starts from a saved
run's fitted parameters (SMC generation from a fitted language model); from an HMC/NUTS
run, ``--start-at means|draws`` chooses its posterior means (default) or its draws, and
one line on stderr says what the fit takes from the run.

Ctrl-C once asks the fit to stop after the current step (everything so far is saved and
the command exits 130); a second Ctrl-C interrupts at once (the record then says
cancelled).

Exit status: 0 success, 1 an error of the model or its data (a clear message, no
traceback), 2 usage or I/O errors, 130 interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from pathlib import Path

from qvr.inference.config import ALL, FITTING, METHODS, ConfigError, FitConfig

_GIVEN = "_fit_options_given"


class UsageError(Exception):
    """A problem with the command line or the files it names (exit status 2)."""


class ModelError(Exception):
    """A problem of the model or its data, already phrased for the user (exit status 1)."""


def _arg_type(opt):
    def parse(text):
        try:
            return opt.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = getattr(opt.parse, "__name__", "value")
    return parse


def flag_of(field, opt) -> str:
    return opt.flag or "--" + field.name.replace("_", "-")


def add_fit_options(p) -> None:
    """The `FitConfig` options as argparse options, one group per set of methods (absent
    unless given, so that options of other methods can be told apart)."""
    groups = {}
    for f, opt in FitConfig.options():
        if opt.flag is None:
            continue
        key = opt.methods
        if key not in groups:
            title = "options of every method" if key == ALL else \
                "--method " + "|".join(m for m in METHODS if m in key)
            groups[key] = p.add_argument_group(title)
        kw = {"dest": f.name, "default": argparse.SUPPRESS,
              "help": FitConfig.help_of(f.name)}
        if opt.choices:
            kw["choices"] = opt.choices
        else:
            kw["type"] = _arg_type(opt)
            if opt.metavar:
                kw["metavar"] = opt.metavar
        if opt.repeat:
            kw["action"] = "append"
        groups[key].add_argument(flag_of(f, opt), **kw)
    smc = groups.get(frozenset({"smc"}))
    if smc is not None:
        smc.add_argument("--no-cache", dest="cache", action="store_false",
                         default=argparse.SUPPRESS,
                         help="SMC: recompute every prefix at each step instead of keeping "
                              "per-particle state")


    fitting = groups.get(FITTING)
    if fitting is not None:
        fitting.add_argument("--no-pointwise", dest="pointwise", action="store_false",
                             default=argparse.SUPPRESS,
                             help="do not record the pointwise log-likelihood and "
                                  "predictive replicates after the fit (no LOO, no "
                                  "predictive checks)")


def config_from_args(args) -> FitConfig:
    """The `FitConfig` of the command line; options of other methods are usage errors."""
    method = args.method
    given = {}
    file = getattr(args, "file", None)
    if file and Path(file).is_file():
        # the options shipped with the program (data/NAME.fit.json) are its defaults
        from qvr.inference.config import shipped_options
        try:
            path, shipped = shipped_options(file, method)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        given.update(shipped)
        args.shipped_options = (path, shipped)
    if getattr(args, "config_file", None):
        given.update(_config_file(args.config_file, method))
    for f, opt in FitConfig.options():
        if f.name == "method" or not hasattr(args, f.name):
            continue
        if method not in opt.methods:
            flag = {"cache": "--no-cache", "pointwise": "--no-pointwise"}.get(
                f.name) or flag_of(f, opt)
            owners = "|".join(m for m in METHODS if m in opt.methods)
            raise UsageError(f"{flag} is an option of --method {owners}, "
                             f"not of --method {method}")
        value = getattr(args, f.name)
        if opt.gather is not None:  # e.g. --arg NAME=VALUE, repeated: a mapping
            try:
                value = opt.gather(value)
            except ValueError as exc:
                raise UsageError(f"{flag_of(f, opt)}: {exc}") from None
        if isinstance(value, dict) and isinstance(given.get(f.name), dict):
            value = {**given[f.name], **value}  # per name over the shipped / --config ones
        given[f.name] = value
    if method == "smc" and "lm" not in given and file and Path(file).is_file():
        # E10: an export that steers a pretrained LM runs as `--lm FOLDER` would
        from qvr.sema.pretrained_export import steered_in_file
        found = steered_in_file(file, getattr(args, "export", None))
        if found is not None:
            given["lm"] = found.folder
            if given.get("lm_dtype", "float32") == "float32":
                given["lm_dtype"] = found.dtype
    cfg = FitConfig(method=method, **given)
    errors = cfg.errors()
    if errors:
        flags = {f.name: flag_of(f, o) for f, o in FitConfig.options()}
        raise UsageError("; ".join(f"{flags.get(k, k)}: {v}" for k, v in errors.items()))
    return cfg


def _say_shipped(args, config, tool) -> None:
    """One line naming the shipped options this fit uses (those nothing overrode)."""
    path, shipped = getattr(args, "shipped_options", (None, {}))
    used = {k: v for k, v in shipped.items() if getattr(config, k, None) == v}
    if path is not None and used:
        text = ", ".join(f"{k} {v}" for k, v in used.items())
        print(f"{tool}: options shipped with the program ({path}): {text}", file=sys.stderr)


def _config_file(path: str, method: str) -> dict:
    import json
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--config {path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a JSON object of fit options")
    from qvr.inference.config import check_option_names
    try:
        check_option_names(data, f"--config {path}", method)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    data.pop("method", None)
    return data


def _check_start_from(path, config):
    """`--from RUN` must name a readable run record, of a kind `--start-at` can start from
    (`start_at_error`): usage errors (exit 2) found before the new run's folder is created
    (torch-free: `qvr.runs` reads records without it).  The run, or None without --from."""
    from qvr.inference.config import start_at_error
    from qvr.runs import RunRecordError, open_run
    at = config.start_choice
    if path is None:
        problem = start_at_error(at, has_run=False)
        if problem:
            raise UsageError(f"--start-at {problem}")
        return None
    if not Path(path).is_dir():
        raise UsageError(f"--from {path}: no such run folder")
    try:
        run = open_run(path)
    except RunRecordError as exc:
        raise UsageError(f"--from {exc}") from None
    problem = start_at_error(at, run.method)
    if problem:
        raise UsageError(f"--start-at {problem}")
    return run


def register(sub) -> None:
    p = sub.add_parser("run", help="run inference on a program (SVI, HMC, NUTS, Pathfinder, "
                                   "SMC, prior)",
                       description="Fit a QVR program with SVI, HMC, NUTS or Pathfinder "
                                   "(--method pathfinder: normal approximations along L-BFGS "
                                   "paths, resampled by PSIS weights; its k-hat says how far "
                                   "to trust them), draw its prior "
                                   "predictive (--method prior), or generate from it with "
                                   "SMC; everything goes to a run record (after a fit: the "
                                   "pointwise log-likelihood, predictive replicates, "
                                   "PSIS-LOO and predictive checks).")
    p.add_argument("file", help="the .qvr program")
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--export", metavar="NAME",
                   help="the exported program to use (default: the first export)")
    p.add_argument("--name", help="run folder name (default: the file's stem)")
    p.add_argument("--runs-dir", default="runs", metavar="DIR",
                   help="where run folders are created (default ./runs)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="write the run record into exactly this folder (instead of "
                        "RUNS-DIR/NAME-TIMESTAMP)")
    p.add_argument("--config", dest="config_file", metavar="FILE",
                   help="fit options as a JSON object of FitConfig fields (command-line "
                        "options override it); the dashboard starts fits this way")
    p.add_argument("--from", dest="start_from", metavar="RUN",
                   help="start from a saved run's fitted parameters (e.g. SMC generation "
                        "from an SVI-fitted language model); from an HMC/NUTS run, "
                        "--start-at chooses its means or its draws")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="run the fit on N processes of this machine, started by torch's "
                        "launcher (torchrun --standalone --nproc-per-node N): SVI "
                        "data-parallel, HMC/NUTS with --chain-method distributed; rank 0 "
                        "writes the run record (for several machines run torchrun "
                        "yourself, see the README)")
    p.add_argument("--vocab", metavar="FILE",
                   help="a vocabulary (JSON list of strings, index = token id) for SMC's "
                        "text, --forbid/--require words and attention patterns (default: "
                        "data/NAME.vocab.json beside the program)")
    add_fit_options(p)
    p.set_defaults(func=run)


def _missing_relation(exc):
    """`(relation, key)` when the load failed only for want of a `from_data("KEY")` table
    (every error is a QVR951 carrying them), else None."""
    errors = [d for d in getattr(exc, "diagnostics", None) or [] if d.is_error]
    found = [dict(d.data) for d in errors if d.code == "QVR951" and dict(d.data).get("key")]
    if not errors or len(found) != len(errors):
        return None
    return found[0]["relation"], found[0]["key"]


def load_program(file: str, export, data_file=None):
    """`(program, export_name)` of a file, as `qvr run` and the dashboard's worker do.
    The export may be a parametric program (a template: `fit` instantiates it with
    `FitConfig.args`, ``--arg NAME=VALUE``).

    Observed relations (``from_data("KEY")``) are read from the data file (`data_file`,
    else the one shipped beside the program) under ``from_data/KEY``."""
    from qvr.inference.data.fit_data import DataError, relations_for
    from qvr.runtime.errors import QvrLoadError
    import qvr
    try:
        relations = relations_for(file, data_file)
    except DataError as exc:
        raise ModelError(str(exc)) from None
    try:
        program = qvr.load(Path(file), data=relations or None)
    except QvrLoadError as exc:
        missing = _missing_relation(exc)
        if missing is not None:  # a from_data relation without its table (QVR951)
            name, key = missing
            raise ModelError(f"{file}: the observed relation `{name}` needs its table "
                             f"`{key}`: give it in the data file under \"from_data/{key}\" "
                             f"(--data FILE), as the shipped data files do") from None
        raise ModelError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: cannot read file: {exc}") from None
    if export is not None:
        if export not in program.exports:
            names = ", ".join(program.exports) or "none"
            raise ModelError(f"{file}: no export named `{export}` (exports: {names})")
        return program.exports[export], export
    if not program.exports:
        raise ModelError(f"{file}: the module exports nothing to run")
    from qvr.inference.front.fitting import choose_export
    try:
        name = choose_export(program)
    except ValueError as exc:
        raise ModelError(f"{file}: {exc}") from None
    return program.exports[name], name


def run(args) -> int:
    from qvr.inference.distributed.world import env_rank, launched
    rank = env_rank()
    tool = "qvr run" if rank == 0 else f"qvr run [rank {rank}]"
    if getattr(args, "nproc", None) is not None and not launched():
        return _launch(args, tool)
    try:
        config = config_from_args(args)
        if not Path(args.file).is_file():
            raise UsageError(f"{args.file}: no such file")
        start_run = _check_start_from(args.start_from, config)
        args.vocab_tokens = _vocab(args.vocab)
        import torch
        torch.manual_seed(config.seed or 0)  # parameters are initialised while loading
        program, export = load_program(args.file, args.export, config.data)
        if config.lm is None:  # E10: before a run folder is made for nothing
            from qvr.inference.data.fit_data import DataError
            from qvr.inference.front.pretrained import refuse_fitting
            try:
                refuse_fitting(program, config)
            except DataError as exc:
                raise ModelError(f"{args.file}: {exc}") from None
        from qvr.inference.front.fitting import args_error
        problem = args_error(program, config.args, export)  # a template's --arg NAME=VALUE
        if problem:
            raise UsageError(problem)
        from qvr.runs import RecordError, new_run_dir
        try:
            if rank != 0:  # rank 0 alone writes the record (qvr.inference.distributed.world)
                folder = None
            elif args.run_dir:
                folder = Path(args.run_dir)
                if (folder / "run.json").exists():
                    raise UsageError(f"--run-dir {folder}: already holds a run record")
            else:
                folder = new_run_dir(args.runs_dir, args.name or Path(args.file).stem)
        except RecordError as exc:
            raise UsageError(str(exc)) from None
    except UsageError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 2
    except ModelError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    if rank != 0:
        return _fit(args, config, program, export, None, tool)
    print(f"{tool}: run folder {folder}", file=sys.stderr)
    if start_run is not None:
        from qvr.inference.front.start import describe
        print(f"{tool}: starting from {args.start_from} ({start_run.method}): "
              f"{describe(config.method, start_run.method, config.start_choice)}",
              file=sys.stderr)
    _say_shipped(args, config, tool)
    args.internal_error_dir = folder  # a bug's traceback goes to the run folder
    return _fit(args, config, program, export, folder, tool)


def _launch(args, tool) -> int:
    """`qvr run --nproc N`: the same command on N processes started by torch's launcher
    (``python -m torch.distributed.run --standalone --nproc-per-node N -m qvr run ...``),
    into a run folder chosen here (given to every rank as ``--run-dir``; rank 0 writes
    it).  Returns the launcher's exit status."""
    import subprocess
    n = args.nproc
    if n < 1:
        print(f"{tool}: --nproc {n}: must be at least 1", file=sys.stderr)
        return 2
    try:  # what every rank would refuse, said once before any process or folder is made
        config = config_from_args(args)
    except UsageError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 2
    from qvr.inference.distributed.world import launch_refusal
    refused = launch_refusal(config.method, config.chain_method, n) if n > 1 else None
    if refused is not None:
        print(f"{tool}: --nproc {n}: {refused[1]}", file=sys.stderr)
        return 2
    if not Path(args.file).is_file():
        print(f"{tool}: {args.file}: no such file", file=sys.stderr)
        return 2
    argv, skip = [], False
    for a in args.argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            argv.append(a)
    if not args.run_dir:
        from qvr.runs import RecordError, new_run_dir
        try:
            folder = new_run_dir(args.runs_dir, args.name or Path(args.file).stem)
        except RecordError as exc:
            print(f"{tool}: {exc}", file=sys.stderr)
            return 2
        argv += ["--run-dir", str(folder)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={n}", "-m", "qvr", *argv]
    print(f"{tool}: starting {n} processes: torchrun --standalone --nproc-per-node {n} "
          f"-m qvr {' '.join(argv)}", file=sys.stderr)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:  # the launcher got it too and stops the ranks
        return 130


def _vocab(path):
    """The tokens of `--vocab FILE` (None without it); a file that does not load is a usage
    error, found before a run folder is made."""
    if path is None:
        return None
    from qvr.datafiles import DataFileError, load_vocab
    if not Path(path).is_file():
        raise UsageError(f"--vocab {path}: no such file")
    try:
        return load_vocab(path)
    except (DataFileError, OSError, ValueError) as exc:
        raise UsageError(f"--vocab {exc}") from None


def _fit(args, config, program, export, folder, tool) -> int:
    from qvr.commands.progress import Progress
    from qvr.commands.report import render_run
    from qvr.inference.data.fit_data import DataError
    from qvr.events import StopToken
    from qvr.inference.front.fitting import fit
    from qvr.inference.front.start import StartError
    from qvr.runs import RecordError, open_run
    from qvr.runtime.errors import QvrRuntimeError

    stop = StopToken()

    def on_sigint(signum, frame):
        if stop.cancelled:
            raise KeyboardInterrupt
        stop.cancel()
        print(f"\n{tool}: stopping after this step (Ctrl-C again to abort)", file=sys.stderr)

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: Ctrl-C is not ours to handle
        previous = None
    from qvr.inference.distributed.world import RankLost, launched
    progress = Progress(sys.stderr) if folder is not None else contextlib.nullcontext()
    status = 0
    try:
        with progress:
            fit(program, config=config,
                on_event=progress.update if folder is not None else None, should_stop=stop,
                run_dir=folder, start_from=args.start_from, program_path=args.file,
                export=export, vocab=getattr(args, "vocab_tokens", None))
    except KeyboardInterrupt:
        if folder is not None:
            print(f"{tool}: interrupted; what was reported is in {folder}", file=sys.stderr)
        return 130
    except (QvrRuntimeError, DataError, StartError, ConfigError, RecordError,
            RankLost) as exc:
        print(f"{tool}: {args.file}: {exc}", file=sys.stderr)
        status = 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if launched():
            from qvr.inference.distributed.world import finish
            finish()
    if folder is None:  # another rank than 0: it writes nothing and says nothing more
        return status
    if status == 0:
        run = open_run(folder)
        print(render_run(run))
        if run.status == "failed":
            summary = run.summary or {}
            print(f"{tool}: {args.file}: {summary.get('message', 'the fit failed')}",
                  file=sys.stderr)
            status = 1
    if stop.cancelled and status == 0:
        status = 130
    print(f"{tool}: results in {folder}", file=sys.stderr)
    return status
