"""`--device cuda` (issue 26, point 5): SVI, HMC/NUTS and SMC fitted on a CUDA device
check the same statistics as on the CPU.  Every test is marked ``gpu`` and skipped where
`torch.cuda.is_available()` is false (the CI machines have no GPU):

    .venv/bin/python -m pytest -m gpu tests/gpu

* SVI on the conjugate Normal-Normal model (`helpers.normal_normal_case`, as
  tests/inference/test_elbo_svi.py): the guide's mean within 0.2 posterior sd of the
  exact mean and its sd within 15% of the exact sd, on cuda and on cpu in the same test
  (the fit's fixed learning rate leaves more noise than that test's two-stage one);
* NUTS, 4 vectorized chains: mean and sd within 4 MCSE of the exact values
  (`helpers.check_moments`), R-hat < 1.05, and the run record's draws on disk are numpy
  arrays equal to the result's; HMC the same, shorter;
* SMC generation from `examples/decoder_lm.qvr` (attention, over its KV cache): token
  ids of its vocabulary and finite log weights and log Z;
* minibatch SVI (``batch_size``) on 400 rows: the conjugate posterior (as
  tests/inference/test_minibatch.py) and the epochs in the progress events and run.json;
* ``dtype="float64"`` on cuda: SVI and NUTS in float64, the default dtype restored.

Small sizes and fixed seeds; each test takes seconds on a GPU.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "inference"))  # the inference tests' helpers

from helpers import check_moments, normal_normal_case, normal_normal_rows  # noqa: E402

from qvr.inference import FitConfig, fit  # noqa: E402
from qvr.runs import open_run  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device (torch.cuda.is_available() is false)"),
]

DECODER = ROOT / "examples" / "decoder_lm.qvr"


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    """As tests/inference/conftest.py: the same global seed, and densities compiled
    whatever the machine's speed."""
    torch.manual_seed(0)
    from qvr.inference.mcmc.potential import ProgramTarget
    monkeypatch.setattr(ProgramTarget, "compile_below_s", float("inf"))
    monkeypatch.setattr(ProgramTarget, "compile_enumerated_below_s", float("inf"))


def nn_data():
    model, x, obs, exact = normal_normal_case()
    return model, {"x": x, **obs}, exact


# ---------------------------------------------------------------- SVI

def svi_conjugate(device: str):
    """The guide's (mean, sd) of `mu` after SVI on `device`, and the exact (mean, sd)."""
    model, data, exact = nn_data()
    res = fit(model, data, FitConfig(method="svi", steps=1500, lr=0.02, elbo_particles=16,
                                     seed=0, device=device, pointwise=False))
    assert res.status == "finished", res.message
    assert np.isfinite(res.losses).all()
    assert all(isinstance(v, np.ndarray) for v in res.params.values())  # back on the host
    loc = float(res.params["loc_mu"].reshape(-1)[0])
    sd = float(np.exp(res.params["log_scale_mu"]).reshape(-1)[0])
    (m,), (s,) = exact["mu"]
    return (loc, sd), (m, s)


def test_svi_conjugate_posterior_on_cuda_as_on_cpu():
    for device in ("cuda", "cpu"):
        (loc, sd), (m, s) = svi_conjugate(device)
        assert abs(loc - m) < 0.2 * s, (device, loc, m, s)
        assert abs(sd / s - 1) < 0.15, (device, sd, s)


def test_minibatch_svi_on_cuda(tmp_path):
    from qvr.events import FitProgress
    n = 400
    y, mean, sd = normal_normal_rows(n)
    model = normal_normal_case()[0]
    events = []
    res = fit(model, data={"y": y},
              config=FitConfig(method="svi", steps=1500, lr=0.01, batch_size=40, seed=0,
                               device="cuda", progress_interval=0.0),
              run_dir=tmp_path / "run", on_event=events.append)
    assert res.status == "finished", res.message
    got = res.samples["mu"].reshape(-1)
    assert abs(got.mean() - mean) < 0.5 * sd
    assert 0.6 * sd < got.std() < 1.5 * sd
    prog = [e for e in events if isinstance(e, FitProgress)]
    assert prog[-1].metrics["epoch"] == 150 and prog[-1].metrics["steps_per_epoch"] == 10
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["batch"]["batch_size"] == 40 and meta["batch"]["rows"] == n


# ---------------------------------------------------------------- HMC / NUTS

@pytest.mark.parametrize("method", ["nuts", "hmc"])
def test_mcmc_on_cuda_within_mcse_and_numpy_on_disk(method, tmp_path):
    model, data, exact = nn_data()
    warmup, samples = (300, 400) if method == "nuts" else (200, 300)
    res = fit(model, data, FitConfig(method=method, num_warmup=warmup, num_samples=samples,
                                     num_chains=4, chain_method="vectorized", seed=2,
                                     device="cuda"),
              run_dir=tmp_path / "run")
    assert res.status == "finished", res.message
    mu = res.samples["mu"]
    assert isinstance(mu, np.ndarray) and mu.shape[:2] == (4, samples)
    rhats = check_moments(res.samples, exact)  # mean and sd within 4 MCSE
    assert max(rhats.values()) < 1.05, rhats
    run = open_run(tmp_path / "run")
    on_disk = run.samples()["mu"]
    assert isinstance(on_disk, np.ndarray)
    np.testing.assert_array_equal(on_disk, mu)
    chunks = run.draws()["mu"]  # the draws chunks written while sampling
    assert isinstance(chunks, np.ndarray) and chunks.shape == mu.shape


# ---------------------------------------------------------------- SMC

def test_smc_generation_from_the_decoder_on_cuda():
    import qvr
    from qvr.datafiles import find_vocab, load_vocab
    vocab = load_vocab(find_vocab(DECODER))
    res = fit(qvr.load(str(DECODER)),
              config=FitConfig(method="smc", particles=8, max_len=6, eos=0, seed=0,
                               device="cuda"),
              program_path=str(DECODER))
    assert res.status == "finished", res.message
    smc = res.smc
    assert len(smc.sequences) == 8
    for seq in smc.sequences:
        ids = list(seq)
        assert 0 < len(ids) <= 6
        assert all(isinstance(t, int) and 0 <= t < len(vocab) for t in ids), ids
    lw = torch.as_tensor(smc.log_weights).cpu()
    alive = ~torch.as_tensor(smc.dead).cpu()
    assert alive.any() and torch.isfinite(lw[alive]).all(), lw
    assert math.isfinite(smc.log_Z)


# ---------------------------------------------------------------- float64

def test_float64_fits_on_cuda():
    model, data, exact = nn_data()
    res = fit(model, data, FitConfig(method="svi", steps=20, dtype="float64", seed=0,
                                     device="cuda", pointwise=False))
    assert res.status == "finished" and np.isfinite(res.losses).all()
    assert {p.dtype for p in res.guide.parameters()} == {torch.float64}
    assert all(v.dtype == np.float64 for v in res.params.values())
    assert res.samples["mu"].dtype == np.float64
    assert torch.get_default_dtype() == torch.float32
    res = fit(model, data, FitConfig(method="nuts", dtype="float64", num_warmup=300,
                                     num_samples=400, num_chains=4, seed=2, device="cuda"))
    assert res.status == "finished", res.message
    assert res.samples["mu"].dtype == np.float64
    assert res.mcmc.unconstrained.dtype == torch.float64
    assert max(check_moments(res.samples, exact).values()) < 1.05
    assert torch.get_default_dtype() == torch.float32
