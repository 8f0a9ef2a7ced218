import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same global seed (one torch thread: tests/conftest.py)."""
    torch.manual_seed(0)
