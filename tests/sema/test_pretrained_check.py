"""`role=pretrained` in the checker (docs/extensions.md E10): the model folder read without
torch (`qvr.sema.pretrained`), the symbol the runtime reads, and every diagnostic with its
code, source range and message."""
import json
import os
import shutil
from pathlib import Path

import pytest

from qvr.analysis import Document, Edit
from qvr.sema.pretrained import read_model
from qvr.sema.pretrained_export import steered_model
from qvr.sema.symbols import MorphismSym
from qvr.sema.typed import typed_module

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_lm"
FILE = str(ROOT / "examples" / "_pretrained_test.qvr")  # a module beside tiny_lm/ (never written)

HEAD = "object Token : FinSet 64\nobject Small : FinSet 32\nobject Vec : Real 4\n"


def diags(src, path=FILE):
    doc = Document(HEAD + src, path)
    return [(d.code, doc.text[d.span.start:d.span.end], d.message) for d in doc.diagnostics()]


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub


def test_the_tiny_model_is_read_from_its_folder_without_torch():
    info = read_model("tiny_lm", str(ROOT / "examples"))
    assert info.ok and info.folder == str(TINY.resolve()) and info.cached_name is None
    assert (info.model_type, info.n_layers, info.vocab, info.config_vocab) == ("gpt2", 2, 64, 64)
    assert info.describe() == "pretrained causal LM `tiny_lm` (gpt2, 2 layers), vocabulary 64 tokens"
    # an absolute folder, whatever the module's folder
    assert read_model(str(TINY), "/nonexistent").folder == str(TINY.resolve())


def test_the_symbol_carries_the_model(empty_hub):
    tm = typed_module(HEAD + "morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", "
                             "dtype=\"bfloat16\"]\nexport lm\n", FILE)
    assert tm.errors == []
    s = tm.symbol("value", "lm")
    assert isinstance(s, MorphismSym)
    assert (s.role, s.stratum, s.mixes, s.causal, s.deterministic, s.family) == \
        ("pretrained", "stochastic", True, True, False, None)
    assert s.pretrained == ("tiny_lm", str(TINY.resolve()), "gpt2", 2, 64, "bfloat16", None)
    found = steered_model(tm)
    assert (found.morphism, found.spelled, found.folder, found.dtype) == \
        ("lm", "tiny_lm", str(TINY.resolve()), "bfloat16")


@pytest.mark.parametrize("body, steers", [
    ("program steer : Token -> Token\n    sample next <- lm\n    return next\nexport steer\n", True),
    ("export lm\n", True),
    ("program steer : Token -> Token\n    sample a <- lm\n    sample b <- lm(a)\n    return b\n"
     "export steer\n", False),
    ("morphism k : Token -> Token [role=kernel]\nprogram steer : Token -> Token\n"
     "    sample next <- k\n    return next\nexport steer\n", False),
])
def test_which_exports_steer_the_model(body, steers, empty_hub):
    tm = typed_module(HEAD + "morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\"]\n"
                      + body, FILE)
    assert tm.errors == []
    assert (steered_model(tm) is not None) == steers


def test_a_model_in_the_hugging_face_cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    snap = hub / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(TINY / f, snap / f)
    (hub / "models--org--tiny" / "refs").mkdir()
    (hub / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    info = read_model("org/tiny", str(tmp_path))
    assert info.ok and info.folder == str(snap.resolve()) and info.cached_name == "org/tiny"
    assert diags("morphism lm : Token -> Token [role=pretrained, model=\"org/tiny\"]\n") == []
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # HF_HOME/hub
    assert read_model("org/tiny", None).folder == str(snap.resolve())


def test_the_tokenizer_size_counts_added_tokens_and_vocab_json(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps(
        {"model_type": "llama", "num_hidden_layers": 3, "vocab_size": 128}))
    (tmp_path / "a" / "tokenizer.json").write_text(json.dumps(
        {"model": {"type": "BPE", "vocab": {"x": 0, "y": 1, "z": 2}},
         "added_tokens": [{"id": 99, "content": "<pad>"}]}))
    info = read_model("a", str(tmp_path))
    assert (info.model_type, info.n_layers, info.vocab, info.config_vocab) == ("llama", 3, 100, 128)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    (tmp_path / "b" / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))
    (tmp_path / "b" / "added_tokens.json").write_text(json.dumps({"<x>": 2}))
    assert read_model("b", str(tmp_path)).vocab == 3


def test_the_checker_names_what_it_tried(empty_hub):
    here = str(ROOT / "examples" / "nowhere_xyz")
    assert diags("morphism lm : Token -> Token [role=pretrained, model=\"nowhere_xyz\"]\n") == [
        ("QVR860", "\"nowhere_xyz\"",
         f"pretrained model `nowhere_xyz` not found: tried the folder {here}, the folder "
         f"nowhere_xyz, models--nowhere_xyz in the Hugging Face cache ({empty_hub}) "
         f"(nothing is downloaded)")]


