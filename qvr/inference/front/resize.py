"""The fit's program on its own data with a row or two fewer: the probes with which the
compiled NUTS transition is built once for every row count
(`qvr.inference.mcmc.transition_rows`, issue 37.3).

`resizer(program, typed, data, make)` picks the program's first size read from the data
(`object Child : FinSet N`) whose every sized value the data hold (a size that also
counts a latent, as eight schools' `J` does, changes the position's size and is not a
row count: `sized_values` lists the sampled sites too, and the data do not hold them),
and returns `resize(drop) -> (rows, model, x, observations)`: the data cut to their
first `N - drop` rows along that size's axes (and a data entry named `N` set to match),
the program re-bound to them (`bind_sizes`), and `make` building the fit's model and
split data from that, as the fit did from the whole.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch


def _first_rows(value, axis: int, n: int):
    """`value` (a tensor, an array or nested lists) cut to its first `n` entries along
    `axis` (counted from the right)."""
    if isinstance(value, torch.Tensor):
        return value.narrow(value.dim() + axis, 0, n)
    a = np.asarray(value)
    return np.take(a, np.arange(n), axis=a.ndim + axis)


def resizer(program, typed, data: Optional[dict], make: Callable) -> Optional[Callable]:
    """`resize(drop)` for `program` (bound, with its checked module `typed`) fitted to
    `data`, or None when it reads no row count from the data (see the module)."""
    from qvr.runtime.load import bind_sizes
    from qvr.runtime.sizes import bound_sizes, sized_values
    if typed is None or not data:
        return None
    sizes = bound_sizes(program)
    where = sized_values(typed)
    name = next((n for n, places in where.items() if n in sizes and places
                 and all(key in data for key, _, _ in places)), None)
    if name is None:
        return None
    places = where[name]

    def resize(drop: int):
        n = sizes[name] - int(drop)
        if n < 2:
            return None
        cut = dict(data)
        for key, axis, _ in places:
            cut[key] = _first_rows(cut[key], axis, n)
        if name in cut:
            cut[name] = n
        bound = bind_sizes(program, cut, {**sizes, name: n})
        return (n, *make(bound, cut))

    return resize
