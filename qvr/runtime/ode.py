"""`ode((y, t) -> dydt, y0, times[, rtol, atol])` in let-expressions (E9.3).

Solves dy/dt = f(y, t) from y(times[0]) = y0 and gives y at every entry of `times`, a
tensor of shape `(|times|, *y0.shape)` (`ode(f, y0, t0, times[, rtol, atol])`: from
y(t0) = y0 instead, t0 before the first output time, as Stan's `ode_rk45`), with the
adaptive Dormand–Prince RK45 of `qvr.runtime.dopri5` (the whole solve compiled after a model's
first 8 solves; defaults rtol = atol = 1e-6).  Gradients are forward sensitivities
carried with the state (as Stan's): exact for the discretisation the solver took; a
solve needing more than `MAX_STEPS` steps fails with `OdeStepLimitError` (a ValueError:
-inf for MCMC).

The adaptive step control branches on tensor values, so a `make_fx` trace (the compiled
MCMC density, qvr.inference.mcmc.potential) records an `ode` as one opaque operation
(`qvr.runtime.ode_op`) that solves at run time.  Eagerly it runs under `torch.func.vmap`:
the solve has a vmap rule of its own that solves every chain in one batch
(`qvr.runtime.ode_batch`).
"""
from __future__ import annotations

from typing import Callable

import torch

from qvr.runtime.errors import InputShapeError, QvrRuntimeError
from qvr.syntax import ast as A

DEFAULT_RTOL = 1e-6
DEFAULT_ATOL = 1e-6
#: adaptive steps (accepted and rejected) one solve may take, per chain: past it the
#: solve fails (`OdeStepLimitError`, a ValueError: the MCMC target counts the point as
#: -inf), instead of spending minutes while a sampler explores extreme parameters
MAX_STEPS = 4096


class OdeStepLimitError(QvrRuntimeError, ValueError):
    """An `ode` solve needed more than `MAX_STEPS` adaptive steps."""


def _num(frame, v):
    from qvr.runtime.numeric import _num as num
    return num(frame, v)


def _tolerance(e, default: float) -> float:
    return float(e.value) if isinstance(e, A.Number) else default


