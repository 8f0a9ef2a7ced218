"""Minibatch SVI (`FitConfig.batch_size`, `qvr.inference.data.minibatch`): the row scale, the
batches, unbiased gradients, and fits."""
import numpy as np
import pytest
import torch

from qvr.inference import ELBO, AutoNormalGuide, FitConfig, fit
from qvr.inference.data.fit_data import DataError
from qvr.inference.data.minibatch import Batches, RowData
from qvr.inference.trace import trace
from qvr.runtime import loads
from qvr.runtime.frame import rows_scaled

from helpers import GROUP_EFFECTS, RANDOM_EFFECTS, effects_data, normal_normal_case, \
    normal_normal_rows

def model_and_rows():
    model = loads(RANDOM_EFFECTS).morphism
    data = effects_data()
    return model, torch.zeros(60, 1), data


def test_rows_scaled_multiplies_row_terms_only():
    model, x, data = model_and_rows()
    torch.manual_seed(1)
    tr = trace(model, x, data)
    values = {k: s.value for k, s in tr.sites.items() if k in ("mu", "tau", "level", "slope",
                                                                  "u")}
    values.update(data)
    plain = {k: s for k, s in trace(model, x, values).sites.items()}
    row = sum(float(plain[k].log_prob.sum()) for k in ("u", "y"))
    glob = sum(float(plain[k].log_prob.sum()) for k in ("mu", "tau", "level", "slope"))
    with rows_scaled(3.0):
        scaled = float(model.log_joint_total(x, values))
        scaled_rows = float(model.log_joint(x, values).sum())
    assert scaled == pytest.approx(glob + 3.0 * row, rel=1e-5)
    assert scaled_rows == pytest.approx(glob + 3.0 * row, rel=1e-5)
    assert float(model.log_joint_total(x, values)) == pytest.approx(glob + row, rel=1e-5)


def test_guide_scales_its_local_sites_only():
    model, x, data = model_and_rows()
    guide = AutoNormalGuide(model, observed_names=set(data))
    torch.manual_seed(2)
    z = guide.rsample(x, data)
    parts = {}
    for name in guide.latent_names:
        parts[name] = float(guide.log_prob(x, {name: z[name]}).detach())
    with rows_scaled(2.5):
        got = float(guide.log_prob(x, z).detach())
    want = sum(v * (2.5 if k == "u" else 1.0) for k, v in parts.items())
    assert got == pytest.approx(want, rel=1e-5)


def test_batches_are_without_replacement_within_an_epoch_and_seeded():
    b = Batches(103, 10, seed=7)
    assert b.steps_per_epoch == 10
    epochs = {}
    for _ in range(30):
        epoch, step, rows, scale = b.next()
        assert scale == pytest.approx(10.3)
        assert len(rows) == 10 and (np.diff(rows) > 0).all()
        epochs.setdefault(epoch, []).append(rows)
    assert sorted(epochs) == [1, 2, 3]
    for batches in epochs.values():
        seen = np.concatenate(batches)
        assert len(np.unique(seen)) == 100  # no row twice in an epoch
    assert not np.array_equal(epochs[1][0], epochs[2][0])
    again = Batches(103, 10, seed=7)
    assert np.array_equal(again.next()[2], epochs[1][0])
    assert not np.array_equal(Batches(103, 10, seed=8).next()[2], epochs[1][0])


def test_rank_shares_partition_the_global_batch():
    whole = Batches(50, 12, seed=3).next()
    shares = [Batches(50, 12, seed=3, rank=r, world=3).next() for r in range(3)]
    assert np.array_equal(np.concatenate([s[2] for s in shares]), whole[2])
    assert all(s[3] == pytest.approx(50 * 3 / 12) for s in shares)
    with pytest.raises(DataError, match="smaller than the number of processes"):
        Batches(50, 2, seed=0, world=3)


def test_batch_of_all_rows_is_full_data():
    b = Batches(8, 20, seed=0)
    assert b.full and b.batch_size == 8
    epoch, step, rows, scale = b.next()
    assert np.array_equal(rows, np.arange(8)) and scale == 1.0


