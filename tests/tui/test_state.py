"""RunState folded from fit events: SVI smoothing, rates, ETA and the plateau note; MCMC
chain rows, divergences and running diagnostics (equal to the worker's summary); SMC
series and particles; decimation; the numpy inverse normal CDF.  Pure: no Textual, no
torch."""
import math
import random
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from qvr.events import (DrawsChunk, FitCancelled, FitFailed, FitFinished,
                        FitProgress, FitStarted, ParticlesSnapshot)
from qvr.runs import open_run
from qvr_tui.live_rows import tokens_text
from qvr_tui.running_diagnostics import ndtri
from qvr_tui.series import decimate
from qvr_tui.state import EMA_BETA, RunState, format_seconds

RECORDED = Path(__file__).parent / "recorded"


def svi_events(losses, dt=0.01, total=None):
    total = total or len(losses)
    yield FitStarted("svi", total, 1, {"method": "svi", "steps": total})
    for i, v in enumerate(losses, 1):
        yield FitProgress("svi", "optimization", i, total, 0, {"loss": v}, elapsed=i * dt)


def test_debiased_ema_matches_the_formula():
    st = RunState.from_events(svi_events([10.0, 20.0, 30.0]))
    b = EMA_BETA
    e1 = (1 - b) * 10
    e2 = b * e1 + (1 - b) * 20
    e3 = b * e2 + (1 - b) * 30
    assert list(st.smooth.y) == pytest.approx([e1 / (1 - b), e2 / (1 - b ** 2), e3 / (1 - b ** 3)])
    assert st.smooth.y[0] == pytest.approx(10.0)  # debiased: the first point is the loss
    assert list(st.loss.y) == [10.0, 20.0, 30.0] and list(st.loss.x) == [1.0, 2.0, 3.0]


def test_rate_and_eta_from_the_fits_clock():
    st = RunState.from_events(svi_events([5.0] * 40, dt=0.02, total=100))
    assert st.rate == pytest.approx(50.0)  # 1 step per 0.02 s
    assert st.eta == pytest.approx(60 / 50.0)
    assert st.status == "running"
    st.apply([FitFinished({}, 0.8)])
    assert st.status == "finished" and st.eta == 0.0


def test_plateau_flag_on_flat_and_on_falling_losses():
    rng = random.Random(0)
    flat = [100 + rng.gauss(0, 1) for _ in range(200)]
    assert RunState.from_events(svi_events(flat)).plateau is True
    falling = [1000 * math.exp(-i / 100) + rng.gauss(0, 1) for i in range(200)]
    assert RunState.from_events(svi_events(falling)).plateau is False
    assert RunState.from_events(svi_events(flat[:40])).plateau is False  # too few steps


def test_nonfinite_loss_named_with_its_step():
    st = RunState.from_events(svi_events([3.0, 2.0, float("nan")]))
    assert st.problem() == "the loss is not finite at step 3"
    assert len(st.smooth) == 2 and len(st.loss) == 3


def test_failed_and_cancelled_and_interrupted_texts():
    st = RunState.from_events(svi_events([3.0, 2.0]))
    st.apply([FitFailed("data file x.json: key y missing", step=2, error_type="DataError")])
    assert st.problem() == "failed at step 2: data file x.json: key y missing"
    st = RunState.from_events(svi_events([3.0, 2.0]))
    st.apply([FitCancelled(step=2, elapsed=0.1)])
    assert (st.status, st.message) == ("cancelled", "cancelled at step 2")
    st = RunState.from_events(svi_events([3.0, 2.0]))
    st.mark_interrupted("killed")
    assert st.problem() == "interrupted after step 2: killed"


def test_decimate_keeps_extremes_and_bounds_length():
    x = list(range(10000))
    y = [0.0] * 10000
    y[5003] = 99.0
    dx, dy = decimate(x, y, 160)
    assert len(dx) <= 160 and 99.0 in dy and dx == sorted(dx)
    assert decimate([1, 2], [3, 4], 160) == ([1, 2], [3, 4])
    # a falling curve keeps its order; non-finite values never chosen over finite ones
    y = [100.0 - i for i in range(1000)]
    y[10] = float("nan")
    y[20] = float("inf")
    dx, dy = decimate(list(range(1000)), y, 100)
    assert len(dx) == 100 and dx == sorted(dx) and all(math.isfinite(v) for v in dy)
    assert dy[0] == 100.0 and dy[-1] == -899.0


def test_mcmc_rows_from_the_recorded_nuts_run():
    run = open_run(RECORDED / "nuts_regression")
    st = RunState.from_events(run.events())
    assert st.method == "nuts" and st.status == "finished"
    assert sorted(st.chains) == [0, 1]
    stats = run.summary["stats"]
    for c, row in st.chains.items():
        assert (row.phase, row.step, row.total) == ("sampling", 60, 60)
        assert row.divergences == stats["divergence_counts"][c]
        assert row.diverged == (row.divergences > 0)
    assert sum(r.max_depth_hits for r in st.chains.values()) == stats["max_depth_hits"]
    assert st.chains[1].first_divergence == 17 and st.chains[0].first_divergence is None
    # one trace point per progress event of the chain, x counted from the start of warmup
    n_events = sum(1 for e in run.events(load_draws=False)
                   if isinstance(e, FitProgress) and e.chain == 0)
    assert len(st.accept[0]) == n_events and st.accept[0].x[-1] == 120.0


