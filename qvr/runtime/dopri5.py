"""The Dormand–Prince 5(4) solver behind `ode` (E9.3), with forward sensitivities and a
compiled solve (issue 36.9).

Method — the one of torchdiffeq and of Stan's `ode_rk45`: Dormand–Prince 5(4), the
fifth-order solution kept (local extrapolation), first-same-as-last, Hairer's initial
step size, the controller ``h * clamp(0.9 * ratio^(-1/5), 0.2, 10)`` and the RMS error
norm ``rms(err / (atol + rtol * max(|y|, |y_new|)))`` on the state.  Steps end exactly on
the output times (a step that would pass one is shortened to it, and the next step is
not shrunk for it) instead of interpolating dense output.

Gradients — by forward sensitivities, as Stan's rk45 (its "coupled system"): with the
state `y` the solver carries ``S = dy / d(y0, params)`` (n x m for n states and m inputs)
and integrates ``dS/dt = J_y S + J_p``, each column a forward-mode product (`jvp`) of the
right-hand side, with the same steps as `y` (the error is controlled on `y` only, as a
seminorm).  The gradient of anything computed from the solution is then
``sum_t gys[t] . S[t]``: no autograd graph of the steps is kept, and the backward costs
one contraction.  A solve that needs no gradient carries no `S`.

Chains — every chain (the leading axis of a batched solve, `qvr.runtime.ode_batch`) has
its own time, step size, step count, next output time and state: a step is *attempted*
for all chains at once (branch-free: each chain accepts or rejects its own, and moves on
to its next output time when it reaches one; a chain past the last idles), so each chain
takes exactly the steps it would take alone.  A chain past the step limit, or whose step
size underflows, is *failed* (its values NaN, its gradient 0) and the others go on; an
unbatched solve raises `SolveFailed` instead.

Speed — a whole solve (the initial step, then attempts of 7 stages of the augmented
system, the error and the controller until every chain is past its last output time) is
one function of tensors (`make_solve`): the augmented right-hand side traced once into
aten operations (`make_fx`), the loop a `torch.while_loop`, the whole compiled by
`torch.compile` with Inductor's C++ wrapper (the loop runs in C++) after `COMPILE_AFTER`
solves ran it eagerly, attempt by attempt in a Python loop (a model solved a handful of
times never waits for the compiler).  Measured on `examples/lotka_volterra.qvr`'s system
(4 chains, rtol 1e-5 / atol 1e-3, float64, one thread, 2-core VM; `bench/ode.py`), per
solve with its sensitivities: the eager loop 97.5 ms; the compiled loop with Inductor's
Python wrapper 2.5 ms, with its C++ wrapper 0.98 ms (compile ~13 s, then from
Inductor's cache).  Before (issue 36.9's first pass): each attempt compiled alone, the
loop in Python, 4.1 ms; torchdiffeq with backpropagation through its steps 55 ms.
"""
from __future__ import annotations

import itertools
import math
import types
import warnings
from typing import Callable, Optional, Sequence

import torch

#: solves of one right-hand side (one `Stepper`) run eagerly before its attempt is
#: compiled; 0 compiles at once, None never
COMPILE_AFTER: Optional[int] = 8

