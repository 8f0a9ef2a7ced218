"""Helpers shared by the runtime tests (a uniquely named module: test directories share
`sys.path`, so `conftest` cannot be imported by name)."""
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLES = ROOT / "examples"

_CACHE = {}


def load_example(stem: str):
    """The compiled example module `stem` (loaded once per test session, seed 0)."""
    from runtime_cases import DATA
    if stem not in _CACHE:
        import qvr
        state = torch.random.get_rng_state()
        torch.manual_seed(0)
        _CACHE[stem] = qvr.load(EXAMPLES / f"{stem}.qvr",
                                data=DATA[stem]() if stem in DATA else None)
        from qvr.runtime.sizes import needs_sizes
        if needs_sizes(_CACHE[stem]):  # `FinSet N`: the sizes of the shipped data
            from qvr.datafiles import find_data, load_data
            from qvr.runtime import bind_sizes
            _CACHE[stem] = bind_sizes(_CACHE[stem],
                                      load_data(find_data(EXAMPLES / f"{stem}.qvr")))
        torch.random.set_rng_state(state)
    return _CACHE[stem]
