"""`qvr run FILE --method M [options]`: run an inference method on a QVR program and keep
everything it reports in a run folder.

The command owns what every method shares: loading the program (`qvr.load`), the run
folder ``RUNS/NAME-TIMESTAMP/`` (``config.json``; ``metrics.jsonl`` appended and flushed
once per step; the method's results), Ctrl-C handling and exit statuses.  Each method is
a module named in `METHODS` that provides

* ``add_arguments(group)`` — its options, added to an argument group of ``qvr run``
  (options of a method other than the chosen one are rejected as usage errors);
* optionally ``validate(args)`` — checks the options together before anything is loaded,
  raising `UsageError`;
* ``run(args, program, folder, should_stop) -> int`` — runs, writes its results with
  ``folder.write_json`` and reports each step with ``folder.metric``; it raises
  `ModelError` for problems of the model (the message is then also kept in the run
  folder as ``error.txt``).

Both are imported when ``qvr`` starts, so a method module must not import torch at import
time.

Ctrl-C once asks the method to stop after the current step (it saves a partial result and
the command exits 130); a second Ctrl-C interrupts at once.  Nothing already reported is
lost either way: metrics are flushed line by line, and the command always says where the
run folder is.

Exit status: 0 success, 1 an error of the model or its data (a clear message, no
traceback), 2 usage or I/O errors, 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import signal
import sys
import time
from pathlib import Path

# method name -> module providing add_arguments(group) and run(args, program, folder, stop)
METHODS = {"smc": "qvr.smc.cli", "svi": "qvr.inference.cli", "hmc": "qvr.inference.cli",
           "nuts": "qvr.inference.cli"}

_OWN = "_run_method_options"  # args attribute: {method: {dest: default}}


class UsageError(Exception):
    """A problem with the command line or the files it names (exit status 2)."""


class ModelError(Exception):
    """A problem of the model or its data, already phrased for the user (exit status 1)."""


class RunFolder:
    """``RUNS/NAME-TIMESTAMP/``: a JSON writer and the per-step metrics log."""

    def __init__(self, root: Path, name: str):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "run"
        path = root / f"{base}-{stamp}"
        i = 2
        while path.exists():
            path = root / f"{base}-{stamp}-{i}"
            i += 1
        path.mkdir(parents=True)
        self.path = path
        self._metrics = open(path / "metrics.jsonl", "a", encoding="utf-8")

    def write_json(self, name: str, obj) -> Path:
        target = self.path / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, allow_nan=True) + "\n", encoding="utf-8")
        tmp.replace(target)
        return target

    def metric(self, record: dict) -> None:
        self._metrics.write(json.dumps(record, allow_nan=True) + "\n")
        self._metrics.flush()

    def close(self) -> None:
        self._metrics.close()


def register(sub) -> None:
    p = sub.add_parser("run", help="run inference on a program (SVI, HMC, NUTS, SMC)",
                       description="Run an inference method on a QVR program; results and "
                                   "per-step metrics go to a run folder.")
    p.add_argument("file", help="the .qvr program")
    p.add_argument("--method", required=True, choices=sorted(METHODS))
    p.add_argument("--export", metavar="NAME",
                   help="the exported program to use (default: the first export)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--name", help="run folder name (default: the file's stem)")
    p.add_argument("--runs-dir", default="runs", metavar="DIR",
                   help="where run folders are created (default ./runs)")
    own = {}
    first = {}  # module -> the first method it serves (one module may serve several)
    for method, module_name in METHODS.items():
        if module_name in first:
            own[method] = own[first[module_name]]
            continue
        first[module_name] = method
        served = "|".join(m for m, n in METHODS.items() if n == module_name)
        group = p.add_argument_group(f"--method {served}")
        importlib.import_module(module_name).add_arguments(group)
        # remember each option's default, and make it absent unless given, so that an
        # option of another method can be told apart from a default
        own[method] = {}
        for action in group._group_actions:
            own[method][action.dest] = action.default
            action.default = argparse.SUPPRESS
    p.set_defaults(func=run, **{_OWN: own})


def _method_args(args) -> None:
    """Fill the chosen method's defaults; reject options of other methods."""
    own = getattr(args, _OWN)
    for method, dests in own.items():
        for dest, default in dests.items():
            if method == args.method:
                if not hasattr(args, dest):
                    setattr(args, dest, default)
            elif hasattr(args, dest) and dest not in own[args.method]:
                flag = "--" + dest.replace("_", "-")
                raise UsageError(f"{flag} is an option of --method {method}, "
                                 f"not of --method {args.method}")


def _load(args):
    path = Path(args.file)
    from qvr.runtime.errors import QvrLoadError
    import qvr
    try:
        program = qvr.load(path)
    except QvrLoadError as exc:
        raise ModelError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{args.file}: cannot read file: {exc}") from None
    if args.export is not None:
        if args.export not in program.exports:
            names = ", ".join(program.exports) or "none"
            raise ModelError(f"{args.file}: no export named `{args.export}` (exports: {names})")
        return program.exports[args.export]
    if program.morphism is None:
        raise ModelError(f"{args.file}: the module exports no program to run")
    return program


def run(args) -> int:
    tool = "qvr run"
    try:
        _method_args(args)
        module = importlib.import_module(METHODS[args.method])
        if hasattr(module, "validate"):
            module.validate(args)
        if not Path(args.file).is_file():
            raise UsageError(f"{args.file}: no such file")
        import torch
        torch.manual_seed(args.seed)  # parameters are initialised while loading
        program = _load(args)
        folder = RunFolder(Path(args.runs_dir), args.name or Path(args.file).stem)
    except UsageError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 2
    except ModelError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{tool}: cannot create the run folder in {args.runs_dir}: {exc.strerror}",
              file=sys.stderr)
        return 2
    config = {"method": args.method, "file": str(Path(args.file).resolve()),
              "argv": sys.argv[1:],
              "options": {k: v for k, v in vars(args).items()
                          if k not in ("func", _OWN) and not callable(v)}}
    folder.write_json("config.json", config)
    print(f"{tool}: run folder {folder.path}", file=sys.stderr)

    from qvr.inference.events import StopToken
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
    try:
        status = module.run(args, program, folder, stop)
    except KeyboardInterrupt:
        print(f"{tool}: interrupted; what was reported is in {folder.path}", file=sys.stderr)
        return 130
    except ModelError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        (folder.path / "error.txt").write_text(f"{exc}\n", encoding="utf-8")
        status = 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        folder.close()
    if stop.cancelled and status == 0:
        status = 130
    print(f"{tool}: results in {folder.path}", file=sys.stderr)
    return status
