"""How many intra-op threads torch computes with while a fit runs, for the methods other
than HMC/NUTS (those sample on one thread: `qvr.inference.methods.mcmc.SAMPLING_THREADS`).

SVI, Pathfinder, Laplace and SMC (program or pretrained LM) do matrix work big enough for
a second thread to pay *on an idle machine*, and to cost several times over *on a busy
one*: every kernel waits for the thread whose core another process holds.  Measured
2026-12-07 on the 2-core VM (`bench/threads_lm.py`: SMC steering, 32 particles x 24
tokens; "busy" is two processes spinning beside the run), tokens/s with one thread / two:

=============================  =============  ==============
model                          idle           busy
=============================  =============  ==============
tiny_lm (2 x 64, 0.1M)         24,310 / 23,705  10,843 / 3,460
GPT-2 shape 2 x 256 (1.7M)      8,169 / 11,379   5,839 / 2,035
GPT-2 shape 6 x 512 (19M)       1,158 / 1,587      760 / 513
GPT-2 shape 12 x 768 (85M)        280 / 400        170 / 117
=============================  =============  ==============

and fullrank SVI of eight schools (2026-12-06, whole `qvr run`): 5.5 s idle, 19.8 s busy
on two threads, 8.1 s busy on one.  No model size decides it (two threads win idle from
1.7M parameters up, lose busy at every size); the machine's load does.  So the default
(`compute_threads`): the threads asked for (``FitConfig.threads``, else
``OMP_NUM_THREADS``), else one thread when other processes keep at least half a core busy
as the fit starts (`busy_cores`, sampled over `SAMPLE_SECONDS`), else torch's default.
The load is read once, at the start: a load that comes later is not followed.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Optional

#: the window `busy_cores` samples the machine's CPU time over
SAMPLE_SECONDS = 0.2
#: busy cores (other processes) from which a fit computes on one thread
BUSY_CORES = 0.5


def _cpu_times() -> Optional[tuple[float, float]]:
    """``(busy, total)`` jiffies of all CPUs from ``/proc/stat`` (Linux), else None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [float(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    total = sum(values[:8])  # user..steal (guest time is counted in user already)
    return total - idle, total


def busy_cores(seconds: float = SAMPLE_SECONDS, read=_cpu_times) -> Optional[float]:
    """How many cores other processes keep busy now: the machine's busy share of CPU
    time over `seconds` (this process sleeps meanwhile) times the core count; where
    ``/proc/stat`` cannot be read, the 1-minute load average; None when neither is
    known."""
    first = read()
    if first is not None:
        time.sleep(seconds)
        second = read()
        if second is not None and second[1] > first[1]:
            share = (second[0] - first[0]) / (second[1] - first[1])
            return max(0.0, share) * (os.cpu_count() or 1)
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def threads_for(asked: Optional[int] = None, busy=None) -> tuple[int, str]:
    """``(threads, why)`` for a fit that asked for `asked` threads (None: the default);
    `busy` reads the load (default `busy_cores`)."""
    import torch
    if asked is not None:
        return asked, "asked"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env), "OMP_NUM_THREADS"
    default = torch.get_num_threads()
    if default <= 1:
        return 1, "one core"
    load = (busy or busy_cores)()
    if load is not None and load >= BUSY_CORES:
        return 1, f"busy machine ({load:.1f} cores in use)"
    return default, "idle machine"


@contextlib.contextmanager
def compute_threads(asked: Optional[int] = None, busy=None):
    """torch's intra-op threads set by `threads_for` while the block runs, restored
    after; yields ``(threads, why)``."""
    import torch
    threads, why = threads_for(asked, busy)
    before = torch.get_num_threads()
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield threads, why
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
