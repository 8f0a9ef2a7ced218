"""The data shipped with the examples (examples/data/) and its reader (qvr.datafiles).

Every runnable example has a data file that `find_data` finds, `load_data` reads and the
program's data check accepts; the token examples have vocabularies covering every id
their programs declare; the committed files are exactly what the seeded generators
write; `load_data` and `load_vocab` reject bad files with messages naming file, key and
cause.
"""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qvr.datafiles import (DataFileError, find_data, find_vocab, load_data, load_vocab,
                           split_relations)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DATA = EXAMPLES / "data"
RUNNABLE = sorted(p.stem for p in EXAMPLES.glob("*.qvr")
                  if p.read_text(encoding="utf-8").startswith("# runnable: yes"))
TOKEN_PROGRAMS = {"transformer_lm": 32, "recurrent_lm": 64, "decoder_lm": 32}   # declared vocabulary sizes


def test_the_runnable_examples_are_the_known_ones():
    assert RUNNABLE == [
        "ar_series", "count_regression", "crop_yields", "decoder_lm", "eight_schools",
        "expert_ensemble", "garch_volatility", "gp_counts", "grouped_mixture", "hmm",
        "hmm_forward", "humidity_bands", "icl_regression", "item_response", "kid_scores",
        "knowledge_graph", "lotka_volterra", "mixture_marginalize", "pcfg_deduction", "recurrent_lm",
        "regression_plates", "relational_authors", "sensor_tracking", "topic_model",
        "transformer_lm", "vae"]


#: posteriordb's data files shipped as they are: what their Stan programs read and the
#: program does not (hmm_forward's two states are written in the program; gp_pois_regr's
#: data carry a `y` its Stan program does not read either)
LEFT_OUT = {
    "hmm_forward": ["the shipped data's `K` is not read by `hmm_forward`: left out"],
    "gp_counts": ["the shipped data's `y` is not read by `gp_counts`: left out"],
}


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_runnable_example_ships_data_that_its_program_accepts(name):
    import torch

    import qvr
    from qvr.inference.data.fit_data import check_data, split_data
    from qvr.inference.front.fitting import model_of
    path = EXAMPLES / f"{name}.qvr"
    found = find_data(path)
    assert found == DATA / f"{name}.json"
    relations, values = split_relations(load_data(found))
    torch.manual_seed(0)
    from qvr.runtime import bind_sizes  # sizes read from the data (`FinSet N`): bound here
    model = model_of(bind_sizes(qvr.load(str(path), data=relations or None), values))
    # as a fit does: a size the program read from the data (a Stan data file's `J`, `T`,
    # `N`) is bound, not a site's value; an entry it does not read is left out with a note
    from qvr.inference.data.fit_data import _for_export
    values, notes, _ = _for_export(model, values, "shipped data")
    assert notes == LEFT_OUT.get(name, [])
    # string host data (a deduction's tokens) is passed as a list, the rest as arrays
    words = {k: v.tolist() for k, v in values.items() if v.dtype.kind == "U"}
    x, observations = split_data(model, {k: v for k, v in values.items() if k not in words})
    observations.update(words)
    check_data(model, x, observations)  # raises DataError on any mismatch
    names = set(model.site_names) | {"x"}
    observed = [k for k in values if k in names and k != "x"]
    # the deduction only reads host data; a posteriordb example scores its likelihood
    # (an HMM's forward pass): one row, no observe
    scored = {"pcfg_deduction", "hmm_forward"}
    # E9.7: an AR observes its steps after the first five, computed from `y` (one row each)
    computed = {"ar_series": 195}
    assert observed or name in scored or name in computed
    rows = x.shape[0]  # a few dozen rows; the corpora hundreds; the deduction one sentence
    small = {"eight_schools": 8, "gp_counts": 11, "lotka_volterra": 2,  # posteriordb's data
             **computed}  # as it is (lotka_volterra: `y_init`, the first observed, 2 rows)
    assert rows == 1 if name in scored else rows == small[name] if name in small \
        else 30 <= rows <= 1500, rows


def test_knowledge_graph_table_is_a_log_probability_table_and_fixes_countries():
    relations, values = split_relations(load_data(DATA / "knowledge_graph.json"))
    assert set(relations) == {"city_country"} and set(values) == {"x", "country"}
    table = relations["city_country"]
    assert table.shape == (12, 5) and table.dtype == np.float32
    np.testing.assert_allclose(np.log(np.exp(table.astype(float)).sum(axis=1)), 0.0,
                               atol=1e-3)
    assert table.argmax(axis=1).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4]
    assert values["x"].ravel().tolist() == list(range(30))


def test_knowledge_graph_without_its_table_names_the_missing_key():
    import qvr
    with pytest.raises(Exception) as info:
        qvr.load(str(EXAMPLES / "knowledge_graph.qvr"))
    assert "city_country" in str(info.value) or "located_in" in str(info.value)


