"""The `ode` solver's cost per solve (issue 36.9): `examples/lotka_volterra.qvr`'s system.

Four chains solved in one batch from t = 0 to the 20 output times, with forward
sensitivities (the gradient the MCMC target needs), rtol 1e-5 / atol 1e-3, float64, one
thread, as `qvr.runtime.dopri5` runs them:

* `eager`: the attempts in a Python loop (a model's first `COMPILE_AFTER` solves);
* `while, python wrapper`: the whole solve compiled, its loop a `torch.while_loop`, with
  Inductor's Python wrapper (a Python `while` calling the compiled kernels);
* `while, C++ wrapper`: the same with Inductor's C++ wrapper (what `dopri5` uses).

Each variant is checked against the eager solve first.  Prints ms per solve and the ratio
to the eager loop measured in the same run.

Usage: PYTHONPATH=. python bench/ode.py [--repeats 50]
"""
from __future__ import annotations

import argparse
import time

import torch

from qvr.runtime import dopri5 as D


def lotka_volterra(B: int = 4):
    dt = torch.float64

    def rhs(t, u, alpha, beta, gamma, delta):
        return torch.stack([u[0] * (alpha - beta * u[1]), u[1] * (delta * u[0] - gamma)])

    params = [torch.tensor([0.55, 0.6, 0.5, 0.52], dtype=dt)[:B],
              torch.tensor([0.028, 0.03, 0.025, 0.027], dtype=dt)[:B],
              torch.tensor([0.8, 0.85, 0.75, 0.8], dtype=dt)[:B],
              torch.tensor([0.024, 0.025, 0.023, 0.024], dtype=dt)[:B]]
    y0 = torch.tensor([[30.0, 4.0]] * B, dtype=dt)
    times = torch.arange(21, dtype=dt)
    n, m = 2, 6
    aug = D.augmented(rhs, (n,), [p[0] for p in params], True)
    gm = D.trace(aug, (torch.zeros(B, dtype=dt), y0, torch.zeros(B, n, m, dtype=dt),
                       *params))
    args = (times, y0, torch.tensor(4096.0, dtype=dt), *params)
    return gm, m, args


def timed(fn, args, repeats: int) -> float:
    for _ in range(3):
        fn(*args)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    return (time.perf_counter() - t0) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    torch.set_num_threads(1)
    gm, m, args = lotka_volterra()
    rtol, atol = 1e-5, 1e-3
    eager = D.make_solve(gm, m, rtol, atol)
    with torch.no_grad():
        want = eager(*args)
        print(f"steps per chain: {want[3].tolist()}")
        base = timed(eager, args, a.repeats)
        print(f"{'eager (Python loop)':28s} {base:8.2f} ms  1.00x")
        for label, options in (("while, python wrapper", {}),
                               ("while, C++ wrapper", {"cpp_wrapper": True})):
            whole = D._fresh(D.make_solve(gm, m, rtol, atol, loop=torch.while_loop))
            t0 = time.perf_counter()
            fn = torch.compile(whole, fullgraph=True, dynamic=False, options=options)
            got = fn(*args)
            compile_s = time.perf_counter() - t0
            assert all(torch.allclose(g, w, rtol=1e-8, atol=1e-10)
                       for g, w in zip(got, want)), label
            ms = timed(fn, args, a.repeats)
            print(f"{label:28s} {ms:8.2f} ms  {ms / base:.2f}x  (compile {compile_s:.1f} s)")


if __name__ == "__main__":
    main()
