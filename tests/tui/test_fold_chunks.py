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


ALL_RECORDED = sorted(p.name for p in RECORDED.iterdir() if (p / "run.json").is_file())


def same(a, b, where="results") -> list:
    """Where `a` and `b` differ (dataclasses field by field, arrays by value, NaN equal
    to NaN); [] when they are the same."""
    import dataclasses
    import math
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return [f"{where}: {type(a).__name__} != {type(b).__name__}"]
        return [d for f in dataclasses.fields(a)
                for d in same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        ok = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and \
            a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        return [] if ok else [f"{where}: arrays differ"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in same(a[k], b[k], f"{where}[{k!r}]")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return [f"{where}: {a!r} != {b!r}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def cut_short(src: Path, dst: Path) -> Path:
    """A copy of record `src` as a killed worker leaves it: no summary, no samples, no
    terminal event (its results are then rebuilt from the draws chunks and the last
    progress event of each chain: the events `_events_kept` must keep)."""
    import shutil
    shutil.copytree(src, dst)
    for name in ("summary.json", "samples.npz"):
        (dst / name).unlink(missing_ok=True)
    lines = (dst / "events.jsonl").read_text().splitlines(keepends=True)
    (dst / "events.jsonl").write_text("".join(lines[:-1]))
    return dst


@pytest.mark.parametrize("name", ALL_RECORDED + ["nuts_regression cut short"])
def test_results_read_in_pieces(name, monkeypatch, tmp_path):
    """`load_results` gives the same `Results`, field by field, whether the record's
    events are read in 97-byte pieces keeping only what the loaders use
    (`_events_kept`) or all at once (`Run.events`): the rule of what is kept is judged
    by what it gives, not re-implemented here (a wrong key would pass both).  The NUTS
    record cut short is read from its progress events (per-chain divergences and tree
    depth hits): keeping the last progress event per phase only, not per chain, fails."""
    import functools
    from qvr_tui import results_model as rm
    assert len(ALL_RECORDED) >= 8
    if name.endswith(" cut short"):
        run = open_run(cut_short(RECORDED / name.split()[0], tmp_path / "cut"))
        assert run.summary is None and run.status == "interrupted"
    else:
        run = open_run(RECORDED / name)
    monkeypatch.setattr(rm, "_events_kept", functools.partial(_events_kept, chunk_bytes=97))
    pieces = load_results(run)
    monkeypatch.setattr(rm, "_events_kept",
                        lambda run, *a, **k: run.events(load_draws=False))
    whole = load_results(run)
    assert same(pieces, whole) == []
    assert pieces.status == run.status


def test_same_tells_results_apart():
    """The comparison above can fail: one float, one array value, one guide site."""
    from qvr_tui.results_data import GuideSite, Results
    a = Results(path=RECORDED, method="svi", status="finished", final_loss=1.0,
                losses=np.array([2.0, 1.0]),
                guide=(GuideSite("w", np.zeros(3), np.ones(3), (3,)),))
    assert same(a, a) == []
    import dataclasses
    assert same(a, dataclasses.replace(a, final_loss=1.5)) == ["results.final_loss: 1.0 != 1.5"]
    assert same(a, dataclasses.replace(a, losses=np.array([2.0, 0.5]))) == \
        ["results.losses: arrays differ"]
    other = (GuideSite("w", np.zeros(3), np.full(3, 2.0), (3,)),)
    assert same(a, dataclasses.replace(a, guide=other)) == ["results.guide[0].scale: arrays differ"]


def test_an_svi_record_is_asked_for_its_losses_once():
    """`load_results` read ``losses.npy`` twice for an SVI record (to decide which
    progress events to keep, then for the curve)."""
    for name in ("svi_regression", "interrupted_svi"):
        run = open_run(RECORDED / name)
        calls = []
        read = run.losses
        run.losses = lambda: calls.append(1) or read()
        res = load_results(run)
        assert len(calls) == 1, name
        assert res.losses is not None and len(res.losses) >= 1
