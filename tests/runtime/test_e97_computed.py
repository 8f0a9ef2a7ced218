"""Extension E9.7 at run time: a score with one term per element adds the same density as
the scalar score, its terms are scipy's per-element log-densities; an observe of a value
computed from data (`observe v = log(w) <- F`) has the density of the hand-written score,
is computed when not supplied and drawn under `replicating()`."""
import numpy as np
import pytest
import torch
from scipy import stats

import qvr
from qvr.runtime.computed import computed_observations, computed_sites, replicating
from qvr.runtime.errors import InputShapeError

HEAD = """\
object Person : FinSet 4

program weights : Person -> Person
    data weight : Person
    sample mu <- Normal(0.0, 1.0)
    sample sigma <- HalfNormal(1.0)
"""
SCALAR = HEAD + "    score lik = sum(log_density(Normal(mu, sigma), log(weight)))\n    return mu\n" \
    "export weights\n"
PER = HEAD + "    score lik : Person = log_density(Normal(mu, sigma), log(weight))\n    return mu\n" \
    "export weights\n"
OBSERVED = HEAD + "    observe log_weight : Person = log(weight) <- Normal(mu, sigma)\n" \
    "    return mu\nexport weights\n"
UNTYPED = """\
object Person : FinSet 4

program weights : Person -> Person
    sample mu <- Normal(0.0, 1.0)
    score lik : Person = log_density(Normal(mu, 1.0), weight)
    return mu
export weights
"""

@pytest.fixture(autouse=True)
def float64():
    """The tests run in float64 (as a fit with `dtype=float64`)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


W = np.array([1.5, 2.0, 0.7, 3.1])
MU, SIGMA = 0.3, 0.8


def model(src):
    return qvr.loads(src).morphism.to(torch.float64)


def run(src, rows=4, **extra):
    m = model(src)
    x = torch.zeros(rows, 1, dtype=torch.float64)
    values = {"weight": torch.tensor(W), "mu": torch.tensor(MU, dtype=torch.float64),
              "sigma": torch.tensor(SIGMA, dtype=torch.float64), **extra}
    return m, x, m.execute(x, values)


def prior():
    return stats.norm(0, 1).logpdf(MU) + stats.halfnorm(scale=1).logpdf(SIGMA)


def test_per_element_score_total_and_terms():
    terms = stats.norm(MU, SIGMA).logpdf(np.log(W))
    _, _, scalar = run(SCALAR)
    _, _, per = run(PER)
    assert float(scalar.log_joint.sum()) == pytest.approx(terms.sum() + prior(), abs=1e-10)
    assert float(per.log_joint.sum()) == pytest.approx(terms.sum() + prior(), abs=1e-10)
    rec = per.sites["lik"]
    assert rec.step == "score" and tuple(rec.value.shape) == (4,)
    np.testing.assert_allclose(rec.value.numpy(), terms, atol=1e-12)
    # one term per row of the input: attributed row by row (runtime spec 5.5)
    np.testing.assert_allclose(rec.log_prob.numpy(), terms, atol=1e-12)
    # other input sizes: spread evenly, same total
    _, _, one = run(PER, rows=1)
    assert float(one.log_joint.sum()) == pytest.approx(terms.sum() + prior(), abs=1e-10)


def test_observed_log_of_data_has_the_density_of_the_score():
    terms = stats.norm(MU, SIGMA).logpdf(np.log(W))
    m, x, ex = run(OBSERVED)
    assert float(ex.log_joint.sum()) == pytest.approx(terms.sum() + prior(), abs=1e-10)
    rec = ex.sites["log_weight"]
    assert rec.step == "observe" and rec.is_observed
    np.testing.assert_allclose(rec.value.numpy(), np.log(W), atol=1e-12)
    np.testing.assert_allclose(rec.contribution.numpy(), terms, atol=1e-12)
    _, _, per = run(PER)
    np.testing.assert_allclose(rec.contribution.numpy(), per.sites["lik"].value.numpy(),
                               atol=1e-12)
    assert computed_sites(m) == {"log_weight": "_observed_log_weight"}
    got = computed_observations(m, x, {"weight": torch.tensor(W)})
    np.testing.assert_allclose(got["log_weight"].numpy(), np.log(W), atol=1e-12)


def test_a_supplied_value_is_scored_and_replicates_are_drawn():
    m, x, ex = run(OBSERVED, log_weight=torch.zeros(4, dtype=torch.float64))
    assert float(ex.sites["log_weight"].contribution.sum()) == pytest.approx(
        stats.norm(MU, SIGMA).logpdf(np.zeros(4)).sum(), abs=1e-10)
    values = {"weight": torch.tensor(W), "mu": torch.tensor(MU, dtype=torch.float64),
              "sigma": torch.tensor(SIGMA, dtype=torch.float64)}
    torch.manual_seed(0)
    with replicating():
        reps = torch.stack([m.execute(x, values, score=False).sites["log_weight"].value
                            for _ in range(2000)])
    assert not torch.allclose(reps[0], torch.log(torch.tensor(W)))
    # N(0.3, 0.8) draws: mean within 4 standard errors (0.8 / sqrt(8000))
    assert abs(float(reps.mean()) - MU) < 4 * SIGMA / np.sqrt(reps.numel())
    assert abs(float(reps.std()) - SIGMA) < 0.03
    # a supplied value does not stop the draw (predictions for new data supply it)
    with replicating():
        rep = m.execute(x, {**values, "log_weight": torch.zeros(4)}, score=False)
    assert not torch.equal(rep.sites["log_weight"].value, torch.zeros(4))
    # outside `replicating()` the value is computed, also without scoring
    plain = m.execute(x, values, score=False).sites["log_weight"].value
    np.testing.assert_allclose(plain.numpy(), np.log(W), atol=1e-12)


def test_a_per_element_score_of_another_shape_is_refused_at_run_time():
    m = model(UNTYPED)
    x = torch.zeros(4, 1, dtype=torch.float64)
    with pytest.raises(InputShapeError) as info:
        m.execute(x, {"weight": torch.ones(3, dtype=torch.float64),
                      "mu": torch.tensor(0.0, dtype=torch.float64)})
    e = info.value
    assert e.what == "`score lik : Person` needs one term per element of `Person`"
    assert e.expected == "trailing shape (4,) (`Person`)" and e.actual == "shape (3,)"
    assert e.program == "weights"
