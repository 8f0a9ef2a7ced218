"""The solver behind `ode` (E9.3): one adaptive solve for every chain at once (issue 36.9).

torchdiffeq's step control branches on tensor values, so `torch.func.vmap` cannot run it:
the MCMC target (`qvr.inference.potential`) used to evaluate an ODE model chain by chain.
Here the solve is a `torch.autograd.Function` with a vmap rule of its own: under vmap
(the chains), every chain's initial state and every tensor the lambda reads (its
parameters) get a leading chain axis, and torchdiffeq solves the chains' systems as one
system whose right-hand side is the lambda vmapped over the chains (the lambda has no
value-dependent control flow, only the solver does).  The step size is shared: a step is
accepted when *every* chain's error is within tolerance (the error norm is the largest
chain's RMS norm), so each chain is solved at least as accurately as it would be alone.

Gradients: by backpropagation through the solver's steps ("direct"), the autograd graph
of the solve kept from the forward pass (`Spec.graph`) and used by the backward
(`_Vjp`, which has a vmap rule too).  The adjoint method (torchdiffeq's `odeint_adjoint`:
an augmented system solved backwards in time, no steps kept) was measured against it on
the Lotka-Volterra model of `examples/lotka_volterra.qvr` (4 chains, rtol 1e-5 / atol
1e-3, float64, one thread, shared 2-core VM): direct is ~3x cheaper (`GRADIENT`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

#: how gradients flow through a solve: "direct" (backpropagation through the steps) or
#: "adjoint" (`torchdiffeq.odeint_adjoint`).  Measured on Lotka-Volterra
#: (`examples/lotka_volterra.qvr`), 4 chains near the posterior, CPU seconds per batched
#: value-and-gradient, float64, one thread, two alternating runs each: direct 0.150 and
#: 0.164, adjoint 0.436 and 0.488 (the adjoint solves a 2 + 2 + 6-dimensional augmented
#: system backwards with adaptive steps of its own, ~3x the work of backpropagating
#: through ~35 kept steps).  Before batching (vmap failing, chains one by one): 0.59.
GRADIENT = "direct"


class Spec:
    """One solve's settings and, after the forward pass, its autograd graph.

    `rhs(t, y, *params)` is the right-hand side for one chain; `params` are the tensors it
    reads besides `y` and `t` (given to the solve as inputs, so that vmap and autograd see
    them)."""

    def __init__(self, rhs: Callable, times: torch.Tensor, rtol: float, atol: float,
                 max_steps: int, traces: dict = None, data_key=()):
        self.rhs = rhs
        self.times = times
        self.traces = traces  # traced right-hand sides of earlier solves (`_traced`)
        self.data_key = data_key  # what identifies the data the lambda may read
        self.rtol, self.atol, self.max_steps = rtol, atol, max_steps
        self.graph = None  # (ys, y0 leaf, param leaves) of the last forward pass
        self.batched = False
        self.worst = None  # the chain whose error decided the last step (`_norm`)
        self.index = None  # (chains solved, all chains) when some were dropped (`run`)

    def run(self, y0: torch.Tensor, params: Sequence[torch.Tensor], batched: bool):
        """`ys` (times first).  Batched, a solve that runs out of steps (or whose step
        size underflows) is solved again without the chain whose error decided the last
        step (the extreme one: its `ys` are NaN, its density -inf, its gradient 0),
        instead of failing every chain: the
        MCMC target would then solve each chain alone, the extreme one to the limit again
        (early in a Lotka-Volterra warm-up, 55 batched solves out of steps cost 151 s of
        CPU and their per-chain repeats 161 s more, of 441 s in all).  Caveat: the
        limit is on the joint solve, whose steps are the union of what its chains need;
        a chain that alone would just fit in the limit can be dropped beside an extreme
        one (only near the limit: thousands of steps, where Stan's own models usually
        reject at 500)."""
        if not batched:
            self.index = None
            return self._solve(y0, params, False)
        idx = list(range(y0.shape[0]))
        while True:
            try:
                sub = [i for i in idx]
                ys = self._solve(y0[sub], [p[sub] for p in params], True)
                break
            except AssertionError:  # out of steps, or torchdiffeq's "underflow in dt"
                if len(idx) < 2 or self.worst is None:
                    raise
                del idx[self.worst]
        if len(idx) == y0.shape[0]:
            self.index = None
            return ys
        self.index = (idx, y0.shape[0])
        out = ys.new_full((ys.shape[0], y0.shape[0], *ys.shape[2:]), float("nan"))
        out[:, idx] = ys
        return out

    def _solve(self, y0: torch.Tensor, params: Sequence[torch.Tensor], batched: bool):
        from torchdiffeq import odeint, odeint_adjoint
        self.worst = None
        with torch.enable_grad():
            y0l = y0.detach().requires_grad_(y0.is_floating_point())
            pl = [p.detach().requires_grad_(p.is_floating_point()) for p in params]
            rhs = self.rhs
            if batched:
                rhs = torch.func.vmap(self.rhs, in_dims=(None, 0, *[0] * len(pl)))
            rhs = _budget(self._traced(rhs, y0l, pl, batched), self.max_steps)
            options = {"max_num_steps": self.max_steps}
            if batched:
                B = y0l.shape[0]
                options["norm"] = self._norm(B)
            if GRADIENT == "adjoint" and any(p.requires_grad for p in pl):
                module = _Rhs(rhs, pl)
                ys = odeint_adjoint(module, y0l, self.times, rtol=self.rtol, atol=self.atol,
                                    method="dopri5", options=options,
                                    adjoint_params=tuple(pl),
                                    adjoint_options={"norm": "seminorm"})
            else:
                ys = odeint(lambda t, y: rhs(t, y, *pl), y0l, self.times, rtol=self.rtol,
                            atol=self.atol, method="dopri5", options=options)
        self.graph = (ys, y0l, pl)
        self.batched = batched
        return ys.detach()

    def _norm(self, B: int):
        """The error norm of a batched solve: the largest chain's RMS norm (that chain is
        noted: `worst`, the one dropped when the steps run out; NaN counts as largest)."""
        def norm(x):
            per = x.reshape(B, -1).pow(2).mean(1).sqrt()
            self.worst = int(per.argmax())
            return per.amax()
        return norm

    def _traced(self, rhs, y0, params, batched: bool):
        """`rhs` traced (`_traced`), from `traces` when a solve of the same shapes on the
        same data traced it already."""
        if self.traces is None:
            return _traced(rhs, self.times[0], y0, params)
        key = (batched, tuple(y0.shape), y0.dtype, self.times.dtype, str(y0.device),
               tuple((tuple(p.shape), p.dtype) for p in params), self.data_key[0])
        if key not in self.traces:
            if len(self.traces) >= 8:  # a model solved at many shapes: keep the last few
                self.traces.pop(next(iter(self.traces)))
            # the data are held with the trace: their ids stay theirs while it is kept
            self.traces[key] = (_traced(rhs, self.times[0], y0, params), self.data_key[1])
        return self.traces[key][0]

    def vjp(self, gys: torch.Tensor) -> tuple:
        """`(d y0, *d params)` of `<gys, ys>` (zeros where a gradient does not flow)."""
        if self.graph is None:
            raise RuntimeError("the gradient of an `ode` solve was asked twice")
        ys, y0l, pl = self.graph
        if self.index is not None:  # gys of every chain: those solved
            gys = gys[:, self.index[0]]
        self.graph = None  # one backward per solve: the steps are freed with it
        leaves = [y0l, *pl]
        want = [x for x in leaves if x.requires_grad]
        with torch.enable_grad():
            got = torch.autograd.grad(ys, want, gys, allow_unused=True) if want else ()
        it = iter(got)
        out = []
        for x in leaves:
            g = next(it) if x.requires_grad else None
            out.append(torch.zeros_like(x) if g is None else g)
        if self.index is not None:  # chains dropped from the solve: gradient 0
            idx, B = self.index
            full = []
            for g in out:
                z = g.new_zeros((B, *g.shape[1:]))
                z[idx] = g
                full.append(z)
            out = full
        return tuple(out)


#: trace the right-hand side (`make_fx`) once per solve: the lambda is then a graph of
#: aten operations, without the interpreter (and vmap) at each of its ~6 calls per step
TRACE_RHS = True


def _traced(rhs, t0, y0, params):
    """`rhs` traced at `(t0, y0, *params)` into an FX graph of aten operations (the lambda
    has no value-dependent control flow), checked against `rhs` at that point; `rhs`
    itself when it cannot be traced."""
    if not TRACE_RHS:
        return rhs
    from torch.fx.experimental.proxy_tensor import make_fx
    args = (t0.detach(), y0.detach(), *[p.detach() for p in params])
    try:
        with torch.no_grad():
            gm = make_fx(rhs)(*args)
            gm.graph.eliminate_dead_code()
            gm.recompile()
            want, got = rhs(*args), gm(*args)
        if want.shape != got.shape or not torch.equal(want, got):
            return rhs
    except Exception:
        return rhs
    return gm


#: right-hand side evaluations per dopri5 step (7 stages, the first shared with the
#: previous step's last), and for the initial step size
_CALLS_PER_STEP, _CALLS_TO_START = 6, 2


def _budget(rhs, max_steps: int):
    """`rhs` counted: past `max_steps` steps of the *whole* solve it raises the step
    limit (torchdiffeq's `max_num_steps` counts the steps to each output time afresh: a
    solve over 20 times could take 20 x 4096 steps, minutes for one gradient of an
    extreme warmup proposal)."""
    limit = _CALLS_TO_START + _CALLS_PER_STEP * max_steps
    calls = [0]

    def counted(t, y, *params):
        calls[0] += 1
        if calls[0] > limit:
            raise AssertionError(f"max_num_steps exceeded ({max_steps} steps in all)")
        return rhs(t, y, *params)

    return counted


class _Rhs(torch.nn.Module):
    """The right-hand side as a module (what `odeint_adjoint` expects)."""

    def __init__(self, rhs, params):
        super().__init__()
        self.rhs, self.params = rhs, params

    def forward(self, t, y):
        return self.rhs(t, y, *self.params)


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
        return spec.run(y0, params, batched=True), 1  # odeint's ys: (times, chains, ...)


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
          traces: dict = None, data: dict = None) -> torch.Tensor:
    """`y` at `times` from `y0` under dy/dt = rhs(t, y, *params) (dopri5), for one chain or,
    under vmap, for all chains in one solve; differentiable in `y0` and `params`.

    `traces` (a dict kept by the caller) keeps the traced right-hand side from one solve to
    the next as long as the shapes and the `data` the lambda may read (the frame's host
    values: the same tensor objects, unmodified) are the same."""
    values = tuple((data or {}).values())
    data_key = (tuple((k, id(v), getattr(v, "_version", None))
                      for k, v in (data or {}).items()), values)
    return _Solve.apply(Spec(rhs, times.detach(), rtol, atol, max_steps, traces, data_key),
                        y0, *params)
