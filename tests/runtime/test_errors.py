"""Bad inputs and observations: exception classes, attributes and exact messages."""
import pytest
import torch

from qvr.runtime.errors import (IndexRangeError, InputDtypeError, InputShapeError,
                                MissingValueError, ObservationShapeError, QvrRuntimeError,
                                UnknownSiteError)
from runtime_support import load_example


@pytest.fixture(scope="module")
def lm():
    return load_example("transformer_lm").morphism


def test_wrong_input_rank(lm):
    with pytest.raises(InputShapeError) as ei:
        lm.rsample(torch.tensor(3))
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, QvrRuntimeError)
    assert (e.program, e.expected, e.actual) == (
        "transformer_lm", "a tensor of rank >= 1 (B = x.shape[0])", "torch.int64 tensor of shape ()")
    assert str(e) == ("program `transformer_lm`: the program input needs a leading batch axis "
                      "(expected a tensor of rank >= 1 (B = x.shape[0]), got torch.int64 tensor "
                      "of shape ())")


def test_wrong_feature_width_names_program_step_and_morphism():
    prog = load_example("expert_ensemble").morphism
    with pytest.raises(InputShapeError) as ei:
        prog.rsample(torch.randn(4, 11))
    e = ei.value
    assert (e.program, e.step, e.morphism) == ("house_price", "summary", "expert_0")
    assert str(e) == ("program `house_price`, step `summary`, morphism `expert_0`: the last axis "
                      "of a continuous input must hold the object's coordinates (expected shape "
                      "(..., 12), got shape (4, 11))")


def test_float_tokens_with_fractions_are_rejected(lm):
    with pytest.raises(InputDtypeError) as ei:
        lm.rsample(torch.tensor([[0.5, 2.0]]))
    e = ei.value
    assert isinstance(e, TypeError)
    assert str(e) == ("program `transformer_lm`, step `h`, morphism `tok_embed`: index values must "
                      "be integers (expected int64 values in [0, 32), got torch.float32 tensor of "
                      "shape (1, 2) with fractional values)")


def test_integral_float_tokens_are_accepted(lm):
    x = torch.tensor([[3, 7, 1]])
    torch.manual_seed(4)
    a = lm.rsample(x)
    torch.manual_seed(4)
    b = lm.rsample(x.float())
    assert torch.equal(a, b)


def test_out_of_range_token_ids(lm):
    with pytest.raises(IndexRangeError) as ei:
        lm.rsample(torch.tensor([[1, 40], [-1, 3]]))
    e = ei.value
    assert (e.low, e.high, e.size) == (-1, 40, 32)
    assert str(e) == ("program `transformer_lm`, step `h`, morphism `tok_embed`: index values out "
                      "of range (expected values in [0, 32), got values in [-1, 40])")


def test_out_of_range_target_in_log_joint(lm):
    x = torch.tensor([[1, 2]])
    h = lm._step_h.sample(x)
    with pytest.raises(IndexRangeError) as ei:
        lm.log_joint(x, {"h": h, "next_token": torch.tensor([[3, 32]])})
    assert str(ei.value) == ("program `transformer_lm`, step `next_token`, morphism `lm_head`: "
                             "class values out of range (expected values in [0, 32), got values "
                             "in [3, 32])")


def test_unknown_site_name_lists_the_known_ones(lm):
    x = torch.tensor([[1, 2]])
    with pytest.raises(UnknownSiteError) as ei:
        lm.log_joint(x, {"h": torch.zeros(1, 2, 16), "next_tokn": torch.zeros(1, 2).long()})
    e = ei.value
    assert isinstance(e, KeyError)
    assert e.known_sites == ["h", "next_token"] and e.name == "next_tokn"
    assert str(e) == ("program `transformer_lm`: `next_tokn` is not a site of the program, nor "
                      "host data it reads (expected one of the sites `h`, `next_token`, got "
                      "`next_tokn`)")


def test_unknown_name_mentions_host_data_the_program_reads():
    prog = load_example("regression_plates").morphism
    with pytest.raises(UnknownSiteError) as ei:
        prog.rsample(torch.zeros(3, 1), observations={"incme": torch.zeros(3)})
    assert ei.value.host_names == ["income", "region_of"]
    assert str(ei.value).endswith("(expected one of the sites `mu_region`, `tau`, `intercept`, "
                                  "`slope`, `noise`, `spend` or host data `income`, `region_of`, "
                                  "got `incme`)")


def test_missing_observation_in_log_joint(lm):
    x = torch.tensor([[1, 2]])
    with pytest.raises(MissingValueError) as ei:
        lm.log_joint(x, {"h": lm._step_h.sample(x)})
    e = ei.value
    assert isinstance(e, KeyError) and e.name == "next_token"
    assert str(e) == ("program `transformer_lm`, step `next_token`: no value supplied for "
                      "`next_token` (expected a value for every sample and observe site: `h`, "
                      "`next_token`, got missing)")


def test_missing_host_data():
    prog = load_example("regression_plates").morphism
    with pytest.raises(MissingValueError) as ei:
        prog.rsample(torch.zeros(3, 1), observations={"income": torch.zeros(3)})
    assert ei.value.name == "region_of"
    assert str(ei.value) == ("program `spending`, step `baseline`: host data `region_of` was not "
                             "supplied (expected a value for `region_of` in the observations dict, "
                             "got no such key)")


def test_observation_with_the_wrong_width(lm):
    x = torch.tensor([[1, 2]])
    with pytest.raises(ObservationShapeError) as ei:
        lm.log_joint(x, {"h": torch.zeros(1, 2, 15), "next_token": torch.zeros(1, 2).long()})
    assert str(ei.value) == ("program `transformer_lm`, step `h`: the value of `h` must end with "
                             "the codomain's 16 coordinates (expected shape (..., 16), got shape "
                             "(1, 2, 15))")


def test_out_of_range_host_index():
    prog = load_example("regression_plates").morphism
    with pytest.raises(IndexRangeError) as ei:
        prog.rsample(torch.zeros(3, 1), observations={"income": torch.zeros(3),
                                                     "region_of": torch.tensor([0, 8, 1])})
    assert str(ei.value) == ("program `spending`, step `baseline`, morphism `intercept[...]`: "
                             "index on axis 0 values out of range (expected values in [0, 8), got "
                             "values in [0, 8])")
