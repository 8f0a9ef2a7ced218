"""Run records (`qvr.runs`): events round-trip, the reader rebuilds exactly what the fit
reported (all four methods, cancelled runs too), a killed writer reads as interrupted, a
second process follows a live record, torn lines are ignored."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load, loads
from qvr.inference import FitConfig, fit
from qvr.events import (DrawsChunk, FitCancelled, FitFailed, FitFinished,
                        FitProgress, FitStarted, FitWarning, ParticlesSnapshot,
                        StopToken, from_json, to_json)
from qvr.runs import RunRecordError, RunWriter, list_runs, open_run

ROOT = Path(__file__).resolve().parents[2]
NORMAL = """
object Obs : FinSet 20
object P : FinSet 3
program normal_normal : Obs -> Obs
    sample mu <- Normal(1.0, 2.0)
    sample w : P <- Normal(0.0, 1.0)
    observe y : Obs <- Normal(mu, 1.5)
    return mu
export normal_normal
"""


def data():
    return {"y": torch.linspace(-1.0, 3.0, 20)}


EVENTS = [
    FitStarted("nuts", 30, 2, {"num_chains": 2, "forbid": [[1, 2]], "eos": None}, "/tmp/x"),
    FitProgress("nuts", "warmup", 3, 10, 1, {"accept_prob": 0.5, "divergences": 0.0}, 0.25),
    DrawsChunk(1, 0, {"mu": np.arange(6, dtype=np.float32).reshape(3, 2),
                      "k": np.array([1, 2, 3], dtype=np.int64)}),
    ParticlesSnapshot(4, ((1, 2), (3,)), (-0.5, -1e300), (True, False)),
    FitWarning("careful", 7),
    FitFinished({"log_Z": -1.5, "step_sizes": [0.1, 0.2]}, 3.5),
    FitFailed("the loss is nan at step 3", 3, "NonFiniteLoss", 1.0),
    FitCancelled(None, 2.0),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_json(event):
    line = to_json(event)
    assert "\n" not in line
    back = from_json(line)
    assert back == event and type(back) is type(event)
    if isinstance(event, DrawsChunk):
        assert {k: v.dtype for k, v in back.draws.items()} == \
            {k: v.dtype for k, v in event.draws.items()}


def test_malformed_lines_are_value_errors():
    for bad in ('{"type": "nope"}', '[1, 2]', '{"type": "progress", "bogus": 1}'):
        with pytest.raises(ValueError):
            from_json(bad)


def _fit(tmp_path, method, **kw):
    events = []
    prog = load(ROOT / "examples" / "transformer_lm.qvr") if method == "smc" else loads(NORMAL)
    cfg = {"svi": dict(steps=40), "nuts": dict(num_warmup=20, num_samples=25, num_chains=2),
           "hmc": dict(num_warmup=10, num_samples=15, num_chains=2, num_steps=5),
           "smc": dict(particles=6, expansion=2, max_len=5, eos=1, bos=0)}[method]
    res = fit(prog, None if method == "smc" else data(),
              FitConfig(method=method, progress_interval=0.0, **cfg, **kw.pop("cfg", {})),
              on_event=events.append, run_dir=tmp_path / method, **kw)
    return res, events


@pytest.mark.parametrize("method", ["svi", "hmc", "nuts", "smc"])
def test_the_reader_rebuilds_exactly_the_events_the_callback_saw(tmp_path, method):
    res, events = _fit(tmp_path, method)
    run = open_run(tmp_path / method)
    assert run.status == "finished" and run.method == method
    assert run.events() == events
    assert isinstance(events[0], FitStarted) and events[0].run_dir == str(tmp_path / method)
    assert run.meta["format"] == 1 and run.meta["config"]["method"] == method
    assert run.meta["versions"]["torch"] == torch.__version__
    summary = run.summary
    assert summary["status"] == "finished"
    if method in ("hmc", "nuts"):
        draws = run.draws()
        np.testing.assert_array_equal(draws["w"], res.samples["w"])
        np.testing.assert_array_equal(draws["mu"], res.samples["mu"])  # (C, N, 1) both
        samples = run.samples()
        assert samples["sample_stats.diverging"].shape == (2, res.mcmc.num_samples)
        assert len(list((run.path / "draws").glob("*.npz"))) == \
            sum(isinstance(e, DrawsChunk) for e in events)
    elif method == "svi":
        np.testing.assert_array_equal(run.losses(), np.asarray(res.losses))
        assert set(run.params()) >= {"loc_mu", "log_scale_mu", "loc_w"}
    else:
        assert run.sequences["log_Z"] == pytest.approx(res.smc.log_Z)


def test_program_source_hash_is_recorded(tmp_path):
    import hashlib
    path = ROOT / "examples" / "transformer_lm.qvr"
    fit(load(path), config=FitConfig(method="smc", particles=2, max_len=2, eos=1),
        run_dir=tmp_path / "r")
    prog = open_run(tmp_path / "r").program
    assert prog["path"] == str(path.resolve())
    assert prog["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("method", ["svi", "hmc", "nuts", "smc"])
def test_cancelled_runs_are_recorded_as_cancelled_with_what_they_had(tmp_path, method):
    token = StopToken()
    seen = []

    def on_event(e):
        seen.append(e)
        if isinstance(e, FitProgress) and e.step >= 3 and e.phase != "warmup":
            token.cancel()  # MCMC: a few draws into sampling
    big = {"svi": dict(steps=10_000), "nuts": dict(num_warmup=5, num_samples=10_000),
           "hmc": dict(num_warmup=5, num_samples=10_000, num_steps=3),
           "smc": dict(max_len=10_000)}[method]
    pot = (lambda p, c, t: 1.0 if c[-1] != 1 else 1e-9) if method == "smc" else None
    prog = load(ROOT / "examples" / "transformer_lm.qvr") if method == "smc" else loads(NORMAL)
    cfg = dict(num_chains=2, particles=4, eos=1, progress_interval=0.0, **big)
    res = fit(prog, None if method == "smc" else data(), FitConfig(method=method, **cfg),
              on_event=on_event, should_stop=token, run_dir=tmp_path / "r",
              potential=pot)
    assert res.status == "cancelled"
    run = open_run(tmp_path / "r")
    assert run.status == "cancelled" and run.events() == seen
    assert isinstance(seen[-1], FitCancelled)
    assert run.summary["status"] == "cancelled"
    if method in ("hmc", "nuts"):  # the draws made before the stop, in the record
        chunks = [e for e in seen if isinstance(e, DrawsChunk)]
        assert chunks and run.draws_per_chain() == \
            {c: sum(e.count for e in chunks if e.chain == c) for c in (0, 1)}
        assert run.samples()["mu"].shape == res.samples["mu"].shape


@pytest.mark.parametrize("method", ["hmc", "nuts"])
def test_a_fit_cancelled_at_its_first_sampling_draw_is_cancelled_not_failed(tmp_path, method):
    """One draw per chain: the split chains are empty, so the tail ESS had nothing to take
    a quantile of (an IndexError turned the cancel into a failed run with an internal
    message).  The statistics that need two draws are NaN; the run is `cancelled`."""
    token = StopToken()

    def on_event(e):
        if isinstance(e, FitProgress) and e.phase == "sampling":
            token.cancel()
    extra = {"num_steps": 3} if method == "hmc" else {}
    cfg = FitConfig(method=method, num_chains=2, num_warmup=3, num_samples=1000,
                    progress_interval=0.0, **extra)
    res = fit(loads(NORMAL), data(), cfg, on_event=on_event, should_stop=token,
              run_dir=tmp_path / "r")
    run = open_run(tmp_path / "r")
    assert res.status == "cancelled" and run.status == "cancelled"
    assert run.summary["status"] == "cancelled" and run.summary["message"] == ""
    row = run.summary["parameters"]["mu"]
    assert math.isfinite(row["mean"]) and math.isnan(row["ess_tail"])


def test_failed_fits_are_recorded_with_the_message(tmp_path):
    d = data()
    d["y"][2] = float("inf")  # (NaN would be a missing entry, design E5)
    res = fit(loads(NORMAL), d, FitConfig(method="svi", steps=5), run_dir=tmp_path / "r")
    run = open_run(tmp_path / "r")
    assert res.status == "failed" and run.status == "failed"
    last = run.events()[-1]
    assert isinstance(last, FitFailed) and last.step == 1 and "inf" in last.message
    # a value the program reads, of the wrong shape (a key it does not read would be left
    # out with a note, issue 36)
    bad = {"y": torch.zeros(20), "mu": torch.zeros(3)}
    with pytest.raises(ValueError, match="`mu`"):
        fit(loads(NORMAL), bad, FitConfig(method="nuts"), run_dir=tmp_path / "bad")
    run = open_run(tmp_path / "bad")
    assert run.status == "failed" and "`mu`" in run.events()[-1].message
    assert "`mu`" in run.error and "Traceback" not in run.error


def test_a_torn_last_line_is_ignored_and_a_dead_writer_reads_as_interrupted(tmp_path):
    w = RunWriter(tmp_path / "r", {"method": "svi", "program": {}})
    w.write(FitStarted("svi", 10))
    w.write(FitProgress("svi", "optimization", 1, 10, metrics={"loss": 3.0}))
    run = open_run(tmp_path / "r")
    assert run.status == "running" and run.writer_alive()
    tail = run.tail()
    assert [type(e).__name__ for e in tail.poll()] == ["FitStarted", "FitProgress"]
    with open(tmp_path / "r" / "events.jsonl", "a") as fh:  # a write cut in the middle
        fh.write('{"type":"progress","method":"svi","pha')
    assert tail.poll() == [] and not tail.done
    w.close()  # the writer goes away without a terminal event
    assert run.status == "interrupted"
    assert len(run.events()) == 2 and tail.poll() == [] and tail.done


def test_not_a_record_is_a_clear_error(tmp_path):
    with pytest.raises(RunRecordError, match="no run.json"):
        open_run(tmp_path)
    (tmp_path / "run.json").write_text('{"format": 99}')
    with pytest.raises(RunRecordError, match="format 99"):
        open_run(tmp_path)
    with pytest.raises(RunRecordError, match="no such run folder"):
        open_run(tmp_path / "missing")


def test_list_runs_filters_by_program_newest_first(tmp_path):
    for name in ("a", "b"):
        w = RunWriter(tmp_path / name, {"method": "svi",
                                         "program": {"path": str(Path("/x/p.qvr"))}})
        w.close()
    w = RunWriter(tmp_path / "c", {"method": "svi", "program": {"path": "/x/other.qvr"}})
    w.close()
    runs = list_runs(tmp_path, program="/x/p.qvr")
    assert sorted(r.path.name for r in runs) == ["a", "b"]
    assert all(r.status == "interrupted" for r in runs)


KILL_SCRIPT = """
import sys, torch
from qvr import loads
from qvr.inference import FitConfig, fit
src = open(sys.argv[1]).read()
fit(loads(src), {"y": torch.linspace(-1.0, 3.0, 20)},
    FitConfig(method="nuts", num_warmup=10, num_samples=1_000_000, num_chains=2,
              progress_interval=0.0), run_dir=sys.argv[2])