def test_a_folder_that_is_not_a_causal_lm(tmp_path, empty_hub):
    (tmp_path / "nolm").mkdir()
    (tmp_path / "notok").mkdir()
    (tmp_path / "notok" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    path = str(tmp_path / "m.qvr")
    folder = (tmp_path / "nolm").resolve()
    assert diags("morphism lm : Token -> Token [role=pretrained, model=\"nolm\"]\n", path) == [
        ("QVR861", "\"nolm\"", f"`nolm` ({folder}) is not a causal language model folder: "
                               f"no config.json in {folder}")]
    folder = (tmp_path / "notok").resolve()
    assert diags("morphism lm : Token -> Token [role=pretrained, model=\"notok\"]\n", path) == [
        ("QVR861", "\"notok\"", f"`notok` ({folder}) is not a causal language model folder: "
                                f"no tokenizer in {folder} (tokenizer.json, vocab.json or "
                                f"tokenizer.model)")]


@pytest.mark.parametrize("decl, expected", [
    ("morphism lm : Small -> Small [role=pretrained, model=\"tiny_lm\"]\n",
     [("QVR862", "Small", "the token object `Small` has 32 elements but the tokenizer of "
                          "`tiny_lm` has 64 tokens; declare `object Small : FinSet 64`")]),
    ("morphism lm : FinSet 8 -> FinSet 8 [role=pretrained, model=\"tiny_lm\"]\n",
     [("QVR862", "FinSet 8", "the token object `FinSet 8` has 8 elements but the tokenizer of "
                             "`tiny_lm` has 64 tokens; write `FinSet 64`")]),
    ("morphism lm : Token -> Token [role=pretrained]\n",
     [("QVR206", "lm", "pretrained morphism `lm` is missing the required option `model` "
                       "(`model=\"FOLDER_OR_NAME\"`)")]),
    ("morphism lm : Token -> Token [role=pretrained, model=tiny_lm]\n",
     [("QVR203", "model", "option `model` expects a string: a model folder or a name in the "
                          "Hugging Face cache")]),
    ("morphism lm : Token -> Vec [role=pretrained, model=\"tiny_lm\"]\n",
     [("QVR306", "Vec", "a pretrained morphism needs the token object (a single `FinSet`) as its "
                        "codomain, got `Vec` (Real 4)")]),
    ("morphism lm : Token -> Small [role=pretrained, model=\"tiny_lm\"]\n",
     [("QVR306", "Small", "a pretrained morphism maps the token object to itself: the codomain "
                          "`Small` (FinSet 32) is not the domain `Token` (FinSet 64)")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\"] ~ Categorical\n",
     [("QVR311", "~ Categorical", "a `pretrained` morphism takes no `~` initializer: its "
                                  "weights are the model's")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", dtype=\"float16\"]\n",
     [("QVR204", "\"float16\"", "unknown dtype `float16`; expected one of float32, bfloat16; did "
                                "you mean `bfloat16`?")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", dtype=16]\n",
     [("QVR203", "dtype", "option `dtype` expects a string: \"float32\" or \"bfloat16\"")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", replicate=2]\n",
     [("QVR201", "replicate", "option `replicate` does not apply to a `pretrained` morphism")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", scale=0.1]\n",
     [("QVR707", "scale", "`scale` has no effect on a pretrained morphism")]),
    ("morphism k : Token -> Token [role=kernel, model=\"tiny_lm\"]\n",
     [("QVR201", "model", "option `model` does not apply to a `kernel` morphism")]),
    ("morphism lm : Token -> Token [role=pretrained, model=\"tiny_lm\", dtype=bfloat16]\n", []),
])
def test_diagnostics(decl, expected, empty_hub):
    assert diags(decl) == expected


def test_a_module_that_is_not_a_file_reads_folders_from_the_working_folder(empty_hub):
    doc = Document(HEAD + f"morphism lm : Token -> Token [role=pretrained, model=\"{TINY}\"]\n")
    assert doc.diagnostics() == []


def test_a_model_folder_that_appears_is_seen_at_the_next_edit(tmp_path, empty_hub):
    path = str(tmp_path / "m.qvr")
    doc = Document(HEAD + "morphism lm : Token -> Token [role=pretrained, model=\"lm\"]\n", path)
    assert [d.code for d in doc.diagnostics()] == ["QVR860"]
    shutil.copytree(TINY, tmp_path / "lm", ignore=shutil.ignore_patterns("*.safetensors"))
    doc.apply_edits([Edit(len(doc.text), len(doc.text), "\n")])  # an edit elsewhere
    assert doc.diagnostics() == []
    # the tokenizer changes (a larger vocabulary): the mismatch shows
    tok = json.loads((tmp_path / "lm" / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 70, "content": "<new>"})
    (tmp_path / "lm" / "tokenizer.json").write_text(json.dumps(tok))
    os.utime(tmp_path / "lm" / "tokenizer.json", ns=(1, 10 ** 18))
    doc.apply_edits([Edit(len(doc.text), len(doc.text), "\n")])
    assert [(d.code, d.message.split(";")[0]) for d in doc.diagnostics()] == [
        ("QVR862", "the token object `Token` has 64 elements but the tokenizer of `lm` has 71 "
                   "tokens")]


def test_the_documented_examples_check_as_documented(empty_hub):
    """docs/extensions.md E10: the example checks clean beside tiny_lm/; each line of the
    invalid block gives exactly its marked code."""
    import re
    text = (ROOT / "docs" / "extensions.md").read_text(encoding="utf-8").split("\n## E10.")[1]
    valid, invalid = re.findall(r"```qvr\n(.*?)```", text, re.S)[:2]  # then "Potentials in
    # the program" (tests/sema/test_steering_scores_check.py)
    assert Document(valid, FILE).diagnostics() == []
    prelude = "object Token : FinSet 64\nobject Small : FinSet 32\nobject Vec : Real 4\n"
    lines = [ln for ln in invalid.splitlines() if ln.strip()]
    assert len(lines) == 6
    for line in lines:
        code = re.search(r"# (QVR\d+)", line).group(1)
        doc = Document(prelude + line + "\n", FILE)
        assert [d.code for d in doc.diagnostics()] == [code], line
