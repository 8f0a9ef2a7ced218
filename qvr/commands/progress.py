"""The live progress display of `qvr run` (rich), fed by fit events.

On a terminal: one row per chain for HMC/NUTS (phase, a bar, draws/s, acceptance, step
size, divergences — red from the first — and an ETA from the phase's own rate, warmup
being slower than sampling), one row for SVI (loss, steps/s, ETA) or SMC (ESS, finished,
log Ẑ); the fit's warnings (`FitWarning`) below the table, which stays on screen when
the fit ends.  Elsewhere (a pipe, CI, the dashboard's worker) one plain line every
`PLAIN_EVERY_S` seconds of fit time (`PLAIN_PREFIX`, then the method, the slowest chain's
phase and step, the rate, the loss / acceptance and divergences / ESS, and the ETA), so a
long headless fit is seen to progress; the run record has every event.
"""
from __future__ import annotations

import math
import time
from typing import Optional

from qvr.events import PLAIN_PREFIX, FitEvent, FitNote, FitProgress, FitStarted, FitWarning
from qvr.inference.criticism.khat_text import importance_text

#: seconds of fit time (the events' `elapsed`) between two plain progress lines
PLAIN_EVERY_S = 10.0


def _eta(seconds: Optional[float]) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class _Chain:
    """What the display knows of one chain (or the one SVI/SMC row)."""

    def __init__(self):
        self.phase = ""
        self.step = 0
        self.total = 0
        self.metrics: dict = {}
        self.running: dict = {}  # a heartbeat's `gradients_in_iteration`, until the next step
        self.phase_t0: Optional[float] = None  # elapsed when the phase started
        self.phase_step0 = 0
        self.rate: Optional[float] = None  # steps/s in this phase
        self.warmup_rate: Optional[float] = None

    def update(self, ev: FitProgress, warmup_total: int, sample_total: int) -> None:
        if ev.phase != self.phase:
            if self.phase == "warmup":
                self.warmup_rate = self.rate
            # the phase's rate is measured from its first report on (the steps before it
            # took an unknown part of the time since the previous phase's last report)
            self.phase, self.phase_t0, self.phase_step0 = ev.phase, ev.elapsed, ev.step
            self.rate = None
        self.step, self.total = ev.step, ev.total
        # a driver's heartbeat (`gradients_in_iteration`) carries no acceptance or step
        # size: the last ones stay shown
        self.running = {k: v for k, v in ev.metrics.items() if k == "gradients_in_iteration"}
        self.metrics = {**self.metrics, **ev.metrics} if self.running else dict(ev.metrics)
        dt = ev.elapsed - (self.phase_t0 or 0.0)
        if dt > 0 and ev.step > self.phase_step0:
            self.rate = (ev.step - self.phase_step0) / dt
        self.warmup_total, self.sample_total = warmup_total, sample_total

    def eta(self) -> Optional[float]:
        if not self.rate:
            return None
        left = (self.total - self.step) / self.rate
        if self.phase == "warmup":
            # sampling is usually faster than warmup (the step size has settled): take
            # the warmup rate as a bound for the rest
            left += self.sample_total / self.rate
        return left


