"""`Tail.pieces`: a record read in bounded pieces gives the same events as one read, a
line cut at a piece's end waits for the next piece, and `until` stops at the size the
caller saw (lines a live writer appends later wait for the next call)."""
from qvr.events import FitProgress, FitStarted, to_json
from qvr.runs import open_run


def write_record(path, n):
    path.mkdir()
    (path / "run.json").write_text('{"format": 1, "run_id": "r", "method": "svi"}\n')
    lines = [to_json(FitStarted("svi", n))] + [
        to_json(FitProgress("svi", "optimization", i + 1, n, metrics={"loss": float(i)}))
        for i in range(n)]
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")
    return lines


def test_pieces_give_the_events_of_one_read_and_stop_at_until(tmp_path):
    lines = write_record(tmp_path / "r", 50)
    run = open_run(tmp_path / "r")
    whole = run.events(load_draws=False)
    tail = run.tail(load_draws=False)
    pieces = list(tail.pieces(max_bytes=97))  # lines are longer: most are cut
    assert len(pieces) > 20 and [e for p in pieces for e in p] == whole
    assert len(whole) == 51
    cut = len(lines[0]) + 1 + len(lines[1]) + 1  # the first two lines' bytes
    tail = run.tail(load_draws=False)
    got = [e for p in tail.pieces(max_bytes=10, until=cut) for e in p]
    assert got == whole[:2] and tail.offset == cut
    assert [e for p in tail.pieces() for e in p] == whole[2:]  # the rest, later
