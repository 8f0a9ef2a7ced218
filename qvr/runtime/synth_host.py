"""Host data drawn from how a program uses it, for synthetic data (`qvr run --synthetic N`).

Host data (a name a program reads but does not bind) has no declared type; its use gives
one: a name used as an index of an axis of size `n` is an index array, drawn uniformly
from `0..n-1`; a name used as a number is a covariate, drawn from a standard normal.
One value per row of the batch; a name declared by a `data NAME : T` step
(E9.1) is drawn with T's shape (`shaped`).  Inside ``with synthesizing_host(generator) as synth:``
every frame of a program run asks `synth` for host data that was not supplied (instead of
raising `MissingValueError`); afterwards `synth.values` holds what was drawn, to be kept
with the synthetic data (and in the run record as ground truth).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Optional

import torch

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("qvr_synth_host", default=None)


class HostRequest:
    """Host data `name` that was not supplied, handed out while synthesizing; its use
    (`HostSynthesizer.index` or `.real`) decides what is drawn."""

    __slots__ = ("name", "rows", "synth")

    def __init__(self, name: str, rows: int, synth: "HostSynthesizer"):
        self.name, self.rows, self.synth = name, rows, synth


class HostSynthesizer:
    def __init__(self, generator: Optional[torch.Generator] = None):
        self.generator = generator
        self.values: dict[str, torch.Tensor] = {}
        self.requested: list[str] = []  # in order of first request

    def request(self, name: str, rows: int):
        if name not in self.requested:
            self.requested.append(name)
        return self.values.get(name) if name in self.values else HostRequest(name, rows, self)

    def index(self, req: HostRequest, size: int, device=None) -> torch.Tensor:
        if req.name not in self.values:
            self.values[req.name] = torch.randint(0, max(int(size), 1), (req.rows,),
                                                  generator=self.generator)
        return self.values[req.name].to(device) if device is not None else \
            self.values[req.name]

    def real(self, req: HostRequest, device=None) -> torch.Tensor:
        if req.name not in self.values:
            self.values[req.name] = torch.randn(req.rows, generator=self.generator,
                                                dtype=torch.get_default_dtype())
        return self.values[req.name].to(device) if device is not None else \
            self.values[req.name]


    def shaped(self, req: HostRequest, shape: tuple, device=None) -> torch.Tensor:
        """Host data of a declared shape (a `data NAME : T` step, E9.1): standard normal
        entries of `shape`."""
        if req.name not in self.values:
            self.values[req.name] = torch.randn(tuple(shape), generator=self.generator,
                                                dtype=torch.get_default_dtype())
        return self.values[req.name].to(device) if device is not None else \
            self.values[req.name]


def active() -> Optional[HostSynthesizer]:
    return _ACTIVE.get()


@contextlib.contextmanager
def synthesizing_host(generator: Optional[torch.Generator] = None):
    synth = HostSynthesizer(generator)
    token = _ACTIVE.set(synth)
    try:
        yield synth
    finally:
        _ACTIVE.reset(token)
