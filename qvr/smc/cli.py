"""``qvr run FILE --method smc``: SMC generation from a ``Token -> Token`` program.

Builds a `ProgramLM` on the loaded program, a potential from the command-line constraints
(`--forbid`, `--require`, `--min-len`), runs `SMCSteering`, writes each step to the run
folder's ``metrics.jsonl``, prints the top sequences with their normalised weights and
``log Ẑ``, and saves ``sequences.json`` (the top sequences and every particle).

The generic parts (loading, the run folder, Ctrl-C, exit statuses) are in
`qvr.commands.run`.  This module imports torch only inside `run`, since ``qvr`` imports
it at start-up to register the options.
"""
from __future__ import annotations

import argparse
import math
import sys

from qvr.commands.argtypes import positive_int, token_id


def _pattern(text: str) -> tuple[int, ...]:
    return tuple(token_id(t) for t in text.split(",") if t.strip()) or (token_id(text),)


def _requirement(text: str) -> tuple[int, int]:
    tok, sep, within = text.partition("@")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected TOKEN@N, got {text!r}")
    return token_id(tok), positive_int(within)


def add_arguments(group) -> None:
    group.add_argument("--particles", type=positive_int, default=64, metavar="N",
                       help="number of particles (default 64)")
    group.add_argument("--expansion", type=positive_int, default=1, metavar="K",
                       help="children per unfinished particle and step (default 1)")
    group.add_argument("--max-len", type=positive_int, default=32, metavar="L",
                       help="maximum sequence length in tokens (default 32)")
    group.add_argument("--eos", type=token_id, metavar="ID", help="end-of-sequence token (required)")
    group.add_argument("--bos", type=token_id, metavar="ID",
                       help="token fed before every prefix (default: the --eos token)")
    group.add_argument("--forbid", type=_pattern, action="append", default=[],
                       metavar="ID[,ID...]",
                       help="forbid a token, or a run of tokens given as ID,ID,...; repeatable")
    group.add_argument("--require", type=_requirement, action="append", default=[],
                       metavar="ID@N", help="require token ID among the first N; repeatable")
    group.add_argument("--min-len", type=positive_int, metavar="L",
                       help="forbid ending before L tokens (the end token not counted)")
    group.add_argument("--top", type=positive_int, default=10, metavar="K",
                       help="number of sequences to print (default 10)")
    group.add_argument("--no-cache", action="store_true",
                       help="recompute every prefix at each step instead of keeping "
                            "per-particle state")


def validate(args) -> None:
    from qvr.commands.run import UsageError
    if args.eos is None:
        raise UsageError("--method smc needs --eos ID")


def build_potential(args):
    """The product of the command line's constraints, or None for `G ≡ 1`."""
    from .potentials import forbid_patterns, forbid_tokens, length_limits, product, require_token
    parts = []
    singles = [p[0] for p in args.forbid if len(p) == 1]
    runs = [p for p in args.forbid if len(p) > 1]
    if singles:
        parts.append(forbid_tokens(*singles))
    if runs:
        parts.append(forbid_patterns(*runs))
    for tok, within in args.require:
        parts.append(require_token(tok, within, eos=args.eos))
    if args.min_len is not None:
        parts.append(length_limits(eos=args.eos, min_len=args.min_len))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else product(*parts)


def _render(seq, eos) -> str:
    return " ".join(map(str, seq))


def run(args, program, folder, should_stop) -> int:
    import torch

    from qvr.commands.run import ModelError
    from qvr.inference.events import FitFailed, FitProgress

    from .program_lm import ProgramLM
    from .steering import SMCSteering

    bos = args.eos if args.bos is None else args.bos
    try:
        lm = ProgramLM(program, bos=bos, eos=args.eos, cache=not args.no_cache)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{args.file}: {exc}") from None
    smc = SMCSteering(lm, potential=build_potential(args), num_particles=args.particles,
                      expansion=args.expansion, max_len=args.max_len,
                      generator=torch.Generator().manual_seed(args.seed), progress_interval=0)
    live = sys.stderr.isatty()

    def on_event(event):
        if isinstance(event, FitProgress):
            folder.metric({"step": event.step, "elapsed": round(event.elapsed, 6),
                           **event.metrics})
            if live:
                m = event.metrics
                print(f"\rstep {event.step}/{event.total}  ess {m['ess']:.1f}  finished "
                      f"{int(m['num_finished'])}  log Z {m['log_Z']:.4f}", end="",
                      file=sys.stderr, flush=True)
        elif isinstance(event, FitFailed):
            folder.metric({"failed": event.message, "step": event.step})

    try:
        result = smc.run(on_event=on_event, should_stop=should_stop)
    except ValueError as exc:  # an invalid potential or model output
        raise ModelError(str(exc)) from None
    finally:
        if live:
            print(file=sys.stderr)
    top = result.top(args.top)
    folder.write_json("sequences.json", {
        "log_Z": result.log_Z, "num_steps": result.num_steps, "cancelled": result.cancelled,
        "mode": lm.mode,
        "top": [{"tokens": list(s), "weight": w, "ends_with_eos": bool(s) and s[-1] == args.eos}
                for s, w in result.top()],
        "particles": [{"tokens": list(s), "log_weight": lw, "finished": f, "truncated": t,
                       "dead": d}
                      for s, lw, f, t, d in zip(result.sequences, result.log_weights.tolist(),
                                                result.finished.tolist(),
                                                result.truncated.tolist(), result.dead.tolist())],
    })
    n_fin = int((result.finished & ~result.dead).sum())
    n_trunc = int((result.truncated & ~result.dead).sum())
    state = " (cancelled: partial result)" if result.cancelled else ""
    log_z = "-inf" if result.log_Z == -math.inf else f"{result.log_Z:.6f}"
    print(f"log Z = {log_z}{state}   N={args.particles} K={args.expansion} steps="
          f"{result.num_steps} finished={n_fin} truncated={n_trunc}")
    if not top:
        print("no sequence has positive weight (every particle was ruled out by the potential)")
    else:
        print(f"{'weight':>10}  {'len':>4}  sequence")
        for seq, w in top:
            end = "" if seq and seq[-1] == args.eos else "  [max length]"
            print(f"{w:10.6f}  {len(seq):4d}  {_render(seq, args.eos)}{end}")
    return 0
