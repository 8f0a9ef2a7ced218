"""The dense-metric note after a NUTS run on a diagonal metric
(`qvr.inference.criticism.correlation`): given for a strongly correlated posterior, in the
events, the record's stats and `qvr run`'s output; not given for independent coordinates
or a dense metric."""
import numpy as np
import torch

from qvr import loads
from qvr.events import FitNote
from qvr.inference import fit
from qvr.inference.criticism.correlation import STRONG, strongest_pair

from helpers import correlated


def test_strongest_pair_names_the_pair_and_its_sign():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 500))
    b = -0.97 * a + 0.2 * rng.normal(size=(4, 500))
    c = rng.normal(size=(4, 500))
    draws = np.stack([c, a, b], -1)
    i, j, r = strongest_pair(draws, ["c", "beta[0]", "beta[1]"])
    assert (i, j) == ("beta[0]", "beta[1]") and -1.0 < r < -STRONG
    assert strongest_pair(np.stack([a, c], -1), ["a", "c"]) is None  # independent
    assert strongest_pair(a[..., None], ["a"]) is None  # one coordinate
    assert strongest_pair(np.stack([a, np.ones_like(a)], -1), ["a", "k"]) is None


def _fit(mass_matrix, events):
    model = loads(correlated(0.97))
    return fit(model, config={"method": "nuts", "num_warmup": 200, "num_samples": 200,
                              "num_chains": 2, "seed": 1, "pointwise": False,
                              "mass_matrix": mass_matrix}, on_event=events.append)


def test_a_correlated_posterior_gets_the_note_on_a_diagonal_metric_only():
    events = []
    r = _fit("diagonal", events)
    a, b, rho = r.stats["correlated"]
    assert (a, b) == ("a", "b") and rho > STRONG
    notes = [e.message for e in events if isinstance(e, FitNote)]
    assert any("`a` and `b` are correlated (+0.9" in m and "--mass-matrix dense" in m
               for m in notes), notes
    events = []
    r = _fit("dense", events)
    assert "correlated" not in r.stats
    assert not any("--mass-matrix dense" in getattr(e, "message", "") for e in events)


def test_qvr_run_prints_the_note(qvr_run, tmp_path):
    f = tmp_path / "corr.qvr"
    f.write_text(correlated(0.97))
    out = qvr_run(f, "--method", "nuts", "--warmup", "150", "--samples", "150",
                  "--chains", "2", "--seed", "2", "--no-pointwise")
    rc, stdout, stderr = out
    assert rc == 0, stderr
    text = stdout + stderr
    assert "`a` and `b` are correlated (+0.9" in text and "--mass-matrix dense" in text
