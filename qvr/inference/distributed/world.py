"""Fits over several processes launched by torch's own launcher (`torchrun`, or
`qvr run --nproc N`, which starts it): the process group, and what the ranks share.

A `qvr run` started by `torchrun --nproc-per-node N` (the launcher sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``) is one rank of a
world of N.  `world()` joins the process group once (``gloo`` on CPU, ``nccl`` on CUDA)
and says which rank this process is; a process not started by a launcher (or started
with one process) is a world of one and touches nothing of `torch.distributed`.

* SVI is data-parallel (`qvr.inference.methods.svi`): every rank draws the same global
  minibatch, scores its own share of the rows and the gradients are summed with one
  `all_reduce` per step, so every rank takes the same optimiser step.
* HMC/NUTS with ``chain_method="distributed"`` run a group of chains per rank
  (`qvr.inference.mcmc.distributed`).
* Rank 0 alone writes the run record (`qvr.inference.front.fitting.fit`); ``run.json`` says
  ``world_size``.

Every rank gathers every rank's ``(host, pid)`` when it joins, so that a rank that
stops answering (a collective fails, or the launcher stops the others) can be
named: `lost_ranks` lists the ranks on this machine whose process is gone.  Ranks on
other machines cannot be checked that way (they are reported as unknown).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

import torch

_WORLD = None
#: seconds a collective waits for the other ranks before it fails (a rank that hangs)
TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class World:
    """This process's place in a launch: ``rank`` of ``size`` (``local_rank`` on its
    machine), and the backend of its process group (None for a world of one)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: Optional[str] = None

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the run record and prints (rank 0)."""
        return self.rank == 0


class RankLost(RuntimeError):
    """Another rank stopped during a distributed fit (killed, crashed, or it failed)."""


def launch_refusal(method: str, chain_method: str, size) -> Optional[tuple]:
    """``(option, message)`` when a fit with `method` (and `chain_method`) cannot run on
    `size` processes — it would run `size` copies of one fit —, None when it can: SVI
    (data-parallel) and HMC/NUTS with ``chain_method="distributed"`` only.  Checked by
    `qvr run --nproc` before it launches and by `fit` in every launched rank."""
    if method in ("hmc", "nuts") and chain_method != "distributed":
        return "chain_method", (f"HMC/NUTS across {size} processes need --chain-method "
                                f"distributed (got {chain_method})")
    if method not in ("svi", "hmc", "nuts"):
        return "method", (f"only SVI (data-parallel) and HMC/NUTS with --chain-method "
                          f"distributed run across {size} processes, not {method}")
    return None


def launched() -> bool:
    """Whether this process was started by torch's launcher with more than one process."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ
    except ValueError:
        return False


def env_rank() -> int:
    """The rank the launcher gave this process (0 outside a launch), without joining."""
    try:
        return int(os.environ.get("RANK", "0")) if launched() else 0
    except ValueError:
        return 0


def world(device: str = "cpu") -> World:
    """This process's `World`, joining the process group on first use in a launch."""
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    if not launched():
        _WORLD = World()
        return _WORLD
    import torch.distributed as dist
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=TIMEOUT_SECONDS))
    _WORLD = World(dist.get_rank(), dist.get_world_size(), local_rank, backend)
    procs = [None] * _WORLD.size
    dist.all_gather_object(procs, (socket.gethostname(), os.getpid()))
    _PROCS[:] = procs
    return _WORLD


_PROCS: list = []  # (host, pid) of every rank, gathered when the group is joined


def lost_ranks(w: World, wait: float = 2.0) -> list:
    """The ranks (other than this one) whose process on this machine has exited; ranks on
    other machines are not checked.  Called when a collective failed: the peer's sockets
    close while it is still exiting, so a rank is looked for during up to `wait` seconds
    before none is named."""
    if not w.distributed:
        return []
    import time
    here = socket.gethostname()
    deadline = time.monotonic() + wait
    while True:
        out = [r for r, proc in enumerate(_PROCS)
               if r != w.rank and proc is not None and proc[0] == here
               and not process_alive(int(proc[1]))]
        if out or time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie — exited, not yet reaped by the launcher —
    does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def lost_message(w: World, where: str, exc: BaseException = None) -> str:
    """A failure's message naming the lost ranks (when this machine can tell)."""
    lost = lost_ranks(w)
    who = (f"rank {lost[0]}" if len(lost) == 1 else
           "ranks " + ", ".join(map(str, lost)) if lost else "another rank")
    why = ""
    if exc is not None:
        import re
        text = str(exc).splitlines()[0] if str(exc) else ""
        text = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", text)  # gloo's source line
        text = text.split(". ")[0][:160]
        why = f" ({type(exc).__name__}: {text})"
    return f"{who} of {w.size} stopped {where}: the distributed fit cannot go on{why}"


def broadcast_parameters(w: World, params) -> None:
    """Every rank starts from rank 0's values (parameters initialised at load time differ
    between processes: torch's generator was not seeded then)."""
    if not w.distributed:
        return
    import torch.distributed as dist
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


def broadcast_object(w: World, value):
    """Rank 0's `value` (any picklable object) on every rank."""
    if not w.distributed:
        return value
    import torch.distributed as dist
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(w: World, params, loss: torch.Tensor, stop: bool = False) -> tuple:
    """Sum every parameter's gradient, the loss and the ranks' stop requests over the
    ranks, in one collective (one flat buffer); returns ``(summed loss, whether any rank
    asked to stop)`` — so that every rank stops after the same step.  A parameter without
    a gradient counts zero."""
    if not w.distributed:
        return float(loss), bool(stop)
    import torch.distributed as dist
    params = list(params)
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
             for p in params]
    dtype = parts[0].dtype if parts else loss.dtype
    flat = torch.cat([*parts, loss.detach().reshape(1).to(dtype),
                      torch.tensor([1.0 if stop else 0.0], dtype=dtype,
                                   device=loss.device)])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        n = p.numel()
        g = flat[offset:offset + n].view_as(p)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        offset += n
    return float(flat[-2]), bool(flat[-1] > 0)


def finish() -> None:
    """Leave the process group, if this process joined one (at the end of a launched
    `qvr run`)."""
    global _WORLD
    if _WORLD is not None and _WORLD.distributed:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    _WORLD = None
