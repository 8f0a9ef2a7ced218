"""`fit()`: the event protocol, cancellation from another thread, non-finite losses and bad
data (the dashboard's contract)."""
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import loads
from qvr.inference import FitConfig, fit
from qvr.events import (DrawsChunk, FitCancelled, FitFailed, FitFinished,
                        FitProgress, FitStarted, StopToken)
from qvr.inference.data.fit_data import DataError

from helpers import NORMAL_NORMAL

ROOT = Path(__file__).resolve().parents[2]


def model_and_data():
    model = loads(NORMAL_NORMAL).morphism
    return model, {"y": torch.randn(20) + 1.0}


def collect():
    events = []
    return events, events.append


def test_nuts_fit_reports_typed_events_in_order():
    model, data = model_and_data()
    events, on_event = collect()
    res = fit(model, data, FitConfig(method="nuts", num_warmup=20, num_samples=15, num_chains=2,
                                     progress_interval=0.0), on_event=on_event)
    assert res.status == "finished"
    assert isinstance(events[0], FitStarted) and events[0].method == "nuts"
    assert events[0].num_chains == 2 and events[0].total_steps == 35
    assert isinstance(events[-1], FitFinished)
    assert sum(isinstance(e, (FitStarted, FitFinished, FitFailed, FitCancelled))
               for e in events) == 2
    progress = [e for e in events if isinstance(e, FitProgress)]
    assert {e.phase for e in progress} == {"warmup", "sampling"}
    assert {e.chain for e in progress} == {0, 1}
    last = [e for e in progress if e.phase == "sampling"][-1]
    assert set(last.metrics) >= {"accept_prob", "step_size", "tree_depth", "divergences"}
    assert last.step == last.total == 15
    for chain in (0, 1):  # draws arrive in order and cover every draw
        chunks = [e for e in events if isinstance(e, DrawsChunk) and e.chain == chain]
        starts = [c.start for c in chunks]
        assert starts == sorted(starts) and starts[0] == 0
        mu = np.concatenate([c.draws["mu"] for c in chunks])
        np.testing.assert_allclose(mu.reshape(-1), res.samples["mu"][chain].reshape(-1),
                                   rtol=1e-6)
    assert res.summary is not None and "mu" in res.summary.rows
    assert {"mean_acceptance", "total_divergences", "step_sizes"} <= set(res.stats)


def test_svi_fit_reports_the_loss():
    model, data = model_and_data()
    events, on_event = collect()
    res = fit(model, data, FitConfig(method="svi", steps=30, lr=0.05, progress_interval=0.0),
              on_event=on_event)
    assert res.status == "finished" and len(res.losses) == 30
    losses = [e.metrics["loss"] for e in events if isinstance(e, FitProgress)]
    assert losses == res.losses
    assert "loc_mu" in res.params and "mu" in res.summary.rows
    assert isinstance(events[-1], FitFinished)


@pytest.mark.parametrize("method", ["nuts", "svi"])
def test_fit_can_be_cancelled_from_another_thread(method):
    model, data = model_and_data()
    token = StopToken()
    events = []
    started = threading.Event()

    def on_event(e):
        events.append(e)
        if isinstance(e, FitProgress) and e.step >= 5:
            started.set()

    box = {}
    cfg = FitConfig(method=method, steps=100_000, num_warmup=100_000, num_samples=10,
                    num_chains=2, progress_interval=0.0)
    th = threading.Thread(target=lambda: box.update(res=fit(model, data, cfg, on_event,
                                                            token)))
    th.start()
    assert started.wait(120)
    token.cancel()
    th.join(120)
    assert not th.is_alive()
    res = box["res"]
    assert res.status == "cancelled"
    assert isinstance(events[-1], FitCancelled)
    assert not any(isinstance(e, (FitFinished, FitFailed)) for e in events)


def test_non_finite_loss_stops_with_a_message_naming_the_step():
    model, data = model_and_data()
    data["y"][3] = float("inf")  # (NaN would be a missing entry, design E5)
    events, on_event = collect()
    res = fit(model, data, FitConfig(method="svi", steps=50), on_event=on_event)
    assert res.status == "failed" and res.step == 1
    assert "step 1" in res.message and "inf" in res.message
    assert isinstance(events[-1], FitFailed) and events[-1].step == 1


