"""Data-parallel SVI on torch.distributed (`qvr.inference.distributed.world`): two CPU ranks
(gloo) started by torch's launcher give the one-process parameters of the same global
batch and seed, one run record written by rank 0, and a killed rank ends the run as
failed, naming the rank."""
import json
import re
import os
import subprocess
import sys

import numpy as np
import pytest

from qvr.runs import open_run

from helpers import GROUP_EFFECTS as PROGRAM, effects_data

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="gloo over torchrun on POSIX")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist")
    (d / "effects.qvr").write_text(PROGRAM)
    data = d / "effects.json"
    data.write_text(json.dumps({k: v.tolist() for k, v in effects_data().items()}))
    return d / "effects.qvr", data


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", QVR_MCMC_COMPILER="torchscript")
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def _qvr(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "qvr", *args], capture_output=True,
                          text=True, env=_env(), timeout=timeout)


OPTIONS = ["--method", "svi", "--steps", "20", "--batch-size", "16", "--lr", "0.05",
           "--seed", "3", "--no-pointwise"]


def test_two_ranks_give_the_one_process_parameters(program, tmp_path):
    prog, data = program
    one = _qvr("run", str(prog), "--data", str(data), *OPTIONS,
               "--run-dir", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    two = _qvr("run", str(prog), "--data", str(data), *OPTIONS,
               "--run-dir", str(tmp_path / "two"), "--nproc", "2")
    assert two.returncode == 0, two.stderr
    assert "starting 2 processes" in two.stderr
    assert two.stdout.count("svi: 20 steps") == 1  # rank 0 alone reports
    a, b = open_run(tmp_path / "one"), open_run(tmp_path / "two")
    assert a.status == b.status == "finished"
    assert b.meta["world_size"] == 2 and "world_size" not in a.meta
    assert b.meta["batch"]["world_size"] == 2 and b.meta["batch"]["batch_size"] == 16
    pa, pb = a.params(), b.params()
    assert sorted(pa) == sorted(pb) and len(pa) >= 8
    for k in pa:
        assert np.allclose(pa[k], pb[k], rtol=1e-4, atol=1e-5), (k, pa[k], pb[k])
    # after 20 Adam steps of lr 0.05 the parameters moved: equality is not trivial
    assert max(float(np.abs(v).max()) for k, v in pb.items() if k.startswith("loc_")) > 0.3
    la, lb = np.load(tmp_path / "one" / "losses.npy"), np.load(tmp_path / "two" / "losses.npy")
    assert np.allclose(la, lb, rtol=1e-4)
    # one record: no other rank wrote a folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


KILLER = """\
import os, signal, sys
import qvr
from qvr.inference import fit, FitConfig
from qvr.events import FitProgress
rank = int(os.environ["RANK"])
victim = int(sys.argv[4])
prog = qvr.load(sys.argv[1])

def on_event(e):
    if rank == victim and isinstance(e, FitProgress) and e.step == 5:
        os.kill(os.getpid(), signal.SIGKILL)

try:
    fit(prog, config=FitConfig(method="svi", steps=400, batch_size=16, seed=1,
                               data=sys.argv[2], pointwise=False, progress_interval=0.0),
        on_event=on_event, run_dir=sys.argv[3])
except BaseException as exc:
    print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(1)
"""


@pytest.mark.parametrize("victim", [1, 0])
def test_a_killed_rank_fails_the_run_naming_the_rank(program, tmp_path, victim):
    """Rank 1 killed: rank 0 ends its record as failed.  Rank 0 (the writer) killed: the
    surviving rank ends rank 0's abandoned record (`qvr.runs.end_abandoned`)."""
    prog, data = program
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node=2", str(script), str(prog), str(data),
                          str(run_dir), str(victim)], capture_output=True, text=True,
                         env=_env(),
                         timeout=240)
    assert out.returncode != 0
    run = open_run(run_dir)
    assert run.status == "failed"
    message = (run.summary or {}).get("message", "")
    if not message:  # rank 0 died: the message is the terminal event's
        from qvr.events import FitFailed
        ends = [e for e in run.events(load_draws=False) if isinstance(e, FitFailed)]
        message = ends[-1].message if ends else ""
    assert f"rank {victim} of 2 stopped" in message, (message, out.stderr[-3000:])
    assert run.meta["world_size"] == 2


@pytest.mark.parametrize("config, field, said", [
    ({"method": "nuts"}, "chain_method", "this process was started by torchrun: HMC/NUTS "
     "across 2 processes need --chain-method distributed (got vectorized)"),
    ({"method": "prior"}, "method", "this process was started by torchrun: only SVI "
     "(data-parallel) and HMC/NUTS with --chain-method distributed run across 2 "
     "processes, not prior"),
])
def test_other_methods_are_refused_under_a_launch(program, monkeypatch, config, field, said):
    """Refused before the process group is joined (the launcher's variables are enough)."""
    import qvr
    from qvr.inference import ConfigError, FitConfig, fit
    prog, data = program
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError) as err:
        fit(qvr.load(str(prog)), config=FitConfig(data=str(data), **config))
    assert err.value.errors == {field: said}


