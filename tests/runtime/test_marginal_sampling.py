"""Forward sampling through `marginalize` blocks: the coordinate from its prior, then the
body (runtime spec 5.6); draws' laws checked with binomial standard errors (fixed seeds)."""
import math
from pathlib import Path

import numpy as np
import torch

import qvr
from qvr.inference import trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PER_ROW = """
object Row : FinSet 8
program m : Row -> Row
    sample s <- HalfNormal(1.0)
    let p = probs * 1.0
    marginalize c <- Categorical(p)
        let loc = 10.0 * c
        observe y : Row <- Normal(loc, 0.1)
    return s
export m
"""

GROUPED = """
object Cust : FinSet 50
object Seg : FinSet 3
object Buy : FinSet 8
program g : Buy -> Buy
    sample share <- Dirichlet(2.0) [over=Seg]
    sample locs : Seg <- Normal(0.0, 10.0)
    marginalize seg : Seg <- Categorical(share) [over=Cust]
        observe amount : Buy <- Normal(locs[seg], 0.1) [via=buyer_of]
    return share
export g
"""


def within(freq, p, n, k=4.0):
    se = np.sqrt(np.asarray(p) * (1 - np.asarray(p)) / n)
    return np.all(np.abs(np.asarray(freq) - np.asarray(p)) <= k * se + 1e-12)


def test_per_row_coordinate_frequencies_match_the_prior():
    torch.manual_seed(0)
    model = qvr.loads(PER_ROW).morphism
    N = 4000
    probs = torch.tensor([0.2, 0.5, 0.3]).expand(N, 3)
    tr = trace(model, torch.zeros(N, 1), {"probs": probs})
    y = tr.sites["y"].value
    assert tr.sites["y"].kind == "observe" and not tr.sites["y"].is_observed
    assert y.shape == (N,)
    cls = torch.round(y / 10.0).long()
    assert torch.all((y - 10.0 * cls).abs() < 1.0)  # one class per row, then the body
    freq = torch.bincount(cls, minlength=3).double().numpy() / N
    assert within(freq, [0.2, 0.5, 0.3], N)
    # the trace scores the block exactly at the drawn values
    values = {"s": tr.sites["s"].value, "y": y, "probs": probs}
    assert torch.allclose(tr.log_joint, model.log_joint(torch.zeros(N, 1), values))


def test_grouped_coordinate_is_shared_by_the_rows_of_a_group():
    torch.manual_seed(1)
    model = qvr.loads(GROUPED).morphism
    N = 3000
    buyer = torch.arange(N) % 50
    share = torch.tensor([0.6, 0.3, 0.1])
    counts = np.zeros(3)
    reps = 40
    for _ in range(reps):
        tr = trace(model, torch.zeros(N, 1), {"buyer_of": buyer, "share": share,
                                                   "locs": torch.tensor([0.0, 10.0, 20.0])})
        cls = torch.round(tr.sites["amount"].value / 10.0).long()
        per_group = cls.reshape(-1, 50)  # row n belongs to group n % 50
        assert torch.all(per_group == per_group[0])  # one class per customer
        counts += torch.bincount(per_group[0], minlength=3).double().numpy()
    n = 50 * reps
    assert within(counts / n, [0.6, 0.3, 0.1], n)


def test_shared_coordinate_is_one_draw_for_the_whole_block():
    # the example's mixture without the plate annotation: one `comp` for every point
    src = (EXAMPLES / "mixture_marginalize.qvr").read_text().replace(
        "marginalize comp : Point <-", "marginalize comp <-")
    assert "marginalize comp <-" in src
    torch.manual_seed(2)
    model = qvr.loads(src).morphism
    centres = torch.tensor([-20.0, 0.0, 20.0])
    weights = torch.tensor([0.25, 0.25, 0.5])
    hits = np.zeros(3)
    reps = 400
    for _ in range(reps):
        tr = trace(model, torch.zeros(30, 1),
                   {"weights": weights, "centres": centres, "spread": torch.tensor(0.5)})
        pos = tr.sites["position"].value
        assert pos.shape == (30,)
        k = int(torch.argmin((centres - pos.mean()).abs()))
        assert torch.all((pos - centres[k]).abs() < 5.0)  # every row from one component
        hits[k] += 1
    assert within(hits / reps, [0.25, 0.25, 0.5], reps)


