"""`chain_method="distributed"`: the chains split across the ranks of a torch.distributed
launch (``torchrun --nproc-per-node N``, or ``qvr run --nproc N``), each group vectorised.

Every rank runs the same fit (same program, data, config and seed).  The chains are cut
into ``world.size`` contiguous groups, as ``"parallel"`` cuts them over processes
(`parallel.py`): rank r runs group r with `_Run.collect` and the result is laid out
exactly as with ``"vectorized"``.  At the end every rank holds the merged recordings of
every chain, so every rank's `MCMCResult` is the whole run (rank 0 writes the record).

* Start: rank 0 publishes the per-group seeds (one draw of its global RNG per group, so
  `torch.manual_seed` makes a run reproducible; the draws differ from ``"vectorized"``),
  the initial positions (computed before the split, as in every chain method) and
  whether its callback listens; the other ranks take them from there, so a rank whose
  seed was not set still runs rank 0's run.
* Live events: a rank other than 0 forwards its events (progress and draws chunks of its
  chains, with their global chain ids) to rank 0, whose callback receives them between
  its own iterations, as the parallel driver's caller does; when rank 0 has no callback
  nothing is sent.  Rank r's own callback receives nothing from the sampling loop.
* Cancellation: rank 0 polls `should_stop`; once true every rank stops, and the partial
  run is merged and returned (``cancelled=True``) on every rank.
* Failures: a rank whose chains raise tells rank 0, which raises a `RuntimeError` naming
  the rank and its chains (the failing rank raises its own error after rank 0 has seen
  it); a rank that dies without a word (or stops answering for `SILENT_SECONDS`) makes
  rank 0 raise `RankLost` (`qvr.inference.distributed.world.lost_message`, naming the rank
  when it ran on this machine); a rank that never starts its chains is given up after
  `qvr.inference.distributed.world.TIMEOUT_SECONDS`.  Whatever stops rank 0 stops the other
  ranks, which raise `RankLost` saying why.
* Fewer chains than ranks: the ranks past the last chain idle (rank 0 notes it with a
  `FitNote`); the run is the same.
* A world of one (no launch) runs as ``"vectorized"``.

Transport.  The control messages and the live events go through the launcher's
key-value store (a `torch.distributed.TCPStore` client connected to ``MASTER_ADDR:
MASTER_PORT``, the store the process group itself was set up with — torchrun's agent
holds it — under a `PrefixStore` of its own per run), not through the process group:

* a store offers non-blocking operations (``check``, ``add(key, 0)``), so rank 0 polls
  the other ranks between its own iterations without a thread, and no wait depends on a
  collective that could block for the group's whole timeout: every wait is a polling
  loop that checks, at each turn, that the ranks it waits on are alive (their process on
  this machine, `lost_ranks`, and a heartbeat counter every rank increments each
  `HEARTBEAT_SECONDS` from a thread with its own store client, for ranks elsewhere);
* a point-to-point gloo channel (`irecv`/`isend` on a second group) would need a thread
  blocked in a receive that cannot be cancelled, a protocol to frame messages, and a
  second group created collectively (a collective that hangs if a rank is gone);
* the events are small and throttled (progress at most every `progress_interval`, draws
  in chunks), batched per rank at most every `FLUSH_SECONDS` into one pickled value per
  key (``ev/<rank>/<i>``, counted by ``ev/<rank>/n``; rank 0 deletes what it read).

The bulk of the results (every rank's raw recordings) is exchanged once, at the end, by
one ``all_gather_object`` on the default process group: it is entered only after every
rank has said, through the store, that it finished and rank 0 has seen them all, so it
cannot wait for a rank that failed; a rank dying inside it fails it (gloo sees the
closed connection), and in any case it is bounded by the group's timeout
(`qvr.inference.distributed.world.TIMEOUT_SECONDS`).
"""
from __future__ import annotations

import itertools
import os
import pickle
import threading
import time
from datetime import timedelta

import numpy as np
import torch

from qvr.inference.distributed.world import RankLost, lost_message, lost_ranks, world
from qvr.inference.mcmc.parallel import _from_numpy, _merge, _to_numpy

#: seconds between two heartbeats of a rank
HEARTBEAT_SECONDS = 1.0
#: a rank whose heartbeat has not moved for this long is given up (it hangs, or its
#: machine is gone)
SILENT_SECONDS = 60.0
#: how often rank 0 looks for the other ranks' events, and waits poll
POLL_SECONDS = 0.02
#: how often ranks check on each other (finished, failed, alive) and for a stop
CHECK_SECONDS = 0.25
#: a rank other than 0 sends its buffered events at least this often
FLUSH_SECONDS = 0.05

