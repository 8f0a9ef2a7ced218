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
