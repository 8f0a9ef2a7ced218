"""`ode` in a traced density: the solve as one opaque operation (issue 36.9).

The compiled MCMC density (`qvr.inference.mcmc.potential`) is a `make_fx` trace of the
batched value-and-gradient function, run by TorchScript.  An adaptive solve cannot be
traced step by step (its steps depend on the values), so a traced `ode` becomes one call
of the custom operator ``qvr::ode_solve(times, y0 (B, ...), params [(B, ...)], key) ->
(ys (T, B, ...), S (T, B, n, m), failed (B,))``: at run time it solves the chains with
`qvr.runtime.dopri5` (the compiled solve), and the trace sees only its inputs and
outputs.  `key` names the right-hand side in this process (`_ENTRIES`), so a graph with
this operator is never kept on disk (`contains_ode`).

Gradients need no backward for the operator: the solve returns the forward
sensitivities `S = d ys / d(y0, params)` with the values, and `traced_solve` gives

    ys + S . (x - stop_gradient(x))        x = (y0, params) flattened per chain

whose value is `ys` and whose gradient is `S^T g`: ordinary operations, which the trace
records with the rest of the density.  Under vmap (the chains) the operator's vmap rule
folds the chain axis into its batch.  Eager evaluation keeps `qvr.runtime.ode_batch`'s
autograd function (its errors for a solve that fails unbatched).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import torch

OP_NAME = "qvr::ode_solve"


class _Entry:
    """A right-hand side and its solve's settings, for the operator's calls."""

    def __init__(self, rhs: Callable, rtol: float, atol: float, max_steps: int,
                 sens: bool, steppers: dict, data_key: tuple):
        self.rhs, self.rtol, self.atol, self.max_steps = rhs, rtol, atol, max_steps
        self.sens = sens
        # the eager solves' steppers (`ode_batch.solve`): the same right-hand side on the
        # same data, so the compiled solve the eager evaluations made is used at once
        self.steppers, self.data_key = steppers, data_key


_ENTRIES: dict = {}
_KEYS = itertools.count()
#: entries kept (one per trace of a density with an `ode`): a long-lived process (the
#: dashboard's worker) traces many; a graph whose entry is gone raises when called, and
#: the MCMC target then evaluates that density eagerly (`ProgramTarget`)
MAX_ENTRIES = 256


def _columns(entry: _Entry, y0: torch.Tensor, params: Sequence[torch.Tensor]) -> int:
    B = y0.shape[0]
    n = math.prod(y0.shape[1:])
    return n + sum(p.numel() // B for p in params) if entry.sens else 0


@torch.library.custom_op(OP_NAME, mutates_args=())
def ode_solve(times: torch.Tensor, y0: torch.Tensor, params: list[torch.Tensor],
              key: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chains' solution `(ys (T, B, ...), S (T, B, n, m), failed (B,))`: a failed
    chain (out of steps, or its step size underflowed) has NaN values and S = 0."""
    from qvr.runtime.ode_batch import Spec
    if _TRACING[0]:  # called by the trace itself (`traced_solve`): values unused
        return _placeholder(times, y0, params, key)
    entry = _ENTRIES.get(key)
    if entry is None:
        raise RuntimeError(f"`ode`: no right-hand side {key} in this process (a traced "
                           "density with an `ode` runs only where it was traced)")
    spec = Spec(entry.rhs, times, entry.rtol, entry.atol, entry.max_steps, entry.steppers,
                entry.data_key, entry.sens)
    ys = spec.run(y0, list(params), batched=True)
    S, failed = spec.saved[0], spec.saved[1]
    S = torch.where(failed[None, :, None, None], 0.0, S)
    return ys.clone(), S.clone(), failed.clone()


