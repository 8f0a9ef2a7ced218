"""The potentials library and the validation of user potentials (qvr.smc.potentials)."""
import doctest
import math

import numpy as np
import pytest
import torch

import qvr.smc.potentials as pots
from qvr.smc import (LogitsLM, Potential, SMCSteering, batched, forbid_patterns, forbid_tokens,
                     from_callable, length_limits, product, require_token)
from qvr.smc.potentials import Transitions, log_potential_fn
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


# -- the array path (Transitions, Potential.log_potential_batch) -------------------------

def random_transitions(rng, t, vocab=4, a=5, k=3):
    prefixes = rng.integers(0, vocab, size=(a, t - 1))
    return Transitions(prefixes, rng.integers(0, vocab, size=a * k), k)


LIBRARY = [
    forbid_tokens(A), forbid_tokens(A, EOS),
    forbid_patterns((A, B), (B, B, B), (EOS,)), forbid_patterns((A, A, A, A, A, A, A)),
    require_token(B, within=3, eos=EOS), require_token(A, within=1, eos=EOS),
    require_token(B, within=2, eos=None),
    length_limits(eos=EOS, min_len=2), length_limits(eos=EOS, max_len=3),
    length_limits(eos=EOS, min_len=1, max_len=4),
    forbid_tokens(B) * require_token(A, within=4, eos=EOS) * (lambda p, c, t: 0.5 + c[-1]),
    from_callable(lambda p, c, t: float(len(c)) if c[-1] != A else 0.0),
    from_callable(lambda p, c, t: -0.25 * t, log=True),
]


@pytest.mark.parametrize("pot", LIBRARY, ids=[repr(p) for p in LIBRARY])
def test_array_path_equals_the_tuple_path(pot):
    rng = np.random.default_rng(0)
    for t in range(1, 8):
        for _ in range(5):
            tr = random_transitions(rng, t)
            a = np.asarray(pot.log_potential_batch(tr), dtype=np.float64)
            b = pot.log_potential(tr.parents, tr.children, t).numpy()
            assert np.array_equal(a, b), (t, tr.children)
            checked = log_potential_fn(potential=pot)
            assert np.array_equal(checked.batch(tr), checked(tr.parents, tr.children, t))


def test_user_callables_get_tuples_on_the_array_path():
    seen = []

    def scalar(parent, child, t):
        seen.append((parent, child, t))
        return 2.0 if child[-1] == A else 0.5

    @batched
    def vector(parents, children, t):
        assert isinstance(parents, list) and isinstance(children, list)
        return [2.0 if c[-1] == A else 0.5 for c in children]

    tr = Transitions(np.array([[A, B], [B, B]]), np.array([A, B, EOS, A]), 2)
    a = log_potential_fn(potential=scalar).batch(tr)
    b = log_potential_fn(potential=vector).batch(tr)
    assert np.array_equal(a, b) and np.allclose(np.exp(a), [2, 0.5, 0.5, 2])
    assert seen == [((A, B), (A, B, A), 3), ((A, B), (A, B, B), 3), ((B, B), (B, B, EOS), 3),
                    ((B, B), (B, B, A), 3)]


def test_transitions():
    tr = Transitions(np.array([[4], [5]]), np.array([1, 2, 3, 4]), 2)
    assert tr.parents == [(4,), (4,), (5,), (5,)]
    assert tr.parent_index.tolist() == [0, 0, 1, 1]
    assert tr.child_tokens.tolist() == [[4, 1], [4, 2], [5, 3], [5, 4]]
    assert tr.tail_matches((5, 3)).tolist() == [False, False, True, False]
    assert tr.tail_matches((9, 4, 1)).tolist() == [False] * 4  # longer than the children
    empty = Transitions(np.zeros((3, 0), dtype=np.int64), np.array([0, 1, 2]), 1)
    assert empty.t == 1 and empty.children == [(0,), (1,), (2,)]
    back = Transitions.from_lists([(1, 2), (3, 4)], [(1, 2, 5), (3, 4, 6)])
    assert back.children == [(1, 2, 5), (3, 4, 6)] and back.expansion == 1
    with pytest.raises(ValueError):
        Transitions.from_lists([(1,), (2, 3)], [(1, 5), (2, 3, 6)])
    with pytest.raises(ValueError):
        Transitions(np.array([[1]]), np.array([1, 2, 3]), 2)


def test_array_path_validation_names_the_child():
    class Bad(Potential):
        def log_potential(self, parents, children, t):
            return torch.tensor([0.0 if c[-1] != B else math.nan for c in children])

        def log_potential_batch(self, batch):
            return np.where(batch.tokens == B, math.nan, 0.0)

    tr = Transitions(np.array([[A]]), np.array([A, B]), 2)
    with pytest.raises(ValueError, match=r"log-potential is nan for child \(0, 1\) at step 2"):
        log_potential_fn(potential=Bad()).batch(tr)
    with pytest.raises(ValueError, match="potential is -1.0"):
        log_potential_fn(potential=lambda p, c, t: -1.0).batch(tr)


@pytest.mark.parametrize("pot", [forbid_patterns((A, B)), require_token(B, within=3, eos=EOS),
                                 length_limits(eos=EOS, min_len=2, max_len=4),
                                 forbid_tokens(EOS) * forbid_patterns((B, B))],
                         ids=["patterns", "require", "lengths", "product"])
@pytest.mark.parametrize("seed", range(3))
def test_smc_is_identical_through_arrays_and_tuples(pot, seed):
    """The library's array path and the same potential as a scalar callable give the
    same run from the same generator (so the statistical tests of the scalar path carry
    over)."""
    def scalar(parent, child, t):
        return math.exp(pot.log_potential([parent], [child], t)[0].item())

    runs = [SMCSteering(LogitsLM(bigram_logits, eos=EOS), potential=p, num_particles=12,
                        expansion=3, max_len=6, generator=torch.Generator().manual_seed(seed)
                        ).run() for p in (pot, scalar)]
    assert runs[0].sequences == runs[1].sequences
    assert torch.equal(runs[0].log_weights, runs[1].log_weights)
    assert runs[0].log_Z == runs[1].log_Z
