from typing import NamedTuple

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same global seed (one torch thread: tests/conftest.py)."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _compile_whatever_the_machine_speed(monkeypatch):
    """`ProgramTarget` leaves a density eager when one evaluation costs more than 50 ms of
    CPU time, or when a short run's evaluations cost less than tracing; on a busy (or a
    fast) machine a small test model can cross either line.  Tests assert how steps ran,
    so they compile regardless: no test depends on machine speed."""
    from qvr.inference.mcmc.potential import ProgramTarget
    monkeypatch.setattr(ProgramTarget, "compile_below_s", float("inf"))
    monkeypatch.setattr(ProgramTarget, "compile_enumerated_below_s", float("inf"))
    # nor whether a short run's eager evaluations cost less than tracing (a measured
    # evaluation against a per-operation cost): a test that does not care opts back in
    monkeypatch.setattr(ProgramTarget, "trace_s_per_op", 0.0)


class RunOutput(NamedTuple):
    """What `qvr run` returned and printed (unpacks as ``rc, out, err``)."""
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def qvr_run(capsys, tmp_path):
    """`qvr run ARGS... --runs-dir TMP/runs` in this process: its `RunOutput`."""
    from qvr.cli import main

    def call(*args):
        try:
            rc = main(["run", *map(str, args), "--runs-dir", str(tmp_path / "runs")])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return RunOutput(rc, out, err)
    return call
