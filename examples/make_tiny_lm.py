"""Make ``examples/tiny_lm/``: a tiny pretrained causal language model for SMC steering
offline (`qvr run FILE --method smc --lm examples/tiny_lm`, README "Steering a pretrained
language model").

    .venv/bin/python examples/make_tiny_lm.py            # rewrites examples/tiny_lm/
    .venv/bin/python examples/make_tiny_lm.py --steps 50 --out /tmp/lm   # a quick one

Needs the ``lm`` extra (``pip install -e ".[lm]"``: transformers, tokenizers).

What it does, deterministically (fixed seeds; one CPU thread):

1. draws 4000 sentences from the word grammar of ``examples/data/make_corpus.py`` (the
   corpus of ``decoder_lm.qvr``: determiners, adjectives, nouns, verbs, prepositions,
   adverbs, ``and``, ``.``) as plain text, one sentence per line;
2. trains a BPE tokenizer (Hugging Face ``tokenizers``) on it: ``<eos>`` (id 0, also the
   start token) and ``<unk>``, a Metaspace pre-tokenizer (``▁`` marks a word start, so
   decoding restores the spaces), 64 tokens in all, so the frequent words are one token
   and the rare ones several (``▁teacher`` is not one token);
3. builds a GPT-2 (`transformers.GPT2LMHeadModel`) from a config — 2 layers, width 64,
   4 heads, 64 positions — and trains it for ``--steps`` AdamW steps on rows of 64 tokens
   cut from the stream ``<eos> sentence <eos> sentence ...``;
4. saves model and tokenizer with ``save_pretrained`` (safetensors, float32, about
   0.5 MB) and prints the held-out loss in nats/token; writing ``examples/tiny_lm`` it
   also writes ``examples/data/steer.vocab.json`` (the token strings, for the baseline
   program of ``steer.qvr``).

Nothing is downloaded; no text is copied from anywhere.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "data"))

SEED = 20261206
EOS, UNK = "<eos>", "<unk>"


def sentences(n: int, seed: int) -> list[str]:
    from make_corpus import sentence
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = sentence(rng)
        out.append(" ".join(words[:-1]) + " .")  # "." a word of its own, as in the corpus
    return out


def train_tokenizer(lines: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, UNK],
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS,
                                   unk_token=UNK, pad_token=EOS)


def stream(tokenizer, lines: list[str]) -> list[int]:
    ids = [tokenizer.eos_token_id]
    for enc in tokenizer(lines, add_special_tokens=False)["input_ids"]:
        ids += enc + [tokenizer.eos_token_id]
    return ids


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "tiny_lm"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--vocab-size", type=int, default=64)
    args = ap.parse_args(argv)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    lines = sentences(4000, SEED)
    held = sentences(300, SEED + 1)
    tokenizer = train_tokenizer(lines, args.vocab_size)
    ids = torch.tensor(stream(tokenizer, lines))
    held_ids = torch.tensor(stream(tokenizer, held))
    width = 64
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=width, n_layer=2,
                        n_head=4, bos_token_id=tokenizer.eos_token_id,
                        eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.steps)
    gen = torch.Generator().manual_seed(SEED)
    rows, length = 32, 64
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, ids.numel() - length, (rows,), generator=gen)
        batch = torch.stack([ids[s:s + length] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step}: {loss.item():.3f} nats/token", file=sys.stderr)
    model.eval()
    with torch.no_grad():
        n = (held_ids.numel() - 1) // length * length
        batch = held_ids[:n].reshape(-1, length)
        held_loss = model(input_ids=batch, labels=batch).loss.item()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # the class name transformers 4.x knows too (5.x reads it as its TokenizersBackend)
    cfg_path = out / "tokenizer_config.json"
    cfg_path.write_text(cfg_path.read_text(encoding="utf-8").replace(
        '"TokenizersBackend"', '"PreTrainedTokenizerFast"'), encoding="utf-8")
    if Path(args.out).resolve() == (HERE / "tiny_lm").resolve():
        # the vocabulary of examples/steer.qvr's own (baseline) program: the same tokens
        import json
        names = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        (HERE / "data" / "steer.vocab.json").write_text(
            "[\n" + ",\n".join(" " + json.dumps(n, ensure_ascii=False) for n in names)
            + "\n]\n", encoding="utf-8")
    words = sum(len(s.split()) for s in held)
    print(f"saved {out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(tokenizer)} tokens; held-out {held_loss:.3f} nats/token "
          f"({held_loss * (held_ids.numel() - 1) / words:.3f} nats/word, "
          f"perplexity {math.exp(held_loss):.2f})")


if __name__ == "__main__":
    main()