class Progress:
    """`update(event)` from the fit's thread; a context manager that starts and stops the
    live display (only when `stream` is a terminal)."""

    def __init__(self, stream, force: Optional[bool] = None):
        self.stream = stream
        self.live_ok = stream.isatty() if force is None else force
        self.method = ""
        self.chains: dict[int, _Chain] = {}
        self.warmup_total = self.sample_total = 0
        self.warnings: list[str] = []
        self.note = ""  # the last `FitNote` (shown until the chains move)
        self.importance: Optional[tuple] = None  # ``--resample amis``: (round, rounds, ESS)
        self._live = None
        self._last = 0.0
        self._next_plain = PLAIN_EVERY_S  # fit time of the next plain line (no terminal)

    def __enter__(self):
        if self.live_ok:
            from rich.console import Console
            from rich.live import Live
            console = Console(file=self.stream)
            self._live = Live(self._render(), console=console, refresh_per_second=8,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)
            self._live = None
        return False

    def update(self, event: FitEvent) -> None:
        if isinstance(event, FitStarted):
            self.method = event.method
            cfg = event.config
            self.warmup_total = int(cfg.get("num_warmup", 0) or 0)
            self.sample_total = int(cfg.get("num_samples", 0) or 0)
            for c in range(event.num_chains):
                self.chains[c] = _Chain()
        elif isinstance(event, FitProgress) and event.phase == "importance":
            # ``--resample amis`` after the fit: a line of its own (the fit's rows stay)
            self.importance = (event.step, event.total, event.metrics.get("ess", math.nan))
            if not self.live_ok:  # its first and last rounds, a line each
                if event.step in (1, event.total):
                    self.stream.write(f"{PLAIN_PREFIX}{importance_text(self.importance)}\n")
                    self.stream.flush()
                return
        elif isinstance(event, FitProgress):
            self.chains.setdefault(event.chain, _Chain()).update(
                event, self.warmup_total, self.sample_total)
        elif isinstance(event, FitNote):
            self.note = event.message
            if not self.live_ok:  # no live table: one line now
                self.stream.write(f"qvr run: {event.message}\n")
                self.stream.flush()
                return
        elif isinstance(event, FitWarning):
            self.warnings.append(event.message)
            if not self.live_ok:  # no live table to show it in: one line now
                self.stream.write(f"qvr run: warning: {event.message}\n")
                self.stream.flush()
                return
            if self._live is not None:  # shown below the live table at once
                self._live.update(self._render())
                return
        else:
            return
        if self._live is not None:
            now = time.monotonic()
            if now - self._last >= 0.1:
                self._last = now
                self._live.update(self._render())
        elif not self.live_ok and isinstance(event, FitProgress) and \
                event.elapsed >= self._next_plain:
            self._next_plain = (event.elapsed // PLAIN_EVERY_S + 1) * PLAIN_EVERY_S
            self.stream.write(self.plain_line() + "\n")
            self.stream.flush()

    def plain_line(self) -> str:
        """One line of where the fit is (for a stream that is not a terminal): the chain
        furthest behind (warmup before sampling, then the fewest steps) stands for all."""
        # chains that have not reported yet (their first progress event is on its way,
        # e.g. after a compile that outlasted the first line's 10 s) do not stand for all
        reported = {c: ch for c, ch in self.chains.items() if ch.total}
        if not reported:
            return f"{PLAIN_PREFIX}{self.method or 'fit'} starting"
        order = {"warmup": 0, "sampling": 1}
        cid, ch = min(reported.items(),
                      key=lambda kv: (order.get(kv[1].phase, 0), kv[1].step))
        m = ch.metrics
        rate = f"{ch.rate:.1f}" if ch.rate else "-"
        mcmc = self.method in ("hmc", "nuts")
        phase = f"{ch.phase} " if mcmc and ch.phase else ("step " if not mcmc else "")
        parts = [f"{self.method} {phase}{ch.step}/{ch.total}"]
        if mcmc:
            div = sum(int(c.metrics.get("divergences", 0)) for c in self.chains.values())
            etas = [c.eta() for c in self.chains.values()]
            eta = None if any(e is None for e in etas) else max(etas)
            parts += [f"{rate} draws/s (chain {cid})",
                      f"accept {m.get('accept_prob', float('nan')):.2f}",
                      f"divergences {div}", f"ETA {_eta(eta)}"]
            if "gradients_in_iteration" in ch.running:  # a slow iteration under way
                parts.append(f"iteration {ch.step + 1} running "
                             f"({int(ch.running['gradients_in_iteration'])} gradients so far)")
        elif self.method == "pathfinder":  # the path under way (they run one by one)
            cid = max(reported)
            parts = [pathfinder_text(cid, reported[cid])]
        elif self.method == "svi":
            parts += [f"{rate} steps/s", f"loss {m.get('loss', float('nan')):.5g}",
                      *([epoch_text(m)] if "epoch" in m else []), f"ETA {_eta(ch.eta())}"]
        else:
            parts += [f"ESS {m.get('ess', float('nan')):.1f}",
                      f"finished {int(m.get('num_finished', 0))}", f"ETA {_eta(ch.eta())}"]
        return PLAIN_PREFIX + ", ".join(parts)

    # ------------------------------------------------------------ rendering
    def _render(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text
        if not self.method:  # before `FitStarted`: nothing is known to show but warnings
            return self._with_warnings(Text(""))
        t = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        mcmc = self.method in ("hmc", "nuts")
        cols = (["chain", "phase", "", "step", "draws/s", "accept", "step size", "diverg.",
                 "ETA"] if mcmc else
                ["", "", "step", "steps/s", "loss", "ETA"] if self.method == "svi" else
                ["path", "iteration", "loss", "best ELBO"] if self.method == "pathfinder" else
                ["", "", "step", "ESS", "finished", "log Z", "ETA"])
        if self.note and not any(ch.step for ch in self.chains.values()):
            t.title = self.note  # e.g. compiling, before the first step
        for c in cols:
            t.add_column(c, justify="right" if c not in ("phase", "chain", "") else "left")
        for cid, ch in sorted(self.chains.items()):
            bar = ProgressBar(total=max(ch.total, 1), completed=ch.step, width=24)
            m = ch.metrics
            step = f"{ch.step}/{ch.total}"
            rate = f"{ch.rate:.1f}" if ch.rate else "-"
            if mcmc:
                div = int(m.get("divergences", 0))
                style = "bold red" if div else ""
                t.add_row(Text(str(cid), style=style), Text(ch.phase or "starting", style=style),
                          bar, step, rate, f"{m.get('accept_prob', float('nan')):.2f}",
                          f"{m.get('step_size', float('nan')):.3g}", Text(str(div), style=style),
                          _eta(ch.eta()))
            elif self.method == "pathfinder":
                t.add_row(str(cid + 1), str(ch.step),
                          f"{m['loss']:.6g}" if "loss" in m else "-",
                          f"{m['best_elbo']:.6g}" if "best_elbo" in m else "-")
            elif self.method == "svi":
                t.add_row(self.method, bar, step, rate, f"{m.get('loss', float('nan')):.5g}",
                          _eta(ch.eta()))
                if "epoch" in m:
                    t.caption = epoch_text(m)
            else:
                t.add_row(self.method, bar, step, f"{m.get('ess', float('nan')):.1f}",
                          f"{int(m.get('num_finished', 0))}",
                          f"{m.get('log_Z', float('nan')):.4f}", _eta(ch.eta()))
        return self._with_warnings(t)

    def _with_warnings(self, body):
        """The fit's warnings below `body` (and ``--resample amis``'s round), still shown
        when the live display ends."""
        if not self.warnings and self.importance is None:
            return body
        from rich.console import Group
        from rich.text import Text
        lines = [Text(importance_text(self.importance))] if self.importance else []
        return Group(body, *lines,
                     *(Text(f"warning: {w}", style="yellow") for w in self.warnings))


def pathfinder_text(cid: int, ch) -> str:
    """A Pathfinder path's plain progress: ``pathfinder path 2 iteration 17, loss 42.1``
    (the loss while L-BFGS climbs, then the best ELBO of its normals)."""
    m = ch.metrics
    text = f"pathfinder path {cid + 1} iteration {ch.step}"
    if "best_elbo" in m:
        return text + f", best ELBO {m['best_elbo']:.6g}"
    if "loss" in m:
        return text + f", loss {m['loss']:.6g}"
    return text


def epoch_text(m: dict) -> str:
    """Where a minibatch SVI fit is in its epochs (`qvr.inference.data.minibatch` metrics):
    ``epoch 3 (step 120/400), batches of 256 of 1,000,000 rows``."""
    text = (f"epoch {int(m['epoch'])} (step {int(m.get('epoch_step', 0))}/"
            f"{int(m.get('steps_per_epoch', 0))}), batches of {int(m.get('batch_size', 0)):,} "
            f"of {int(m.get('rows', 0)):,} rows")
    if int(m.get("world_size", 1)) > 1:
        text += f" over {int(m['world_size'])} processes"
    return text