@pytest.mark.parametrize("name,size", sorted(TOKEN_PROGRAMS.items()))
def test_language_model_vocab_covers_every_declared_token(name, size):
    import qvr
    from qvr.inference.front.fitting import model_of
    vocab = load_vocab(find_vocab(EXAMPLES / f"{name}.qvr"))
    assert find_vocab(EXAMPLES / f"{name}.qvr") == DATA / f"{name}.vocab.json"
    assert model_of(qvr.load(str(EXAMPLES / f"{name}.qvr"))).domain.size == size
    assert len(vocab) == size and len(set(vocab)) == size
    assert vocab[0] == "<eos>"
    data = load_data(find_data(EXAMPLES / f"{name}.qvr"))
    for key, ids in data.items():
        assert ids.dtype == np.int64, key
        assert 0 <= ids.min() and ids.max() < size, key


def test_transformer_corpus_is_word_sentences_shifted_by_one():
    vocab = load_vocab(DATA / "transformer_lm.vocab.json")
    data = load_data(DATA / "transformer_lm.json")
    x, y = data["x"], data["next_token"]
    assert x.shape == y.shape == (38, 12)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])   # next_token: the following word
    np.testing.assert_array_equal(x[1:, 0], y[:-1, -1])  # rows cut from one stream
    text = " ".join(vocab[i] for i in x[:3].ravel())
    assert text.startswith("<eos> the farmer ran . <eos> the brown teacher chased the fox")
    stream = [vocab[i] for i in np.concatenate([x.ravel(), y[-1, -1:]]).tolist()]
    sentences = " ".join(stream).split("<eos>")[1:-1]
    assert len(sentences) > 50
    for s in sentences:
        words = s.split()
        assert words[-1] == "." and words[0] in ("the", "a", "every"), s


def test_decoder_corpus_is_rows_of_sixteen_words_shifted_by_one():
    vocab = load_vocab(DATA / "decoder_lm.vocab.json")
    assert vocab == load_vocab(DATA / "transformer_lm.vocab.json")
    data = load_data(DATA / "decoder_lm.json")
    x, y = data["x"], data["next_token"]
    assert x.shape == y.shape == (365, 16)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    np.testing.assert_array_equal(x[1:, 0], y[:-1, -1])
    sentences = " ".join(vocab[i] for i in x.ravel()).split("<eos>")[1:-1]
    assert len(sentences) > 700
    for s in sentences:
        words = s.split()
        assert words[-1] == "." and words[0] in ("the", "a", "every"), s


def test_recurrent_corpus_is_character_windows_and_the_next_character():
    vocab = load_vocab(DATA / "recurrent_lm.vocab.json")
    data = load_data(DATA / "recurrent_lm.json")
    x, y = data["x"], data["next_char"]
    assert x.shape == (335, 8) and y.shape == (335,)
    np.testing.assert_array_equal(y[:-1], x[1:, 4])  # windows at stride 4
    stream = "".join(vocab[i] if i else "|" for i in x[::2].ravel().tolist()[:60])
    assert stream.startswith("|The cat near the fox followed the farmer quietly.|A bird sa"), stream


def test_topic_model_vocab_covers_the_declared_vocabulary_and_documents():
    source = (EXAMPLES / "topic_model.qvr").read_text(encoding="utf-8")
    size = int(re.search(r"object Vocab : FinSet (\d+)", source).group(1))
    vocab = load_vocab(find_vocab(EXAMPLES / "topic_model.qvr"))
    assert len(vocab) == size == 1000
    data = load_data(DATA / "topic_model.json")
    assert data["word"].shape == data["doc_of"].shape == (1200,)
    used = {vocab[i] for i in data["word"].tolist()}
    assert "<unused>" not in used and {"harvest", "telescope", "guitar"} <= used
    assert data["doc_of"].max() == 39


def test_pcfg_sentence_is_parsed_by_the_example_grammar():
    import torch

    import qvr
    from qvr.inference.front.fitting import model_of
    tokens = load_data(DATA / "pcfg_deduction.json")["tokens"]
    assert tokens.tolist() == ["the", "cat", "s", "chased", "the", "dog"]
    model = model_of(qvr.load(str(EXAMPLES / "pcfg_deduction.qvr")))
    run = model.execute(torch.zeros(1, 1), {"tokens": tokens.tolist()}, score=True)
    # one parse, all learnable weights at zero: log Z = 0 (a sentence it cannot parse: -inf)
    assert run.log_joint.tolist() == [0.0]


def _load_script(name):
    sys.path.insert(0, str(DATA))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DATA))