def _grads(model, guide, x, obs, scale, seed):
    """The ELBO gradient at a fixed guide draw (`seed`), rows scaled by `scale`."""
    params = list(guide.parameters())
    for p in params:
        p.grad = None
    torch.manual_seed(seed)
    with rows_scaled(scale):
        loss = ELBO()(model, guide, x, obs)
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in params]).clone()


def _global_model():
    return loads(GROUP_EFFECTS).morphism


def test_an_epochs_gradients_average_to_the_full_data_gradient():
    """With B dividing N, one epoch's batches partition the rows: at a fixed guide draw the
    mean of their scaled gradients is the full-data gradient (up to rounding)."""
    model = _global_model()
    data = effects_data()
    x = torch.zeros(60, 1)
    guide = AutoNormalGuide(model, observed_names=set(data))
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.3 * torch.randn_like(p))
    full = _grads(model, guide, x, data, 1.0, seed=5)
    rows = RowData(x, data)
    b = Batches(60, 12, seed=11)
    grads = []
    for _ in range(b.steps_per_epoch):
        _, _, idx, scale = b.next()
        xb, ob = rows.take(idx)
        assert xb.shape == (12, 1) and ob["y"].shape == (12,) and ob["group_of"].dtype == \
            torch.int64
        grads.append(_grads(model, guide, xb, ob, scale, seed=5))
    mean = torch.stack(grads).mean(0)
    assert torch.allclose(mean, full, rtol=1e-4, atol=1e-4 * float(full.abs().max()))
    # and a single batch is not the full gradient (the test can fail)
    assert not torch.allclose(grads[0], full, rtol=1e-2)


def test_minibatch_gradients_are_unbiased_with_local_latents():
    """Random batches and fresh guide draws (the local latent `u` drawn for the batch's
    rows only): the mean minibatch gradient equals the mean full-data gradient within
    Monte Carlo error (4.5 standard errors per coordinate, both means estimated)."""
    model, x, data = model_and_rows()
    guide = AutoNormalGuide(model, observed_names=set(data))
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    rows = RowData(x, data)
    b = Batches(60, 10, seed=4)
    M = 600
    mini, full = [], []
    for i in range(M):
        _, _, idx, scale = b.next()
        xb, ob = rows.take(idx)
        mini.append(_grads(model, guide, xb, ob, scale, seed=1000 + i))
        full.append(_grads(model, guide, x, data, 1.0, seed=5000 + i))
    mini, full = torch.stack(mini).double(), torch.stack(full).double()
    se = torch.sqrt(mini.var(0) / M + full.var(0) / M)
    z = (mini.mean(0) - full.mean(0)) / se.clamp(min=1e-12)
    assert float(z.abs().max()) < 4.5, z
    # the scale matters: unscaled batches are biased (the test can fail)
    _, _, idx, _ = Batches(60, 10, seed=4).next()
    xb, ob = rows.take(idx)
    unscaled = torch.stack([_grads(model, guide, xb, ob, 1.0, seed=1000 + i)
                            for i in range(50)]).double()
    assert float(((unscaled.mean(0) - full.mean(0)) / se).abs().max()) > 6


def test_minibatch_svi_fit_recovers_the_conjugate_posterior(tmp_path):
    n = 400
    y, mean, sd = normal_normal_rows(n)
    model = normal_normal_case()[0]
    res = fit(model, data={"y": y}, config=FitConfig(method="svi", steps=1500, lr=0.01,
                                                      batch_size=40, seed=0,
                                                      progress_interval=0.0),
              run_dir=tmp_path / "run")
    got = res.samples["mu"].reshape(-1)
    assert abs(got.mean() - mean) < 0.5 * sd
    assert 0.6 * sd < got.std() < 1.5 * sd
    assert res.stats["batch_size"] == 40 and res.stats["rows"] == n
    assert res.stats["epochs"] == pytest.approx(1500 / 10)
    import json
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["batch"] == {"rows": n, "batch_size": 40, "steps_per_epoch": 10,
                             "world_size": 1, "mapped": False}


