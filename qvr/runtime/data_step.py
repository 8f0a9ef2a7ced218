"""`data NAME : T` steps and observed values read before their `observe` (E9.1).

A `DataStep` reads host data `NAME` (the caller's value of that key, `Frame.host`: data
names are host names of the program, never among its bound names) and checks its shape
against the axes of T: the sizes of T's objects, except that when the first object of T
is the program's domain object the first axis may instead hold one row per row of the
input (a leading batch axis).  The value is bound in the environment under the step's
key.  While synthetic data is drawn (`qvr.runtime.synth_host`), a missing value is drawn
with the declared shape (standard normal entries; rows: the synthetic rows).

`read_observed` is the value of an `observe` site read in a let-expression before its
step: the supplied observed value (`frame.values`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from qvr.runtime.errors import InputDtypeError, InputShapeError, MissingValueError
from qvr.runtime.frame import _host_value


@dataclass
class DataStep:
    name: str  # environment key
    host: str  # the host-data key (the name as written)
    sizes: tuple  # the sizes of T's axes
    spelled: str  # T's axes as written (`Household * Coef`), for messages
    row_axis: bool = False  # T's first object is the program's domain object
    text: str = ""

    def shape_ok(self, shape: tuple, rows: int) -> bool:
        if shape == self.sizes:
            return True
        return (self.row_axis and len(shape) == len(self.sizes) and shape[0] == rows
                and shape[1:] == self.sizes[1:])


def run_data_step(step: DataStep, frame) -> None:
    from qvr.runtime.synth_host import HostRequest
    v = frame.host(step.host)
    if isinstance(v, HostRequest):  # synthetic data: drawn with the declared shape
        shape = ((frame.B,) + step.sizes[1:]) if step.row_axis else step.sizes
        v = v.synth.shaped(v, shape, frame.device)
    if not isinstance(v, torch.Tensor) or v.dtype == torch.bool or v.is_complex():
        kind = "words" if isinstance(v, (str, list, tuple)) else type(v).__name__
        raise InputDtypeError(f"host data `{step.host}` of a `data` step must be numbers",
                              expected=f"an array of shape {step.sizes}", actual=kind,
                              name=step.host)
    shape = tuple(v.shape)
    if not step.shape_ok(shape, frame.B):
        want = f"shape {step.sizes} (`{step.spelled}`)"
        rows = (frame.B,) + step.sizes[1:]
        if step.row_axis and rows != step.sizes:
            want += f" or {rows} (one row per input row)"
        raise InputShapeError(f"host data `{step.host}` does not have the shape its `data` step "
                              f"declares", expected=want, actual=f"shape {shape}", name=step.host)
    frame.env[step.name] = v


def read_observed(frame, key: str, name: str):
    """The supplied value of observe site `key`, read before its step (E9.1)."""
    try:
        v = frame.values[key]
    except KeyError:
        raise MissingValueError(
            f"`{name}` is read before its `observe` step, so its observed value must be "
            f"supplied", expected=f"a value for `{key}` in the observations", actual="missing",
            name=key) from None
    return _host_value(v, frame.device)
