import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_and_seed():
    """Inference tests are small: one intra-op thread avoids oversubscription under
    pytest-xdist; every test starts from the same global seed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _compile_whatever_the_machine_speed(monkeypatch):
    """`ProgramTarget` leaves a density eager when one evaluation costs more than 50 ms of
    CPU time; on a busy machine a small test model can cross it.  Tests assert how steps
    ran, so they compile regardless: no test depends on machine speed."""
    from qvr.inference.potential import ProgramTarget
    monkeypatch.setattr(ProgramTarget, "compile_below_s", float("inf"))
