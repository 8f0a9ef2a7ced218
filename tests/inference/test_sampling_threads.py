"""HMC/NUTS sample on one torch thread by default (issue 37.1,
`qvr.inference.methods.mcmc.sampling_threads`): ``FitConfig.threads`` or the user's
``OMP_NUM_THREADS`` say otherwise; the process's setting comes back after the fit."""
import pytest
import torch

from qvr import loads
from qvr.inference import FitConfig, fit
from qvr.inference.config import ConfigError
from qvr.inference.methods.mcmc import sampling_threads

from helpers import NORMAL_NORMAL as PROGRAM



@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_one_thread_while_sampling_and_the_setting_back_after(two_threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []
    with sampling_threads() as n:
        seen.append((n, torch.get_num_threads()))
    assert seen == [(1, 1)] and torch.get_num_threads() == 2
    with sampling_threads(3) as n:
        assert (n, torch.get_num_threads()) == (3, 3)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with sampling_threads() as n:
        assert (n, torch.get_num_threads()) == (2, 2)
    assert torch.get_num_threads() == 2


def test_a_fit_samples_on_the_threads_it_records(two_threads, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    from qvr.inference.mcmc import driver
    during = []
    real = driver.MCMC.run

    def spy(self, *a, **k):
        during.append(torch.get_num_threads())
        return real(self, *a, **k)
    monkeypatch.setattr(driver.MCMC, "run", spy)
    data = {"y": [0.1 * i - 0.5 for i in range(20)]}
    res = fit(loads(PROGRAM), data, FitConfig(method="nuts", num_warmup=20, num_samples=20,
                                              num_chains=2, seed=0))
    assert res.status == "finished" and res.stats["threads"] == 1 and during == [1]
    res = fit(loads(PROGRAM), data, FitConfig(method="nuts", num_warmup=20, num_samples=20,
                                              num_chains=2, seed=0, threads=2))
    assert res.stats["threads"] == 2 and during == [1, 2]
    assert torch.get_num_threads() == 2


def test_threads_must_be_a_positive_integer():
    with pytest.raises(ConfigError) as e:
        FitConfig(method="nuts", threads=0).validate()
    assert "threads" in str(e.value) and "must be an integer >= 1, got 0" in str(e.value)
