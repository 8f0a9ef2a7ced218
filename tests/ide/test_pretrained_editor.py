"""`role=pretrained` in the editors (docs/extensions.md E10): hover names the model and
its vocabulary, completion offers the role, its keys and dtype values, semantic tokens
classify it, the formatter prints it canonically and idempotently."""
from pathlib import Path

import pytest

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.syntax.format import format_text

ROOT = Path(__file__).resolve().parents[2]
TINY = str((ROOT / "examples" / "tiny_lm").resolve())
FILE = str(ROOT / "examples" / "_pretrained_editor.qvr")  # beside tiny_lm/ (never written)

SRC = """\
object Token : FinSet 64
morphism lm : Token -> Token [role=pretrained, model="tiny_lm"]
morphism half : Token -> Token [role=pretrained, model="tiny_lm", dtype="bfloat16"]
program steer : Token -> Token
    sample next <- lm
    return next
export steer
"""

FACTS = ("morphism · role pretrained · pretrained causal LM `tiny_lm` (gpt2, 2 layers), "
         "vocabulary 64 tokens")


@pytest.fixture(autouse=True)
def empty_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))


def doc_at(src, needle):
    off = src.index(needle.replace("$0", "")) + needle.index("$0")
    return Document(src, FILE), off


@pytest.mark.parametrize("needle, token, facts", [
    ("morphism l$0m", "lm", f"{FACTS} · from {TINY}"),
    ("<- l$0m", "lm", f"{FACTS} · from {TINY}"),
    ("morphism ha$0lf", "half", f"{FACTS} · bfloat16 · from {TINY}"),
])
def test_hover_names_the_model_and_its_vocabulary(needle, token, facts):
    doc, off = doc_at(SRC, needle)
    assert doc.diagnostics() == []
    got = hover(doc, off)
    assert doc.text[got.span.start:got.span.end] == token
    sig = "lm" if token == "lm" else token
    assert got.text == f"```qvr\n{sig} : Token -> Token\n```\n{facts}"


def test_hover_of_the_option_keys():
    doc, off = doc_at(SRC, "mo$0del=")
    assert hover(doc, off).text.endswith(
        "option of a morphism · pretrained: the model, a folder (relative to this file's folder "
        "first) or a name in the Hugging Face cache (`\"gpt2\"`); required, never downloaded")


def labels(src):
    doc = Document(src.replace("$0", ""), FILE)
    return [(i.label, i.insert) for i in complete(doc, src.index("$0")).items]


def test_completion_offers_the_role_its_keys_and_dtypes():
    head = "object Token : FinSet 64\nmorphism z : Token -> Token "
    assert ("pretrained", "") in labels(head + "[role=$0")
    assert labels(head + "[role=pretrained, $0") == [("dtype", "dtype="), ("model", "model=")]
    assert labels(head + "[role=pretrained, model=\"tiny_lm\", $0") == [("dtype", "dtype=")]
    assert labels(head + "[role=pretrained, dtype=$0") == [('"bfloat16"', ""), ('"float32"', "")]


def test_semantic_tokens_classify_the_role_and_keys():
    doc = Document(SRC, FILE)
    toks = {(doc.text[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)}
    assert ("pretrained", "enumMember", ()) in toks
    assert ("model", "property", ()) in toks and ("dtype", "property", ()) in toks
    assert ('"tiny_lm"', "string", ()) in toks


def test_the_formatter_prints_it_canonically_and_idempotently():
    messy = ("object Token : FinSet 64\n"
             "morphism lm:Token->Token[ role = pretrained ,model = \"tiny_lm\",dtype=\"bfloat16\" ]\n"
             "export   lm\n")
    out = format_text(messy).text
    assert out == ("object Token : FinSet 64\n"
                   "morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", "
                   "dtype=\"bfloat16\"]\n"
                   "export lm\n")
    assert format_text(out).text == out
    assert Document(out, FILE).diagnostics() == []


def test_completion_offers_the_model_folders_beside_the_file_and_the_cached_names(
        tmp_path, monkeypatch):
    """`model=`: the folders beside the file that hold a config.json and a tokenizer, then
    the names in the Hugging Face cache (ORG/NAME), quoted; other folders are not offered."""
    hub = tmp_path / "hub"
    snap = hub / "models--acme--tiny-gpt" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "gpt2"}')
    (snap / "tokenizer.json").write_text("{}")
    (hub / "models--acme--no-tokenizer" / "snapshots" / "x").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    head = "object Token : FinSet 64\nmorphism lm : Token -> Token "
    doc = Document(head + "[role=pretrained, model=", FILE)
    items = complete(doc, len(doc.text)).items
    assert [(i.label, i.detail) for i in items] == [
        ('"tiny_lm"', "model folder beside this file"),
        ('"acme/tiny-gpt"', "in the Hugging Face cache")]
    # `data/` (no config.json) is beside the file too, and is not offered
    assert (ROOT / "examples" / "data").is_dir()