_RUNS = itertools.count()  # every rank runs the same fits in the same order


def run_distributed(run, z0: torch.Tensor) -> dict:
    """Run `run`'s chains over the ranks of the launch; returns the merged raw
    recordings (every chain) on every rank.  A world of one runs them here."""
    w = world(z0.device.type)
    if not w.distributed:
        return run.collect(z0)
    C = z0.shape[0]
    groups = [g.tolist() for g in np.array_split(np.arange(C), w.size)]
    seeds = torch.randint(0, 2 ** 62, (w.size,)).tolist()
    link = _Link(w, next(_RUNS))
    try:
        if w.rank == 0:
            return _lead(run, z0, groups, seeds, link)
        return _follow(run, z0, groups, link)
    finally:
        link.close()


# ---------------------------------------------------------------------------- rank 0
def _lead(run, z0, groups, seeds, link) -> dict:
    w = link.w
    try:
        link.put("start", {"seeds": seeds, "z0": z0.detach().cpu().numpy(),
                           "active": run.emit.on_event is not None})
        idle = [r for r, g in enumerate(groups) if not g]
        if idle:
            from qvr.events import FitNote
            run.emit(FitNote(f"{len(groups) - len(idle)} of {w.size} ranks run chains "
                             f"(num_chains={z0.shape[0]}); ranks "
                             f"{', '.join(map(str, idle))} idle"))
        others = _Others(run, link, groups)
        torch.manual_seed(seeds[0])
        own = run.collect(z0[groups[0]], chain_ids=groups[0], pump=others.pump)
        if own["cancelled"]:
            link.flag("stop")
        others.wait()
        link.flag("gather")
        link.stop_beating()
        parts = link.gather(own)
    except BaseException as exc:
        link.abort(f"{type(exc).__name__}: {exc}")
        raise
    link.clean()
    return _merged(parts, z0.device)


class _Others:
    """Rank 0's view of the other ranks: their events, their end, their life."""

    def __init__(self, run, link, groups):
        self.run = run
        self.link = link
        self.groups = groups
        self.ranks = list(range(1, link.w.size))
        self.read = {r: 0 for r in self.ranks}  # event batches consumed
        self.finished = set()
        self.stopping = False
        self.last_poll = self.last_check = 0.0

    def pump(self) -> None:
        now = time.monotonic()
        if now - self.last_poll < POLL_SECONDS:
            return
        self.last_poll = now
        if not self.stopping and self.run.stop():
            self.stopping = True
            self.link.flag("stop")
        for r in self.ranks:
            if r not in self.finished:
                self._drain(r)
        if now - self.last_check >= CHECK_SECONDS:
            self.last_check = now
            self._check()

    def wait(self) -> None:
        while len(self.finished) < len(self.ranks):
            self.last_poll = self.last_check = 0.0
            self.pump()
            if len(self.finished) < len(self.ranks):
                time.sleep(POLL_SECONDS)

    def _drain(self, r: int) -> None:
        n = self.link.count(f"ev/{r}/n")
        for i in range(self.read[r], n):
            for event in self.link.take(f"ev/{r}/{i}"):
                self.run.emit(event)
        self.read[r] = max(self.read[r], n)

    def _check(self) -> None:
        w = self.link.w
        for r in self.ranks:
            if r in self.finished:
                continue
            status = self.link.get(f"done/{r}")
            if status is None:
                continue
            self._drain(r)  # the events it sent before it said it was done
            if status[0] == "error":
                raise RuntimeError(f"MCMC chains {self.groups[r]} failed on rank {r} of "
                                   f"{w.size}: {status[1]}")
            self.finished.add(r)
        self.link.check_alive([r for r in self.ranks if r not in self.finished],
                              "during MCMC sampling")


