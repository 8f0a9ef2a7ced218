"""Minibatches of the data rows for SVI (`FitConfig.batch_size`, ``--batch-size B``).

The rows of a fit are the leading axis of the program input `x` (runtime spec 5.2: its
batch size ``N``).  Every value of the data whose leading size is ``N`` — the input,
observed values, host covariates and row-wise index arrays — is row data and is cut with
the rows; any other value (a group-level covariate of ``J`` groups, a scalar, words) is
kept whole in every batch.  (A value whose leading size happens to equal ``N`` without
being per row would be cut too: give such a table another shape.)

Each epoch is a fresh permutation of the ``N`` rows (seeded: `Batches`), cut into
``N // B`` batches of ``B`` rows, so a row is drawn at most once per epoch (the last
``N mod B`` rows of a permutation wait for a later epoch; every batch is a uniform
sample of ``B`` rows without replacement).  A step scores its batch under
`qvr.runtime.frame.rows_scaled(N / B)`: every row-attributed term — observed sites and
local latents, in the model and in the guide — counts ``N / B`` times, global and plate
terms once.  Its expectation over batches is the full-data ELBO, and so is its gradient's
(the test `tests/inference/test_minibatch.py` checks it within Monte Carlo error).
Global latents are shared by all batches; local (per-row) latents are drawn for the
batch's rows only (the guide's local sites share their parameters across rows, runtime
spec 6.3, so no per-row parameter goes untouched).

Data parallel (`qvr.inference.distributed.world`): with ``W`` ranks every rank draws the same
global batch and scores the contiguous ``1/W`` share of it that is its own, with row
scale ``N W / B`` and the whole loss divided by ``W``; the sum over ranks is the
one-process loss (row terms ``N / B`` each, global terms once), and so is the summed
gradient.

Memory-mapped data (`qvr.mapped_arrays.MappedArray`, a folder of ``.npy`` or a stored
``.npz`` opened with ``mapped=True``) is never read whole here: a batch copies its rows
and lets the pages go.

Not supported with minibatches (a clear `DataError` says so): finite latents summed out
by enumeration (their exact marginal couples rows through global finite sites), and
data without rows (no value has the input's leading size).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from qvr.inference.data.fit_data import DataError


def _lead(v) -> Optional[int]:
    shape = getattr(v, "shape", None)
    if shape is None or len(shape) == 0:
        return None
    return int(shape[0])


def is_mapped(v) -> bool:
    return hasattr(v, "rows") and hasattr(v, "chunks") and not isinstance(v, torch.Tensor)


class RowData:
    """The data of a fit seen as rows: `take(rows)` gives the input and observations of
    those rows (tensors on `device`, floats in torch's default dtype)."""

    def __init__(self, x, observations: dict, device="cpu"):
        self.n = int(x.shape[0])
        self.x = x
        self.values = dict(observations)
        self.device = torch.device(device)
        self.row_keys = [k for k, v in self.values.items() if _lead(v) == self.n]

    @property
    def mapped(self) -> bool:
        return is_mapped(self.x) or any(is_mapped(v) for v in self.values.values())

    def _cut(self, v, rows: np.ndarray):
        if isinstance(v, torch.Tensor):
            return v[torch.as_tensor(rows, device=v.device)].to(self.device)
        a = v.rows(rows) if is_mapped(v) else np.asarray(v)[rows]
        return _tensor(a, self.device)

    def take(self, rows: np.ndarray) -> tuple:
        rows = np.asarray(rows, dtype=np.int64)
        x = self._cut(self.x, rows)
        obs = {}
        for k, v in self.values.items():
            if k in self.row_keys:
                obs[k] = self._cut(v, rows)
            elif is_mapped(v):  # a table without rows: read whole once
                obs[k] = self.values[k] = _tensor(np.asarray(v), self.device)
            else:
                obs[k] = v
        return x, obs


def _tensor(a: np.ndarray, device) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a))
    if t.is_floating_point() and t.dtype != torch.get_default_dtype():
        t = t.to(torch.get_default_dtype())
    elif not t.is_floating_point() and t.dtype not in (torch.bool, torch.int64):
        t = t.to(torch.int64)  # indices: torch indexes with int64
    return t.to(device)


