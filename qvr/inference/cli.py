"""``qvr run FILE --method svi|hmc|nuts``: fit a program from the command line.

Adds the options of the three methods to ``qvr run`` (`add_arguments`), checks them
(`validate`), and runs `qvr.inference.fit` (`run`) with

* data from ``--data FILE`` (``.npz``, ``.pt`` or ``.json``: arrays by site or host-data
  name, ``x`` for the program input) or ``--synthetic N`` (N rows drawn from the prior
  predictive; the drawn latents are kept in ``synthetic_truth.npz``); the data is checked
  against the program before any fitting;
* a live progress line on a terminal (loss, or acceptance, step size and divergences);
* in the run folder: ``metrics.jsonl`` (one line per step and chain, flushed), ``draws.jsonl``
  (MCMC draws as they come, for models of moderate size), then ``samples.npz`` or
  ``params.npz``, ``summary.json`` and ``summary.txt``; and the summary table on stdout.

A non-finite loss, or data that does not fit, ends with a message (exit status 1), not a
traceback.  The generic parts (loading, the run folder, Ctrl-C, exit statuses) are
`qvr.commands.run`'s.  This module imports torch only inside `run`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from qvr.commands.argtypes import non_negative_int, positive_float, positive_int

_SVI_ONLY = ("steps", "lr", "elbo_particles")
_MCMC_ONLY = ("warmup", "samples", "chains", "step_size", "max_tree_depth", "leapfrog_steps",
              "target_accept", "mass_matrix", "chain_method", "init")
_NUTS_ONLY = ("max_tree_depth",)
_HMC_ONLY = ("leapfrog_steps",)
_DRAWS_JSONL_LIMIT = 10_000  # coordinates per draw above which draws.jsonl is not written


def _probability(text: str) -> float:
    value = positive_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text}")
    return value


def add_arguments(group) -> None:
    """The options of ``--method svi|hmc|nuts`` (defaults None: filled in by `validate`)."""
    a = group.add_argument
    a("--data", metavar="FILE", help="observed data and host data (.npz, .pt or .json); "
      "the key x is the program input")
    a("--synthetic", type=positive_int, metavar="N",
      help="fit N rows drawn from the program's prior predictive instead of --data")
    a("--device", choices=("cpu", "cuda"), default="cpu", help="where to fit (default cpu)")
    a("--steps", type=positive_int, metavar="N", help="SVI: optimisation steps (default 1000)")
    a("--lr", type=positive_float, metavar="LR", help="SVI: Adam learning rate (default 0.01)")
    a("--elbo-particles", type=positive_int, metavar="K",
      help="SVI: ELBO particles per step (default 1)")
    a("--warmup", type=non_negative_int, metavar="N", help="HMC/NUTS: warmup iterations "
      "(default 500)")
    a("--samples", type=positive_int, metavar="N", help="HMC/NUTS: draws per chain (default 500)")
    a("--chains", type=positive_int, metavar="C", help="HMC/NUTS: chains (default 4)")
    a("--step-size", type=positive_float, metavar="EPS",
      help="HMC/NUTS: initial step size (default 0.1)")
    a("--max-tree-depth", type=positive_int, metavar="D", help="NUTS: maximum tree depth "
      "(default 10)")
    a("--leapfrog-steps", type=positive_int, metavar="L",
      help="HMC: leapfrog steps per iteration (default 10)")
    a("--target-accept", type=_probability, metavar="P",
      help="HMC/NUTS: step-size adaptation target (default 0.65 HMC, 0.8 NUTS)")
    a("--mass-matrix", choices=("identity", "diagonal", "dense"),
      help="HMC/NUTS: mass matrix (default identity for HMC, diagonal for NUTS)")
    a("--chain-method", choices=("vectorized", "sequential", "parallel"),
      help="HMC/NUTS: run chains as one batch (default), one after the other, or "
           "split over worker processes")
    a("--init", choices=("prior", "zero"), help="HMC/NUTS: initial positions (default prior)")


_DEFAULTS = {"steps": 1000, "lr": 0.01, "elbo_particles": 1, "warmup": 500, "samples": 500,
             "chains": 4, "step_size": 0.1, "max_tree_depth": 10, "leapfrog_steps": 10,
             "chain_method": "vectorized", "init": "prior"}


def validate(args) -> None:
    """Reject options of the other methods and conflicting data sources; fill defaults."""
    from qvr.commands.run import UsageError
    method = args.method
    not_for = {"svi": _MCMC_ONLY, "hmc": _SVI_ONLY + _NUTS_ONLY, "nuts": _SVI_ONLY + _HMC_ONLY}
    for dest in not_for[method]:
        if getattr(args, dest, None) is not None:
            raise UsageError(f"--{dest.replace('_', '-')} is not an option of --method {method}")
    if getattr(args, "data", None) and getattr(args, "synthetic", None):
        raise UsageError("give either --data FILE or --synthetic N, not both")
    for dest, default in _DEFAULTS.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available")


def load_data(path: str) -> dict:
    """Arrays by name from ``.npz``, ``.pt`` or ``.json``."""
    import numpy as np
    import torch
    from qvr.commands.run import UsageError
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such data file")
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as f:
                return {k: torch.as_tensor(f[k]) for k in f.files}
        if p.suffix == ".pt":
            obj = torch.load(p, map_location="cpu", weights_only=True)
        elif p.suffix == ".json":
            obj = json.loads(p.read_text(encoding="utf-8"))
            obj = {k: torch.as_tensor(np.asarray(v)) for k, v in obj.items()}
        else:
            raise UsageError(f"{path}: unknown data format (expected .npz, .pt or .json)")
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"{path}: cannot read data: {exc}") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path}: expected a mapping from names to arrays")
    return {str(k): torch.as_tensor(v) for k, v in obj.items()}


def synthesize(model, n: int) -> tuple[dict, dict]:
    """`n` rows from the prior predictive: `(data, truth)` (observed values and input in
    `data`, every drawn latent in `truth`)."""
    import torch
    from qvr.commands.run import ModelError
    from qvr.inference.trace import trace
    from qvr.runtime.errors import MissingValueError
    dom = model.domain
    try:
        if dom.is_discrete and dom.width == 1:
            x = torch.randint(0, dom.size, (n, 1))
        elif dom.is_continuous:
            x = torch.randn(n, dom.width)
        else:
            x = torch.zeros(n, 1)
    except (TypeError, AttributeError):
        x = torch.zeros(n, 1)
    try:
        with torch.no_grad():
            tr = trace(model, x)
    except MissingValueError as exc:
        raise ModelError(f"--synthetic cannot run this program: {exc}; give the data with "
                         "--data FILE") from None
    data, truth = {"x": x}, {}
    for name, site in tr.sites.items():
        if site.is_deterministic or not isinstance(site.value, torch.Tensor):
            continue
        (data if site.kind == "observe" else truth)[name] = site.value.detach()
    return data, truth


class _Progress:
    """One live status line on a terminal (nothing otherwise)."""

    def __init__(self, live: bool):
        from qvr.inference.events import Throttle
        self.live = live
        self.throttle = Throttle(0.1)
        self.chains = {}
        self.shown = False

    def update(self, event) -> None:
        if not self.live:
            return
        self.chains[event.chain] = event
        if not self.throttle.due(event.step, event.total):
            return
        evs = list(self.chains.values())
        step = min(e.step for e in evs if e.phase == event.phase) if evs else event.step
        frac = step / max(event.total, 1)
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        m = event.metrics
        if event.method == "svi":
            info = f"loss {m.get('loss', float('nan')):.4g}"
        else:
            same = [e for e in evs if e.phase == event.phase]
            acc = sum(e.metrics.get("accept_prob", 0.0) for e in same) / max(len(same), 1)
            div = int(sum(e.metrics.get("divergences", 0.0) for e in same))
            eps = sum(e.metrics.get("step_size", 0.0) for e in same) / max(len(same), 1)
            info = f"accept {acc:.2f}  step size {eps:.3g}  divergences {div}"
        print(f"\r{event.phase:<12} [{bar}] {step}/{event.total}  {info}   ", end="",
              file=sys.stderr, flush=True)
        self.shown = True

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def run(args, program, folder, should_stop) -> int:
    import numpy as np
    import torch

    from qvr.commands.run import ModelError
    from qvr.inference.events import DrawsChunk, FitFailed, FitProgress
    from qvr.inference.fit import DataError, FitConfig, check_data, fit, model_of, split_data
    from qvr.runtime.errors import QvrRuntimeError

    try:
        model = model_of(program)
    except DataError as exc:
        raise ModelError(f"{args.file}: {exc}") from None
    if args.synthetic:
        data, truth = synthesize(model, args.synthetic)
        np.savez(folder.path / "synthetic_truth.npz",
                 **{k: v.cpu().numpy() for k, v in truth.items()},
                 **{f"data.{k}": v.cpu().numpy() for k, v in data.items()})
    elif args.data:
        data = load_data(args.data)
    else:
        data = {}
    device = torch.device(args.device)
    model.to(device)
    x, observations = split_data(model, data, device)
    try:
        check_data(model, x, observations)  # bad data: a clear error before any fitting
    except DataError as exc:
        raise ModelError(f"{args.file}: {exc}") from None
    config = FitConfig(method=args.method, steps=args.steps, lr=args.lr,
                       num_particles=args.elbo_particles, num_warmup=args.warmup,
                       num_samples=args.samples, num_chains=args.chains,
                       step_size=args.step_size, num_steps=args.leapfrog_steps,
                       max_tree_depth=args.max_tree_depth, target_accept=args.target_accept,
                       mass_matrix=args.mass_matrix, init_strategy=args.init,
                       chain_method=args.chain_method, seed=args.seed, device=args.device,
                       progress_interval=0.0)
    folder.write_json("fit_config.json", config.to_dict())
    progress = _Progress(sys.stderr.isatty())
    draws_file = open(folder.path / "draws.jsonl", "a", encoding="utf-8") \
        if args.method != "svi" else None

    def on_event(event):
        if isinstance(event, FitProgress):
            folder.metric({"phase": event.phase, "chain": event.chain, "step": event.step,
                           "elapsed": round(event.elapsed, 6), **event.metrics})
            progress.update(event)
        elif isinstance(event, DrawsChunk) and draws_file is not None:
            size = sum(int(np.prod(v.shape[1:])) for v in event.draws.values())
            if size <= _DRAWS_JSONL_LIMIT:
                for i in range(len(next(iter(event.draws.values()), []))):
                    draws_file.write(json.dumps(
                        {"chain": event.chain, "draw": event.start + i,
                         **{k: np.asarray(v[i]).tolist() for k, v in event.draws.items()}})
                        + "\n")
                draws_file.flush()
        elif isinstance(event, FitFailed):
            folder.metric({"failed": event.message, "step": event.step})

    try:
        result = fit(model, {**observations, "x": x}, config, on_event=on_event,
                     should_stop=should_stop)
    except (QvrRuntimeError, DataError) as exc:
        raise ModelError(f"{args.file}: {exc}") from None
    finally:
        progress.close()
        if draws_file is not None:
            draws_file.close()
    _save(folder, result)
    print(f"{args.method}: {_headline(result)}")
    if result.summary is not None:
        print(result.summary)
    if result.status == "failed":
        raise ModelError(f"{args.file}: {result.message}")
    return 0


def _headline(result) -> str:
    s = result.stats
    state = {"cancelled": " (cancelled: partial result)", "failed": " (failed)"}.get(
        result.status, "")
    if result.method == "svi":
        return f"{s.get('steps', 0)} steps, final loss {s.get('final_loss', float('nan')):.6g}" \
               f"{state}"
    return (f"{result.mcmc.num_chains} chains x {result.mcmc.num_samples} draws, acceptance "
            f"{s['mean_acceptance']:.3f}, divergences {s['total_divergences']}, step sizes "
            f"{', '.join(f'{v:.3g}' for v in s['step_sizes'])}, "
            f"min bulk ESS {s.get('min_ess_bulk', float('nan')):.0f}, "
            f"max R-hat {s.get('max_r_hat', float('nan')):.3f}"
            f"{', steps compiled by Inductor' if s.get('compiler') == 'inductor' else ''}"
            f"{state}")


def _save(folder, result) -> None:
    import numpy as np
    if result.method == "svi":
        if result.params:
            np.savez(folder.path / "params.npz", **result.params)
    elif result.mcmc is not None:
        r = result.mcmc
        stats = {"sample_stats.log_density": r.log_densities, "sample_stats.diverging": r.diverging,
                 "sample_stats.accept_prob": r.accept_probs,
                 "sample_stats.tree_depth": r.tree_depths, "sample_stats.num_steps": r.num_steps,
                 "sample_stats.step_size": r.step_sizes}
        np.savez(folder.path / "samples.npz", **result.samples,
                 **{k: v.detach().cpu().numpy() for k, v in stats.items()})
    folder.write_json("summary.json", {
        "status": result.status, "message": result.message, "stats": result.stats,
        "parameters": result.summary.to_dict() if result.summary is not None else {}})
    if result.summary is not None:
        (folder.path / "summary.txt").write_text(str(result.summary) + "\n", encoding="utf-8")