"""


def _wait(pred, timeout=240.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if proc is not None and proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.05)
    raise AssertionError("timed out")


def _spawn(tmp_path, folder):
    src = tmp_path / "prog.qvr"
    src.write_text(NORMAL)
    script = tmp_path / "fit.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QVR_MCMC_COMPILER": "torchscript"}
    return subprocess.Popen([sys.executable, str(script), str(src), str(folder)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _spawn_qvr_run(tmp_path, folder):
    src = tmp_path / "prog.qvr"
    src.write_text(NORMAL)
    data = tmp_path / "d.json"
    data.write_text(json.dumps({"y": np.linspace(-1.0, 3.0, 20).tolist()}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QVR_MCMC_COMPILER": "torchscript"}
    return subprocess.Popen(
        [sys.executable, "-m", "qvr.cli", "run", str(src), "--method", "nuts", "--data",
         str(data), "--warmup", "10", "--samples", "1000000", "--chains", "2",
         "--run-dir", str(folder)], env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_qvr_run_killed_mid_sampling_leaves_an_interrupted_readable_record(tmp_path):
    folder = tmp_path / "r"
    proc = _spawn_qvr_run(tmp_path, folder)
    try:
        # four chunks *recorded* (their lines written), not four files: a file precedes its
        # line, and a kill between the two on a busy machine left three lines for four files
        _wait(lambda: (folder / "events.jsonl").is_file() and sum(
            isinstance(e, DrawsChunk) for e in open_run(folder).events()) >= 4, proc=proc)
        assert open_run(folder).status == "running"
        assert open_run(folder).status == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    run = open_run(folder)
    assert run.status == "interrupted"
    events = run.events()
    chunks = [e for e in events if isinstance(e, DrawsChunk)]
    files = sorted((folder / "draws").glob("*.npz"))
    assert len(chunks) >= 4 and len(files) >= len(chunks)  # a file may precede its line
    per = run.draws_per_chain()
    draws = run.draws()
    assert draws["mu"].shape[:2] == (2, min(per.values()))
    assert np.isfinite(draws["mu"]).all()
    from qvr.commands.report import render_run
    text = render_run(run)
    assert "[interrupted]" in text and "no summary was written" in text


FOLLOW_SCRIPT = """
import sys, json
from qvr.runs import open_run
from qvr.events import FitProgress, event_type
import time
deadline = time.monotonic() + 240
run = None
while run is None and time.monotonic() < deadline:
    try:
        run = open_run(sys.argv[1])
    except Exception:
        time.sleep(0.05)
seen = []
for ev in run.follow(poll_interval=0.02, timeout=240):
    seen.append([event_type(ev), getattr(ev, "phase", None), getattr(ev, "step", None),
                 getattr(ev, "chain", None)])
    if len([s for s in seen if s[0] == "progress"]) >= 30:
        break
print(json.dumps({"seen": seen, "status": run.status, "torch": "torch" in sys.modules}))
"""


def test_a_second_process_follows_a_running_record_in_order(tmp_path):
    folder = tmp_path / "r"
    proc = _spawn(tmp_path, folder)
    try:
        script = tmp_path / "follow.py"
        script.write_text(FOLLOW_SCRIPT)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, str(script), str(folder)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["status"] == "running" and not got["torch"]
        seen = got["seen"]
        assert seen[0][0] == "started"
        for chain in (0, 1):
            steps = [(s[1], s[2]) for s in seen if s[0] == "progress" and s[3] == chain]
            order = [(0 if p == "warmup" else 1, st) for p, st in steps]
            assert order == sorted(order) and len(order) >= 5
    finally:
        proc.kill()
        proc.wait(60)