@pytest.mark.parametrize("script", ["make_data", "make_corpus"])
def test_committed_files_are_what_the_seeded_scripts_write(script, tmp_path):
    module = _load_script(script)
    module.main(tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


# ---------------------------------------------------------------- the reader


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_load_data_reads_json_dtypes(tmp_path):
    p = _write(tmp_path, "d.json", '{"n": [[1, 2], [3, 4]], "v": [0.5, 1], "s": 2.5, '
                                   '"tokens": ["the", "dog"], "flag": [true, false]}')
    d = load_data(p)
    assert d["n"].dtype == np.int64 and d["n"].shape == (2, 2)
    assert d["v"].dtype == np.float32 and d["v"].tolist() == [0.5, 1.0]
    assert d["s"].shape == () and float(d["s"]) == 2.5
    assert d["tokens"].dtype.kind == "U" and d["tokens"].tolist() == ["the", "dog"]
    assert d["flag"].dtype == np.bool_


def test_load_data_reads_npz_and_pt(tmp_path):
    import torch
    np.savez(tmp_path / "d.npz", a=np.arange(6).reshape(2, 3), b=np.ones(2))
    d = load_data(tmp_path / "d.npz")
    assert d["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and d["b"].dtype == np.float64
    torch.save({"a": torch.arange(3)}, tmp_path / "d.pt")
    assert load_data(tmp_path / "d.pt")["a"].tolist() == [0, 1, 2]


def test_find_data_prefers_json_then_npz(tmp_path):
    prog = _write(tmp_path, "m.qvr", "")
    assert find_data(prog) is None and find_vocab(prog) is None
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "m.npz", a=np.zeros(1))
    assert find_data(prog) == tmp_path / "data" / "m.npz"
    _write(tmp_path / "data", "m.json", "{}")
    assert find_data(prog) == tmp_path / "data" / "m.json"
    _write(tmp_path / "data", "m.vocab.json", '["<eos>", "a"]')
    assert find_vocab(prog) == tmp_path / "data" / "m.vocab.json"
    assert load_vocab(find_vocab(prog)) == ["<eos>", "a"]


def test_split_relations():
    rel, rest = split_relations({"from_data/t": 1, "x": 2, "y": 3})
    assert rel == {"t": 1} and rest == {"x": 2, "y": 3}


@pytest.mark.parametrize("name,text,message", [
    ("d.json", '{"a": [[1, 2], [3]]}',
     "key `a`: ragged lists: [0] has shape (2,) but [1] has shape (1,) "
     "(every row must have the same length)"),
    ("d.json", '{"a": [[1, 2], [[3], [4]]]}',
     "key `a`: ragged lists: [0] has shape (2,) but [1] has shape (2, 1) "
     "(every row must have the same length)"),
    # null is a missing entry among numbers (design E5), not among strings
    ("d.json", '{"a": [1, 2], "b": [["x", null]]}',
     "key `b`: mixes strings and numbers (a null at [0, 1], a string at [0, 0])"),
    ("d.json", '{"b": {"c": 1}}', "key `b`: non-numeric value an object at the top level"),
    ("d.json", '{"a": [1, "x"]}',
     "key `a`: mixes strings and numbers (a number at [0], a string at [1])"),
    ("d.json", "[1, 2]", "expected a JSON object mapping names to arrays, found a list"),
    ("d.json", '{"a": [1,\n 2', ":2:3: invalid JSON: Expecting ',' delimiter"),
    ("d.csv", "a,b", "unknown data format `.csv` (expected .json, .npz or .pt)"),
])
def test_load_data_errors(tmp_path, name, text, message):
    p = _write(tmp_path, name, text)
    with pytest.raises(DataFileError) as info:
        load_data(p)
    sep = "" if message.startswith(":") else ": "
    assert str(info.value) == f"{p}{sep}{message}"


def test_load_data_errors_on_unreadable_and_object_files(tmp_path):
    with pytest.raises(DataFileError) as info:
        load_data(tmp_path / "missing.json")
    assert str(info.value) == f"{tmp_path / 'missing.json'}: cannot read: No such file or directory"
    np.savez(tmp_path / "o.npz", a=np.array([{"k": 1}], dtype=object))
    with pytest.raises(DataFileError) as info:
        load_data(tmp_path / "o.npz")
    assert str(info.value).startswith(f"{tmp_path / 'o.npz'}: key `a`: cannot read the array (")
    _write(tmp_path, "bad.npz", "not a zip")
    with pytest.raises(DataFileError) as info:
        load_data(tmp_path / "bad.npz")
    assert str(info.value).startswith(f"{tmp_path / 'bad.npz'}: cannot read: ")


@pytest.mark.parametrize("text,message", [
    ('{"0": "a"}', "a vocabulary must be a JSON list of strings (index = token id), "
                   "found an object"),
    ('["<eos>", 7]', "token id 1: expected a string, found the number 7"),
])
def test_load_vocab_errors(tmp_path, text, message):
    p = _write(tmp_path, "v.vocab.json", text)
    with pytest.raises(DataFileError) as info:
        load_vocab(p)
    assert str(info.value) == f"{p}: {message}"


def test_datafiles_does_not_import_torch():
    code = "import sys, qvr.datafiles; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"