def test_data_the_program_does_not_read_is_left_out_with_a_note():
    """As CmdStan (issue 36): `yy` is not read by the program, so it is left out, said in
    one note (it was an error before)."""
    from qvr.events import FitWarning
    events, on_event = collect()
    res = fit(loads(NORMAL_NORMAL).morphism, {"y": torch.zeros(20), "yy": torch.zeros(20)},
              FitConfig(method="svi", steps=2), on_event=on_event)
    assert res.status == "finished"
    notes = [e.message for e in events if isinstance(e, FitWarning)]
    assert notes[0] == "the data's `yy` is not read by `normal_normal`: left out"


@pytest.mark.parametrize("data, words", [
    ({"y": torch.zeros(20), "mu": torch.zeros(3)}, "`mu`"),
])
def test_bad_data_is_a_clear_error_before_fitting(data, words):
    model = loads(NORMAL_NORMAL).morphism
    events, on_event = collect()
    with pytest.raises(DataError, match=words):
        fit(model, data, FitConfig(method="nuts", num_warmup=5, num_samples=5),
            on_event=on_event)
    assert not any(isinstance(e, FitProgress) for e in events)
    assert isinstance(events[-1], FitFailed)


def test_fit_config_rejects_unknown_methods_and_options():
    from qvr.inference.config import ConfigError
    assert FitConfig(method="vi").errors() == {
        "method": "must be one of svi, hmc, nuts, smc, prior, pathfinder; got 'vi'"}
    model, data = model_and_data()
    with pytest.raises(ConfigError, match="method"):
        fit(model, data, FitConfig(method="vi"))
    with pytest.raises(ConfigError, match="num_chain"):
        fit(model, data, {"method": "nuts", "num_chain": 2})
    assert FitConfig(method="nuts", num_chains=0, lr=-1.0).errors() == {
        "lr": "must be a positive number, got -1.0",
        "num_chains": "must be an integer >= 1, got 0"}


def test_same_seed_same_results_as_the_drivers_called_directly():
    """`fit` adds reporting, not arithmetic: with a seed it gives exactly the draws and
    losses of the driver run by hand after `torch.manual_seed` with the same seed."""
    from qvr.inference.mcmc.driver import MCMC
    from qvr.inference.mcmc.nuts import NUTSKernel
    from qvr.inference.data.fit_data import check_data, split_data
    model, data = model_and_data()
    res = fit(model, data, FitConfig(method="nuts", num_warmup=15, num_samples=10,
                                     num_chains=2, seed=7))
    torch.manual_seed(7)
    x, obs = split_data(model, data)
    check_data(model, x, obs)  # as `fit` (and the fit before the run records) does
    direct = MCMC(NUTSKernel(), num_warmup=15, num_samples=10, num_chains=2).run(model, x, obs)
    np.testing.assert_array_equal(res.samples["mu"], direct.samples["mu"].numpy())
    a = fit(model, data, FitConfig(method="svi", steps=20, seed=3)).losses
    b = fit(model, data, FitConfig(method="svi", steps=20, seed=3)).losses
    assert a == b and len(a) == 20


def test_smc_through_fit_reports_one_start_and_one_end(tmp_path):
    from qvr import load
    from qvr.events import ParticlesSnapshot
    prog = load(str(ROOT / "examples" / "transformer_lm.qvr"))
    events, on_event = collect()
    res = fit(prog, config=FitConfig(method="smc", particles=8, expansion=2, max_len=6, eos=1,
                                     bos=0, forbid=[[5]], progress_interval=0.0),
              on_event=on_event)
    assert res.status == "finished"
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "FitStarted" and kinds[-1] == "FitFinished"
    assert kinds.count("FitStarted") == 1 and kinds.count("FitFinished") == 1
    steps = [e.step for e in events if isinstance(e, FitProgress)]
    assert steps == list(range(1, res.stats["num_steps"] + 1))
    snaps = [e for e in events if isinstance(e, ParticlesSnapshot)]
    assert len(snaps) == len(steps)
    assert all(5 not in p["tokens"] for p in res.sequences["particles"])
    assert events[-1].summary["log_Z"] == pytest.approx(res.smc.log_Z)


