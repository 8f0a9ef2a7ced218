"""Generate the text corpora of the token examples, and their vocabularies.

    python examples/data/make_corpus.py        # rewrites the files below (deterministic)
    python examples/data/make_corpus.py --tokens 50000000 --out DIR [--seed S]
                                               # a large corpus for decoder_lm (below)

Every sentence is drawn from a small probabilistic grammar written here (an extension of
the phrase-structure grammar of `pcfg_deduction.qvr`: determiners, adjectives, nouns,
transitive and intransitive verbs, prepositional phrases, adverbs, coordination).  No
text is copied from anywhere.  Outputs, all in this folder:

* ``transformer_lm.vocab.json`` — 32 entries: ``<eos>`` (id 0), 30 words and ``.``.
  ``transformer_lm.json`` — ``x`` (rows of 12 word ids cut from the stream
  ``<eos> sentence <eos> sentence ...``) and ``next_token`` (the same rows shifted by one:
  the word that follows each position), as the position-wise model observes them.  (60
  sentences, about 40 rows: each row's density is a Monte-Carlo estimate over draws of the
  stochastic backbone, so a fit step costs in proportion to rows x length.)
* ``decoder_lm.vocab.json`` — the same 32 words.  ``decoder_lm.json`` — ``x`` and
  ``next_token`` as for ``transformer_lm`` from 720 further sentences, rows of 16 (the
  attention model of ``decoder_lm.qvr`` reads every earlier position of its row).
* ``recurrent_lm.vocab.json`` — 64 entries: ``<eos>`` (id 0), space, a-z, A-Z and ten
  punctuation marks.  ``recurrent_lm.json`` — ``x`` (windows of 8 characters, starting at
  every 4th position of the stream ``<eos>The old dog slept.<eos>A cat ran.<eos>...``) and
  ``next_char`` (the character after each window), as the scan model observes them.  (Few
  short windows: the scan's log-density is a Monte-Carlo estimate over 100 draws per
  row, so fitting cost grows fast with rows x length.)
* ``pcfg_deduction.json`` — ``tokens``: one sentence the example's own grammar parses
  (``the``, a noun stem with the plural suffix ``s``, a verb, a determiner, a noun).
* ``topic_model.vocab.json`` — 1000 entries: the topic words first, ``<unused>`` for ids no
  document uses.  ``topic_model.json`` — ``doc_of`` and ``word``: 40 documents of 30 words,
  each drawn from a mixture of two of eight themes (LDA's own generative story).

A large corpus for ``decoder_lm.qvr`` (data larger than memory, issue 26): ``--tokens N
--out DIR`` writes ``DIR/x.npy`` and ``DIR/next_token.npy``, int16 arrays of ``N // 16``
rows of 16 word ids (``--length``), cut as in ``decoder_lm.json`` from the stream ``<eos>
sentence <eos> sentence ...``, ``next_token`` the same rows shifted by one; a fit opens
the folder memory-mapped (``qvr.mapped_arrays.open_arrays``).  How it is drawn (fast:
50 million tokens in seconds): a pool of ``min(100000, N // 4)`` sentences (``--pool``)
is drawn once from the grammar with ``random.Random(seed)``, then the stream is a
sequence of pool sentences drawn uniformly with replacement by
``numpy.random.default_rng(seed)`` — sentences follow the grammar's distribution as
sampled by the pool (about half of a 100000-sentence pool are distinct sentences).  The
stream is generated and written in blocks of 65536 rows, so generation memory stays
bounded (a few tens of MB) whatever `N`; progress goes to stderr.  Same seed, same
bytes.

Sentences use only ids inside the vocabulary sizes the programs declare (``Token : FinSet
32``, ``Char : FinSet 64``, ``Vocab : FinSet 1000``, ``Doc : FinSet 100``).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20240601
EOS = "<eos>"

# ---------------------------------------------------------------- the grammar

DET = {"the": 5, "a": 3, "every": 1}
ADJ = {"small": 2, "old": 2, "happy": 1, "brown": 1}
NOUN = {"dog": 4, "cat": 4, "bird": 2, "fox": 2, "child": 2, "farmer": 2, "teacher": 1,
        "horse": 1}
VT = {"saw": 3, "chased": 3, "liked": 2, "fed": 1, "followed": 1, "heard": 1}
VI = {"slept": 2, "ran": 2, "sang": 1}
PREP = {"near": 2, "with": 1, "behind": 1}
ADV = {"quietly": 1, "today": 1}
WORDS = [w for table in (DET, ADJ, NOUN, VT, VI, PREP, ADV) for w in table] + ["and", "."]


def pick(rng: random.Random, table: dict) -> str:
    words = list(table)
    return rng.choices(words, weights=[table[w] for w in words])[0]


def noun_phrase(rng: random.Random, depth: int = 0) -> list:
    np_ = [pick(rng, DET)]
    if rng.random() < 0.3:
        np_.append(pick(rng, ADJ))
    np_.append(pick(rng, NOUN))
    if depth == 0 and rng.random() < 0.15:
        np_ += [pick(rng, PREP)] + noun_phrase(rng, depth + 1)
    return np_


def verb_phrase(rng: random.Random) -> list:
    r = rng.random()
    if r < 0.6:
        vp = [pick(rng, VT)] + noun_phrase(rng)
    else:
        vp = [pick(rng, VI)]
    if rng.random() < 0.2:
        vp.append(pick(rng, ADV))
    return vp


def sentence(rng: random.Random) -> list:
    """S -> NP VP [and VP] ."""
    words = noun_phrase(rng) + verb_phrase(rng)
    if rng.random() < 0.1:
        words += ["and"] + verb_phrase(rng)
    return words + ["."]


# ---------------------------------------------------------------- vocabularies

WORD_VOCAB = [EOS] + WORDS                                       # 32 entries
CHAR_VOCAB = ([EOS, " "] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
              + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
              + list(".,;:!?'-()"))                              # 64 entries


def char_text(words: list) -> str:
    """'The old dog slept.' from ['the', 'old', 'dog', 'slept', '.']."""
    text = " ".join(words[:-1]) + words[-1]
    return text[0].upper() + text[1:]


def windows(stream: list, length: int, stride: int) -> tuple[list, list]:
    """Rows of `length` ids and the id after each row."""
    xs, ys = [], []
    for start in range(0, len(stream) - length, stride):
        xs.append(stream[start:start + length])
        ys.append(stream[start + length])
    return xs, ys


def word_lm(rng: random.Random, n_sentences: int = 60, length: int = 12) -> dict:
    ids = {w: i for i, w in enumerate(WORD_VOCAB)}
    stream = []
    for _ in range(n_sentences):
        stream += [ids[EOS]] + [ids[w] for w in sentence(rng)]
    rows = (len(stream) - 1) // length
    x = [stream[r * length:(r + 1) * length] for r in range(rows)]
    y = [stream[r * length + 1:(r + 1) * length + 1] for r in range(rows)]
    return {"x": x, "next_token": y}


def char_lm(rng: random.Random, n_sentences: int = 40, length: int = 8,
            stride: int = 4) -> dict:
    ids = {c: i for i, c in enumerate(CHAR_VOCAB)}
    stream = []
    for _ in range(n_sentences):
        stream += [ids[EOS]] + [ids[c] for c in char_text(sentence(rng))]
    x, y = windows(stream, length, stride)
    return {"x": x, "next_char": y}


def pcfg_sentence(rng: random.Random) -> dict:
    """Det N V Det N in the lexicon of `pcfg_deduction.qvr`, with a plural subject (stem +
    suffix `s`, so that the morphology is used).  The object stays singular: a plural
    object would leave the sentence without its suffix as a second goal item (goal items
    are spans of any extent) and log Z would count both."""
    subject = ["the", rng.choice(["dog", "cat"]), "s"]
    verb = [rng.choice(["saw", "chased"])]
    obj = [rng.choice(["the", "a"]), rng.choice(["dog", "cat"])]
    return {"tokens": subject + verb + obj}


# ---------------------------------------------------------------- topic corpus

THEMES = {
    "farming": "farm field harvest tractor wheat barley soil rain seed cattle barn crop",
    "sailing": "boat sail wind harbour tide anchor mast deck crew wave rope coast",
    "cooking": "oven bread flour butter salt pan soup onion garlic recipe bake spoon",
    "football": "goal match team coach ball pitch league referee score striker season fans",
    "astronomy": "star planet orbit telescope moon comet galaxy light sky night eclipse dust",
    "music": "song guitar piano choir melody rhythm concert band drum chord stage note",
    "medicine": "doctor patient fever clinic nurse dose vaccine heart blood pain ward cure",
    "railways": "train station track signal ticket platform engine carriage timetable "
                "driver tunnel freight",
}
COMMON = "day year people time place work small large new old good long".split()
TOPIC_VOCAB_SIZE = 1000


def topic_corpus(rng: random.Random, n_docs: int = 40, doc_len: int = 30) -> tuple:
    vocab = list(COMMON)
    theme_words = {}
    for theme, words in THEMES.items():
        theme_words[theme] = [len(vocab) + i for i in range(len(words.split()))]
        vocab += words.split()
    used = len(vocab)
    vocab += ["<unused>"] * (TOPIC_VOCAB_SIZE - used)
    themes = list(THEMES)
    doc_of, word = [], []
    for d in range(n_docs):
        main, side = rng.sample(themes, 2)
        share = rng.uniform(0.6, 0.9)
        for _ in range(doc_len):
            r = rng.random()
            if r < 0.1:
                w = rng.randrange(len(COMMON))
            else:
                theme = main if rng.random() < share else side
                w = rng.choice(theme_words[theme])
            doc_of.append(d)
            word.append(w)
    return {"doc_of": doc_of, "word": word}, vocab


# ---------------------------------------------------------------- output

def write_json(out: Path, name: str, obj, row_per_line: bool = True) -> None:
    """`out/name`: JSON with one row per line for 2-d arrays (diffs stay readable)."""
    path = Path(out) / name
    if isinstance(obj, dict) and row_per_line:
        parts = []
        for k, v in obj.items():
            if isinstance(v, list) and v and isinstance(v[0], list):
                rows = ",\n    ".join(json.dumps(r) for r in v)
                parts.append(f"  {json.dumps(k)}: [\n    {rows}\n  ]")
            else:
                parts.append(f"  {json.dumps(k)}: {json.dumps(v)}")
        text = "{\n" + ",\n".join(parts) + "\n}\n"
    else:
        text = json.dumps(obj, indent=1, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def main(out: Path = HERE) -> None:
    """Write every file into `out` (default: this folder)."""
    assert len(WORD_VOCAB) == 32 and len(set(WORD_VOCAB)) == 32
    assert len(CHAR_VOCAB) == 64 and len(set(CHAR_VOCAB)) == 64
    write_json(out, "transformer_lm.vocab.json", WORD_VOCAB, row_per_line=False)
    write_json(out, "transformer_lm.json", word_lm(random.Random(SEED)))
    write_json(out, "decoder_lm.vocab.json", WORD_VOCAB, row_per_line=False)
    # rows of 16 from 720 further sentences: the attention model reads whole rows
    write_json(out, "decoder_lm.json", word_lm(random.Random(SEED + 4), 720, 16))
    write_json(out, "recurrent_lm.vocab.json", CHAR_VOCAB, row_per_line=False)
    write_json(out, "recurrent_lm.json", char_lm(random.Random(SEED + 1)))
    write_json(out, "pcfg_deduction.json", pcfg_sentence(random.Random(SEED + 2)))
    topics, vocab = topic_corpus(random.Random(SEED + 3))
    write_json(out, "topic_model.vocab.json", vocab, row_per_line=False)
    write_json(out, "topic_model.json", topics)


# ---------------------------------------------------------------- a large corpus

POOL = 100_000         # sentences drawn from the grammar for a large corpus (at most)
BLOCK_ROWS = 1 << 16   # rows generated and written at a time


def corpus(tokens: int, out: Path, seed: int = SEED, length: int = 16,
           pool: int | None = None, progress=sys.stderr) -> tuple[int, int]:
    """Write ``out/x.npy`` and ``out/next_token.npy`` (int16, ``tokens // length`` rows of
    `length`) for ``decoder_lm.qvr``, drawn as the module docstring says; returns
    ``(rows, length)``.  `progress`: a text stream for a progress line, or None."""
    import numpy as np

    rows = int(tokens) // int(length)
    if rows < 1:
        raise ValueError(f"--tokens {tokens}: fewer than one row of {length}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = {w: i for i, w in enumerate(WORD_VOCAB)}
    rng = random.Random(seed)
    n_pool = int(pool) if pool else min(POOL, max(1, tokens // 4))
    flat, lens = [], np.empty(n_pool, dtype=np.int32)
    for j in range(n_pool):
        s = [ids[EOS]] + [ids[w] for w in sentence(rng)]
        flat += s
        lens[j] = len(s)
    flat = np.array(flat, dtype=np.int16)
    starts = np.cumsum(lens, dtype=np.int32) - lens
    draw = np.random.default_rng(seed)
    mean = float(lens.mean())

    paths = [out / "x.npy", out / "next_token.npy"]
    offsets = []
    for path in paths:  # the .npy header, and the file at its full size
        m = np.lib.format.open_memmap(path, mode="w+", dtype=np.int16, shape=(rows, length))
        offsets.append(m.offset)
        del m
    row_bytes = length * np.dtype(np.int16).itemsize
    carry = np.empty(0, dtype=np.int16)  # stream drawn but not yet written
    files = [open(path, "r+b") for path in paths]
    try:
        done = 0
        while done < rows:
            block = min(BLOCK_ROWS, rows - done)
            need = block * length + 1  # the last row's next token too
            parts = [carry]
            have = len(carry)
            while have < need:
                k = int((need - have) / mean * 1.05) + 16
                pick = draw.integers(0, n_pool, k)
                n = lens[pick]
                total = int(n.sum())
                shift = np.repeat(starts[pick] - (np.cumsum(n, dtype=np.int32) - n), n)
                shift += np.arange(total, dtype=np.int32)  # the pool index of each token
                parts.append(flat[shift])
                have += total
            stream = np.concatenate(parts)
            cut = block * length
            for f, offset, values in zip(files, offsets, (stream[:cut], stream[1:cut + 1])):
                f.seek(offset + done * row_bytes)
                f.write(values.tobytes())
            carry = stream[cut:].copy()
            done += block
            if progress is not None:
                print(f"\r{done * length:,} / {rows * length:,} tokens", end="",
                      file=progress, flush=True)
        if progress is not None:
            print(f"\rwrote {out}/x.npy and next_token.npy: {rows:,} rows of {length} "
                  f"({rows * length:,} tokens)", file=progress, flush=True)
    finally:
        for f in files:
            f.close()
    return rows, length


def cli(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Rewrite the token examples' data (no options), or write a large "
                    "corpus for decoder_lm.qvr (--tokens N --out DIR).")
    parser.add_argument("--tokens", type=int, help="tokens of the large corpus (rows of "
                        "--length: N // length rows)")
    parser.add_argument("--out", type=Path, help="the folder to write (x.npy, "
                        "next_token.npy; without --tokens: the shipped files)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"default {SEED}")
    parser.add_argument("--length", type=int, default=16, help="tokens per row (16)")
    parser.add_argument("--pool", type=int, default=None,
                        help=f"sentences drawn from the grammar (default min({POOL}, N // 4))")
    args = parser.parse_args(argv)
    if args.tokens is None:
        main(args.out or HERE)
        return
    if args.out is None:
        parser.error("--tokens needs --out DIR")
    if args.tokens < args.length:
        parser.error(f"--tokens {args.tokens}: fewer than one row of {args.length}")
    corpus(args.tokens, args.out, args.seed, args.length, args.pool)


if __name__ == "__main__":
    cli()
