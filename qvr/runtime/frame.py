"""Execution state of a program run: the frame, the per-step records and row attribution.

`Frame` holds one run's input, environment, supplied values (sites and host data) and the
running `(B,)` log joint; `attribute` implements the row-attribution rule of runtime spec
5.5; `SiteInfo`, `SiteRecord` and `Execution` are the records `MonadicProgram.execute`
returns (the basis of `qvr.inference.trace`).  Nothing here runs steps.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from qvr.runtime.errors import MissingValueError
from qvr.runtime.morphisms.base import Morphism


@dataclass
class SiteInfo:
    """Static facts of a `sample`/`observe` site."""

    name: str
    step: str  # sample | observe
    site_kind: str  # global | plate | local
    family: Optional[str]
    morphism: Optional[Morphism]
    plate: Optional[int] = None
    in_marginalize: bool = False


@dataclass
class SiteRecord:
    """One executed step: its value and its contribution to the log joint."""

    name: str
    step: str  # sample | observe | let | score | marginalize | alias
    value: Any
    log_prob: Optional[torch.Tensor] = None  # (B,) row-attributed contribution
    contribution: Optional[torch.Tensor] = None  # as computed (scalar or batch-shaped)
    site_kind: Optional[str] = None
    morphism: Optional[Morphism] = None
    distribution: Any = None
    support: Any = None
    is_observed: bool = False
    is_deterministic: bool = False


@dataclass
class Execution:
    output: Any
    log_joint: Optional[torch.Tensor]
    sites: dict = field(default_factory=dict)
    batch_size: int = 0


class _Deductions(dict):
    """Deductions a program's let-expressions use; a plain dict so that their parameters
    are not the program's (runtime spec 2.2)."""


class Frame:
    """The state of one execution: input, environment, supplied values and the log joint."""

    def __init__(self, program: "MonadicProgram", x, values, *, score: bool,
                 require_all: bool, record: bool, reduce: bool = False):
        self.program = program
        self.x = x
        self.B = int(x.shape[0])
        self.device = x.device
        self.dtype = program.float_dtype()
        self.env: dict = {}
        self.values = values
        self.score = score
        self.require_all = require_all
        self.record = record
        self.records: dict = {}
        # reduce: keep only the scalar sum of the log joint (no row attribution); shares
        # returned by `add` are then None
        self.reduce = reduce
        self._total = None  # the running sum, None until the first contribution
        self.row_scale = _ROW_SCALE.get()  # minibatches: rows stand for N / B rows each
        self._host = {k: v for k, v in values.items() if k not in program.bound_names}

    def literal(self, v):
        return torch.tensor(v, dtype=self.dtype, device=self.device)

    def host(self, name):
        try:
            v = self._host[name]
        except KeyError:
            from qvr.runtime.synth_host import active
            synth = active()
            if synth is not None:  # drawing synthetic data: its use decides the value
                return synth.request(name, self.B)
            raise MissingValueError(
                f"host data `{name}` was not supplied", expected=f"a value for `{name}` in "
                "the observations dict", actual="no such key", name=name,
                host_names=sorted(self.program.host_names)) from None
        return _host_value(v, self.device)

    def deduction(self, name):
        return self.program._deductions[name]

    @property
    def total(self):
        """The log joint so far: `(B,)` (a 0-d scalar in reduce mode); zeros before any
        contribution, None when the frame does not score."""
        if not self.score:
            return None
        if self._total is None:
            return torch.zeros(() if self.reduce else self.B, dtype=self.dtype,
                               device=self.device)
        return self._total

    def _accumulate(self, t: torch.Tensor) -> None:
        # the first contribution is the total itself (`0 + t == t`): one addition fewer
        # (an evenly spread share, an expanded view, is made a tensor of its own)
        if self._total is None:
            self._total = t.contiguous() if t.dim() and t.stride(0) == 0 else t
        else:
            self._total = self._total + t

    def add(self, c: torch.Tensor) -> torch.Tensor:
        """Row attribution of a contribution (spec 5.5); returns the `(B,)` share (None in
        reduce mode, where only the scalar total is kept).  Under `rows_scaled(s)` a
        contribution attributed row by row (leading size B) is multiplied by `s`; one
        spread evenly (global and plate sites) is not."""
        if self.row_scale != 1.0:
            c = torch.as_tensor(c, device=self.device)
            if c.dim() >= 1 and c.shape[0] == self.B:
                c = c * self.row_scale
        if self.reduce:
            self._accumulate(torch.as_tensor(c, device=self.device).sum().to(self.dtype))
            return None
        share = attribute(c, self.B, self.dtype, self.device)
        self._accumulate(share)
        return share


_ROW_SCALE: contextvars.ContextVar = contextvars.ContextVar("qvr_row_scale", default=1.0)


@contextlib.contextmanager
def rows_scaled(scale: float):
    """Run the block with every row-attributed contribution of a program run multiplied by
    `scale` (`Frame.add`): a minibatch of B of N rows stands for the whole data when
    `scale = N / B`, the rule of subsampled plates (Pyro's `plate(subsample_size=...)`),
    which keeps the ELBO and its gradient unbiased.  Global and plate terms, spread evenly
    over the rows by the attribution rule, are not scaled.  `current_row_scale()` reads it
    (the guide scales its local sites' densities likewise)."""
    token = _ROW_SCALE.set(float(scale))
    try:
        yield
    finally:
        _ROW_SCALE.reset(token)


def current_row_scale() -> float:
    return _ROW_SCALE.get()


def _host_value(v, device):
    if isinstance(v, torch.Tensor):
        return v if v.device == device else v.to(device)
    try:
        import numpy as np
        if isinstance(v, np.ndarray):
            return torch.as_tensor(v, device=device)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, (int, float)):
        return torch.tensor(v, device=device)
    if isinstance(v, (list, tuple)) and v and all(isinstance(i, (int, float)) for i in v):
        return torch.tensor(v, device=device)
    return v


def attribute(c, B: int, dtype, device) -> torch.Tensor:
    """`c` summed row by row when its leading size is B, else spread evenly (spec 5.5)."""
    c = torch.as_tensor(c, device=device)
    if c.dim() >= 1 and c.shape[0] == B:
        return c.reshape(B, -1).sum(-1).to(dtype)
    return (c.sum() / B).to(dtype).expand(B)