# ---------------------------------------------------------------------------- rank r > 0
def _follow(run, z0, groups, link) -> dict:
    w = link.w
    start = link.wait_for(("start",), "before MCMC sampling")["start"]
    z0 = torch.from_numpy(start["z0"]).to(device=z0.device, dtype=z0.dtype)
    group = groups[w.rank]
    out = _Outbox(link, run.emit.t0, start["active"])
    run.emit = out
    run.stop = link.stop_requested
    torch.manual_seed(start["seeds"][w.rank])
    try:
        raw = run.collect(z0[group], chain_ids=group, pump=out.flush_due) if group else None
        out.flush()
    except BaseException as exc:
        if isinstance(exc, RankLost) or link.lost is not None:
            raise
        try:
            out.flush()
        except Exception:
            pass
        link.put(f"done/{w.rank}", ("error", f"{type(exc).__name__}: {exc}"))
        try:  # leave once rank 0 has seen it (a launcher stops the others when one exits)
            link.wait_for(("abort",), "after this rank failed")
        except RankLost:
            pass
        raise
    link.raise_if_stopped()
    link.put(f"done/{w.rank}", ("ok", None))
    seen = link.wait_for(("gather", "abort"), "at the end of MCMC sampling")
    if "abort" in seen:
        raise RankLost(f"rank 0 of {w.size} stopped the distributed MCMC run: "
                       f"{seen['abort']}")
    link.stop_beating()
    return _merged(link.gather(raw), z0.device)


class _Outbox:
    """Stands in for the driver's `Emitter` on a rank other than 0: batches the events
    and sends them to rank 0."""

    def __init__(self, link, t0: float, active: bool):
        self.link = link
        self.t0 = t0
        self.on_event = self if active else None
        self.buffer = []
        self.sent = 0
        self.last = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, event) -> None:
        if self.on_event is not None:
            self.buffer.append(event)
            self.flush_due()

    def flush_due(self) -> None:
        if self.buffer and time.monotonic() - self.last >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        self.last = time.monotonic()
        if not self.buffer:
            return
        r = self.link.w.rank
        self.link.put(f"ev/{r}/{self.sent}", self.buffer)
        self.link.count(f"ev/{r}/n", 1)
        self.sent += 1
        self.buffer = []


