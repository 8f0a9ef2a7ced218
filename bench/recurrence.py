"""Recurrence benchmark (E9.3): seconds per gradient of a GARCH(1,1) MCMC target.

    .venv/bin/python bench/recurrence.py [--steps 400] [--chains 4] [--repeats 50]
                                         [--dtype float64] [--no-unrolled]

A GARCH(1,1) volatility model over T steps (default 400),

    sigma[0] = 1;  sigma[t] = sqrt(alpha0 + alpha1 * (y[t-1] - mu)^2 + beta1 * sigma[t-1]^2)
    y[t] ~ Normal(mu, sigma[t]),   mu ~ Normal(0, 1), alpha0 ~ HalfNormal(1),
    alpha1 ~ Beta(2, 2), beta1 ~ Beta(2, 2)

is evaluated as the MCMC target of NUTS: `ProgramTarget` (qvr.inference.mcmc.potential, built
the way `fit` builds it: `make_target(program, x, observations)`), timing
`target.log_density_and_grad(z)` for C chains (default 4) after two warm-up calls (the
first ones trace and compile the density when it is cheap enough).  Three versions:

  (a) the QVR program with `scan(Time, 1.0, (s, t) -> ...)`;
  (b) the same log-density hand-written in torch, batched over chains, gradient by
      autograd (a Python loop over t, as one writes it);
  (c) a QVR program with the recurrence unrolled into T `let` steps (generated text;
      the states gathered with a `factor` case expression), i.e. what one writes without
      `scan`;
  (a') with `--also-compiled`: (a) traced and replayed (TorchScript) even though one eager
      evaluation costs more than the target's `compile_below_s`, with the one-off trace
      time.

All three are checked to give the same log-density at the timed point; the script prints
seconds per evaluation, whether the density was compiled (and why not), and the ratios
a/b and c/b.  The series is simulated from the model with a fixed seed.
"""
from __future__ import annotations

import argparse
import math
import time

import torch


