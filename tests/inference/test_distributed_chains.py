"""`chain_method="distributed"`: chain groups on the ranks of a torch.distributed launch.

Two launches of 2 CPU ranks (``python -m torch.distributed.run --standalone
--nproc-per-node 2``) run a script through `qvr.inference.fit` on a conjugate normal
model: the first checks the posterior, the run record, the live events of rank 1's chains
and that every rank holds the whole run; the second repeats the first fit's seed (the
same draws), makes rank 1 raise (rank 0 names it), runs fewer chains than ranks, stops a
run from rank 0, and makes rank 1 vanish (rank 0 raises `RankLost` naming it).  A world of
one runs in-process.
"""
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import NORMAL_NORMAL, check_moments, normal_normal_case
from qvr.inference.criticism.diagnostics import split_rhat_basic

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="gloo over torchrun on POSIX")

SCRIPT = textwrap.dedent('''
    import os, pickle, sys, time
    import numpy as np
    import torch
    import qvr
    from qvr.inference import fit
    from qvr.inference.config import FitConfig
    from qvr.events import DrawsChunk, FitProgress

    rank = int(os.environ["RANK"])
    out_dir, mode = sys.argv[1], sys.argv[2]
    PROGRAM = {program!r}
    y = 1.0 + 1.5 * torch.randn(20, generator=torch.Generator().manual_seed(0)) + 0.7
    out = {{}}

    def config(**kw):
        kw = {{"num_chains": 4, "num_warmup": 60, "num_samples": 150, "seed": 11,
              "pointwise": False, **kw}}  # the record without its pointwise terms: faster
        return FitConfig(method="nuts", chain_method="distributed", **kw)

    started = os.path.join(out_dir, "rank1-sampling")  # rank 1's first event came

    def run(name, cfg, run_dir=None, stop_at_chain=None):
        events = []
        def on_event(e):
            events.append((time.monotonic(), e))
            if rank == 1 and name == "main" and not os.path.exists(started):
                open(started, "w").close()
        def should_stop():  # once a draws chunk of `stop_at_chain` came
            return stop_at_chain is not None and any(
                isinstance(e, DrawsChunk) and e.chain == stop_at_chain for _, e in events)
        try:
            res = fit(qvr.loads(PROGRAM).morphism, {{"y": y.numpy()}}, cfg,
                      on_event=on_event, should_stop=should_stop,
                      run_dir=run_dir)  # fit writes it on rank 0 alone
        except BaseException as exc:
            out[name] = {{"error": type(exc).__name__, "message": str(exc)}}
            return
        m = res.mcmc
        out[name] = {{
            "mu": m.samples["mu"].numpy(), "r_hat": m.r_hat["mu"].numpy(),
            "step_sizes": m.step_sizes.numpy(), "cancelled": m.cancelled,
            "progress": [(t, e.chain, e.phase, e.step) for t, e in events
                         if isinstance(e, FitProgress)],
            "draws": [(e.chain, e.start, len(e.draws["mu"])) for _, e in events
                      if isinstance(e, DrawsChunk)]}}

    if mode == "main":
        if rank == 0:
            # rank 0's chains start once rank 1's chains have sent an event (a file rank
            # 1 writes; at most 120 s): whichever rank the launch started first, rank 0
            # then still runs while rank 1's events come, so the check of live delivery
            # below does not depend on the machine's load
            from qvr.inference.mcmc.nuts import NUTSKernel
            sample = NUTSKernel.sample
            def after_rank_1(self, state, target):
                give_up = time.monotonic() + 120
                while not os.path.exists(started) and time.monotonic() < give_up:
                    time.sleep(0.01)
                return sample(self, state, target)
            NUTSKernel.sample = after_rank_1
        run("main", config(), run_dir=os.path.join(out_dir, "record"))
    else:
        run("again", config())
        from qvr.inference.mcmc.nuts import NUTSKernel
        sample = NUTSKernel.sample
        calls = [0]
        def boom(self, state, target):
            calls[0] += 1
            if calls[0] > 10:
                raise ValueError("exploded on purpose")
            return sample(self, state, target)
        if rank == 1:
            NUTSKernel.sample = boom
        run("raises", config(num_warmup=20, num_samples=2000))
        NUTSKernel.sample = sample
        run("fewer", config(num_chains=1))
        run("cancelled", config(num_warmup=20, num_samples=100000), stop_at_chain=3)
        calls[0] = 0
        def vanish(self, state, target):
            calls[0] += 1
            if calls[0] > 10:  # exit 0: the launcher keeps rank 0 going
                with open(os.path.join(out_dir, "out1.pkl"), "wb") as fh:
                    pickle.dump(out, fh)
                os._exit(0)
            return sample(self, state, target)
        if rank == 1:
            NUTSKernel.sample = vanish
        run("vanishes", config(num_warmup=20, num_samples=20000))
    with open(os.path.join(out_dir, f"out{{rank}}.pkl"), "wb") as fh:
        pickle.dump(out, fh)
''')