# ---------------------------------------------------------------------------- the store
class _Link:
    """This rank's connection to the launcher's store, under a prefix of its own for this
    run, and its heartbeat."""

    def __init__(self, w, number: int):
        self.w = w
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port:
            raise RuntimeError('chain_method="distributed" needs the launcher\'s store '
                               "(MASTER_ADDR and MASTER_PORT are not set)")
        self.prefix = (f"qvr/mcmc/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{number}/")
        self.address = (addr, int(port))
        self.store = self._client()
        self.lost = None  # RankLost found while polling for a stop
        self.aborted = None  # rank 0's message when it gave up
        self.stopped = False
        self.last_stop_check = 0.0
        self.seen = {}  # rank -> (heartbeat count, when it last moved)
        self.t0 = time.monotonic()
        self.written = set()
        self._beating = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True,
                                      name=f"qvr-mcmc-heartbeat-{w.rank}")
        self._beat.start()

    def _client(self):
        import torch.distributed as dist
        try:
            store = dist.TCPStore(*self.address, is_master=False, wait_for_workers=False,
                                  timeout=timedelta(seconds=60))
        except Exception as exc:
            raise RankLost(lost_message(self.w, "before MCMC sampling (the launcher's store "
                                        "cannot be reached)", exc)) from exc
        return dist.PrefixStore(self.prefix, store)

    def _heartbeat(self) -> None:
        try:
            store = self._client()
            key = f"beat/{self.w.rank}"
            while True:
                store.add(key, 1)
                if self._beating.wait(HEARTBEAT_SECONDS):
                    return
        except Exception:  # the store is gone: the waits of the other ranks notice
            return

    def stop_beating(self) -> None:
        self._beating.set()
        self._beat.join(timeout=5.0)

    def close(self) -> None:
        self.stop_beating()

    # ---- operations (a failing store means the launch is coming apart)
    def _op(self, fn, *args):
        try:
            return fn(*args)
        except RankLost:
            raise
        except Exception as exc:
            raise RankLost(lost_message(self.w, "during MCMC sampling (the launcher's store "
                                        "stopped answering)", exc)) from exc

    def put(self, key: str, value) -> None:
        self._op(self.store.set, key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        self.written.add(key)

    def flag(self, key: str, message: str = "") -> None:
        self._op(self.store.set, key, message)
        self.written.add(key)

    def has(self, key: str) -> bool:
        return bool(self._op(self.store.check, [key]))

    def get(self, key: str):
        if not self.has(key):
            return None
        return pickle.loads(self._op(self.store.get, key))

    def take(self, key: str):
        value = pickle.loads(self._op(self.store.get, key))
        self._op(self.store.delete_key, key)
        return value

    def count(self, key: str, add: int = 0) -> int:
        if add:
            self.written.add(key)
        return int(self._op(self.store.add, key, add))

    # ---- waits and checks
    def check_alive(self, ranks, where: str) -> None:
        """Raise `RankLost` when one of `ranks` is gone: its process on this machine has
        exited, its heartbeat has not moved for `SILENT_SECONDS`, or it never beat within
        the group's timeout."""
        from qvr.inference.distributed import world as distributed
        if not ranks:
            return
        gone = [r for r in lost_ranks(self.w, wait=0.0) if r in ranks]
        if gone:
            raise RankLost(lost_message(self.w, where))
        now = time.monotonic()
        for r in ranks:
            beats = self.count(f"beat/{r}")
            last = self.seen.get(r)
            if last is None or beats != last[0]:
                self.seen[r] = (beats, now)
                continue
            if beats == 0 and now - self.t0 > distributed.TIMEOUT_SECONDS:
                raise RankLost(f"rank {r} of {self.w.size} did not start its MCMC chains "
                               f"within {distributed.TIMEOUT_SECONDS} s {where}: the "
                               f"distributed fit cannot go on")
            if beats > 0 and now - last[1] > SILENT_SECONDS:
                raise RankLost(f"rank {r} of {self.w.size} has not answered for "
                               f"{now - last[1]:.0f} s {where}: the distributed fit cannot "
                               f"go on")

    def wait_for(self, keys, where: str) -> dict:
        """Wait until one of `keys` is set (by rank 0); returns the ones set."""
        last = 0.0
        while True:
            found = {k: self._value(k) for k in keys if self.has(k)}
            if found:
                return found
            now = time.monotonic()
            if now - last >= CHECK_SECONDS:
                last = now
                self.check_alive([0], where)
            time.sleep(POLL_SECONDS)

    def _value(self, key: str):
        raw = self._op(self.store.get, key)
        if key in ("abort", "gather", "stop"):
            return raw.decode("utf-8", "replace")
        return pickle.loads(raw)

    def stop_requested(self) -> bool:
        """The `should_stop` of a rank other than 0: rank 0 asked for a stop, gave up, or
        is gone."""
        if self.stopped:
            return True
        now = time.monotonic()
        if now - self.last_stop_check < CHECK_SECONDS:
            return False
        self.last_stop_check = now
        try:
            if self.has("abort"):
                self.aborted = self._value("abort")
                self.stopped = True
            elif self.has("stop"):
                self.stopped = True
            else:
                self.check_alive([0], "during MCMC sampling")
        except RankLost as exc:
            self.lost = exc
            self.stopped = True
        return self.stopped

    def raise_if_stopped(self) -> None:
        """After the chains of a rank other than 0: raise when they stopped because rank 0
        gave up or is gone (a plain stop goes on to the merge)."""
        if self.lost is not None:
            raise self.lost
        if self.aborted is not None:
            raise RankLost(f"rank 0 of {self.w.size} stopped the distributed MCMC run: "
                           f"{self.aborted}")

    def abort(self, message: str) -> None:
        """Rank 0 gives up: the other ranks stop and raise."""
        try:
            self.store.set("abort", message)
        except Exception:
            pass

    def gather(self, raw) -> list:
        import torch.distributed as dist
        parts = [None] * self.w.size
        try:
            dist.all_gather_object(parts, _to_numpy(raw) if raw is not None else None)
        except Exception as exc:
            raise RankLost(lost_message(self.w, "while the MCMC draws were gathered",
                                        exc)) from exc
        return parts

    def clean(self) -> None:
        """Rank 0, after the gather (no rank reads this run's keys any more)."""
        keys = {"start", "stop", "abort", "gather"} | self.written
        for r in range(self.w.size):
            keys |= {f"done/{r}", f"ev/{r}/n", f"beat/{r}"}
        for key in keys:
            try:
                self.store.delete_key(key)
            except Exception:
                pass


def _merged(parts: list, device) -> dict:
    """The gathered recordings (numpy, rank order) as one recording on `device`."""
    raws = []
    for p in parts:
        if p is None:
            continue
        raw = _from_numpy(p)
        for key in ("zs", "warm_div", "warm_steps", "step_sizes", "inv_mass"):
            if isinstance(raw.get(key), torch.Tensor):
                raw[key] = raw[key].to(device)
        for key in ("rec", "rec_l", "rec_b"):
            raw[key] = {k: v.to(device) for k, v in raw[key].items()}
        raws.append(raw)
    return _merge(raws)