def test_running_diagnostics_equal_the_workers_summary():
    run = open_run(RECORDED / "nuts_regression")
    st = RunState.from_events(run.events())
    st.update_diagnostics(force=True)
    params = run.summary["parameters"]
    assert st.diagnostics_draws == 60 and len(st.worst) == 5
    worst_r = max(p["r_hat"] for p in params.values())
    assert st.worst[0].r_hat == pytest.approx(worst_r, abs=1e-9)
    for w in st.worst:
        assert w.r_hat == pytest.approx(params[w.name]["r_hat"], abs=1e-9)
        assert w.ess_bulk == pytest.approx(params[w.name]["ess_bulk"], rel=1e-9)
        assert w.ess_tail == pytest.approx(params[w.name]["ess_tail"], rel=1e-9)


def test_diagnostics_wait_for_enough_draws_and_are_rate_limited():
    now = [0.0]
    st = RunState(clock=lambda: now[0], diagnostics_interval=1.0)
    rng = np.random.default_rng(0)
    st.apply([FitStarted("nuts", 40, 2, {"num_warmup": 0, "num_samples": 40})])
    for c in (0, 1):
        st.apply([DrawsChunk(c, 0, {"mu": rng.normal(size=(10, 1))})])
    assert st.worst == []  # 10 draws per chain: not enough
    for c in (0, 1):
        st.apply([DrawsChunk(c, 10, {"mu": rng.normal(size=(15, 1))})])
    assert st.diagnostics_draws == 25 and st.worst[0].name == "mu"
    for c in (0, 1):
        st.apply([DrawsChunk(c, 25, {"mu": rng.normal(size=(5, 1))})])
    assert st.diagnostics_draws == 25  # computed less than a second ago
    now[0] = 1.5
    st.apply([FitProgress("nuts", "sampling", 30, 40, 0, {"accept_prob": 0.8})])
    assert st.diagnostics_draws == 30


def test_eta_uses_each_phases_rate():
    st = RunState()
    st.apply([FitStarted("nuts", 200, 1, {"num_warmup": 100, "num_samples": 100})])
    st.apply([FitProgress("nuts", "warmup", 50, 100, 0, {}, elapsed=10.0)])  # 5 it/s
    assert st.eta == pytest.approx(50 / 5 + 100 / 5)
    st.apply([FitProgress("nuts", "warmup", 100, 100, 0, {}, elapsed=20.0),
              FitProgress("nuts", "sampling", 50, 100, 0, {}, elapsed=25.0)])  # 10 it/s
    assert st.chains[0].sampling_rate == pytest.approx(10.0)
    assert st.eta == pytest.approx(50 / 10)


def test_smc_series_and_particles():
    run = open_run(RECORDED / "smc_recurrent")
    vocab = run.sequences["vocab"]
    st = RunState.from_events(run.events(), vocab=vocab)
    progress = [e for e in run.events() if isinstance(e, FitProgress)]
    assert len(st.ess) == len(progress) and list(st.ess.y) == [e.metrics["ess"] for e in progress]
    assert st.log_z.y[-1] == pytest.approx(progress[-1].metrics["log_Z"])
    assert st.num_finished == int(progress[-1].metrics["num_finished"])
    assert st.resampled_steps == [e.step for e in progress if e.metrics.get("resampled")]
    snap = [e for e in run.events() if isinstance(e, ParticlesSnapshot)][-1]
    assert len(st.particles) == len(snap.sequences)
    assert sum(p.weight for p in st.particles) == pytest.approx(1.0)
    assert [p.weight for p in st.particles] == sorted((p.weight for p in st.particles),
                                                      reverse=True)
    top = st.particles[0]
    assert top.text == "".join(vocab[t] for t in top.tokens)  # a character model


def test_particle_weights_are_normalised_softmax():
    st = RunState(vocab=["<eos>", "the", "dog"])
    st.apply([ParticlesSnapshot(3, ((1, 2), (2,), (1,)), (0.0, math.log(3.0), -math.inf),
                                (True, False, False))])
    assert [(p.text, round(p.weight, 6)) for p in st.particles] == [
        ("dog", 0.75), ("the dog", 0.25), ("the", 0.0)]


def test_tokens_text():
    assert tokens_text([1, 2], None) == "1 2"
    assert tokens_text([1, 2], ["<eos>", "a", "b"]) == "ab"
    assert tokens_text([1, 2], ["<eos>", "the", "dog"]) == "the dog"
    assert tokens_text([1, 9], ["<eos>", "the", "dog"]) == "1 9"  # outside the vocabulary