def simulate(T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mu, a0, a1, b1 = 0.1, 0.2, 0.3, 0.5
    y = torch.empty(T, dtype=torch.float64)
    s = 1.0
    for t in range(T):
        if t > 0:
            s = math.sqrt(a0 + a1 * (float(y[t - 1]) - mu) ** 2 + b1 * s * s)
        y[t] = mu + s * float(torch.randn((), generator=g, dtype=torch.float64))
    return y


HEADER = """object Time : FinSet {T}

program garch : Time -> Time
    sample mu <- Normal(0.0, 1.0)
    sample alpha0 <- HalfNormal(1.0)
    sample alpha1 <- Beta(2.0, 2.0)
    sample beta1 <- Beta(2.0, 2.0)
"""
FOOTER = """    observe y : Time <- Normal(mu, sigma)
    return sigma

export garch
"""


def scan_source(T: int) -> str:
    return HEADER.format(T=T) + (
        "    let sigma = scan(Time, 1.0, (s, t) -> sqrt(alpha0 + alpha1 * (r[t - 1] - mu) * "
        "(r[t - 1] - mu) + beta1 * s * s))\n") + FOOTER


def unrolled_source(T: int) -> str:
    lines = [HEADER.format(T=T), "    let s0 = 1.0\n"]
    for t in range(1, T):
        lines.append(f"    let s{t} = sqrt(alpha0 + alpha1 * (r[{t - 1}] - mu) * (r[{t - 1}] - mu)"
                     f" + beta1 * s{t - 1} * s{t - 1})\n")
    cases = ", ".join(f"{t} -> s{t}" for t in range(T))
    lines.append(f"    let sigma = factor t : Time in {{ {cases} }}\n")
    return "".join(lines) + FOOTER


def torch_density(y: torch.Tensor):
    """log p(z) for z (C, 4) = (mu, log alpha0, logit alpha1, logit beta1), batched."""
    T = y.shape[0]
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    log_beta22 = math.log(6.0)  # 1 / B(2, 2)

    def logp(z):
        mu, u0, u1, u2 = z.unbind(-1)
        a0 = torch.exp(u0)
        a1 = torch.sigmoid(u1)
        b1 = torch.sigmoid(u2)
        lp = -0.5 * mu * mu - half_log_2pi
        lp = lp + (math.log(2.0) - 0.5 * a0 * a0 - half_log_2pi) + u0  # HalfNormal + log|J|
        for a, u in ((a1, u1), (b1, u2)):
            lp = lp + log_beta22 + torch.log(a) + torch.log1p(-a)  # Beta(2, 2)
            lp = lp + torch.nn.functional.logsigmoid(u) + torch.nn.functional.logsigmoid(-u)
        sigmas = [torch.ones_like(mu)]
        s = sigmas[0]
        for t in range(1, T):
            d = y[t - 1] - mu
            s = torch.sqrt(a0 + a1 * d * d + b1 * s * s)
            sigmas.append(s)
        sig = torch.stack(sigmas, -1)
        r = (y - mu.unsqueeze(-1)) / sig
        lp = lp + (-0.5 * r * r - torch.log(sig) - half_log_2pi).sum(-1)
        return lp

    return logp


def time_calls(fn, z, repeats: int) -> float:
    for _ in range(2):
        fn(z)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(z)
    return (time.perf_counter() - t0) / repeats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--no-unrolled", action="store_true")
    ap.add_argument("--also-compiled", action="store_true",
                    help="also time (a) traced and replayed whatever its eager cost (the "
                         "target compiles only densities cheaper than compile_below_s), "
                         "with the one-off trace time")
    args = ap.parse_args(argv)

    import qvr
    from qvr.inference.mcmc.potential import FunctionTarget, make_target

    dtype = getattr(torch, args.dtype)
    torch.set_default_dtype(dtype)
    torch.set_num_threads(1)
    T, C = args.steps, args.chains
    y = simulate(T).to(dtype)
    x = torch.zeros(1, 1)
    obs = {"y": y, "r": y}
    z = 0.3 * torch.randn(C, 4, generator=torch.Generator().manual_seed(1), dtype=dtype)

    rows = []
    t0 = time.perf_counter()
    prog = qvr.loads(scan_source(T))
    target_a = make_target(prog.morphism, x, obs)
    lp_a = target_a.log_density_and_grad(z)[0]
    sec_a = time_calls(target_a.log_density_and_grad, z, args.repeats)
    note_a = target_a.compile_notes.get(C, "compiled" if target_a._compiled.get(C) else "eager")
    rows.append(("(a) QVR scan", sec_a, note_a, time.perf_counter() - t0))

    if args.also_compiled:
        t0 = time.perf_counter()
        target_ac = make_target(prog.morphism, x, obs)
        target_ac.compile_below_s = float("inf")
        target_ac.log_density_and_grad(z)
        trace_s = time.perf_counter() - t0
        sec_ac = time_calls(target_ac.log_density_and_grad, z, args.repeats)
        note = "compiled" if target_ac._compiled.get(C) else target_ac.compile_notes.get(C, "eager")
        rows.append(("(a') QVR scan, traced", sec_ac, f"{note}; trace {trace_s:.1f} s",
                     time.perf_counter() - t0))

    t0 = time.perf_counter()
    target_b = FunctionTarget(torch_density(y), 4, batched=True)
    lp_b = target_b.log_density_and_grad(z)[0]
    sec_b = time_calls(target_b.log_density_and_grad, z, args.repeats)
    rows.append(("(b) hand-written torch", sec_b, "eager autograd", time.perf_counter() - t0))
    if not torch.allclose(lp_a, lp_b, rtol=1e-6 if dtype == torch.float64 else 1e-4):
        print(f"WARNING: (a) and (b) differ: {lp_a.tolist()} vs {lp_b.tolist()}")

    if not args.no_unrolled:
        t0 = time.perf_counter()
        prog_c = qvr.loads(unrolled_source(T))
        target_c = make_target(prog_c.morphism, x, obs)
        lp_c = target_c.log_density_and_grad(z)[0]
        sec_c = time_calls(target_c.log_density_and_grad, z, max(3, args.repeats // 10))
        note_c = target_c.compile_notes.get(C, "compiled" if target_c._compiled.get(C) else "eager")
        rows.append(("(c) QVR unrolled lets", sec_c, note_c, time.perf_counter() - t0))
        if not torch.allclose(lp_c, lp_b, rtol=1e-6 if dtype == torch.float64 else 1e-4):
            print(f"WARNING: (c) and (b) differ: {lp_c.tolist()} vs {lp_b.tolist()}")

    print(f"GARCH(1,1), T = {T} steps, {C} chains, {args.dtype}, "
          f"log_density_and_grad per call (torch {torch.__version__}, 1 thread)")
    for name, sec, note, setup in rows:
        print(f"  {name:<24} {sec * 1e3:9.2f} ms/gradient   [{note}; set-up + timing "
              f"{setup:.1f} s]")
    print(f"  ratio a/b = {sec_a / sec_b:.2f}")
    if args.also_compiled:
        print(f"  ratio a'/b = {rows[1][1] / sec_b:.2f}")
    if not args.no_unrolled:
        sec_c = rows[-1][1]
        print(f"  ratio c/b = {sec_c / sec_b:.2f}   ratio c/a = {sec_c / sec_a:.2f}")


if __name__ == "__main__":
    main()
