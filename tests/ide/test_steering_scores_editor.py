"""A steering program's text functions in the editors (docs/extensions.md E10,
"Potentials in the program"): hover shows the signature and meaning, completion offers
them in a steering program's score steps only, semantic tokens classify them, the
formatter round-trips the score steps and their strings."""
from pathlib import Path

import pytest

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.sema.steering_scores import TEXT_FUNCTIONS
from qvr.syntax.format import format_text

ROOT = Path(__file__).resolve().parents[2]
FILE = str(ROOT / "examples" / "_steering_editor.qvr")  # beside tiny_lm/ (never written)
EXAMPLE = ROOT / "examples" / "steer_potentials.qvr"

SRC = """\
object Token : FinSet 64
morphism lm : Token -> Token [role=pretrained, model="tiny_lm"]
program steer : Token -> Token
    sample next <- lm
    score no_cat = forbid_words(next, "cat", "dog")
    score fox_early = require_word(next, "fox", 6)
    score fewer_e = -0.5 * count_letters(next, "e") + token_length(next) / 10
    return next
export steer
"""


@pytest.fixture(autouse=True)
def empty_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))


@pytest.mark.parametrize("name, sig, kinds, meaning", [
    ("forbid_words", "forbid_words(token, phrase...)", "constraint: 0 or -inf",
     "-inf once the text holds one of the phrases as whole words (--forbid)"),
    ("require_word", "require_word(token, word, within)", "constraint: 0 or -inf",
     "-inf unless the word is among the first `within` words (--require WORD@N)"),
    ("count_letters", "count_letters(token, letters)", "number per token",
     "how many of the letters (either case) the new token's text holds"),
    ("token_length", "token_length(token)", "number per token",
     "the number of characters of the new token's text"),
])
def test_hover_shows_signature_and_meaning(name, sig, kinds, meaning):
    doc = Document(SRC, FILE)
    assert doc.diagnostics() == []
    off = SRC.index(name + "(") + 2
    got = hover(doc, off)
    assert doc.text[got.span.start:got.span.end] == name
    assert got.text == (f"```qvr\n{sig}\n```\ntext function of a steering program's score "
                        f"steps · {kinds}\n\n{meaning}")


def test_hover_on_a_score_local():
    doc = Document(SRC, FILE)
    got = hover(doc, SRC.index("no_cat") + 1)
    assert "score step · a log potential of SMC steering" in got.text


def items(src):
    doc = Document(src.replace("$0", ""), FILE)
    return {i.label: i for i in complete(doc, src.index("$0")).items}


def test_completion_offers_them_in_a_steering_score_step():
    got = items(SRC.replace("    return next", "    score extra = $0\n    return next"))
    assert set(TEXT_FUNCTIONS) <= set(got)
    assert got["forbid_words"].insert == 'forbid_words(next, "${2:phrase}")'
    assert got["require_word"].insert == 'require_word(next, "${2:word}", ${3:within})'
    assert got["token_length"].insert == "token_length(next)"
    assert got["forbid_words"].doc == TEXT_FUNCTIONS["forbid_words"].meaning
    assert got["count_letters"].detail == ("count_letters(token, letters) · text function · "
                                           "number per token")
    prefixed = items(SRC.replace("    return next", "    score extra = forb$0\n    return next"))
    assert {"forbid_words", "forbid_letters"} <= set(prefixed)


def test_completion_does_not_offer_them_elsewhere():
    plain = ("object Token : FinSet 64\nmorphism k : Token -> Token [role=kernel]\n"
             "program p : Token -> Token\n    sample t <- k\n    score s = $0\n    return t\n")
    assert not set(TEXT_FUNCTIONS) & set(items(plain))
    let_step = SRC.replace("    return next", "    let z = $0\n    return next")
    assert not set(TEXT_FUNCTIONS) & set(items(let_step))


def test_semantic_tokens_classify_them_as_functions_and_their_strings():
    doc = Document(SRC, FILE)
    toks = {(doc.text[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)}
    for name in ("forbid_words", "require_word", "count_letters", "token_length"):
        assert (name, "function", ("defaultLibrary",)) in toks
    assert ('"cat"', "string", ()) in toks and ("next", "variable", ()) in {
        (a, b, ()) for a, b, _m in toks}


def test_the_formatter_round_trips_score_steps_and_strings():
    messy = SRC.replace('forbid_words(next, "cat", "dog")', 'forbid_words( next,"cat" ,  "dog" )'
                        ).replace("-0.5 * count_letters", "-0.5*count_letters")
    out = format_text(messy).text
    assert out == SRC
    assert format_text(out).text == out
    text = EXAMPLE.read_text()
    assert format_text(text).text == text


def test_signature_help_shows_the_text_functions_parameters():
    from qvr.ide.signature import signature_help
    src = SRC.replace("    return next", '    score extra = require_word(next, "fox", \n'
                                          "    return next")
    doc = Document(src, FILE)
    sig = signature_help(doc, src.index('"fox", ') + 7)
    assert sig.label == "require_word(token, word, within)" and sig.active == 2
    assert sig.label[slice(*sig.params[2])] == "within"
    assert sig.doc == ("text function · constraint: 0 or -inf — -inf unless the word is among "
                       "the first `within` words (--require WORD@N)")
    src = SRC.replace("    return next", '    score extra = forbid_words(next, "a", "b", \n'
                                          "    return next")
    sig = signature_help(Document(src, FILE), src.index('"b", ') + 5)
    assert sig.label == "forbid_words(token, phrase...)" and sig.active == 1