@pytest.mark.parametrize("extra, said", [
    (["--method", "nuts"], "--nproc 2: HMC/NUTS across 2 processes need --chain-method "
                           "distributed (got vectorized)"),
    (["--method", "prior"], "--nproc 2: only SVI (data-parallel) and HMC/NUTS with "
                            "--chain-method distributed run across 2 processes, not prior"),
    (["--method", "svi", "--nproc", "0"], "--nproc 0: must be at least 1"),
])
def test_nproc_refusals_come_before_any_process_or_folder(program, tmp_path, extra, said):
    from qvr.cli import main
    prog, _ = program
    argv = ["run", str(prog), "--runs-dir", str(tmp_path / "runs"), *extra]
    if "--nproc" not in extra:
        argv += ["--nproc", "2"]
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(argv) == 2
    assert f"qvr run: {said}" in err.getvalue()
    assert not (tmp_path / "runs").exists()


STOPPER = """\
import os, sys
import qvr
from qvr.inference import fit, FitConfig
rank = int(os.environ["RANK"])
seen = []
res = fit(qvr.load(sys.argv[1]),
          config=FitConfig(method="svi", steps=400, batch_size=16, seed=1, data=sys.argv[2],
                           pointwise=False, progress_interval=0.0),
          on_event=lambda e: seen.append(e),
          should_stop=lambda: rank == 1 and len(seen) > 6, run_dir=sys.argv[3])
print(f"rank {rank}: {res.status} after {len(res.losses)} steps")
"""


def test_a_stop_on_one_rank_stops_every_rank_after_the_same_step(program, tmp_path):
    """Ctrl-C (or the dashboard's cancel) reaches the ranks at different moments: the
    request travels with the gradients, so every rank stops after the same step and the
    record ends cancelled."""
    prog, data = program
    script = tmp_path / "stopper.py"
    script.write_text(STOPPER)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node=2", str(script), str(prog), str(data),
                          str(tmp_path / "run")], capture_output=True, text=True,
                         env=_env(), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    # the ranks share the launcher's stdout: one rank's line may land before the other's
    # newline, so the lines are read by pattern, not split at newlines
    said = sorted(re.findall(r"rank \d+: \w+ after \d+ steps", out.stdout))
    assert len(said) == 2, out.stdout
    steps = {line.split(" after ")[1] for line in said}
    assert len(steps) == 1 and all("cancelled" in line for line in said), said
    assert int(steps.pop().split()[0]) < 400
    assert open_run(tmp_path / "run").status == "cancelled"


def test_an_ended_record_is_never_ended_twice(tmp_path):
    from qvr.inference import FitConfig, fit
    from qvr.events import FitFailed
    from qvr.runs import end_abandoned
    from qvr.runtime import loads
    model = loads(PROGRAM).morphism
    fit(model, data=effects_data(), config=FitConfig(method="svi", steps=3, pointwise=False),
        run_dir=tmp_path / "run")
    assert not end_abandoned(tmp_path / "run", FitFailed(message="rank 0 of 2 stopped"))
    assert open_run(tmp_path / "run").status == "finished"
    # a record cut off before its terminal event (its writer gone) is ended
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    (tmp_path / "run" / "events.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert open_run(tmp_path / "run").status == "interrupted"
    assert end_abandoned(tmp_path / "run", FitFailed(message="rank 0 of 2 stopped"))
    assert open_run(tmp_path / "run").status == "failed"


def test_the_launchers_sigterm_does_not_cut_a_failing_fit_short():
    """CI once left rank 0's abandoned record `interrupted`: the surviving rank's
    collective failed, and torchrun's SIGTERM, arriving while that failure was being
    written, raised `RankLost` inside the failure path.  Once the path starts it holds
    SIGTERM off; the launch's handler (and after it the old one) comes back on exit."""
    import signal
    from qvr.inference.distributed.world import RankLost, World
    from qvr.inference.front.fitting import _hold_launcher_stop, _launcher_stop
    world = World(rank=1, size=2)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RankLost):
        with _launcher_stop(world):
            os.kill(os.getpid(), signal.SIGTERM)  # before a failure: the fit stops
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # let the handler run here
    with _launcher_stop(world):
        try:
            raise RuntimeError("a collective failed")
        except RuntimeError:
            _hold_launcher_stop(world)
            os.kill(os.getpid(), signal.SIGTERM)  # arrives during the failure path
            signal.pthread_sigmask(signal.SIG_BLOCK, [])
            ended = True
        assert ended
    assert signal.getsignal(signal.SIGTERM) is before
