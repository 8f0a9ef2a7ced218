"""The checker on a steering program's score steps (docs/extensions.md E10, "Potentials in
the program"): each refusal with its exact code, message and range (given as the line and
the text it covers), what passes, and `steered_model`'s plain data for the runtime."""
from __future__ import annotations

from pathlib import Path

import pytest

from qvr.analysis import Document
from qvr.sema.pretrained_export import steered_model
from qvr.sema.steering_scores import TEXT_FUNCTIONS, TextCall
from qvr.sema.typed import typed_module

ROOT = Path(__file__).resolve().parents[2]
HEAD = ("object Token : FinSet 64\n"
        f"morphism lm : Token -> Token [role=pretrained, model=\"{ROOT / 'examples' / 'tiny_lm'}\"]\n")


def source(*steps, header="program steer : Token -> Token", tail="export steer\n"):
    return HEAD + header + "\n" + "".join(f"    {s}\n" for s in steps) + tail


def diags(text, path=ROOT / "t.qvr"):
    doc = Document(text, str(path))
    return [(d.code, doc.position(d.span.start).line + 1, text[d.span.start:d.span.end],
             d.message) for d in doc.diagnostics()]


SHAPE = "a steering program has `sample next <- lm`, `score` steps and `return next`"


def test_the_example_and_every_allowed_form_check_clean():
    import re
    example = ROOT / "examples" / "steer_potentials.qvr"
    assert diags(example.read_text(), example) == []
    doc = (ROOT / "docs" / "extensions.md").read_text(encoding="utf-8")
    block = re.findall(r"```qvr\n(.*?)```", doc.split("### Potentials in the program")[1],
                       re.S)[0]
    assert diags(block, example) == []
    assert diags(source(
        "sample next <- lm",
        'score a = 2 * forbid_words(next, "cat", "the dog") + forbid_letters(next, "xz") / 4',
        'score b = require_word(next, "fox", 6) + word_budget(next, 7) + '
        'template(next, "the _ sat on the _")',
        'score c = exp(-token_length(next)) / 3 - sqrt(count_letters(next, "ae")) * '
        '(0.5 + log(2)) + sigmoid(1)',
        "return next")) == []


@pytest.mark.parametrize("score, want", [
    ('forbid_word(next, "cat")',
     ("QVR109", "forbid_word", "unknown function `forbid_word`; did you mean `forbid_words`?")),
    ('forbid_words(next)',
     ("QVR416", "forbid_words", "`forbid_words` expects at least 2 arguments (token, "
                                "phrase...), got 1")),
    ('require_word(next, "fox")',
     ("QVR416", "require_word", "`require_word` expects 3 arguments (token, word, within), "
                                "got 2")),
    ('token_length(next, "e")',
     ("QVR416", "token_length", "`token_length` expects 1 argument (token), got 2")),
    ('exp(1, 2)', ("QVR416", "exp", "`exp` expects 1 argument, got 2")),
    ('count_letters(3, "e")',
     ("QVR865", "3", "the first argument of `count_letters` is the sampled token `next`, "
                     "got `3`")),
    ('word_budget(next, 0)',
     ("QVR866", "0", "`max_letters` of `word_budget` must be a positive integer, got `0`")),
    ('word_budget(next, "7")',
     ("QVR866", '"7"', "`max_letters` of `word_budget` must be a positive integer, got `\"7\"`")),
    ('template(next, 3)',
     ("QVR866", "3", "`pattern` of `template` must be a string, got `3`")),
    ('forbid_words(next, "cat", "..")',
     None),  # a sign is a word (`words_of`)
    ('forbid_words(next, " ")',
     ("QVR866", '" "', "`phrase` of `forbid_words` must have at least one word, got \" \"")),
    ('require_word(next, "the fox", 3)',
     ("QVR866", '"the fox"', "`word` of `require_word` is one word, got \"the fox\"")),
    ('count_letters(next, "")',
     ("QVR866", '""', "`letters` of `count_letters` must not be empty")),
    ('token_length(next) + next',
     ("QVR867", "next", "`next` is read by the text functions, as their first argument "
                        "(`token_length(next)`, `count_letters(next, \"e\")`), not as a "
                        "number")),
    ('pow(token_length(next), 2)',
     ("QVR867", "pow", "`pow` is not evaluated in a steering score step: use numbers, + - * /, "
                       "exp, log, sqrt, sigmoid and the text functions")),
    ('[1, 2]',
     ("QVR867", "[1, 2]", "`[1, 2]` is not evaluated in a steering score step: use numbers, "
                          "+ - * /, exp, log, sqrt, sigmoid and the text functions")),
    ('token_length(next) > 3',
     ("QVR867", ">", "`>` is not evaluated in a steering score step: use numbers, + - * /, "
                     "exp, log, sqrt, sigmoid and the text functions")),
    ('"cat"', ("QVR900", '"cat"', "string literals in let-expressions are outside the "
                                  "supported core")),
    ('1 - forbid_words(next, "cat")',
     ("QVR868", "-", "`forbid_words` is 0 or -inf (a constraint): subtracting it would make a "
                     "ruled-out text +inf or NaN; constraints combine by `+` and by a positive "
                     "number factor")),
    ('token_length(next) / template(next, "a _")',
     ("QVR868", "/", "`template` is 0 or -inf (a constraint): dividing by it would make a "
                     "ruled-out text +inf or NaN; constraints combine by `+` and by a positive "
                     "number factor")),
    ('token_length(next) * forbid_letters(next, "z")',
     ("QVR868", "*", "`forbid_letters` is 0 or -inf (a constraint): a factor that is not a "
                     "positive number would make a ruled-out text +inf or NaN; constraints "
                     "combine by `+` and by a positive number factor")),
    ('exp(word_budget(next, 5))',
     ("QVR868", "exp", "`word_budget` is 0 or -inf (a constraint): `exp` of it would make a "
                       "ruled-out text +inf or NaN; constraints combine by `+` and by a "
                       "positive number factor")),
])
def test_each_refusal_in_a_score_step(score, want):
    got = diags(source("sample next <- lm", f"score s = {score}", "return next"))
    assert got == ([] if want is None else [(want[0], 5, want[1], want[2])])


