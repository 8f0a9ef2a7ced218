"""SMC steering of a pretrained causal language model behind `fit` (``FitConfig.lm``,
``qvr run FILE --method smc --lm PATH_OR_NAME``; issue 40, design document 001 Algorithm
3): `qvr.smc.hf_lm.HFCausalLM` in place of the program's next-token model.

What comes from where:

* the model and its tokenizer: ``--lm`` (a ``save_pretrained`` folder or a name in the
  user's Hugging Face cache), in ``--lm-dtype`` on ``--device``; ``--no-cache`` recomputes
  prefixes instead of keeping the KV cache;
* the text every particle continues: ``--prompt``;
* the end token: ``--eos``, else the tokenizer's; the start token: ``--bos``, else the
  tokenizer's ``bos``, else its ``eos``;
* constraints: ``--forbid``/``--require`` *words* are judged on the detokenised text
  (`qvr.smc.text_potentials`: whole words, whatever tokens spell them; ``a,b`` is the
  phrase ``a b``); token *ids* keep their token meaning (`qvr.smc.potentials`);
  ``--min-len`` counts tokens; ``--forbid-letters``, ``--max-word-len`` and
  ``--template`` are text constraints too; a Python potential given to `fit` multiplies
  them; so do the score steps of a steering program (docs/extensions.md E10, "Potentials
  in the program": `qvr.inference.methods.smc_scores`), named in ``sequences.json``
  (``"potentials"``) and in the summary;
* the program FILE: the run's name, its source hash and its shipped options
  (``data/NAME.fit.json``: a prompt, constraints, lengths); its export and vocabulary are
  not used by the LM run (the record says so in ``sequences.json``: ``"lm"``).

The record's ``sequences.json`` holds the prompt, every distinct string's ids and text
(``top``) and every particle's ids, text and weight; its particle snapshots (``events``)
carry each particle's text (`with_texts`)."""
from __future__ import annotations

import torch

from qvr.inference.data.fit_data import DataError
from qvr.inference.methods.fit_result import FitContext, FitResult


def split_constraints(config):
    """``(token forbid, token require, word forbid, word require)``: the ids of
    ``--forbid``/``--require`` and their words (a pattern mixing both is an error)."""
    tok_forbid, word_forbid = [], []
    for p in config.forbid:
        kinds = {isinstance(t, str) for t in p}
        if len(kinds) > 1:
            raise DataError(f"--forbid {','.join(map(str, p))}: give words or token ids, "
                            f"not both")
        (word_forbid if True in kinds else tok_forbid).append(list(p))
    tok_require = [[t, n] for t, n in config.require if not isinstance(t, str)]
    word_require = [(t, n) for t, n in config.require if isinstance(t, str)]
    return tok_forbid, tok_require, word_forbid, word_require


def load(config):
    """The `HFCausalLM` of a config (errors phrased for the user as `DataError`)."""
    from qvr.smc.hf_lm import LMLoadError, LMUnavailable, load_lm
    try:
        lm = load_lm(config.lm, dtype=config.lm_dtype, device=config.device,
                     prompt=config.prompt, cache=config.cache)
    except (LMUnavailable, LMLoadError) as exc:
        raise DataError(str(exc)) from None
    if config.eos is not None:
        lm.eos = config.eos
    if config.bos is not None:
        lm.bos = config.bos
        lm.head = (lm.bos,) + lm.prompt_ids
    for name, tok in (("--eos", lm.eos), ("--bos", lm.bos)):
        if not 0 <= tok < lm.vocab_size:
            raise DataError(f"{name} {tok}: not a token of {config.lm} (0..{lm.vocab_size - 1})")
    try:
        lm.check_length(config.max_len)
    except ValueError as exc:
        raise DataError(f"--lm {config.lm}: {exc}") from None
    return lm


def build_potential(config, lm, extra=None, scores=()):
    """The product of the config's constraints, the Python potential `extra` and the
    steering program's score steps `scores` (`qvr.sema.steering_scores.SteerScore`); None
    when there is none."""
    from dataclasses import replace

    from qvr.inference.methods.smc import build_potential as token_potential
    from qvr.smc.potentials import product
    from qvr.smc.text_potentials import text_constraints
    tok_forbid, tok_require, word_forbid, word_require = split_constraints(config)
    for p in tok_forbid:
        for t in p:
            if t >= lm.vocab_size:
                raise DataError(f"--forbid {t}: not a token of {config.lm} "
                                f"(0..{lm.vocab_size - 1})")
    parts = []
    tokens = token_potential(replace(config, forbid=tok_forbid, require=tok_require,
                                     eos=lm.eos), extra)
    if tokens is not None:
        parts.append(tokens)
    parts += text_constraints(lm.decode, lm.eos, forbid=word_forbid, require=word_require,
                              max_len=config.max_len)
    from qvr.smc.text_potentials import forbid_letters, template, word_budget
    if config.forbid_letters:
        parts.append(forbid_letters(config.forbid_letters, decode=lm.decode, eos=lm.eos))
    if config.max_word_len is not None:
        parts.append(word_budget(config.max_word_len, decode=lm.decode, eos=lm.eos))
    if config.template:
        parts.append(template(config.template, decode=lm.decode, eos=lm.eos,
                              max_len=config.max_len))
    if scores:  # E10: the program's own potentials, multiplied with the command line's
        from qvr.inference.methods.smc_scores import ProgramScores
        parts.append(ProgramScores(scores, lm, config.max_len))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else product(*parts)


def with_texts(ctx: FitContext, text) -> FitContext:
    """`ctx` whose particle snapshots carry each sequence's `text` (``texts``): the
    dashboard and the record show words without loading the tokenizer."""
    from dataclasses import replace

    from qvr.events import ParticlesSnapshot
    report = ctx.report
    if report is None:
        return ctx

    def on_event(ev):
        if isinstance(ev, ParticlesSnapshot):
            ev = replace(ev, texts=tuple(text(tuple(s)) for s in ev.sequences))
        report(ev)
    return replace(ctx, report=on_event)


def run(ctx: FitContext) -> FitResult:
    from qvr.inference.methods.smc import run_steering
    config = ctx.config
    if ctx.start is not None:
        raise DataError("--from: a run's fitted parameters are the program's; with --lm the "
                        "model is the pretrained one (give one or the other)")
    lm = load(config)

    def text(s):
        return lm.decode(s[:-1] if s and s[-1] == lm.eos else s)

    from qvr.inference.methods.smc_scores import steered_of
    found = steered_of(ctx.program)
    scores = found.scores if found is not None else ()
    out = run_steering(with_texts(ctx, text), lm,
                       build_potential(config, lm, ctx.potential, scores), lm.eos)
    res = out.smc

    seqs = out.sequences
    seqs.update({"lm": config.lm, "lm_dtype": config.lm_dtype, "prompt": config.prompt,
                 "prompt_tokens": list(lm.prompt_ids), "bos": lm.bos, "vocab": None,
                 "potentials": [s.name for s in scores]})
    for item in seqs["top"]:
        item["text"] = text(tuple(item["tokens"]))
    for item, s in zip(seqs["particles"], res.sequences):
        item["text"] = text(s)
    out.stats["lm"] = config.lm
    out.params = {}
    return out