def test_nuts_progress_steps_increase_per_chain_and_phase():
    model, data = model_and_data()
    events, on_event = collect()
    fit(model, data, FitConfig(method="nuts", num_warmup=20, num_samples=15, num_chains=3,
                               progress_interval=0.0), on_event=on_event)
    progress = [e for e in events if isinstance(e, FitProgress)]
    for chain in (0, 1, 2):
        mine = [(0 if e.phase == "warmup" else 1, e.step) for e in progress
                if e.chain == chain]
        # every iteration reported (interval 0), warmup then sampling, strictly increasing
        assert mine == [(0, s) for s in range(1, 21)] + [(1, s) for s in range(1, 16)]
        assert {e.total for e in progress if e.chain == chain and e.phase == "warmup"} == {20}


def _x_obs(model, data):
    from qvr.inference.data.fit_data import check_data, split_data
    x, obs = split_data(model, data)
    check_data(model, x, obs)  # as `fit` does
    return x, obs


def test_hmc_through_fit_gives_the_draws_of_the_driver_called_directly():
    from qvr.inference.front.fitting import model_of
    from qvr.inference.mcmc.driver import MCMC
    from qvr.inference.mcmc.hmc import HMCKernel
    model, data = model_and_data()
    events, on_event = collect()
    res = fit(model, data, FitConfig(method="hmc", num_warmup=15, num_samples=10,
                                     num_chains=2, num_steps=5, seed=11,
                                     progress_interval=0.0), on_event=on_event)
    torch.manual_seed(11)
    prog = model_of(model)
    x, obs = _x_obs(prog, data)
    direct = MCMC(HMCKernel(num_steps=5), num_warmup=15, num_samples=10,
                  num_chains=2).run(prog, x, obs)
    np.testing.assert_array_equal(res.samples["mu"], direct.samples["mu"].numpy())
    np.testing.assert_array_equal(res.mcmc.step_sizes.numpy(), direct.step_sizes.numpy())
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "FitStarted" and kinds[-1] == "FitFinished"
    assert kinds.count("FitStarted") == kinds.count("FitFinished") == 1


def test_svi_through_fit_gives_the_losses_and_guide_of_the_loop_run_directly():
    from qvr.inference.vi.elbo import ELBO
    from qvr.inference.front.fitting import model_of
    from qvr.inference.vi.guides import AutoNormalGuide
    from qvr.inference.vi.svi import SVI, adam
    _, data = model_and_data()
    res = fit(loads(NORMAL_NORMAL).morphism, data,
              FitConfig(method="svi", steps=25, lr=0.05, elbo_particles=2, seed=4))
    torch.manual_seed(4)
    prog = model_of(loads(NORMAL_NORMAL).morphism)
    x, obs = _x_obs(prog, data)
    guide = AutoNormalGuide(prog, observed_names=set(obs))
    optim = adam(list(prog.parameters()) + list(guide.parameters()), 0.05)
    svi = SVI(prog, guide, optim, ELBO(num_particles=2))
    losses = [svi.step(x, obs) for _ in range(25)]
    assert res.losses == losses
    for name, p in guide.named_parameters():
        np.testing.assert_array_equal(res.params[name], p.detach().numpy())


def test_smc_through_fit_gives_the_particles_of_the_steering_run_directly():
    from qvr import load
    from qvr.smc.potentials import forbid_tokens
    from qvr.smc.program_lm import ProgramLM
    from qvr.smc.steering import SMCSteering
    prog = load(str(ROOT / "examples" / "transformer_lm.qvr"))
    res = fit(prog, config=FitConfig(method="smc", particles=8, expansion=2, max_len=6,
                                     eos=1, bos=0, forbid=[[5]], seed=3))
    torch.manual_seed(3)
    direct = SMCSteering(ProgramLM(prog, bos=0, eos=1), potential=forbid_tokens(5),
                         num_particles=8, expansion=2, max_len=6,
                         generator=torch.Generator().manual_seed(3)).run()
    assert [tuple(p["tokens"]) for p in res.sequences["particles"]] == \
        [tuple(s) for s in direct.sequences]
    assert res.smc.log_Z == direct.log_Z
    np.testing.assert_array_equal(res.smc.log_weights.numpy(), direct.log_weights.numpy())