def test_steps_smc_cannot_run():
    got = diags(source("score early = token_length(next)", "sample next <- lm",
                       "observe y <- lm(next)", "sample again <- lm", "score s : Token = 1",
                       "return again"))
    assert [g[:3] for g in got if g[0] == "QVR864"] == [
        ("QVR864", 4, "score"), ("QVR864", 6, "observe"), ("QVR864", 7, "sample"),
        ("QVR864", 8, "Token"), ("QVR864", 9, "again")]
    msgs = [g[3] for g in got if g[0] == "QVR864"]
    assert msgs == [f"{SHAPE}: a score step comes after the `sample` step",
                    f"{SHAPE}: SMC cannot run an `observe` step in it",
                    f"{SHAPE}: SMC cannot run a second `sample` step in it",
                    f"{SHAPE}: a score step takes no index",
                    f"{SHAPE}: it returns the sampled token"]


def test_a_steering_program_takes_no_parameters():
    got = diags(source("sample next <- lm", "score s = token_length(next)", "return next",
                       header="program steer(x) : Token -> Token"))
    assert got[0] == ("QVR864", 3, "(x)", f"{SHAPE}: it takes no parameters")


def test_text_functions_outside_a_steering_program():
    got = diags(HEAD + "program p : Token -> Token\n    sample t <- lm\n"
                       "    score s = forbid_words(t, \"cat\")\n    return t\n"
                       "program q : Token -> Token\n    let n = 2\n"
                       "    score s = forbid_words(n, \"cat\")\n    return n\nexport p\n")
    assert got == [("QVR863", 9, "forbid_words",
                    "`forbid_words` is a text function: it is read only in the score steps of a "
                    "steering program (`sample NAME <- LM` with LM pretrained, then `score` "
                    "steps, then `return NAME`)")]


def test_steered_model_exposes_the_scores_as_plain_data():
    text = source("sample next <- lm", 'score no_cat = forbid_words(next, "cat", "dog")',
                  'score fewer_e = -0.5 * count_letters(next, "e") + token_length(next)',
                  "return next")
    tm = typed_module(text, str(ROOT / "t.qvr"))
    assert not tm.errors
    found = steered_model(tm)
    assert found.morphism == "lm" and [s.name for s in found.scores] == ["no_cat", "fewer_e"]
    assert [s.line for s in found.scores] == [5, 6]
    assert [[(c.function, c.args) for c in s.calls] for s in found.scores] == [
        [("forbid_words", ("cat", "dog"))], [("count_letters", ("e",)), ("token_length", ())]]
    assert all(isinstance(c, TextCall) for s in found.scores for c in s.calls)
    plain = typed_module(source("sample next <- lm", "return next"), str(ROOT / "t.qvr"))
    assert steered_model(plain).scores == ()
    assert set(TEXT_FUNCTIONS) == {"forbid_words", "require_word", "forbid_letters",
                                   "word_budget", "template", "count_letters", "token_length"}