class Batches:
    """Seeded epochs of ``N`` rows in batches of ``B`` (see the module docstring); rank
    `rank` of `world` takes its contiguous share of each global batch."""

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        if n < 1:
            raise DataError("minibatches need data with rows: the data has none")
        self.n = int(n)
        self.batch_size = min(int(batch_size), self.n)
        self.steps_per_epoch = self.n // self.batch_size
        self.rank, self.world = int(rank), int(world)
        if self.batch_size < self.world:
            raise DataError(f"--batch-size {self.batch_size} is smaller than the number of "
                            f"processes ({self.world}): every process needs rows")
        self._rng = np.random.Generator(np.random.PCG64(int(seed) % 2 ** 63))
        self.epoch, self.step, self._perm = 0, self.steps_per_epoch, None

    @property
    def full(self) -> bool:
        """Whether every batch is all the rows (B >= N)."""
        return self.batch_size >= self.n

    def next(self) -> tuple:
        """``(epoch, step_in_epoch, rows of this rank, row_scale)`` of the next step."""
        if self.step >= self.steps_per_epoch:
            self.epoch += 1
            self.step = 0
            self._perm = None if self.full else self._rng.permutation(self.n)
        self.step += 1
        B = self.batch_size
        if self._perm is None:
            rows = np.arange(self.n)
        else:
            rows = np.sort(self._perm[(self.step - 1) * B:self.step * B])
        share = np.array_split(rows, self.world)[self.rank] if self.world > 1 else rows
        return self.epoch, self.step, share, self.n * self.world / B


def check_supported(model, observations: dict) -> None:
    """A `DataError` for programs minibatches cannot serve (module docstring)."""
    from qvr.inference.enumeration.enumerate import enumerated_names
    finite = enumerated_names(getattr(model, "morphism", model), observations)
    if finite:
        names = ", ".join(f"`{n}`" for n in finite)
        raise DataError(f"--batch-size: the finite latent {names} "
                        f"{'is' if len(finite) == 1 else 'are'} summed out exactly "
                        f"(enumeration), which minibatches do not support yet; fit all "
                        f"rows (no --batch-size)")


def describe(batches: Batches) -> dict:
    """The record's ``batch`` entry (``run.json``)."""
    return {"rows": batches.n, "batch_size": batches.batch_size,
            "steps_per_epoch": batches.steps_per_epoch, "world_size": batches.world}


class _Zeros:
    """The input of a program that reads none (`zeros(N, 1)`, spec 5.2), made per batch."""

    def __init__(self, n: int):
        self.shape = (int(n), 1)

    def rows(self, idx) -> np.ndarray:
        return np.zeros((len(idx), 1), dtype=np.float32)

    def chunks(self, rows: int = 1 << 20):
        for start in range(0, self.shape[0], rows):
            yield np.zeros((min(rows, self.shape[0] - start), 1), dtype=np.float32)


def split_rows(model, values: dict, device="cpu") -> tuple:
    """`qvr.inference.data.fit_data.split_data` for data that may hold memory-mapped arrays: those
    stay mapped (read a batch at a time by `RowData.take`); the rest is split as always."""
    from qvr.inference.data.fit_data import input_key, split_data
    mapped = {k: v for k, v in (values or {}).items() if is_mapped(v)}
    if not mapped:
        return split_data(model, values, device)
    key = input_key(model, values)
    x, obs = split_data(model, {k: v for k, v in values.items() if k not in mapped}, device)
    if key in mapped:
        x = mapped[key]
    elif key is None:  # no input: N rows from the first observed value (split_data's rule)
        for name in getattr(model, "site_names", []):
            v = values.get(name)
            if v is not None and _lead(v) is not None:
                x = _Zeros(_lead(v))
                break
    obs.update({k: v for k, v in mapped.items() if k != key})
    return x, obs
