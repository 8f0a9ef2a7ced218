"""SMC constraints name tokens by id or by a word of the program's vocabulary: `--forbid
dog`, `--forbid the,cat`, `--require fox@4`; words are resolved when the fit starts, and an
unknown word is a clear error with a suggestion."""
import pytest

from qvr.inference.config import FitConfig, parse_pattern, parse_requirement
from qvr.inference.data.fit_data import DataError
from qvr.inference.methods.smc import resolve_tokens

VOCAB = ["<eos>", "the", "a", "dog", "cat", "fox", "."]


def test_patterns_and_requirements_parse_ids_and_words():
    assert parse_pattern("3") == [3]
    assert parse_pattern("the,cat") == ["the", "cat"]
    assert parse_pattern("1, cat") == [1, "cat"]
    assert parse_requirement("fox@4") == ["fox", 4]
    assert parse_requirement("5@2") == [5, 2]
    with pytest.raises(ValueError, match="token ids are >= 0"):
        parse_pattern("-2")
    with pytest.raises(ValueError, match="expected TOKEN@N"):
        parse_requirement("fox")


def test_words_resolve_against_the_vocabulary():
    cfg = FitConfig(method="smc", forbid=[["dog"], ["the", "cat"], [6]], require=[["fox", 4]])
    assert cfg.errors() == {}
    out = resolve_tokens(cfg, VOCAB)
    assert out.forbid == [[3], [1, 4], [6]] and out.require == [[5, 4]]


def test_an_unknown_word_or_no_vocabulary_is_named():
    with pytest.raises(DataError) as info:
        resolve_tokens(FitConfig(method="smc", forbid=[["dgo"]]), VOCAB)
    assert str(info.value) == "--forbid dgo: `dgo` is not in the program's vocabulary; " \
                              "did you mean `dog`?"
    with pytest.raises(DataError) as info:
        resolve_tokens(FitConfig(method="smc", require=[["fox", 2]]), None)
    assert str(info.value).startswith("--require fox: words need a vocabulary file")


def test_bad_shapes_are_still_config_errors():
    assert "forbid" in FitConfig(method="smc", forbid=[[""]]).errors()
    assert "require" in FitConfig(method="smc", require=[["fox", 0]]).errors()
