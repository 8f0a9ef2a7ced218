"""`qvr run FILE --method smc --lm examples/tiny_lm` end to end (issue 40): words judged
on the text, particles shown and recorded as text; and the text potentials
(`qvr.smc.text_potentials`) on the tiny model's multi-token words and templates.
Skipped without transformers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

pytest.importorskip("transformers")

from qvr.smc import SMCSteering  # noqa: E402
from qvr.smc.hf_lm import load_lm  # noqa: E402
from qvr.smc.text_potentials import (forbid_letters, forbid_words, template,  # noqa: E402
                                     word_budget, words_of)

ROOT = Path(__file__).resolve().parents[2]
STEER = str(ROOT / "examples" / "steer.qvr")
TINY = str(ROOT / "examples" / "tiny_lm")


@pytest.fixture(scope="module")
def tiny():
    return load_lm(TINY, prompt="the old dog")


#: a token program whose next-token model is its own (not a pretrained LM, E10)
BIGRAM = ("object Token : FinSet 4\nmorphism b : Token -> Token [role=kernel]\n"
          "program p : Token -> Token\n    sample n <- b\n    return n\nexport p\n")


def run_cli(capsys, *args, file=STEER):
    from qvr.cli import main
    try:
        rc = main(["run", str(file), "--method", "smc", *args])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_steers_the_tiny_lm_and_records_text(tmp_path, capsys):
    from qvr.runs import open_run
    rc, out, err = run_cli(capsys, "--lm", TINY, "--prompt", "the old dog", "--forbid", "cat",
                           "--require", "fox@6", "--particles", "12", "--max-len", "16",
                           "--runs-dir", str(tmp_path))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("smc: log Z = ")
    assert lines[1] == f"{TINY}, continuing 'the old dog':"
    assert lines[2].split() == ["weight", "len", "sequence"]
    run = open_run(next(tmp_path.iterdir()))
    seqs = run.sequences
    assert seqs["lm"] == TINY and seqs["prompt"] == "the old dog" and seqs["mode"] == "kv-cache"
    assert seqs["prompt_tokens"] == load_lm(TINY).encode("the old dog")
    tiny = load_lm(TINY)
    shown = [ln.split(None, 2)[2].replace("  [max length]", "") for ln in lines[3:]]
    assert shown == [item["text"] for item in seqs["top"][:len(shown)]]
    for item in seqs["particles"]:
        assert item["text"] == tiny.decode([t for t in item["tokens"] if t != tiny.eos])
    live = [p for p in seqs["particles"] if p["log_weight"] > float("-inf")]
    assert live
    for p in live:
        words = p["text"].split()
        assert "cat" not in words and "fox" in words[:6], p["text"]


def test_cli_no_cache_gives_the_same_particles(tmp_path, capsys):
    texts = []
    for extra in ((), ("--no-cache",)):
        rc, out, err = run_cli(capsys, "--lm", TINY, "--prompt", "a", "--particles", "6",
                               "--max-len", "10", "--runs-dir", str(tmp_path / str(len(extra))),
                               *extra)
        assert rc == 0, err
        folder = next((tmp_path / str(len(extra))).iterdir())
        seqs = json.loads((folder / "sequences.json").read_text())
        texts.append((seqs["mode"], [p["text"] for p in seqs["particles"]]))
    assert texts[0][0] == "kv-cache" and texts[1][0] == "recompute"
    assert texts[0][1] == texts[1][1]


def test_cli_errors(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "--lm", str(tmp_path / "none") + "/",
                           "--runs-dir", str(tmp_path))
    assert rc == 1 and f"--lm {tmp_path / 'none'}/: no such folder" in err
    rc, out, err = run_cli(capsys, "--lm", TINY, "--max-len", "70", "--runs-dir", str(tmp_path))
    assert rc == 1 and "plus --max-len 70 exceed the model's 64 positions" in err
    bigram = tmp_path / "bigram.qvr"
    bigram.write_text(BIGRAM)
    rc, out, err = run_cli(capsys, "--prompt", "x", "--runs-dir", str(tmp_path), file=bigram)
    assert rc == 2 and "--prompt: needs --lm (a pretrained language model's text)" in err
    from qvr.cli import main
    rc = main(["run", STEER, "--method", "svi", "--prompt", "x", "--runs-dir", str(tmp_path)])
    assert rc == 2
    assert "--prompt is an option of --method smc, not of --method svi" in capsys.readouterr().err


def test_a_word_of_several_tokens_is_forbidden_in_any_spelling(tiny):
    pieces = tiny.encode("teacher")
    assert len(pieces) > 1  # `teacher` is not one token of the tiny tokenizer
    p = forbid_words("teacher", decode=tiny.decode, eos=tiny.eos)
    eos = tiny.eos
    kids = [tuple(pieces) + (eos,), tuple(pieces) + tuple(tiny.encode(" .")),
            tuple(pieces), tuple(tiny.encode("teachers ."))]
    got = p.log_potential([c[:-1] for c in kids], kids, 0).tolist()
    assert got[:2] == [float("-inf")] * 2 and got[2] == 0.0  # a partial word may grow


def test_letters_budget_and_template_constraints_hold_on_every_particle(tiny):
    lm = load_lm(TINY, prompt="the")
    dec, eos = lm.decode, lm.eos
    for pot, check in (
            (forbid_letters("o", decode=dec, eos=eos), lambda t: "o" not in t),
            (word_budget(4, decode=dec, eos=eos, ), lambda t: max(map(len, t.split())) <= 4),
            (template("_ chased a _ .", decode=dec, eos=eos, max_len=12),
             lambda t: t.split()[1:3] == ["chased", "a"] and t.split()[4:] == ["."])):
        res = SMCSteering(lm, potential=pot, num_particles=12, expansion=3, max_len=12,
                          generator=torch.Generator().manual_seed(4)).run()
        live = [s for s, w in zip(res.sequences, res.log_weights.tolist())
                if w > float("-inf")]
        assert live and res.log_Z > float("-inf")
        for s in live:
            text = dec([t for t in s if t != eos])
            assert check(text), (pot, text)


def test_words_of_splits_complete_and_partial_words():
    assert words_of("the dog sa", False) == (["the", "dog"], "sa")
    assert words_of("the dog sa", True) == (["the", "dog", "sa"], "")
    assert words_of("the dog ", False) == (["the", "dog"], "")
    assert words_of("fox.", False) == (["fox"], ".")


def test_cli_template_letters_and_word_budget(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "--lm", TINY, "--prompt", "the", "--template",
                           "_ chased a _ .", "--forbid-letters", "o", "--particles", "12",
                           "--runs-dir", str(tmp_path / "a"))
    assert rc == 0, err
    seqs = json.loads((next((tmp_path / "a").iterdir()) / "sequences.json").read_text())
    live = [p["text"] for p in seqs["particles"] if p["log_weight"] > float("-inf")]
    assert live
    for text in live:
        w = text.split()
        assert len(w) == 5 and w[1:3] == ["chased", "a"] and w[4] == "." and "o" not in text
    rc, out, err = run_cli(capsys, "--lm", TINY, "--prompt", "a", "--max-word-len", "3",
                           "--particles", "8", "--runs-dir", str(tmp_path / "b"))
    assert rc == 0, err
    seqs = json.loads((next((tmp_path / "b").iterdir()) / "sequences.json").read_text())
    live = [p["text"] for p in seqs["particles"] if p["log_weight"] > float("-inf")]
    assert live and all(len(w) <= 3 for t in live for w in t.split())
    bigram = tmp_path / "bigram.qvr"
    bigram.write_text(BIGRAM)
    rc, out, err = run_cli(capsys, "--template", "_ ran", "--runs-dir", str(tmp_path / "c"),
                           file=bigram)
    assert rc == 2 and "--template: needs --lm" in err
