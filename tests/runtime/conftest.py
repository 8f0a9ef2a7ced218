"""Shared fixtures of the runtime tests: loaded example modules (cached per session)."""
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(HERE))

from example_cases import DATA  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_and_dtype():
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)


_CACHE = {}


def load_example(stem: str):
    """The compiled example module `stem` (loaded once per test session, seed 0)."""
    if stem not in _CACHE:
        import qvr
        state = torch.random.get_rng_state()
        torch.manual_seed(0)
        _CACHE[stem] = qvr.load(EXAMPLES / f"{stem}.qvr",
                                data=DATA[stem]() if stem in DATA else None)
        torch.random.set_rng_state(state)
    return _CACHE[stem]