def compile_ode(compiler, e: A.ECall, binders: frozenset) -> Callable:
    from qvr.sema.axes_calls import ode_arguments
    lam, y0_e = e.args[:2]
    t0_e, times_e, rtol_e, atol_e = ode_arguments(e.args)  # `ode(f, y0[, t0], times, …)`
    rtol = _tolerance(rtol_e, DEFAULT_RTOL) if rtol_e is not None else DEFAULT_RTOL
    atol = _tolerance(atol_e, DEFAULT_ATOL) if atol_e is not None else DEFAULT_ATOL
    y_name, t_name = lam.params[0].text, lam.params[1].text
    body = compiler.expr(lam.body, binders | {y_name, t_name})
    y0_f = compiler.expr(y0_e, binders)
    times_f = compiler.expr(times_e, binders)
    t0_f = compiler.expr(t0_e, binders) if t0_e is not None else None

    reads = [None]  # the locals the lambda reads (found at the first solve)
    traces = {}  # its traced right-hand sides (`ode_batch.solve`)

    def run(frame, b):
        from qvr.runtime.dopri5 import SolveFailed
        from qvr.runtime.ode_batch import solve
        y0 = _num(frame, y0_f(frame, b))
        if not y0.is_floating_point():
            y0 = y0.to(frame.dtype)
        times = _num(frame, times_f(frame, b))
        if not times.is_floating_point() or times.dtype != y0.dtype:
            times = times.to(y0.dtype)
        if times.dim() != 1 or times.shape[0] < 1:
            raise InputShapeError("the times of `ode` must be a vector of at least one time",
                                  expected="a 1-D tensor of increasing times",
                                  actual=f"shape {tuple(times.shape)}")
        if t0_f is not None:  # solved from t0; the solution at t0 is dropped below
            times = _with_t0(_num(frame, t0_f(frame, b)), times)
        if times.shape[0] == 1:
            return y0.unsqueeze(0)
        if not _tracing() and times.requires_grad is False:
            d = times[1:] - times[:-1]
            if not (bool((d > 0).all()) or bool((d < 0).all())):
                raise InputShapeError("the times of `ode` must be strictly increasing (or "
                                      "strictly decreasing)" + (", after its initial time t0"
                                                                if t0_f is not None else ""),
                                      expected="monotone times",
                                      actual=f"{times.tolist()[:8]}")
        shape = y0.shape
        # what the lambda reads besides y and t (parameters, lets) becomes an input of the
        # solve, so that vmap (the chains) and autograd see it (`ode_batch`)
        if reads[0] is None:
            reads[0] = _reads(frame, b, body, y_name, y0, t_name, times[0])
        refs = reads[0]
        params = [frame.env[r] for r in refs]

        def f(t, y, *ps):
            view = _FrameView(frame, {**frame.env, **dict(zip(refs, ps))})
            bb = dict(b)
            bb[y_name] = y
            bb[t_name] = t
            dy = _num(frame, body(view, bb))
            if dy.shape != shape:
                try:
                    ok = torch.broadcast_shapes(dy.shape, shape) == shape
                except RuntimeError:
                    ok = False
                if not ok:
                    raise InputShapeError(
                        "the lambda of `ode` gives a derivative whose shape does not broadcast "
                        "to the state's (the shape of y0)", expected=f"shape {tuple(shape)}",
                        actual=f"shape {tuple(dy.shape)}")
                dy = dy.expand(shape)
            return dy.to(y.dtype) if dy.dtype != y.dtype else dy

        if _tracing():  # one opaque operation in the trace: its steps depend on values
            from qvr.runtime.ode_op import traced_solve
            ys = traced_solve(f, y0, params, times, rtol, atol, MAX_STEPS, traces,
                              getattr(frame, "_host", None))
            return ys[1:] if t0_f is not None else ys
        try:
            ys = solve(f, y0, params, times, rtol, atol, MAX_STEPS, traces,
                       getattr(frame, "_host", None))
            return ys[1:] if t0_f is not None else ys
        except SolveFailed as exc:
            if "max_num_steps" in str(exc):
                raise OdeStepLimitError(
                    f"`ode` needed more than {MAX_STEPS} adaptive steps (a stiff problem, or "
                    "extreme parameter values)", expected=f"at most {MAX_STEPS} steps",
                    actual="more") from None
            raise OdeStepLimitError(f"`ode` failed: {exc}") from None

    return run


def _with_t0(t0, times):
    """`times` with the initial time t0 (a number) in front."""
    if t0.numel() != 1:
        raise InputShapeError("the initial time of `ode` must be one number",
                              expected="a number", actual=f"shape {tuple(t0.shape)}")
    return torch.cat([t0.reshape(1).to(times.dtype), times])


class _FrameView:
    """A frame whose locals (`env`) are replaced; everything else is the frame's."""

    def __init__(self, frame, env: dict):
        self._frame = frame
        self.env = env

    def __getattr__(self, name):
        return getattr(self._frame, name)


class _Reads(dict):
    """A copy of a frame's locals that notes which are read."""

    def __init__(self, env):
        super().__init__(env)
        self.seen = []

    def __getitem__(self, key):
        if key not in self.seen:
            self.seen.append(key)
        return super().__getitem__(key)


def _reads(frame, b, body, y_name, y0, t_name, t0) -> list:
    """The frame locals (floating-point tensors) that `body` reads, in order of reading:
    the lambda evaluated once at (y0, t0) on a frame that notes its reads."""
    env = _Reads(frame.env)
    bb = dict(b)
    bb[y_name], bb[t_name] = y0, t0
    body(_FrameView(frame, env), bb)
    return [r for r in env.seen if isinstance(frame.env[r], torch.Tensor)
            and frame.env[r].is_floating_point()]


def _tracing() -> bool:
    from qvr.runtime.values import _tracing as tracing
    return tracing()
