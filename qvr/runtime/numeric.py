"""Numeric helpers shared by the let-expression compilers.

`_num(frame, v)` turns a value of a let-expression (a tensor, a number, or host data
asked of synthetic data) into a tensor on the frame's device; `_float(v)` gives a
floating tensor (integers take the default float dtype).  `qvr.runtime.letexpr` and the
builtin compilers it calls (`linalg`, `logic`, `indexing`, `recurrence`, `ode`) import
them from here, so that those files need not import `letexpr` back.
"""
from __future__ import annotations

import torch

from qvr.runtime.synth_host import HostRequest


def _num(frame, v):
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, HostRequest):  # synthetic data: host data used as a number
        return v.synth.real(v, frame.device)
    return frame.literal(v)


def _float(v):
    return v if v.is_floating_point() else v.to(torch.get_default_dtype())
