"""`RunState`: a pure, torch-free model of one run, folded from its fit events.

The live screen and a reopened past run use the same code: `RunState.apply(events)` folds
the typed events of `qvr.events` (from `Tail.poll()` while a fit runs, or from
`Run.events()` afterwards) into plain series, rows and flags that widgets render.  Nothing
here touches Textual, torch or the clock except through the injected `clock` (the
running diagnostics are recomputed at most once per `diagnostics_interval` seconds of it).

What is kept, by method:

* SVI — `loss` (raw, one point per progress event, x = step), `smooth` (a debiased
  exponential moving average, as TensorBoard smooths: ``ema_t = β ema_{t-1} + (1-β) x_t``
  shown as ``ema_t / (1 - β^t)``), `rate` (steps/s over the last few seconds of the fit's
  own clock), `eta`, and `plateau`: **the loss has stopped falling** when, with at least
  `PLATEAU_MIN_STEPS` steps done, the mean raw loss over the last 20% of the steps is not
  lower than the mean over the 20% before by more than two standard errors of that
  difference (``drop = mean(prev) - mean(last) <= 2 * sqrt(var(prev)/n_prev +
  var(last)/n_last)``) nor by more than 1% (``drop <= 0.01 * |mean(prev)|``).
  Minibatch SVI (``FitConfig.batch_size``): `batch`, the last progress event's
  `BATCH_KEYS` (epoch, step within it, steps per epoch, rows, batch size), and
  `world_size` (processes of a torchrun launch, 1 without one); `batch_text()` says them
  in one line.  Full-batch progress carries none of them: `batch` stays empty.
* HMC/NUTS — one `ChainRow` per chain (phase, step/total, draws/s in its phase,
  acceptance, step size, tree depth, max-depth hits, divergences, first divergence),
  per-chain `accept`, `step_size` and `log_density` series on a common x (iterations
  counted from the start of warmup), an ETA from each phase's own rate (a chain in warmup
  is charged its warmup rate for the rest of warmup and, until sampling has been seen,
  the same rate for sampling: warmup is slower, so this errs long), and once every chain
  has `MIN_DRAWS_FOR_DIAGNOSTICS` draws, the running rank-normalised R-hat and bulk/tail
  ESS of the worst parameters (`worst`, computed with `qvr.inference.criticism.diagnostics`).
* SMC — `ess` and `log_z` series per step, finished/dead counts, the steps where the
  particles were resampled, and the latest particles (`particles`: text or token ids,
  normalised weight, finished, truncated) sorted by weight.  The text is the snapshot's
  own when it has one (SMC steering a pretrained LM: the worker detokenises; the UI has
  no tokenizer), else from the vocabulary; `lm_text()` names the LM and its prompt.

`status` is ``waiting`` until `FitStarted`, ``running`` until a terminal event, then
``finished`` / ``failed`` / ``cancelled``; `mark_interrupted(message)` records a worker
that died without one, `start_failed` one that ended before writing a record, and
`cancelled_before_record` a fit cancelled before its worker wrote one.  Series
(`qvr_tui.series.Series`) are decimated for plotting with `decimate` (min/max per bucket,
so spikes survive).  The rows are in `qvr_tui.live_rows`, the running R-hat and ESS
in `qvr_tui.running_diagnostics`.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Iterable, Optional, Sequence

from qvr.events import (DrawsChunk, FitCancelled, FitEvent, FitFailed, FitFinished,
                        FitNote, FitProgress, FitStarted, FitWarning,
                        ParticlesSnapshot)
from qvr.runs.layout import EVENTS, nothing_sampled
from qvr_tui.live_rows import ChainRow, ParticleRow, WorstRow, tokens_text
from qvr_tui.running_diagnostics import rank_diagnostics
from qvr_tui.series import Series

__all__ = ["RunState", "NO_FIT_YET", "CANCELLED_BEFORE_RECORD", "fold_record", "format_seconds",
           "EMA_BETA", "PLATEAU_MIN_STEPS", "MIN_DRAWS_FOR_DIAGNOSTICS", "BATCH_KEYS"]

EMA_BETA = 0.9
#: the metrics of a minibatch SVI progress event (`qvr.inference.methods.svi`)
BATCH_KEYS = ("epoch", "epoch_step", "steps_per_epoch", "rows", "batch_size")
PLATEAU_MIN_STEPS = 50
PLATEAU_MIN_POINTS = 5  # per window
PLATEAU_MIN_DROP = 0.01  # a relative drop of 1% between the windows still counts as falling
RATE_WINDOW_S = 5.0  # steps/s over this much of the fit's clock
MIN_DRAWS_FOR_DIAGNOSTICS = 20
WORST_SHOWN = 5
MAX_PARTICLES_SHOWN = 64

NO_FIT_YET = "no fit yet: set one up (2) and press r"
CANCELLED_BEFORE_RECORD = "cancelled before the worker wrote a record"
FOLD_CHUNK_BYTES = 1 << 20


def fold_record(state: "RunState", tail, chunk_bytes: int = FOLD_CHUNK_BYTES) -> int:
    """Fold what a record's `tail` (`qvr.runs.Tail`) holds now into `state`, at most
    `chunk_bytes` of events at a time, and return how many events there were.

    Why in pieces: a reopened record of 100,000 progress events parsed at once made
    ~150 MB of event objects, and the memory they left fragmented stayed with the
    process (its resident size grew with the run's length); parsed a megabyte at a
    time, what is left is the folded series (16 bytes a point)."""
    try:
        size = (tail.run.path / EVENTS).stat().st_size
    except OSError:
        size = 0
    n = 0
    for events in tail.pieces(chunk_bytes, until=size):
        if events:
            n += state.apply(events)
    return n


class RunState:
    """See the module docstring."""

    def __init__(self, vocab: Optional[Sequence[str]] = None,
                 clock: Callable[[], float] = time.monotonic,
                 diagnostics_interval: float = 1.0) -> None:
        self.vocab = list(vocab) if vocab else None
        self.clock = clock
        self.diagnostics_interval = diagnostics_interval
        self.method: Optional[str] = None
        self.requested: Optional[str] = None  # the method asked for (before FitStarted)
        self.paths: dict = {}  # Pathfinder: path index -> (iteration, metrics) last reported
        # ``--resample amis`` after the fit (Laplace, Pathfinder): (round, rounds, ESS)
        self.importance: Optional[tuple] = None
        self.no_record = False  # the worker ended before writing a record (`start_failed`)
        self.folder_contents: list[str] = []  # what its run folder holds then
        self.config: dict = {}
        self.potentials: tuple = ()  # a steering program's score steps (E10), by name
        self.total_steps = 0
        self.num_chains = 1
        self.run_dir: Optional[str] = None
        self.status = "waiting"
        self.message = ""
        self.failed_step: Optional[int] = None
        self.error_type = ""
        self.summary: dict = {}
        self.elapsed = 0.0
        self.step = 0
        self.events_seen = 0
        self.warnings: list[str] = []
        self.note = ""  # the fit's last `FitNote` (shown until the chains move)
        self.steps_path = ""  # how NUTS's steps run now (`FitNote.path`), while running
        self.version = 0  # bumped by every apply() that changed something
        # SVI
        self.loss = Series()
        self.smooth = Series()
        self._ema = 0.0
        self._ema_n = 0
        self.rate: Optional[float] = None
        self.eta: Optional[float] = None
        self.plateau = False
        self.nonfinite_step: Optional[int] = None
        self.batch: dict[str, int] = {}  # minibatch SVI: the last event's BATCH_KEYS
        self.world_size = 1  # processes of a torchrun launch
        # MCMC
        self.chains: dict[int, ChainRow] = {}
        self.accept: dict[int, Series] = {}
        self.step_size: dict[int, Series] = {}
        self.log_density: dict[int, Series] = {}
        self.tree_depth: dict[int, Series] = {}
        self.num_warmup = 0
        self.num_samples = 0
        self._draws: dict[int, dict[str, list]] = {}
        self._draw_counts: dict[int, int] = {}
        self._diag_at: Optional[float] = None
        self._diag_counts: Optional[tuple] = None
        self.worst: list[WorstRow] = []
        self.diagnostics_draws = 0  # draws per chain the worst rows were computed from
        # SMC
        self.ess = Series()
        self.log_z = Series()
        self.num_finished = 0
        self.num_dead = 0
        self.resampled_steps: list[int] = []
        self.particles: list[ParticleRow] = []
        self.particles_step = 0

    # ------------------------------------------------------------ folding
    @classmethod
    def from_events(cls, events: Iterable[FitEvent], **kw) -> "RunState":
        st = cls(**kw)
        st.apply(events)
        return st

    @property
    def finished(self) -> bool:
        return self.status in ("finished", "failed", "cancelled", "interrupted")

    @property
    def is_mcmc(self) -> bool:
        return self.method in ("hmc", "nuts")

    def apply(self, events: Iterable[FitEvent]) -> int:
        """Fold `events` in order; returns how many there were."""
        n = 0
        for ev in events:
            self._fold(ev)
            n += 1
        if n:
            self.events_seen += n
            self.version += 1
            if self.method == "svi":
                self._svi_rates()
            elif self.is_mcmc:
                self._mcmc_eta()
                self.update_diagnostics()
        return n

    def mark_interrupted(self, message: str = "") -> None:
        """The worker is gone without a terminal event."""
        if not self.finished or self.status == "waiting":
            self.status = "interrupted"
            self.message = message or "the worker stopped without finishing the record"
            self.version += 1

    def _fold(self, ev: FitEvent) -> None:
        if isinstance(ev, FitProgress):
            self.elapsed = max(self.elapsed, ev.elapsed)
            if ev.phase == "importance":  # adaptive importance sampling's rounds
                self.importance = (int(ev.step), int(ev.total),
                                   float(ev.metrics.get("ess", float("nan"))))
            elif ev.phase == "optimization" and self.method == "pathfinder":
                self.paths[ev.chain] = (ev.step, dict(ev.metrics))  # path -> last report
            elif ev.phase == "optimization":
                self._svi(ev)
            elif ev.phase in ("warmup", "sampling"):
                self._mcmc(ev)
            elif ev.phase == "smc":
                self._smc(ev)
        elif isinstance(ev, DrawsChunk):
            self._chunk(ev)
        elif isinstance(ev, ParticlesSnapshot):
            self._particles(ev)
        elif isinstance(ev, FitStarted):
            self.method = ev.method
            self.total_steps = int(ev.total_steps)
            self.num_chains = int(ev.num_chains)
            self.config = dict(ev.config)
            self.run_dir = self.run_dir or ev.run_dir
            self.status = "running"
            self.num_warmup = int(self.config.get("num_warmup", 0) or 0)
            self.num_samples = int(self.config.get("num_samples", 0) or 0)
            if self.is_mcmc:
                for c in range(self.num_chains):
                    self._chain(c)
        elif isinstance(ev, FitNote):
            self.note = ev.message
            if getattr(ev, "path", ""):
                self.steps_path = ev.path
        elif isinstance(ev, FitWarning):
            at = f" (step {ev.step})" if ev.step is not None else ""
            self.warnings.append(f"{ev.message}{at}")
        elif isinstance(ev, FitFinished):
            self.status = "finished"
            self.summary = dict(ev.summary)
            self.elapsed = max(self.elapsed, ev.elapsed)
            if self.nothing_sampled:
                self.chains.clear()  # no chain ran: rows stuck at 0/500 would say otherwise
        elif isinstance(ev, FitFailed):
            self.status = "failed"
            self.message = ev.message
            self.failed_step = ev.step
            self.error_type = ev.error_type
            self.elapsed = max(self.elapsed, ev.elapsed)
        elif isinstance(ev, FitCancelled):
            self.status = "cancelled"
            self.message = f"cancelled at step {ev.step}" if ev.step is not None else "cancelled"
            self.elapsed = max(self.elapsed, ev.elapsed)

    # ------------------------------------------------------------ SVI
    def _svi(self, ev: FitProgress) -> None:
        m = ev.metrics
        if m.get("epoch") is not None:
            self.batch = {k: int(m[k]) for k in BATCH_KEYS if m.get(k) is not None}
        if m.get("world_size") is not None:
            self.world_size = int(m["world_size"])
        loss = m.get("loss")
        if loss is None:
            return
        loss = float(loss)
        self.step = ev.step
        self.total_steps = ev.total or self.total_steps
        self.loss.append(ev.step, loss)
        if not math.isfinite(loss):
            if self.nonfinite_step is None:
                self.nonfinite_step = ev.step
            return
        self._ema_n += 1
        self._ema = EMA_BETA * self._ema + (1 - EMA_BETA) * loss
        self.smooth.append(ev.step, self._ema / (1 - EMA_BETA ** self._ema_n))
        self._times_append(ev.step, ev.elapsed)

    def _times_append(self, step: int, elapsed: float) -> None:
        times = getattr(self, "_times", None)
        if times is None:
            times = self._times = []
        times.append((elapsed, step))
        # keep only what the rate window needs
        while len(times) > 2 and times[1][0] < elapsed - RATE_WINDOW_S:
            times.pop(0)

    def _svi_rates(self) -> None:
        times = getattr(self, "_times", [])
        if len(times) >= 2 and times[-1][0] > times[0][0]:
            self.rate = (times[-1][1] - times[0][1]) / (times[-1][0] - times[0][0])
        if self.rate and self.rate > 0 and not self.finished:
            self.eta = max(0.0, (self.total_steps - self.step) / self.rate)
        elif self.finished:
            self.eta = 0.0 if self.status == "finished" else None
        self.plateau = self._plateau()

    def _plateau(self) -> bool:
        s = self.step
        if s < PLATEAU_MIN_STEPS:
            return False
        import numpy as np
        xs = np.frombuffer(self.loss.x, dtype=np.float64)
        ys = np.frombuffer(self.loss.y, dtype=np.float64)
        ok = np.isfinite(ys)
        last = ys[ok & (xs > 0.8 * s)]
        prev = ys[ok & (xs > 0.6 * s) & (xs <= 0.8 * s)]
        if len(last) < PLATEAU_MIN_POINTS or len(prev) < PLATEAU_MIN_POINTS:
            return False
        m_last, m_prev = float(last.mean()), float(prev.mean())
        se = math.sqrt(float(last.var(ddof=1)) / len(last) + float(prev.var(ddof=1)) / len(prev))
        drop = m_prev - m_last
        return drop <= 2 * se and drop <= PLATEAU_MIN_DROP * abs(m_prev)

    # ------------------------------------------------------------ MCMC
    def _chain(self, c: int) -> ChainRow:
        row = self.chains.get(c)
        if row is None:
            row = self.chains[c] = ChainRow(chain=c, total=self.num_warmup or 0)
            for d in (self.accept, self.step_size, self.log_density, self.tree_depth):
                d[c] = Series()
        return row

    def _mcmc(self, ev: FitProgress) -> None:
        row = self._chain(ev.chain)
        m = ev.metrics
        if ev.phase != row.phase:
            if row.phase == "warmup":
                row.warmup_rate = row.step / max(row.last_elapsed - row.phase_t0, 1e-9) \
                    if row.step else row.warmup_rate
            row.phase = ev.phase
            row.phase_t0 = row.last_elapsed
        row.step = ev.step
        row.total = ev.total
        row.last_elapsed = ev.elapsed
        dt = ev.elapsed - row.phase_t0
        rate = ev.step / dt if dt > 0 else None
        if rate is not None:
            row.draws_per_s = rate
            if ev.phase == "warmup":
                row.warmup_rate = rate
            else:
                row.sampling_rate = rate
        row.accept = float(m.get("accept_prob", row.accept))
        row.step_size = float(m.get("step_size", row.step_size))
        row.tree_depth = float(m.get("tree_depth", row.tree_depth))
        row.num_steps = float(m.get("num_steps", row.num_steps))
        div = int(m.get("divergences", 0) or 0)
        hits = int(m.get("max_depth_hits", 0) or 0)
        if ev.phase == "sampling":
            if div > 0 and row.first_divergence is None:
                # the driver says which draw diverged first (a report can come many
                # iterations after it); older records only give the report's step
                row.first_divergence = int(m.get("first_divergence") or ev.step)
            row.divergences = div
            row.max_depth_hits = hits
        else:
            row.warmup_divergences = div
            row.warmup_max_depth_hits = hits
        x = ev.step + (self.num_warmup if ev.phase == "sampling" else 0)
        self.step = max(self.step, x)
        if "accept_prob" in m:
            self.accept[ev.chain].append(x, m["accept_prob"])
        if "step_size" in m:
            self.step_size[ev.chain].append(x, m["step_size"])
        if "log_density" in m:
            self.log_density[ev.chain].append(x, m["log_density"])
        if "tree_depth" in m:
            self.tree_depth[ev.chain].append(x, m["tree_depth"])

    def _mcmc_eta(self) -> None:
        etas = []
        for row in self.chains.values():
            if self.finished:
                row.eta = None
                continue
            if row.phase == "warmup":
                r = row.warmup_rate
                if not r:
                    row.eta = None
                    continue
                left_w = max(0, (row.total or self.num_warmup) - row.step)
                row.eta = left_w / r + self.num_samples / (row.sampling_rate or r)
            else:
                r = row.sampling_rate
                row.eta = max(0, row.total - row.step) / r if r else None
            if row.eta is not None:
                etas.append(row.eta)
        self.eta = max(etas) if etas else (0.0 if self.status == "finished" else None)

    def _chunk(self, ev: DrawsChunk) -> None:
        if not ev.draws:
            return
        per = self._draws.setdefault(ev.chain, {})
        for k, v in ev.draws.items():
            per.setdefault(k, []).append(v)
        self._draw_counts[ev.chain] = self._draw_counts.get(ev.chain, 0) + ev.count

    def draws_per_chain(self) -> dict[int, int]:
        return dict(self._draw_counts)

    def update_diagnostics(self, force: bool = False) -> bool:
        """Recompute `worst` when every chain has enough new draws and the last
        computation is at least `diagnostics_interval` old (or `force`)."""
        if not self._draw_counts or len(self._draw_counts) < max(1, self.num_chains):
            return False
        n = min(self._draw_counts.values())
        if n < MIN_DRAWS_FOR_DIAGNOSTICS:
            return False
        counts = tuple(sorted(self._draw_counts.items()))
        if counts == self._diag_counts:
            return False
        now = self.clock()
        if not force and not self.finished and self._diag_at is not None and \
                now - self._diag_at < self.diagnostics_interval:
            return False
        import numpy as np
        rows: list[WorstRow] = []
        chains = sorted(self._draws)
        for site in self._draws[chains[0]]:
            try:
                a = np.stack([np.concatenate(self._draws[c][site], axis=0)[:n] for c in chains])
            except (KeyError, ValueError):
                continue
            a = a.astype(np.float64).reshape(a.shape[0], a.shape[1], -1)
            with np.errstate(all="ignore"):
                rh, eb, et = rank_diagnostics(a)
            shape = self._draws[chains[0]][site][0].shape[1:]
            for k in range(a.shape[2]):
                if not shape or shape == (1,):
                    label = site
                else:
                    label = f"{site}[{','.join(map(str, np.unravel_index(k, shape)))}]"
                rows.append(WorstRow(label, float(rh[k]), float(eb[k]), float(et[k])))
        rows.sort(key=lambda r: (-(r.r_hat if math.isfinite(r.r_hat) else math.inf),
                                 r.ess_bulk))
        self.worst = rows[:WORST_SHOWN]
        self.diagnostics_draws = n
        self._diag_at = now
        self._diag_counts = counts
        self.version += 1
        return True

    # ------------------------------------------------------------ SMC
    def _smc(self, ev: FitProgress) -> None:
        m = ev.metrics
        self.step = ev.step
        self.total_steps = ev.total or self.total_steps
        if "ess" in m:
            self.ess.append(ev.step, m["ess"])
        if "log_Z" in m:
            self.log_z.append(ev.step, m["log_Z"])
        self.num_finished = int(m.get("num_finished", self.num_finished) or 0)
        self.num_dead = int(m.get("num_dead", self.num_dead) or 0)
        if m.get("resampled"):
            self.resampled_steps.append(ev.step)

    def _particles(self, ev: ParticlesSnapshot) -> None:
        lw = list(ev.log_weights)
        finite = [w for w in lw if math.isfinite(w)]
        top = max(finite) if finite else 0.0
        ws = [math.exp(w - top) if math.isfinite(w) else 0.0 for w in lw]
        total = sum(ws) or 1.0
        n = len(ev.sequences)
        texts = ev.texts if len(ev.texts) == n else \
            [tokens_text(seq, self.vocab) for seq in ev.sequences]  # no text: from the vocabulary
        cut = ev.truncated if len(ev.truncated) == n else (False,) * n
        rows = [ParticleRow(text, tuple(seq), w / total, bool(f), bool(c))
                for seq, text, w, f, c in zip(ev.sequences, texts, ws, ev.finished, cut)]
        rows.sort(key=lambda r: -r.weight)
        self.particles = rows[:MAX_PARTICLES_SHOWN]
        self.particles_step = ev.step

    # ------------------------------------------------------------ text
    def batch_text(self) -> str:
        """Minibatch SVI's place: ``epoch 3 of 10 · step 120/400 of this epoch · batch 256
        of 1,000,000 rows`` (and ``· 2 processes`` in a launch of two); empty for a
        full-batch fit in one process."""
        b = self.batch
        parts = []
        if "epoch" in b:
            k = b.get("steps_per_epoch")
            epochs = -(-self.total_steps // k) if k and self.total_steps else None
            parts.append(f"epoch {b['epoch']:,}" + (f" of {epochs:,}" if epochs else ""))
            if "epoch_step" in b:
                parts.append(f"step {b['epoch_step']:,}" + (f"/{k:,}" if k else "")
                             + " of this epoch")
            if "batch_size" in b:
                rows = f" of {b['rows']:,} rows" if "rows" in b else ""
                parts.append(f"batch {b['batch_size']:,}{rows}")
        if self.world_size > 1:
            parts.append(f"{self.world_size} processes")
        return " · ".join(parts)

    @property
    def nothing_sampled(self) -> bool:
        """An MCMC fit of a program with no continuous latent site: it reports the log
        marginal likelihood (finite latents summed out) and runs no chain."""
        return self.is_mcmc and nothing_sampled(self.summary)

    def lm_text(self) -> str:
        """SMC steering a pretrained LM: ``tiny_lm · prompt "the old dog"`` (the particles
        are its continuations); empty otherwise."""
        from qvr_tui.lm_source import lm_label
        lm = self.config.get("lm") if self.method == "smc" else None
        if not lm:
            return ""
        prompt = self.config.get("prompt") or ""
        return f"{lm_label(lm)} · " + (f"prompt \"{prompt}\"" if prompt else "no prompt") + \
            (f" · potentials {', '.join(self.potentials)}" if self.potentials else "")

    def status_line(self) -> str:
        """One line: method, status, step, rate and ETA (what the live header shows)."""
        if self.status == "waiting":
            # a started fit has its run folder from the start; without one nothing was
            # started (the dashboard just opened, or `--run` named no run)
            if self.run_dir is None:
                return NO_FIT_YET
            return "waiting for the worker to start the fit"
        m = (self.method or self.requested or "fit").upper()
        if self.no_record:
            if self.status == "cancelled":
                return f"{m} {self.message}"
            return f"{m} failed to start: no record was written"
        parts = [f"{m} {self.status}"]
        if self.method == "pathfinder":
            parts += pathfinder_parts(self.paths, self.num_chains)
        elif self.method == "svi":
            parts.append(f"step {self.step}/{self.total_steps}")
            if self.rate:
                parts.append(f"{self.rate:,.0f} steps/s")
            if self.smooth.last is not None:
                parts.append(f"smoothed loss {self.smooth.last:.4g}")
        elif self.nothing_sampled:
            lml = self.summary["log_marginal_likelihood"]
            parts.append(f"no continuous latent · log marginal likelihood {lml:.6g}")
        elif self.is_mcmc:
            done = sum(r.step + (self.num_warmup if r.phase == "sampling" else 0)
                       for r in self.chains.values())
            tot = max(1, (self.num_warmup + self.num_samples) * max(1, len(self.chains)))
            parts.append(f"{100 * done / tot:.0f}%")
            if not done and self.note and not self.finished:
                parts.append(self.note)  # e.g. compiling, before the first step
            elif self.steps_path and not self.finished:
                parts.append(self.steps_path)
            divs = sum(r.divergences for r in self.chains.values())
            parts.append(f"{divs} divergence{'s' if divs != 1 else ''}")
        elif self.method == "smc":
            parts.append(f"step {self.step}/{self.total_steps}")
            if self.log_z.last is not None:
                parts.append(f"log Ẑ {self.log_z.last:.4g}")
        if self.eta is not None and not self.finished:
            parts.append(f"ETA {format_seconds(self.eta)}")
        parts.append(f"{format_seconds(self.elapsed)} elapsed")
        return " · ".join(parts)

    def start_failed(self, message: str, folder_contents: Sequence[str] = ()) -> None:
        """The worker ended before it wrote a record: `message` says why (its stderr or
        exit status); `folder_contents` is what the run folder holds (it is usually left
        empty: the note says so instead of pointing at a record)."""
        self.status = "failed"
        self.no_record = True
        self.message = message
        self.folder_contents = list(folder_contents)
        self.version += 1

    def cancelled_before_record(self, folder_contents: Sequence[str] = ()) -> None:
        """The fit was cancelled (``x``) before the worker wrote its record: not a failure
        (the worker's "interrupted" exit is the cancel itself), and nothing was saved."""
        self.status = "cancelled"
        self.no_record = True
        self.message = CANCELLED_BEFORE_RECORD
        self.folder_contents = list(folder_contents)
        self.version += 1

    def problem(self) -> Optional[str]:
        """The cause of a failed or interrupted run, naming the step, or None."""
        if self.status == "failed":
            at = f" at step {self.failed_step}" if self.failed_step is not None and \
                f"step {self.failed_step}" not in self.message else ""
            return f"failed{at}: {self.message}"
        if self.status == "interrupted":
            return f"interrupted after step {self.step}: {self.message}"
        if self.nonfinite_step is not None:
            return f"the loss is not finite at step {self.nonfinite_step}"
        return None


def format_seconds(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _mean(v: list[float]) -> float:
    return sum(v) / len(v)


def _var(v: list[float]) -> float:
    if len(v) < 2:
        return 0.0
    m = _mean(v)
    return sum((a - m) ** 2 for a in v) / (len(v) - 1)


def pathfinder_parts(paths: dict, total: int) -> list:
    """The status line's words for a Pathfinder fit: the path under way, its last
    iteration, loss (-log density while L-BFGS climbs) or best ELBO so far."""
    if not paths:
        return []
    i = max(paths)
    step, m = paths[i]
    parts = [f"path {i + 1}/{total}", f"iteration {step}"]
    if "best_elbo" in m:
        parts.append(f"best ELBO {m['best_elbo']:.6g}")
    elif "loss" in m:
        parts.append(f"loss {m['loss']:.6g}")
    return parts
