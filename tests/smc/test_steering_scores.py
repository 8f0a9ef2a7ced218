"""A steering program's score steps as SMC potentials (docs/extensions.md E10, "Potentials
in the program"; issue 40): the program's `forbid_words` is the command line's
`--forbid`, exactly; a soft score adds exactly its value per token to the log weight;
both kinds multiply; a NaN score names its step; the program's soft potential gives an
unbiased Z-hat (against exact enumeration).  Skipped without transformers."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

pytest.importorskip("transformers")

import qvr  # noqa: E402
from qvr.inference import fit  # noqa: E402
from qvr.inference.data.fit_data import DataError  # noqa: E402
from qvr.smc.hf_lm import load_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_lm"


def program(tmp_path, *scores, name="p.qvr"):
    body = "".join(f"    {s}\n" for s in scores)
    path = tmp_path / name
    path.write_text(f"object Token : FinSet 64\n"
                    f"morphism lm : Token -> Token [role=pretrained, model=\"{TINY}\"]\n"
                    f"program steer : Token -> Token\n    sample next <- lm\n{body}"
                    f"    return next\nexport steer\n")
    return path


def run(path, **config):
    cfg = {"method": "smc", "prompt": "the old dog", "particles": 8, "max_len": 10, "seed": 3,
           **config}
    return fit(qvr.load(path), config=cfg)


def particles(res):
    return [(p["tokens"], p["log_weight"]) for p in res.sequences["particles"]]


def test_forbid_words_in_the_program_is_the_command_lines_forbid(tmp_path):
    plain = program(tmp_path, name="plain.qvr")
    scored = program(tmp_path, 'score no_cat = forbid_words(next, "cat")', name="scored.qvr")
    zs = []
    for seed in (3, 4, 5):
        a = run(plain, forbid=[["cat"]], seed=seed)
        b = run(scored, seed=seed)
        assert particles(a) == particles(b)  # the same tokens and log weights, exactly
        assert a.sequences["log_Z"] == b.sequences["log_Z"]
        assert b.sequences["potentials"] == ["no_cat"] and a.sequences["potentials"] == []
        zs.append(b.sequences["log_Z"])
    assert min(zs) < 0  # the constraint ruled draws out (without it log Z-hat is 0)


def test_the_cli_names_the_programs_potentials(tmp_path, capsys):
    from qvr.cli import main
    plain = program(tmp_path, name="plain.qvr")
    scored = program(tmp_path, 'score no_cat = forbid_words(next, "cat")',
                     'score fox = require_word(next, "fox", 6)', name="scored.qvr")
    common = ["--method", "smc", "--prompt", "the old dog", "--particles", "8", "--max-len",
              "10", "--seed", "5"]
    assert main(["run", str(plain), *common, "--forbid", "cat", "--require", "fox@6",
                 "--runs-dir", str(tmp_path / "a")]) == 0
    out_a = capsys.readouterr().out
    assert main(["run", str(scored), *common, "--runs-dir", str(tmp_path / "b")]) == 0
    out_b = capsys.readouterr().out
    assert "potentials: no_cat, fox (from the program)\n" in out_b
    assert "potentials:" not in out_a

    def record(folder):
        return json.loads((next((tmp_path / folder).iterdir()) / "sequences.json").read_text())
    a, b = record("a"), record("b")
    assert [p["tokens"] for p in a["particles"]] == [p["tokens"] for p in b["particles"]]
    assert [p["log_weight"] for p in a["particles"]] == [p["log_weight"] for p in b["particles"]]
    assert a["log_Z"] == b["log_Z"] and b["potentials"] == ["no_cat", "fox"]


def test_the_summary_names_the_potentials_that_ruled_every_particle_out(tmp_path, capsys):
    from qvr.cli import main
    scored = program(tmp_path, 'score no_e = forbid_letters(next, "aeiou")')
    assert main(["run", str(scored), "--method", "smc", "--particles", "4", "--max-len",
                 "4", "--seed", "1", "--runs-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "potentials: no_e (from the program)\nno sequence has positive weight (every " \
        "particle was ruled out)\n" in out


@pytest.fixture(scope="module")
def texts():
    lm = load_lm(str(TINY))
    return lm.token_texts(), lm.eos


def test_a_soft_score_adds_its_value_per_token(tmp_path, texts):
    token_texts, eos = texts
    path = program(tmp_path, 'score fewer_e = -0.5 * count_letters(next, "e")')
    for seed in range(4):  # one particle: its log weight is the sum of the increments
        res = run(path, particles=1, seed=seed, max_len=12)
        (tokens, lw), = particles(res)
        count = sum(token_texts[t].lower().count("e") for t in tokens if t != eos)
        assert count > 0 or seed > 0
        assert lw == pytest.approx(-0.5 * count, abs=1e-12)
        assert res.sequences["log_Z"] == pytest.approx(-0.5 * count, abs=1e-12)


def test_the_potential_on_one_step_against_the_tokenizers_texts(texts):
    from qvr.inference.methods.smc_scores import ProgramScores
    from qvr.sema.pretrained_export import steered_in_file
    from qvr.smc.potentials import Transitions
    token_texts, eos = texts
    found = steered_in_file(str(ROOT / "examples" / "steer_potentials.qvr"))
    lm = load_lm(str(TINY), prompt="the old dog")
    pot = ProgramScores(found.scores, lm, max_len=24)
    assert [s.name for s in found.scores] == ["no_cat", "fox_early", "fewer_e"]
    kids = list(range(64))
    got = pot.log_potential_batch(Transitions(np.zeros((1, 0), dtype=np.int64), np.arange(64),
                                              64))
    for a in kids:  # one token: no complete word yet unless it ends the string
        e = 0.0 if a == eos else -0.5 * token_texts[a].lower().count("e")
        if a == eos:  # the empty string has ended: `fox` is not among its words
            e = -math.inf
        assert got[a] == e, (a, token_texts[a])


def test_both_the_programs_and_the_command_lines_potentials_apply(tmp_path):
    path = program(tmp_path, 'score no_cat = forbid_words(next, "cat")')
    res = run(path, forbid_letters="z", seed=1, particles=16)
    lm = load_lm(str(TINY))
    for p in res.sequences["particles"]:
        if p["log_weight"] > -math.inf:
            assert "cat" not in p["text"].split() and "z" not in p["text"].lower()
    plain = program(tmp_path, name="plain.qvr")
    both = run(plain, forbid=[["cat"]], forbid_letters="z", seed=1, particles=16)
    assert particles(both) == particles(res)
    assert lm.eos == res.sequences["eos"]


def test_a_nan_score_names_its_step(tmp_path):
    path = program(tmp_path, "score odd = log(token_length(next) - 100)")
    with pytest.raises(DataError, match=r"^score step `odd` \(line 5\) is nan for child \(\d+,\) "
                                        r"at step 1; a log potential must be < \+inf and not "
                                        r"NaN$"):
        run(path, particles=2, max_len=3)


def test_the_program_run_from_python_says_where_text_functions_run(tmp_path):
    from qvr.runtime.steer_text import TextFunctionOutsideSteering
    path = program(tmp_path, 'score no_cat = forbid_words(next, "cat")')
    steer = qvr.load(path).exports["steer"]
    x = torch.tensor([[0, 5]])
    with pytest.raises(TextFunctionOutsideSteering, match=r"^`forbid_words` reads the text of "
                                                          r"the steered tokens"):
        steer.log_joint(x, {"next": x})


def test_the_soft_potentials_z_hat_is_unbiased(tmp_path, texts):
    """Z = E_LM[exp(Σ_t -0.5·count_e(x_t))] over strings of at most 2 tokens (cut there),
    enumerated from the model's next-token probabilities; the mean Z-hat over 120 seeds
    of 4 particles is within 4 Monte Carlo standard errors of it."""
    token_texts, eos = texts
    lm = load_lm(str(TINY), prompt="the")
    soft = np.array([0.0 if a == eos else -0.5 * token_texts[a].lower().count("e")
                     for a in range(64)])
    p1 = torch.softmax(lm.logits([()])[0].double(), -1).numpy()
    p2 = torch.softmax(lm.logits([(a,) for a in range(64)]).double(), -1).numpy()
    w2 = (p2 * np.exp(soft)[None, :]).sum(1)  # the second token's expected factor
    second = np.where(np.arange(64) == eos, 1.0, w2)  # eos first: the string has ended
    z = float((p1 * np.exp(soft) * second).sum())
    path = program(tmp_path, 'score fewer_e = -0.5 * count_letters(next, "e")')
    steer = qvr.load(path)
    zs = np.array([math.exp(fit(steer, config={"method": "smc", "prompt": "the", "particles": 4,
                                                "max_len": 2, "seed": s}).sequences["log_Z"])
                   for s in range(120)])
    se = zs.std(ddof=1) / math.sqrt(len(zs))
    assert abs(zs.mean() - z) <= 4 * se, (zs.mean(), z, se)
    assert 0.2 < z < 1.0


def test_with_another_lm_the_programs_scores_still_apply(tmp_path):
    import shutil
    other = tmp_path / "other_lm"  # another folder: --lm wins, the program's scores apply
    shutil.copytree(TINY, other)
    scored = program(tmp_path, 'score no_cat = forbid_words(next, "cat")',
                     'score short = -0.25 * token_length(next)', name="scored.qvr")
    plain = program(tmp_path, 'score short = -0.25 * token_length(next)', name="plain.qvr")
    a = run(scored, lm=str(other), seed=7)
    b = run(plain, lm=str(other), forbid=[["cat"]], seed=7)
    assert a.sequences["lm"] == str(other) and a.sequences["potentials"] == ["no_cat", "short"]
    assert particles(a) == particles(b) and a.sequences["log_Z"] == b.sequences["log_Z"]
