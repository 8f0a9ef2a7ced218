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
    CPU time; on a busy machine a small test model can cross it.  Tests assert how steps
    ran, so they compile regardless: no test depends on machine speed."""
    from qvr.inference.mcmc.potential import ProgramTarget
    monkeypatch.setattr(ProgramTarget, "compile_below_s", float("inf"))
    monkeypatch.setattr(ProgramTarget, "compile_enumerated_below_s", float("inf"))


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
