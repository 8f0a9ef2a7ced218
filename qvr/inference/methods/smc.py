"""SMC generation behind `fit` (runtime spec §8): a `ProgramLM` over the program (a
``Token -> Token`` export), a potential from the config's constraints (``forbid``,
``require``, ``min_len``) times any Python potential given to `fit`, and `SMCSteering`.
The end token is ``config.eos``, else the vocabulary's ``<eos>``."""
from __future__ import annotations

import math

import torch

from qvr.inference.data.fit_data import DataError
from qvr.inference.methods.fit_result import FitContext, FitResult

EOS_SPELLINGS = ("<eos>", "</s>", "<|endoftext|>", "<end>")


def eos_of(config, vocab) -> int:
    if config.eos is not None:
        return config.eos
    for spelling in EOS_SPELLINGS:
        if vocab and spelling in vocab:
            return vocab.index(spelling)
    raise DataError("SMC generation needs an end-of-sequence token: give --eos ID (or ship a "
                    "vocabulary file with an <eos> entry beside the program)")


def resolve_tokens(config, vocab):
    """`config` with the words of ``forbid`` and ``require`` replaced by their ids in
    `vocab`; an unknown word, or a word without a vocabulary, is a `DataError` naming it."""
    from dataclasses import replace

    def tok(t, where):
        if not isinstance(t, str):
            return t
        if not vocab:
            raise DataError(f"--{where} {t}: words need a vocabulary file beside the program "
                            f"(data/NAME.vocab.json); give token ids instead")
        if t in vocab:
            return vocab.index(t)
        import difflib
        near = difflib.get_close_matches(t, [w for w in vocab if isinstance(w, str)], n=1)
        hint = f"; did you mean `{near[0]}`?" if near else ""
        raise DataError(f"--{where} {t}: `{t}` is not in the program's vocabulary{hint}")

    forbid = [[tok(t, "forbid") for t in p] for p in config.forbid]
    require = [[tok(t, "require"), n] for t, n in config.require]
    return replace(config, forbid=forbid, require=require)


def build_potential(config, extra=None):
    """The product of the config's constraints and `extra`, or None for `G ≡ 1`."""
    from qvr.smc.potentials import (forbid_patterns, forbid_tokens, length_limits, product,
                                    require_token)
    parts = []
    singles = [p[0] for p in config.forbid if len(p) == 1]
    runs = [tuple(p) for p in config.forbid if len(p) > 1]
    if singles:
        parts.append(forbid_tokens(*singles))
    if runs:
        parts.append(forbid_patterns(*runs))
    eos = config.eos
    for tok, within in config.require:
        parts.append(require_token(tok, within, eos=eos))
    if config.min_len is not None:
        parts.append(length_limits(eos=eos, min_len=config.min_len))
    if extra is not None:
        parts.append(extra)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else product(*parts)


def render(seq, vocab) -> str:
    """Token ids as text (characters joined, words spaced) or as numbers."""
    if not vocab:
        return " ".join(map(str, seq))
    words = [vocab[t] if 0 <= t < len(vocab) else f"<{t}>" for t in seq]
    joiner = "" if all(len(w) <= 1 for w in words if not w.startswith("<")) else " "
    return joiner.join(words)


def run(ctx: FitContext) -> FitResult:
    from dataclasses import replace

    from qvr.smc.program_lm import ProgramLM
    config, vocab = ctx.config, ctx.vocab
    eos = eos_of(config, vocab)
    config = resolve_tokens(replace(config, eos=eos), vocab)
    bos = eos if config.bos is None else config.bos
    program = ctx.program
    try:
        lm = ProgramLM(program, bos=bos, eos=eos, cache=config.cache)
    except (TypeError, ValueError) as exc:
        raise DataError(str(exc)) from None
    if ctx.start is not None:
        ctx.start.apply_to_model(lm.morphism)
    lm.morphism.to(torch.get_default_dtype())  # FitConfig.dtype (`fit` set the default)
    from qvr.inference.criticism.recorded import smc_note
    note = smc_note(lm.morphism)  # `record v = e`: no per-particle site values to record
    if note:
        from qvr.events import FitWarning
        ctx.report(FitWarning(note))
    out = run_steering(ctx, lm, build_potential(config, ctx.potential), eos)
    out.sequences["vocab"] = vocab
    for item in out.sequences["top"]:
        s = item["tokens"]
        item["text"] = render(s[:-1] if s and s[-1] == eos else s, vocab)
    out.params = {f"model.{n}": p.detach().cpu().numpy()
                  for n, p in lm.morphism.named_parameters()}
    return out


def run_steering(ctx: FitContext, lm, potential, eos: int) -> FitResult:
    """`SMCSteering` of `lm` under `potential` with the config's sizes; the result with
    its stats and ``sequences`` record (``text`` left for the caller)."""
    from qvr.smc.steering import SMCSteering, _ess
    config = ctx.config
    smc = SMCSteering(lm, potential=potential,
                      num_particles=config.particles, expansion=config.expansion,
                      max_len=config.max_len,
                      generator=torch.Generator().manual_seed(config.seed or 0),
                      progress_interval=config.progress_interval)
    try:
        res = smc.run(on_event=ctx.report, should_stop=ctx.stop)
    except ValueError as exc:  # an invalid potential or model output
        raise DataError(str(exc)) from None
    alive = ~res.dead
    out = FitResult("smc", status="cancelled" if res.cancelled else "finished", smc=res,
                    step=res.num_steps)
    out.stats = {"log_Z": res.log_Z, "num_steps": res.num_steps,
                 "ess": _ess(res.log_weights.numpy()),
                 "num_finished": int((res.finished & alive).sum()),
                 "num_truncated": int((res.truncated & alive).sum()),
                 "num_particles": config.particles, "expansion": config.expansion,
                 "eos": eos}
    out.sequences = {
        "log_Z": res.log_Z, "num_steps": res.num_steps, "cancelled": res.cancelled,
        "mode": lm.mode, "eos": eos, "vocab": None,
        # a pretrained LM's key/value cache: "shared-prefix", or "dynamic (WHY)"
        **({"cache": lm.cache_kind} if getattr(lm, "cache_kind", None) else {}),
        "top": [{"tokens": list(s), "weight": w, "ends_with_eos": bool(s) and s[-1] == eos}
                for s, w in res.top()],  # every distinct sequence; displays show `top`
        "particles": [{"tokens": list(s), "log_weight": lw, "finished": f, "truncated": t,
                       "dead": d}
                      for s, lw, f, t, d in zip(res.sequences, res.log_weights.tolist(),
                                                res.finished.tolist(), res.truncated.tolist(),
                                                res.dead.tolist())],
    }
    return out


def format_log_z(v: float) -> str:
    return "-inf" if v == -math.inf else f"{v:.6f}"