def test_ndtri_matches_the_normal_quantile():
    nd = NormalDist()
    ps = [1e-10, 1e-6, 0.001, 0.02, 0.02425, 0.1, 0.3, 0.5, 0.77, 0.97575, 0.999, 1 - 1e-9]
    got = ndtri(np.array(ps))
    want = [nd.inv_cdf(p) for p in ps]
    assert np.max(np.abs(got - want)) < 1e-9


def test_format_seconds():
    assert [format_seconds(s) for s in (3.25, 42, 125, 7322)] == ["3.2s", "42s", "2m05s",
                                                                   "2h02m"]


def test_an_mcmc_fit_with_nothing_to_sample_says_so_and_shows_no_chain():
    """NUTS on a program whose latents are all finite (summed out): no chain runs, and the
    header gives the log marginal likelihood instead of 'finished · 0%' over rows stuck
    at 0/500 (seen in tmux on examples/hmm.qvr)."""
    from qvr.events import FitStarted, FitWarning
    s = RunState()
    s.run_dir = Path("runs/hmm-1")
    s.apply([FitStarted("nuts", 1000, 4, {"num_warmup": 500, "num_samples": 500}),
             FitWarning("no continuous latent site to sample"),
             FitFinished({"log_marginal_likelihood": -184.8496856689453, "num_chains": 0,
                          "num_samples": 0, "note": "no continuous latent site"}, 0.03)])
    assert s.nothing_sampled and s.chains == {}
    assert s.status_line().startswith(
        "NUTS finished · no continuous latent · log marginal likelihood -184.85 · ")


def test_a_note_shows_in_the_status_line_until_the_chains_move():
    from qvr.events import FitNote
    st = RunState()
    st.run_dir = "runs/x"
    st.apply([FitStarted("nuts", 200, 1, {"num_warmup": 100, "num_samples": 100}),
              FitNote("compiling the NUTS transition to C++")])
    assert "compiling the NUTS transition to C++" in st.status_line()
    st.apply([FitProgress("nuts", "warmup", 5, 100, 0, {}, elapsed=1.0)])
    assert "compiling" not in st.status_line()


def test_the_first_divergence_is_the_draw_the_driver_names():
    """A report can come many draws after the divergence (throttled, or at the end of a
    compiled block of 64): the chain table shows the draw the driver names, and the
    report's step only for records without it."""
    st = RunState()
    st.apply([FitStarted("nuts", 200, 2, {"num_warmup": 100, "num_samples": 100}),
              FitProgress("nuts", "sampling", 64, 100, 0,
                          {"divergences": 1.0, "first_divergence": 37.0}),
              FitProgress("nuts", "sampling", 64, 100, 1, {"divergences": 1.0}),
              FitProgress("nuts", "sampling", 100, 100, 0,
                          {"divergences": 2.0, "first_divergence": 37.0})])
    assert st.chains[0].first_divergence == 37 and st.chains[1].first_divergence == 64


def test_the_status_line_says_how_the_steps_run_when_a_note_changes_it():
    """Issue 37.4: leaf by leaf while the C++ loop compiles in the background, then the
    compiled loop; gone once the run has finished; a record's note without a path (older
    records) changes nothing."""
    from qvr.events import STEPS_COMPILED, STEPS_LEAF_BY_LEAF, FitNote, from_dict, to_dict
    st = RunState()
    st.run_dir = "runs/x"
    st.apply([FitStarted("nuts", 200, 1, {"num_warmup": 100, "num_samples": 100}),
              FitNote("compiling NUTS to C++ in the background", STEPS_LEAF_BY_LEAF),
              FitProgress("nuts", "warmup", 5, 100, 0, {}, elapsed=1.0)])
    assert " · leaf by leaf, C++ loop compiling · " in st.status_line()
    note = FitNote("the whole NUTS transition took over at iteration 40", STEPS_COMPILED)
    assert from_dict(to_dict(note)) == note
    st.apply([from_dict(to_dict(note))])
    assert " · compiled C++ loop · " in st.status_line()
    st.apply([from_dict({"type": "note", "message": "recording the pointwise terms"})])
    assert " · compiled C++ loop · " in st.status_line()
    st.apply([FitFinished({}, 2.0)])
    assert "C++" not in st.status_line()


def test_importance_rounds_are_their_own_line():
    """``--resample amis`` after an SVI fit: its rounds neither move the loss nor the
    step; the live note says where they are."""
    from qvr.inference.criticism.khat_text import importance_text
    st = RunState.from_events(svi_events([5.0] * 10))
    st.apply([FitProgress("svi", "importance", r, 8, 0, {"ess": 250.0 * r}, 1.0 + r)
              for r in (1, 2, 3)])
    assert st.importance == (3, 8, 750.0)
    assert list(st.loss.y) == [5.0] * 10 and st.step == 10
    assert importance_text(st.importance) == "importance sampling: round 3 of 8, ESS 750"

