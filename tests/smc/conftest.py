import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """SMC works on many tiny tensors: intra-op threads only add latency (badly so on a
    loaded 2-core machine), so these tests run torch single-threaded."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
