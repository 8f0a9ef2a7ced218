"""Data values of the wrong kind are `DataError`s naming the value, never a Python error:
text given for an observed site or the input, text host data the program uses as numbers
(found with the audit's file `{"spend": "oops"}`: an AttributeError reached the user), and
objects that are not arrays."""
from pathlib import Path

import pytest
import torch

from qvr import load
from qvr.inference.data.fit_data import DataError, check_data, split_data

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "regression_plates.qvr"


@pytest.fixture(scope="module")
def model():
    return load(str(EXAMPLE)).morphism


def good():
    return {"income": [1.0, 2.0, 3.0], "spend": [1.0, 2.0, 3.0], "region_of": [0, 1, 2]}


@pytest.mark.parametrize("key, value, message", [
    ("spend", "oops", "`spend` needs numbers (it is an observed value), got the text 'oops'"),
    ("spend", ["a", "b", "c"], "`spend` needs numbers (it is an observed value), got the "
                               "text 'a b c'"),
    ("x", "oops", "`x` needs numbers (it is the program input), got the text 'oops'"),
    ("spend", {"a": 1}, "`spend` is not an array of numbers"),
])
def test_values_that_are_not_numbers_are_named(model, key, value, message):
    data = good()
    data[key] = value
    with pytest.raises(DataError) as info:
        split_data(model, data)
    assert str(info.value).startswith(message)


def test_text_host_data_used_as_numbers_is_named(model):
    data = good()
    data["region_of"] = "oops"
    x, obs = split_data(model, data)  # words may be host data (a deduction's sentence)
    assert obs["region_of"] == "oops" and isinstance(obs["spend"], torch.Tensor)
    with pytest.raises(DataError) as info:
        check_data(model, x, obs)
    assert str(info.value) == ("the data does not fit the program: host data `region_of` "
                               "holds words, and the program uses it as numbers")


def test_good_data_still_splits(model):
    x, obs = split_data(model, good())
    assert x.shape == (3, 1) and obs["spend"].dtype == torch.get_default_dtype()
    check_data(model, x, obs)