def test_progress_reports_epochs_and_a_too_large_batch_is_said():
    from qvr.events import FitProgress, FitWarning
    model, x, obs, _ = normal_normal_case()
    events = []
    fit(model, data=obs, config=FitConfig(method="svi", steps=25, batch_size=5, seed=0,
                                           progress_interval=0.0), on_event=events.append)
    prog = [e for e in events if isinstance(e, FitProgress)]
    assert [(e.metrics["epoch"], e.metrics["epoch_step"]) for e in prog[:6]] == [
        (1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2)]
    assert prog[0].metrics["steps_per_epoch"] == 4 and prog[0].metrics["rows"] == 20
    events = []
    fit(model, data=obs, config=FitConfig(method="svi", steps=3, batch_size=50, seed=0),
        on_event=events.append)
    notes = [e.message for e in events if isinstance(e, FitWarning)]
    assert any("--batch-size 50 is at least the 20 rows" in n for n in notes)
    assert all("epoch" not in e.metrics for e in events if isinstance(e, FitProgress))


def test_same_seed_same_fit_different_seed_different_batches():
    model, x, obs, _ = normal_normal_case()

    def losses(seed):
        cfg = FitConfig(method="svi", steps=30, batch_size=4, seed=seed)
        return fit(model, data=obs, config=cfg).losses
    assert losses(1) == losses(1)
    assert losses(1) != losses(2)


def test_enumerated_finite_latents_are_refused_with_batches():
    src = """\
object Coin : FinSet 2
object Row : FinSet 30
program mix : Row -> Row
    sample w <- Beta(1.0, 1.0)
    sample c <- Bernoulli(w)
    sample m <- Normal(0.0, 3.0)
    let centre = m + 2.0 * c
    observe y : Row <- Normal(centre, 1.0)
    return y
export mix
"""
    model = loads(src).morphism
    y = torch.randn(30)
    with pytest.raises(DataError, match=r"finite latent `c` is summed out exactly"):
        fit(model, data={"y": y}, config=FitConfig(method="svi", steps=2, batch_size=5))


def test_batch_size_is_checked_and_svi_only():
    assert "batch_size" in FitConfig(method="svi", batch_size=0).errors()
    assert FitConfig(method="svi", batch_size=64).errors() == {}
    assert "batch_size" not in {f.name for f, _ in FitConfig.options("nuts")}
    assert "batch_size" in {f.name for f, _ in FitConfig.options("svi")}


def test_memory_mapped_data_is_read_a_batch_at_a_time(tmp_path, monkeypatch):
    """A folder of .npy given with --batch-size is memory-mapped: the fit never reads an
    array whole (reading one whole raises here), records the same data hash as the data
    in memory, and says why it records no pointwise terms."""
    from qvr.mapped_arrays import MappedArray
    from qvr.events import FitWarning
    data = effects_data()
    folder = tmp_path / "data"
    folder.mkdir()
    for k, v in data.items():
        np.save(folder / f"{k}.npy", v.numpy())
    reads = []
    original = MappedArray.rows

    def rows(self, idx):
        reads.append(len(idx))
        return original(self, idx)

    def whole(self, *a, **k):
        raise AssertionError(f"{self.key} read whole")
    monkeypatch.setattr(MappedArray, "rows", rows)
    monkeypatch.setattr(MappedArray, "__array__", whole)
    model = loads(RANDOM_EFFECTS).morphism
    events = []
    res = fit(model, config=FitConfig(method="svi", steps=12, batch_size=15, seed=0,
                                      data=str(folder)),
              on_event=events.append, run_dir=tmp_path / "run")
    assert res.status == "finished"
    assert reads and max(reads) == 15 and len(reads) == 3 * 13  # 3 row arrays, 1 + 12 batches
    import json
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["batch"]["mapped"] is True and meta["data"]["mapped"] is True
    inmem = fit(model, data=data, config=FitConfig(method="svi", steps=2, batch_size=15,
                                                   seed=0), run_dir=tmp_path / "mem")
    assert inmem.status == "finished"
    meta_mem = json.loads((tmp_path / "mem" / "run.json").read_text())
    assert meta["data_sha256"] == meta_mem["data_sha256"]
    notes = [e.message for e in events if isinstance(e, FitWarning)]
    assert any("data is memory-mapped (60 rows)" in n for n in notes)
    # seeded: the same mapped fit again gives the same losses
    again = fit(model, config=FitConfig(method="svi", steps=12, batch_size=15, seed=0,
                                        data=str(folder)))
    assert again.losses == res.losses
