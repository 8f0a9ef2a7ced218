"""A record is folded a piece at a time (the UI's memory stays flat however long the
record): the pieces give exactly what one read gives, even when a piece ends inside a
line (`Tail.poll(max_bytes=...)` keeps the cut line for the next piece)."""
from pathlib import Path

import numpy as np
import pytest

from qvr.runs import open_run
from qvr_tui.results_model import _events_kept, load_results
from qvr_tui.state import RunState, fold_record

RECORDED = Path(__file__).parent / "recorded"
RUNS = ("svi_attention", "nuts_regression", "smc_recurrent", "interrupted_svi", "failed_svi")


def snapshot(st: RunState) -> dict:
    return {"status": st.status, "step": st.step, "events": st.events_seen,
            "loss": (list(st.loss.x), list(st.loss.y)),
            "smooth": list(st.smooth.y), "ess": list(st.ess.y),
            "chains": {c: (r.phase, r.step, r.divergences) for c, r in st.chains.items()},
            "accept": {c: list(s.y) for c, s in st.accept.items()}}


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("chunk", [97, 4096])  # 97 bytes: nearly every piece cuts a line
def test_fold_in_pieces_equals_one_read(name, chunk):
    run = open_run(RECORDED / name)
    whole = RunState()
    whole.apply(run.tail().poll())
    pieces = RunState()
    n = fold_record(pieces, run.tail(), chunk_bytes=chunk)
    assert n == whole.events_seen > 0
    assert snapshot(pieces) == snapshot(whole)


@pytest.mark.parametrize("name", RUNS)
def test_results_read_in_pieces(name):
    run = open_run(RECORDED / name)
    every = run.events(load_draws=False)
    kept = _events_kept(run, chunk_bytes=97)
    progress = [e for e in every if type(e).__name__ == "FitProgress"]
    others = [e for e in every if type(e).__name__ != "FitProgress"]
    assert [type(e) for e in kept if type(e).__name__ != "FitProgress"] == \
        [type(e) for e in others]
    # the last progress of each (phase, chain) is kept (all of them for an SVI record
    # without losses.npy: its loss curve)
    last = {}
    for e in progress:
        last[(e.phase, e.chain, tuple(sorted(e.metrics)))] = e
    kept_progress = [e for e in kept if type(e).__name__ == "FitProgress"]
    if run.method == "svi" and run.losses() is None:
        assert kept_progress == progress
    else:
        assert kept_progress == [e for e in progress if e in last.values()]
    res = load_results(run)
    assert res.status == run.status
    if res.losses is not None:
        assert len(res.losses) >= 1 and np.isfinite(res.losses).all()