def _placeholder(times, y0, params, key):
    """Outputs of the right shapes: the state held at y0, no sensitivity, no failure."""
    T, B = times.shape[0], y0.shape[0]
    n, m = math.prod(y0.shape[1:]), _columns(_ENTRIES[key], y0, params)
    return (y0.unsqueeze(0).expand(T, *y0.shape).clone(), y0.new_zeros((T, B, n, m)),
            torch.zeros((B,), dtype=torch.bool, device=y0.device))


#: set while `traced_solve` records the operator: the trace runs the operator's kernel
#: on real tensors inside its dispatch (where a solve cannot run: the solver's own
#: forward-mode trace fails there), and needs only outputs of the right shapes
_TRACING = [False]


@ode_solve.register_fake
def _fake(times, y0, params, key):
    T, B = times.shape[0], y0.shape[0]
    n, m = math.prod(y0.shape[1:]), _columns(_ENTRIES[key], y0, params)
    return (y0.new_empty((T, *y0.shape)), y0.new_empty((T, B, n, m)),
            y0.new_empty((B,), dtype=torch.bool))


def _front(x: torch.Tensor, dim, V: int) -> torch.Tensor:
    if dim is None:
        return x.unsqueeze(0).expand(V, *x.shape)
    return x.movedim(dim, 0)


def _vmap(info, in_dims, times, y0, params, key):
    """The chains of a vmap folded into the operator's batch."""
    t_dim, y_dim, p_dims, _ = in_dims
    if t_dim is not None:
        raise NotImplementedError("`ode` with times that differ between chains")
    V = info.batch_size
    y0 = _front(y0, y_dim, V)
    params = [_front(p, d, V) for p, d in zip(params, p_dims or [None] * len(params))]
    B = y0.shape[1]
    ys, S, failed = ode_solve(times, y0.reshape(V * B, *y0.shape[2:]),
                              [p.reshape(V * B, *p.shape[2:]) for p in params], key)
    T = times.shape[0]
    return ((ys.reshape(T, V, B, *ys.shape[2:]), S.reshape(T, V, B, *S.shape[2:]),
             failed.reshape(V, B)), (1, 1, 0))


torch.library.register_vmap(OP_NAME, _vmap)


def traced_solve(rhs: Callable, y0: torch.Tensor, params: Sequence[torch.Tensor],
                 times: torch.Tensor, rtol: float, atol: float, max_steps: int,
                 steppers: dict = None, data: dict = None) -> torch.Tensor:
    """`ode_batch.solve`'s values (times first, one chain's `y0`) through the operator,
    with the gradient of the sensitivities (module docstring); `steppers` and `data` as
    `ode_batch.solve`'s."""
    from qvr.runtime.ode_batch import data_key, wants_sensitivities
    sens = wants_sensitivities(y0, params)
    key = next(_KEYS)
    while len(_ENTRIES) >= MAX_ENTRIES:
        _ENTRIES.pop(next(iter(_ENTRIES)))
    _ENTRIES[key] = _Entry(rhs, rtol, atol, max_steps, sens,
                           steppers if steppers is not None else {}, data_key(data))
    _TRACING[0] = True
    try:
        ys, S, _ = ode_solve(times.detach(), y0.detach().unsqueeze(0),
                             [p.detach().unsqueeze(0) for p in params], key)
    finally:
        _TRACING[0] = False
    ys, S = ys[:, 0], S[:, 0]
    if sens:
        dx = torch.cat([(y0 - y0.detach()).reshape(-1)]
                       + [(p - p.detach()).reshape(-1) for p in params])
        ys = ys + torch.matmul(S, dx.to(S.dtype)).reshape(ys.shape).to(ys.dtype)
    return ys


def contains_ode(graph) -> bool:
    """Whether an FX graph calls the operator (it cannot be kept on disk, nor exported
    for AOTInductor: the right-hand side lives in this process)."""
    target = torch.ops.qvr.ode_solve.default
    return any(node.op == "call_function" and node.target in (target, ode_solve,
                                                               torch.ops.qvr.ode_solve)
               for node in graph.graph.nodes)
