"""The solve behind `ode` (E9.3): one solve for every chain at once (issue 36.9).

A solver's step control branches on tensor values, so `torch.func.vmap` cannot run it:
the MCMC target (`qvr.inference.mcmc.potential`) used to evaluate an ODE model chain by chain.
Here the solve is a `torch.autograd.Function` with a vmap rule of its own: under vmap
(the chains), every chain's initial state and every tensor the lambda reads (its
parameters) get a leading chain axis, and `qvr.runtime.dopri5` solves the chains as one
batch, each chain with its own steps (exactly those it takes alone).

Gradients: by forward sensitivities (`dopri5`: S = dy/d(y0, params) carried with the
state); the backward (`_Vjp`, itself vmappable) is one contraction of the incoming
gradient with S.  Measured on `examples/lotka_volterra.qvr`'s system (4 chains, rtol
1e-5 / atol 1e-3, float64, one thread, 2-core VM), per solve with its gradient:
torchdiffeq's `odeint` with backpropagation through its steps 55 ms (its adjoint method,
`odeint_adjoint`, ~3x that: an augmented system solved backwards with steps of its own),
this solver 0.98 ms once compiled (`bench/ode.py`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


_SOLVING = [0]


def solving() -> bool:
    """Whether a solve is running (the operations it dispatches are the solver's: the
    MCMC target's operation count leaves them out, `potential._operations`)."""
    return _SOLVING[0] > 0


class Spec:
    """One solve's settings and, after the forward pass, its sensitivities.

    `rhs(t, y, *params)` is the right-hand side for one chain; `params` are the tensors it
    reads besides `y` and `t` (given to the solve as inputs, so that vmap and autograd see
    them)."""

    def __init__(self, rhs: Callable, times: torch.Tensor, rtol: float, atol: float,
                 max_steps: int, steppers: dict = None, data_key=(), sens: bool = True):
        self.rhs = rhs
        self.times = times
        self.steppers = steppers  # the steppers of earlier solves (`_stepper`)
        self.data_key = data_key  # what identifies the data the lambda may read
        self.rtol, self.atol, self.max_steps = rtol, atol, max_steps
        self.sens = sens  # whether a gradient may be asked (sensitivities carried)
        self.saved = None  # (S (T, B, n, m), failed (B,), shapes) of the last forward pass
        self.batched = False

    def run(self, y0: torch.Tensor, params: Sequence[torch.Tensor], batched: bool):
        """`ys` (times first; under vmap ``(T, B, *y0.shape)``).  A batched chain that runs
        out of steps (or whose step size underflows) gets NaN values (its density -inf)
        and a zero gradient, the others what they get alone; unbatched, the solve raises
        `dopri5.SolveFailed`."""
        from qvr.runtime import dopri5
        y0 = y0.detach()
        params = [p.detach() for p in params]
        if not batched:
            y0 = y0.unsqueeze(0)
            params = [p.unsqueeze(0) for p in params]
        B, shape = y0.shape[0], tuple(y0.shape[1:])
        times = [float(x) for x in self.times.tolist()]
        sign = -1.0 if len(times) > 1 and times[-1] < times[0] else 1.0
        if sign < 0:  # backwards in time: forwards in s = -t
            times = [-x for x in times]
        stepper = self._stepper(y0, params, sign)
        _SOLVING[0] += 1
        try:
            ys, S, failed, steps = dopri5.solve(stepper, y0.reshape(B, -1), params, times,
                                                self.max_steps)
        finally:
            _SOLVING[0] -= 1
        if bool(failed.any()):
            if not batched:
                raise dopri5.SolveFailed(
                    f"max_num_steps exceeded ({self.max_steps} steps in all)"
                    if float(steps.max()) > self.max_steps else
                    "its step size underflowed (the solution is not finite, or stiff)")
            ys = torch.where(failed[None, :, None], float("nan"), ys)
        self.saved = (S, failed, shape, [tuple(p.shape[1:]) for p in params])
        self.batched = batched
        ys = ys.reshape(len(times), B, *shape)
        return ys if batched else ys[:, 0]

    def _stepper(self, y0, params, sign: float):
        """The `dopri5.Stepper` of this right-hand side at these shapes, from `steppers`
        when a solve of the same shapes on the same data made it already (it counts the
        solves and compiles the solve after `dopri5.COMPILE_AFTER` of them)."""
        from qvr.runtime import dopri5
        key = (tuple(y0.shape), y0.dtype, str(y0.device),
               tuple((tuple(p.shape), p.dtype) for p in params), self.data_key[0] if
               self.data_key else None, self.rtol, self.atol, self.sens, sign)
        if self.steppers is not None and key in self.steppers:
            return self.steppers[key][0]
        rhs = self.rhs
        if sign < 0:
            def rhs(t, y, *ps, _f=self.rhs):
                return -_f(-t, y, *ps)
        shape = tuple(y0.shape[1:])
        one = [p[0] for p in params]
        aug = dopri5.augmented(rhs, shape, one, self.sens)
        n = y0[0].numel()
        m = (n + sum(p.numel() for p in one)) if self.sens else 0
        B = y0.shape[0]
        example = (torch.full((B,), float(self.times[0]) * sign, dtype=y0.dtype,
                              device=y0.device),
                   y0.reshape(B, -1), torch.zeros(B, n, m, dtype=y0.dtype, device=y0.device),
                   *params)
        stepper = dopri5.Stepper(dopri5.trace(aug, example), m, self.rtol, self.atol)
        if self.steppers is not None:
            if len(self.steppers) >= 8:  # a model solved at many shapes: keep the last few
                self.steppers.pop(next(iter(self.steppers)))
            # the data are held with the stepper: their ids stay theirs while it is kept
            self.steppers[key] = (stepper, self.data_key[1] if self.data_key else None)
        return stepper

    def vjp(self, gys: torch.Tensor) -> tuple:
        """`(d y0, *d params)` of `<gys, ys>` (zeros for a failed chain)."""
        if self.saved is None:
            raise RuntimeError("the gradient of an `ode` solve was asked twice")
        S, failed, shape, pshapes = self.saved
        if S.shape[-1] == 0:
            raise RuntimeError("the gradient of an `ode` solve that was not set up for one")
        self.saved = None
        T, B = S.shape[0], S.shape[1]
        g = gys.reshape(T, B, -1) if self.batched else gys.reshape(T, 1, -1)
        g = torch.where(failed[None, :, None], 0.0, g).to(S.dtype)
        flat = torch.einsum("tbn,tbnm->bm", g, torch.where(failed[None, :, None, None],
                                                             0.0, S))
        n = S.shape[2]
        out = [flat[:, :n].reshape(B, *shape)]
        at = n
        for s in pshapes:
            k = 1
            for d in s:
                k *= d
            out.append(flat[:, at:at + k].reshape(B, *s))
            at += k
        if not self.batched:
            out = [x[0] for x in out]
        return tuple(out)


def _front(x: torch.Tensor, dim, B: int) -> torch.Tensor:
    """`x` with its chain axis first (expanded to `B` chains when it has none)."""
    if dim is None:
        return x.unsqueeze(0).expand(B, *x.shape)
    return x.movedim(dim, 0)


class _Solve(torch.autograd.Function):
    """`ys = solve(y0, *params)` for one chain; its vmap rule solves all chains at once."""

    @staticmethod
    def forward(spec, y0, *params):
        return spec.run(y0, params, batched=False)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.spec = inputs[0]

    @staticmethod
    def backward(ctx, gys):
        return (None, *_Vjp.apply(ctx.spec, gys))

    @staticmethod
    def vmap(info, in_dims, spec, y0, *params):
        B = info.batch_size
        y0 = _front(y0, in_dims[1], B)
        params = [_front(p, d, B) for p, d in zip(params, in_dims[2:])]
        return spec.run(y0, params, batched=True), 1  # ys: (times, chains, ...)


class _Vjp(torch.autograd.Function):
    """The backward of `_Solve` (itself vmappable: vmap(grad(f)) runs it under vmap)."""

    @staticmethod
    def forward(spec, gys):
        return spec.vjp(gys)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("second derivatives of an `ode` solve are not supported")

    @staticmethod
    def vmap(info, in_dims, spec, gys):
        gys = _front(gys, in_dims[1], info.batch_size).movedim(0, 1)  # as ys: (T, B, ...)
        grads = spec.vjp(gys)
        return grads, tuple(0 for _ in grads)


def solve(rhs: Callable, y0: torch.Tensor, params: Sequence[torch.Tensor],
          times: torch.Tensor, rtol: float, atol: float, max_steps: int,
          steppers: dict = None, data: dict = None) -> torch.Tensor:
    """`y` at `times` from `y0` under dy/dt = rhs(t, y, *params) (Dormand–Prince 5(4)),
    for one chain or, under vmap, for all chains in one solve; differentiable in `y0` and
    `params` (sensitivities are carried only when grad mode is on and an input requires
    a gradient, `_wants_grad`).

    `steppers` (a dict kept by the caller) keeps the traced, eventually compiled solve from
    one solve to the next as long as the shapes and the `data` the lambda may read (the
    frame's host values: the same tensor objects, unmodified) are the same."""
    sens = wants_sensitivities(y0, params)
    return _Solve.apply(Spec(rhs, times.detach(), rtol, atol, max_steps, steppers,
                             data_key(data), sens), y0, *params)


def data_key(data: dict = None) -> tuple:
    """What identifies the data a right-hand side may read, for `steppers`: the tensor
    objects and their versions (and the values, held so that the ids stay theirs)."""
    values = tuple((data or {}).values())
    return (tuple((k, id(v), getattr(v, "_version", None))
                  for k, v in (data or {}).items()), values)


def wants_sensitivities(y0: torch.Tensor, params: Sequence[torch.Tensor]) -> bool:
    """Whether a solve carries sensitivities: grad mode is on and an input may be asked
    a gradient (`_wants_grad`)."""
    return torch.is_grad_enabled() and (_wants_grad(y0) or any(map(_wants_grad, params)))


def _wants_grad(x: torch.Tensor) -> bool:
    """Whether a gradient may be asked of `x` (functorch's `grad` wraps its inputs in
    tensors that require one, under `vmap` too: the MCMC target's vmap(grad) solves carry
    sensitivities, a forward pass under `torch.no_grad` does not)."""
    return bool(x.requires_grad)