_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_A = ((),
      (1 / 5,),
      (3 / 40, 9 / 40),
      (44 / 45, -56 / 15, 32 / 9),
      (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
      (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
      (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_E = tuple(b5 - b4 for b5, b4 in zip(_B5, _B4))
SAFETY, GROW, SHRINK = 0.9, 10.0, 0.2
#: a step shorter than this share of |t| (or of 1) underflows: the chain fails
UNDERFLOW = 1e-13


class SolveFailed(RuntimeError):
    """An unbatched solve that cannot go on: past its step limit, or its step size
    underflowed (a NaN or an infinity in the state counts as the latter)."""


def augmented(rhs: Callable, shape: tuple, params: Sequence[torch.Tensor],
              sens: bool) -> Callable:
    """The right-hand side for a batch of chains on flat states:
    ``aug(t (B,), y (B, n), S (B, n, m), *params (B, ...)) -> (dy (B, n), dS (B, n, m))``
    where `rhs(t, y, *params)` is one chain's (y of `shape`), and m = n + the parameters'
    sizes (the columns of S: d/dy0 then d/dparams; `params`: one chain's, for their
    shapes and dtypes).  Without `sens`, S is (B, n, 0) and dS too."""
    n = math.prod(shape)
    sizes = [p.numel() for p in params]
    m = n + sum(sizes)

    def f(t, yf, *ps):
        return rhs(t, yf.reshape(shape), *ps).reshape(n)

    if not sens:
        def one(t, yf, S, *ps):
            return f(t, yf, *ps), S
        return torch.func.vmap(one)

    # the parameters' tangents of column j: unit vectors after the n columns of y0
    units, at = [], n
    for p, k in zip(params, sizes):
        eye = torch.eye(m, dtype=p.dtype, device=p.device)
        units.append(eye[:, at:at + k].reshape(m, *p.shape))
        at += k

    def one(t, yf, S, *ps):
        def column(s_y, *s_p):
            return torch.func.jvp(lambda yy, *pp: f(t, yy, *pp), (yf, *ps), (s_y, *s_p))
        dy, dS = torch.func.vmap(column, in_dims=(1, *[0] * len(ps)),
                                 out_dims=(0, 1))(S, *units)
        return dy[0], dS

    return torch.func.vmap(one)


def _combine(x, h, coefs, ks):
    acc = None
    for a, k in zip(coefs, ks):
        if a != 0.0:
            term = k * a
            acc = term if acc is None else acc + term
    return x + h * acc


def make_attempt(aug: Callable, rtol: float, atol: float) -> Callable:
    """One step attempted by every chain toward its next output time:

        attempt(times, idx, t, h, y, S, k1, K1, steps, failed, limit, ys, Ss, *params)
          -> (idx, t, h, y, S, k1, K1, steps, failed, ys, Ss)

    (per chain: the index of its next output time in `times` (Tn,), its time, step size,
    state, sensitivities, the derivative and its sensitivities at (t, y), the steps
    taken; the solution so far `ys (Tn, B, n)`, `Ss (Tn, B, n, m)`).  A step that
    reaches the chain's output time writes its row of `ys`/`Ss` and moves `idx` on;
    `failed` chains and those past the last time idle, so each chain takes exactly the
    steps it takes alone."""

    def attempt(times, idx, t, h, y, S, k1, K1, steps, failed, limit, ys, Ss, *params):
        Tn = times.shape[0]
        T = times[idx.clamp(max=Tn - 1)]
        idle = (idx >= Tn) | failed
        last = t + h >= T - UNDERFLOW * torch.clamp(T.abs(), min=1.0)
        hh = torch.where(idle, torch.zeros_like(h), torch.where(last, T - t, h))
        hy, hS = hh[:, None], hh[:, None, None]
        ks, Ks = [k1], [K1]
        for i in range(1, 7):
            k, K = aug(t + _C[i] * hh, _combine(y, hy, _A[i], ks),
                       _combine(S, hS, _A[i], Ks), *params)
            ks.append(k)
            Ks.append(K)
        y5 = _combine(y, hy, _B5, ks)
        S5 = _combine(S, hS, _B5, Ks)
        err = _combine(torch.zeros_like(y), hy, _E, ks)
        ratio = (err / (atol + rtol * torch.maximum(y.abs(), y5.abs()))).pow(2) \
            .mean(1).sqrt()
        ok = (ratio <= 1.0) & ~idle  # NaN is not <= 1: rejected
        factor = torch.clamp(SAFETY * ratio.pow(-0.2), SHRINK, GROW)
        factor = torch.where(ratio == 0.0, torch.full_like(ratio, GROW),
                             torch.nan_to_num(factor, nan=SHRINK))
        reached = ok & last
        t2 = torch.where(ok, torch.where(last, T, t + hh), t)
        h2 = torch.where(idle, h, torch.where(reached, torch.maximum(h, hh * factor),
                                              hh * factor))
        steps2 = steps + (~idle).to(steps.dtype)
        tiny = h2.abs() <= UNDERFLOW * torch.clamp(t2.abs(), min=1.0)
        failed2 = failed | (~idle & ((steps2 > limit) | tiny | ~torch.isfinite(h2)))
        y2 = torch.where(ok[:, None], y5, y)
        S2 = torch.where(ok[:, None, None], S5, S)
        k12 = torch.where(ok[:, None], ks[6], k1)
        K12 = torch.where(ok[:, None, None], Ks[6], K1)
        hit = (torch.arange(Tn, device=idx.device)[:, None] == idx[None, :]) \
            & reached[None, :]
        ys2 = torch.where(hit[:, :, None], y2[None], ys)
        Ss2 = torch.where(hit[:, :, None, None], S2[None], Ss)
        return (idx + reached.to(idx.dtype), t2, h2, y2, S2, k12, K12, steps2, failed2,
                ys2, Ss2)

    return attempt


def python_loop(cond: Callable, body: Callable, state: tuple) -> tuple:
    """`torch.while_loop`'s semantics in Python (the eager solve)."""
    while bool(cond(*state)):
        state = tuple(body(*state))
    return state


def make_solve(aug: Callable, columns: int, rtol: float, atol: float,
               loop: Callable = python_loop) -> Callable:
    """A whole solve as one function of tensors:

        whole(times (Tn,), y0 (B, n), limit, *params) -> (ys, Ss, failed, steps)

    (`solve`'s results).  Its attempts run in `loop`: `python_loop` (eager, one flag read
    per attempt) or `torch.while_loop` (the loop inside the compiled code)."""
    attempt = make_attempt(aug, rtol, atol)

    def whole(times, y0, limit, *params):
        B, n = y0.shape
        Tn = times.shape[0]
        t = times[0].expand(B).clone()
        S = torch.eye(n, columns, dtype=y0.dtype, device=y0.device).expand(B, n, columns) \
            .clone()
        k1, K1 = aug(t, y0, S, *params)
        # the loop's state may not alias (without sensitivities `aug` gives S back as K)
        k1, K1 = k1.clone(), K1.clone()
        h = _initial_step(aug, t, y0, S, k1, params, rtol, atol)
        steps = torch.zeros(B, dtype=y0.dtype, device=y0.device)
        failed = ~torch.isfinite(k1).all(1)
        ys = torch.cat([y0[None], y0.new_zeros((Tn - 1, B, n))])
        Ss = torch.cat([S[None], S.new_zeros((Tn - 1, B, n, columns))])
        idx = torch.ones(B, dtype=torch.int64, device=y0.device)

        def cond(idx, t, h, y, k1, steps, failed, ys, *sens):
            return ((idx < Tn) & ~failed).any()

        def body(idx, t, h, y, k1, steps, failed, ys, *sens):
            # without sensitivities the loop carries no S: empty tensors of zero columns
            # get strides of their own that a loop's state may not change
            S, K1, Ss = sens if columns else (y.new_zeros((B, n, 0)),) * 2 + (
                y.new_zeros((Tn, B, n, 0)),)
            idx, t, h, y, S, k1, K1, steps, failed, ys, Ss = attempt(
                times, idx, t, h, y, S, k1, K1, steps, failed, limit, ys, Ss, *params)
            return (idx, t, h, y, k1, steps, failed, ys) + ((S, K1, Ss) if columns else ())

        out = loop(cond, body, (idx, t, h, y0, k1, steps, failed, ys)
                   + ((S, K1, Ss) if columns else ()))
        return out[7], (out[10] if columns else Ss), out[6], out[5]

    return whole


class Stepper:
    """The solve of one right-hand side at one set of shapes (`augmented`): eager for
    its first `COMPILE_AFTER` solves (a Python loop of attempts), then the whole solve
    compiled (its loop a `torch.while_loop`); a compile that fails leaves it eager for
    good, with one warning.  `aug` is traced into aten operations once (`trace`)."""

    def __init__(self, aug: Callable, columns: int, rtol: float, atol: float):
        self.aug = aug
        self.columns = columns  # m: the sensitivities' columns (0: none)
        self.rtol, self.atol = rtol, atol
        self.eager = make_solve(aug, columns, rtol, atol)
        self.solves = 0
        self.compiled = None
        self.failed: Optional[str] = None

    def pick(self, example: tuple) -> Callable:
        """The solve to use (`example`: its arguments, `whole`'s)."""
        self.solves += 1
        if self.compiled is not None:
            return self.compiled
        if (self.failed is None and COMPILE_AFTER is not None
                and self.solves > COMPILE_AFTER):
            self._compile(example)
        return self.compiled if self.compiled is not None else self.eager

    def _compile(self, example: tuple) -> None:
        whole = _fresh(make_solve(self.aug, self.columns, self.rtol, self.atol,
                                  loop=torch.while_loop))
        try:
            # Inductor's C++ wrapper runs the loop in C++: the Python wrapper calls its
            # kernels from a Python `while` (measured on lotka_volterra, per solve with
            # sensitivities: 2.0 ms against 5.6 ms; the attempt compiled alone 12.4 ms)
            compiled = torch.compile(whole, fullgraph=True, dynamic=False,
                                     options={"cpp_wrapper": True})
            with torch.no_grad():  # compile now, and check it on this call
                got, want = compiled(*example), self.eager(*example)
            if not all(torch.allclose(g, w, rtol=1e-6, atol=1e-9, equal_nan=True)
                       for g, w in zip(got, want) if g.is_floating_point()):
                raise RuntimeError("the compiled solve differs from the eager one")
            if not torch.equal(got[2], want[2]):
                raise RuntimeError("the compiled solve fails other chains than the eager one")
            self.compiled = compiled
        except Exception as exc:  # no C++ compiler, an operation Inductor cannot take...
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            self.failed = f"{type(exc).__name__}: {text}"
            warnings.warn(f"`ode`: the solver did not compile ({self.failed}); it "
                          "runs uncompiled (several times slower)", RuntimeWarning,
                          stacklevel=3)


_FRESH = itertools.count()


def _fresh(fn: Callable) -> Callable:
    """`fn` with a code object of its own: TorchDynamo keeps its compiled code (and its
    recompile limit) per code object, and every attempt closure shares one; two steppers
    compiled in one process would then be recompiles of one frame (seen: the second
    failed, "found no compiled frames")."""
    code = fn.__code__.replace(co_name=f"ode_solve_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def trace(aug: Callable, example: tuple) -> Callable:
    """`aug` traced at `example` into an FX graph of aten operations (the lambda has no
    value-dependent control flow; vmap and jvp are gone from the graph), checked against
    `aug` there; `aug` itself when it cannot be traced."""
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        with torch.no_grad():
            gm = make_fx(aug)(*example)
            gm.graph.eliminate_dead_code()
            gm.recompile()
            want, got = aug(*example), gm(*example)
        if not all(w.shape == g.shape and torch.allclose(w, g, rtol=1e-12, atol=0.0,
                                                         equal_nan=True)
                   for w, g in zip(want, got)):
            return aug
    except Exception:
        return aug
    return gm


def _initial_step(aug, t0, y0, S0, f0, params, rtol: float, atol: float):
    """Hairer, Nørsett & Wanner's starting step size (II.4), per chain."""
    scale = atol + y0.abs() * rtol

    def rms(x):
        return x.pow(2).mean(1).sqrt()
    d0, d1 = rms(y0 / scale), rms(f0 / scale)
    small = (d0 < 1e-5) | (d1 < 1e-5) | ~torch.isfinite(d1)
    h0 = torch.where(small, torch.full_like(d0, 1e-6), 0.01 * d0 / d1)
    f1, _ = aug(t0 + h0, y0 + h0[:, None] * f0, S0, *params)
    d2 = rms((f1 - f0) / scale) / h0
    big = torch.maximum(d1, d2)
    h1 = torch.where(big <= 1e-15, torch.clamp(h0 * 1e-3, min=1e-6),
                     (0.01 / big).pow(0.2))
    h = torch.minimum(100 * h0, h1)
    return torch.where(torch.isfinite(h), h, h0)


def solve(stepper: Stepper, y0: torch.Tensor, params: Sequence[torch.Tensor],
          times: Sequence[float], max_steps: int) -> tuple:
    """``(ys (T, B, n), S (T, B, n, m), failed (B,), steps (B,))`` from flat states ``y0 (B, n)`` at
    ``times[0]`` (increasing floats), the chains' parameters ``params (B, ...)``, with
    at most `max_steps` attempted steps per chain (rejected ones included).  No autograd:
    the gradients are `S` (`stepper.columns` is m; m = 0 without sensitivities)."""
    dtype, device = y0.dtype, y0.device
    with torch.no_grad():
        # contiguous: the compiled solve is specialised to its inputs' strides (a chain
        # axis added by vmap is often an expanded view), and its loop carries the state
        args = (torch.tensor([float(x) for x in times], dtype=dtype, device=device),
                y0.contiguous(), torch.tensor(float(max_steps), dtype=dtype, device=device),
                *[p.contiguous() for p in params])
        return stepper.pick(args)(*args)