def test_plate_annotated_coordinate_is_one_draw_per_row():
    # `marginalize comp : Point` (the example): one component per point, from the weights
    torch.manual_seed(5)
    model = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr")).morphism
    centres = torch.tensor([-20.0, 0.0, 20.0])
    weights = torch.tensor([0.25, 0.25, 0.5])
    N = 4000
    tr = trace(model, torch.zeros(N, 1),
               {"weights": weights, "centres": centres, "spread": torch.tensor(0.5)})
    pos = tr.sites["position"].value
    assert pos.shape == (N,)
    k = torch.argmin((pos[:, None] - centres).abs(), -1)
    assert torch.all((pos - centres[k]).abs() < 5.0)  # each row from one component
    freq = torch.bincount(k, minlength=3).double().numpy() / N
    assert within(freq, [0.25, 0.25, 0.5], N)  # 4 binomial standard errors
    assert len(set(k.tolist())) == 3  # not one component for the whole block
    # the faulty sensor: one Bernoulli(p_fault) per reading
    sensor = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr")).exports["faulty_sensor"]
    tr = trace(sensor, torch.zeros(N, 1), {"level": torch.tensor(20.0),
                                           "jitter": torch.tensor(0.1),
                                           "p_fault": torch.tensor(0.2)})
    faulty = ((tr.sites["temperature"].value - 20.0).abs() > 0.6).double().numpy()
    # |error| > 0.6 has probability 0.2 P(|N(0, 1)| > 0.6) + 0.8 P(|N(0, 0.1)| > 0.6)
    from scipy import stats
    p_far = 0.2 * 2 * stats.norm.sf(0.6) + 0.8 * 2 * stats.norm.sf(6.0)
    assert within(faulty.mean(), p_far, N)


def test_examples_trace_forward_and_their_log_joint_matches():
    torch.manual_seed(3)
    prog = qvr.load(str(EXAMPLES / "mixture_marginalize.qvr"))
    for model in (prog.morphism, prog.exports["faulty_sensor"]):
        tr = trace(model, torch.zeros(20, 1))
        values = {k: s.value for k, s in tr.sites.items() if not s.is_deterministic}
        assert torch.isfinite(tr.log_joint).all()
        assert torch.allclose(tr.log_joint, model.log_joint(torch.zeros(20, 1), values))
    seg = qvr.load(str(EXAMPLES / "grouped_mixture.qvr")).morphism
    buyer = torch.randint(0, 300, (200,))
    tr = trace(seg, torch.zeros(200, 1), {"buyer_of": buyer})
    assert tr.sites["amount"].value.shape == (200,)
    assert tr.sites["items"].value.dtype == torch.int64
    assert torch.all(tr.sites["amount"].value > 0)  # LogNormal
    values = {k: s.value for k, s in tr.sites.items() if not s.is_deterministic}
    lj = seg.log_joint(torch.zeros(200, 1), {**values, "buyer_of": buyer})
    assert torch.allclose(tr.log_joint, lj)
    assert math.isfinite(float(lj.sum()))


def test_missing_group_index_is_drawn_uniformly_and_recorded_as_host_data():
    torch.manual_seed(4)
    seg = qvr.load(str(EXAMPLES / "grouped_mixture.qvr")).morphism
    N = 6000
    tr = trace(seg, torch.zeros(N, 1))
    site = tr.sites["buyer_of"]
    assert site.is_deterministic and site.kind == "host"
    idx = site.value
    assert idx.shape == (N,) and idx.dtype == torch.int64
    counts = torch.bincount(idx, minlength=300).double()
    # uniform over the 300 customers: counts ~ Binomial(N, 1/300); total chi-square
    # statistic within 4 standard deviations of its mean (299 degrees of freedom)
    chi2 = float(((counts - N / 300) ** 2 / (N / 300)).sum())
    assert abs(chi2 - 299) < 4 * math.sqrt(2 * 299)
    values = {k: s.value for k, s in tr.sites.items() if not s.is_deterministic}
    lj = seg.log_joint(torch.zeros(N, 1), {**values, "buyer_of": idx})
    assert torch.allclose(tr.log_joint, lj)