def _launch(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / "fit_ranks.py"
    script.write_text(SCRIPT.format(program=NORMAL_NORMAL))
    env = {**os.environ, "QVR_MCMC_COMPILER": "torchscript", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(script), str(tmp_path), mode],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = {}
    for rank in (0, 1):
        with open(tmp_path / f"out{rank}.pkl", "rb") as fh:
            out[rank] = pickle.load(fh)
    return out


@pytest.fixture(scope="module")
def main_launch(tmp_path_factory):
    path = tmp_path_factory.mktemp("distributed_main")
    return path, _launch(path, "main")


@pytest.fixture(scope="module")
def second_launch(tmp_path_factory):
    path = tmp_path_factory.mktemp("distributed_second")
    return _launch(path, "second")


def test_the_chains_of_both_ranks_target_the_posterior(main_launch):
    _, out = main_launch
    r0, r1 = out[0]["main"], out[1]["main"]
    assert r0["mu"].shape == (4, 150, 1) and r0["step_sizes"].shape == (4,)
    *_, exact = normal_normal_case()
    check_moments({"mu": r0["mu"]}, exact)
    # R-hat over the four chains (not over a rank's two)
    np.testing.assert_allclose(r0["r_hat"],
                               np.asarray(split_rhat_basic(r0["mu"].astype(float))).reshape(1),
                               rtol=1e-5)
    # every rank ends with the whole run
    np.testing.assert_array_equal(r0["mu"], r1["mu"])
    np.testing.assert_array_equal(r0["r_hat"], r1["r_hat"])
    # the ranks' chains differ (each group has its own seed)
    assert not np.array_equal(r0["mu"][0], r0["mu"][2])


def test_rank_1s_chains_reach_rank_0s_callback_live(main_launch):
    _, out = main_launch
    r0 = out[0]["main"]
    chains = {c for _, c, _, _ in r0["progress"]}
    assert chains == {0, 1, 2, 3}
    drawn = {c: 0 for c in range(4)}
    for c, _, n in r0["draws"]:
        drawn[c] += n
    assert drawn == {c: 150 for c in range(4)}
    # rank 1's progress came while rank 0's own chains ran, not in one batch at the end:
    # told by the order of the events, not by their spacing in time (on a busy machine a
    # live delivery can come in a burst shorter than any fixed interval); rank 0's chains
    # wait for rank 1's first event (the script), so which rank starts first does not
    # decide it
    own = [t for t, c, _, _ in r0["progress"] if c in (0, 1)]
    theirs = [t for t, c, _, _ in r0["progress"] if c in (2, 3)]
    assert min(theirs) < max(own)
    phases = {(c, p) for _, c, p, _ in r0["progress"]}
    assert {(2, "warmup"), (2, "sampling"), (3, "warmup"), (3, "sampling")} <= phases
    # rank 1's own callback is not given its chains' events (rank 0 reports them)
    assert out[1]["main"]["progress"] == [] and out[1]["main"]["draws"] == []


def test_rank_0_records_every_chain(main_launch):
    from qvr.runs import open_run
    path, out = main_launch
    run = open_run(path / "record")
    draws = run.draws()
    assert draws["mu"].shape == (4, 150, 1)
    np.testing.assert_array_equal(draws["mu"], out[0]["main"]["mu"])
    assert run.draws_per_chain() == {c: 150 for c in range(4)}
    assert run.meta["world_size"] == 2 and run.meta["config"]["chain_method"] == "distributed"
    np.testing.assert_array_equal(run.samples()["mu"], out[0]["main"]["mu"])


def test_the_same_seed_gives_the_same_draws_in_another_launch(main_launch, second_launch):
    _, first = main_launch
    np.testing.assert_array_equal(first[0]["main"]["mu"], second_launch[0]["again"]["mu"])
    np.testing.assert_array_equal(first[0]["main"]["mu"], second_launch[1]["again"]["mu"])


def test_a_rank_that_raises_is_named_on_rank_0(second_launch):
    r0, r1 = second_launch[0]["raises"], second_launch[1]["raises"]
    assert r0["error"] == "RuntimeError", r0
    assert "rank 1 of 2" in r0["message"] and "[2, 3]" in r0["message"]
    assert "ValueError: exploded on purpose" in r0["message"]
    assert r1 == {"error": "ValueError", "message": "exploded on purpose"}


def test_fewer_chains_than_ranks_leave_a_rank_idle(second_launch):
    for rank in (0, 1):
        r = second_launch[rank]["fewer"]
        assert r["mu"].shape == (1, 150, 1), r
    assert {c for _, c, _, _ in second_launch[0]["fewer"]["progress"]} == {0}


def test_rank_0s_should_stop_stops_every_rank(second_launch):
    r0, r1 = second_launch[0]["cancelled"], second_launch[1]["cancelled"]
    assert r0["cancelled"] and r1["cancelled"], (r0, r1)
    assert 1 <= r0["mu"].shape[1] < 100000
    np.testing.assert_array_equal(r0["mu"], r1["mu"])


def test_a_rank_that_vanishes_is_named_on_rank_0(second_launch):
    r0 = second_launch[0]["vanishes"]
    assert r0["error"] == "RankLost", r0
    assert r0["message"].startswith("rank 1 of 2 stopped"), r0


def test_a_world_of_one_runs_as_vectorized():
    from qvr.inference import MCMC, NUTSKernel
    model, x, obs, _ = normal_normal_case()
    runs = []
    for method in ("distributed", "vectorized"):
        torch.manual_seed(3)
        runs.append(MCMC(NUTSKernel(), num_warmup=30, num_samples=40, num_chains=3,
                         chain_method=method).run(model, x, obs))
    assert torch.equal(runs[0].samples["mu"], runs[1].samples["mu"])
