"""The potentials library and the validation of user potentials (qvr.smc.potentials)."""
import doctest
import math

import numpy as np
import pytest
import torch

import qvr.smc.potentials as pots
from qvr.smc import (LogitsLM, Potential, SMCSteering, batched, forbid_patterns, forbid_tokens,
                     from_callable, length_limits, product, require_token)
from qvr.smc.potentials import log_potential_fn
from smc_helpers import A, B, EOS, bigram_logits, enumerate_target
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

MAX_LEN = 5


def logs(p, pairs, t=0):
    return p.log_potential([a for a, _ in pairs], [c for _, c in pairs], t).tolist()


def test_docstring_examples():
    import qvr.smc.resample
    import qvr.smc.steering
    for module in (pots, qvr.smc.resample, qvr.smc.steering):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_forbid_tokens_and_patterns():
    assert logs(forbid_tokens(A, B), [((), (A,)), ((), (EOS,)), ((A,), (A, B))]) == \
        [-math.inf, 0.0, -math.inf]
    p = forbid_patterns((A, B), (B, B, B))
    assert logs(p, [((B,), (B, A)), ((A,), (A, B)), ((B, B), (B, B, B)), ((A, B), (A, B, A))]) \
        == [0.0, -math.inf, -math.inf, 0.0]
    with pytest.raises(ValueError):
        forbid_patterns(())


def test_require_token_decides_once():
    p = require_token(B, within=2, eos=EOS)
    assert logs(p, [((), (A,)), ((A,), (A, A)), ((A,), (A, B)), ((), (EOS,)),
                    ((A, A), (A, A, B))]) == [0.0, -math.inf, 0.0, -math.inf, 0.0]


def test_length_limits():
    p = length_limits(eos=EOS, min_len=1, max_len=2)
    assert logs(p, [((), (EOS,)), ((A,), (A, EOS)), ((A, A), (A, A, A)), ((A,), (A, A))]) == \
        [-math.inf, 0.0, -math.inf, 0.0]
    with pytest.raises(ValueError):
        length_limits(eos=EOS)


def test_product_flattens_and_accepts_plain_callables():
    half = lambda parent, child, t: 0.5
    p = forbid_tokens(A) * half * require_token(B, within=1, eos=EOS)
    assert isinstance(p, Potential) and len(p.sources) == 3
    assert logs(p, [((), (A,)), ((), (B,)), ((), (EOS,))]) == \
        [-math.inf, math.log(0.5), -math.inf]
    assert "forbid_tokens(0)" in repr(p)
    # the (non-log) batched form is the product of the factors
    assert p([()], [(B,)], 1).tolist() == [0.5]


def test_library_potentials_steer_to_the_exact_target():
    pot = forbid_patterns((A, A)) * length_limits(eos=EOS, min_len=1)
    target, z = enumerate_target(MAX_LEN, lambda par, ch, t: pot.log_potential([par], [ch], t)[0])
    r = SMCSteering(LogitsLM(bigram_logits, eos=EOS), potential=pot, num_particles=3000,
                    expansion=2, max_len=MAX_LEN, generator=torch.Generator().manual_seed(0)).run()
    for s in r.posterior():
        assert (A, A) not in zip(s, s[1:]) and s != (EOS,)
    assert abs(r.Z - z) < 0.1 * z


def test_scalar_and_batched_forms_agree():
    scalar = lambda p, c, t: 2.0 if c[-1] == A else 0.25

    @batched
    def vector(parents, children, t):
        return np.array([2.0 if c[-1] == A else 0.25 for c in children])

    kids = [(A,), (B,), (A, A)]
    a = log_potential_fn(potential=scalar)([()] * 3, kids, 1)
    b = log_potential_fn(potential=vector)([()] * 3, kids, 1)
    as_log = log_potential_fn(log_potential=lambda p, ch, t: math.log(scalar(p, ch, t)))
    c = as_log([()] * 3, kids, 1)
    assert np.allclose(a, b) and np.allclose(a, c)
    assert from_callable(scalar).log_potential([()] * 3, kids, 1).tolist() == a.tolist()


def test_validation_messages():
    with pytest.raises(ValueError, match=r"potential is -1.0 for child \(0,\) at step 1"):
        log_potential_fn(potential=lambda p, c, t: -1.0)([()], [(0,)], 1)
    with pytest.raises(ValueError, match="3 values for 2 children"):
        log_potential_fn(potential=batched(lambda p, c, t: [1, 1, 1]))([(), ()], [(0,), (1,)], 1)
    with pytest.raises(TypeError):
        log_potential_fn(log_potential=forbid_tokens(1))
    with pytest.raises(TypeError):
        log_potential_fn()
    with pytest.raises(TypeError):
        log_potential_fn(potential=3.0)
