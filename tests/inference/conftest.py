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
