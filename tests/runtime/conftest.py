"""Runtime tests: every test starts from seed 0 with the default dtype restored after it."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _seed_and_dtype():
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)


@pytest.fixture
def f64():
    """float64 as the default dtype (restored by `_seed_and_dtype`)."""
    torch.set_default_dtype(torch.float64)
