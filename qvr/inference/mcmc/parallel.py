"""`chain_method="parallel"`: the chains split across processes, each batch vectorised.

The chains are cut into `num_workers` contiguous groups.  The calling process runs the
first group itself; every other group runs in a forked child process, which inherits the
program, the compiled target and the kernel (nothing is pickled on the way in: programs
with let-expressions hold closures).  A child sends back its events (forwarded to the
caller's callback between the caller's own iterations) and, at the end, its raw
recordings as numpy arrays; the driver concatenates them along the chain axis, so the
result is laid out exactly as with ``"vectorized"``.

* Randomness: each group's torch RNG is seeded from one draw of the caller's global RNG
  per group, so `torch.manual_seed` still makes a run reproducible (the draws differ
  from ``"vectorized"``, which shares one stream between all chains).  Initial positions
  are computed before the split, as in every chain method.
* Cancellation: `should_stop` is polled by the caller, which tells the children through a
  shared event; Ctrl-C reaches the caller only (children ignore SIGINT) and stops them.
* A child that fails sends its error, which the caller raises as a `RuntimeError` naming
  the chains; a child that dies without a word is reported the same way.
* Falls back to ``"vectorized"`` where it cannot help or cannot run: one worker, one
  chain, a non-CPU device (CUDA cannot be forked), or a platform without ``fork``.

Worth it when a run takes more than a few seconds: a child costs a fork plus compiling
the kernel's leaf for its chain count.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import numpy as np
import torch


def fork_available() -> bool:
    return "fork" in mp.get_all_start_methods()


def worker_count(requested, num_chains: int) -> int:
    n = requested if requested is not None else (os.cpu_count() or 1)
    return max(1, min(int(n), num_chains))


def run_parallel(run, z0: torch.Tensor) -> dict:
    """Run `run`'s chains over processes; returns the merged raw recordings."""
    C = z0.shape[0]
    workers = worker_count(run.mc.num_workers, C)
    if workers <= 1 or z0.device.type != "cpu" or not fork_available():
        return run.collect(z0)
    groups = [g.tolist() for g in np.array_split(np.arange(C), workers)]
    seeds = torch.randint(0, 2 ** 62, (workers,)).tolist()
    for size in sorted({len(g) for g in groups}):  # compile once, before forking
        run.target.log_density_and_grad(z0[:size])
    from qvr.inference.mcmc.tick import wait_prewarm
    wait_prewarm()  # never fork while a thread is importing (the child could deadlock)
    ctx = mp.get_context("fork")
    cancel = ctx.Event()
    children = []
    for w in range(1, workers):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, daemon=True,
                           args=(run, z0[groups[w]], groups[w], seeds[w], send, cancel))
        proc.start()
        send.close()
        children.append(_Child(proc, recv, groups[w]))
    try:
        torch.manual_seed(seeds[0])

        def pump():
            if run.stop():
                cancel.set()
            for ch in children:
                ch.drain(run.emit)

        own = run.collect(z0[groups[0]], chain_ids=groups[0], pump=pump)
        if own["cancelled"]:
            cancel.set()
        while not all(ch.finished for ch in children):
            pump()
            for ch in children:
                ch.drain(run.emit, timeout=0.05)
        for ch in children:
            if ch.error is not None:
                raise RuntimeError(f"MCMC chains {ch.chains} failed in their worker process: "
                                   f"{ch.error}")
        return _merge([own] + [ch.raw for ch in children])
    finally:
        cancel.set()
        for ch in children:
            ch.close()


class _Child:
    def __init__(self, proc, conn, chains):
        self.proc = proc
        self.conn = conn
        self.chains = chains
        self.raw = None
        self.error = None

    @property
    def finished(self) -> bool:
        return self.raw is not None or self.error is not None

    def drain(self, emit, timeout: float = 0.0) -> None:
        if self.finished:
            return
        try:
            while self.conn.poll(timeout):
                kind, payload = self.conn.recv()
                if kind == "event":
                    emit(payload)
                elif kind == "result":
                    self.raw = _from_numpy(payload)
                    return
                else:
                    self.error = payload
                    return
                timeout = 0.0
        except (EOFError, OSError):
            pass
        if not self.proc.is_alive() and not self.finished:
            if self.conn.poll(0):  # a last message raced with the exit
                return self.drain(emit)
            self.error = f"the worker exited with code {self.proc.exitcode} without a result"

    def close(self) -> None:
        self.proc.join(timeout=2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=1.0)
        self.conn.close()


class _PipeEmitter:
    """Stands in for the driver's `Emitter` in a child: forwards events to the caller."""

    def __init__(self, conn, t0: float, active: bool):
        self.conn = conn
        self.t0 = t0
        self.on_event = self if active else None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, event) -> None:
        if self.on_event is not None:
            self.conn.send(("event", event))


def _child(run, z0, chain_ids, seed, conn, cancel) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        run.emit = _PipeEmitter(conn, run.emit.t0, run.emit.on_event is not None)
        run.stop = cancel.is_set
        raw = run.collect(z0, chain_ids=chain_ids)
        conn.send(("result", _to_numpy(raw)))
    except BaseException as exc:  # reported to the caller, which raises it
        code = 1
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except Exception:
            pass
    finally:
        try:
            conn.close()
        finally:
            os._exit(code)  # no atexit handlers or finalisers of the parent's state


def _to_numpy(raw: dict) -> dict:
    def conv(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", v.detach().cpu().numpy(), str(v.dtype))
        if isinstance(v, dict):
            return {k: conv(i) for k, i in v.items()}
        return v
    return {k: conv(v) for k, v in raw.items()}


def _from_numpy(raw: dict) -> dict:
    def conv(v):
        if isinstance(v, tuple) and len(v) == 3 and v[0] == "tensor":
            return torch.from_numpy(v[1])
        if isinstance(v, dict):
            return {k: conv(i) for k, i in v.items()}
        return v
    return {k: conv(v) for k, v in raw.items()}


def _merge(parts: list) -> dict:
    """Concatenate raw recordings along the chain axis (in group order)."""
    first = parts[0]
    out = {}
    for key in ("zs", "warm_div", "warm_steps", "step_sizes"):
        out[key] = torch.cat([p[key] for p in parts])
    for key in ("rec", "rec_l", "rec_b"):
        out[key] = {k: torch.cat([p[key][k] for p in parts]) for k in first[key]}
    inv = [p["inv_mass"] for p in parts]
    out["inv_mass"] = torch.cat(inv) if all(i is not None for i in inv) else None
    out["done"] = [d for p in parts for d in p["done"]]
    out["t_warm"] = max(p["t_warm"] for p in parts)
    out["t_samp"] = max(p["t_samp"] for p in parts)
    out["cancelled"] = any(p["cancelled"] for p in parts)
    out["evals"] = sum(p["evals"] for p in parts)
    return out
