"""The Live pane: what a fit is doing now (or did: a reopened run is folded the same way).

`LivePane.show(state)` renders a `qvr_tui.state.RunState`; the app calls it from its
~10 Hz timer when the state changed, so it is never called per event.  One body per
kind of method, switched by `ContentSwitcher`:

* SVI — `LossPlot` (raw faint, smoothed bold; `l` toggles the log scale) and a line with
  steps/s, ETA and the note when the loss has stopped falling; with minibatches
  (``--batch-size``) the line starts with the epoch, the step within it and the batch
  (`RunState.batch_text`: "epoch 3 of 10 · step 120/400 of this epoch · batch 256 of
  1,000,000 rows"), and the number of processes of a torchrun launch;
* HMC/NUTS — `ChainTable` (a row per chain, red from its first divergence), a `TracePlot`
  of per-chain acceptance / step size / log density / tree depth (`v` cycles them; a
  vertical line marks the end of warmup) and `WorstParams` (running R-hat and ESS);
* SMC — `TracePlot`s of ESS and log Ẑ per step (resampling steps marked) and the
  `ParticlesTable`; steering a pretrained LM, a line between them names the model and
  the prompt (`RunState.lm_text`), and the table shows each particle's continuation;
* an HMC/NUTS fit with nothing to sample (every latent finite, summed out:
  `RunState.nothing_sampled`) — one line saying so with the log marginal likelihood, in
  place of the chain table, trace and running diagnostics (no chain ran: an empty table,
  an empty plot and "R-hat / ESS: after 20 draws" would suggest one was still to come).

A header line gives method, status, progress, rate and ETA; a problem line names the cause
and the step of a failure, a non-finite loss or a worker that died.
"""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ContentSwitcher, Static

from qvr.inference.criticism.khat_text import importance_text
from qvr_tui.state import NO_FIT_YET, RunState, format_seconds
from qvr_tui.widgets.chain_table import ChainTable
from qvr_tui.widgets.loss_plot import LossPlot
from qvr_tui.widgets.particles import ParticlesTable
from qvr_tui.widgets.trace_plot import TracePlot
from qvr_tui.widgets.worst_params import WorstParams

__all__ = ["LivePane", "TRACES", "nothing_sampled_text"]

TRACES = (("accept", "acceptance"), ("step_size", "step size"),
          ("log_density", "log density"), ("tree_depth", "tree depth"))


def nothing_sampled_text(state: RunState) -> str:
    """The line Live shows for an MCMC fit with nothing to sample."""
    lml = state.summary.get("log_marginal_likelihood")
    value = f"{float(lml):.6g}" if lml is not None else "n/a"
    if str(state.summary.get("note", "")).startswith("an exported morphism"):
        return (f"Nothing to sample: the export is a morphism, with parameters (fit them "
                f"with SVI) and no latent site, so no chain ran and there are no draws. "
                f"Log-likelihood of the data: {value}.")
    return (f"Nothing to sample: the program has no continuous latent site (its finite "
            f"latents are summed out exactly), so no chain ran and there are no draws, "
            f"traces or R-hat/ESS. Log marginal likelihood: {value}.")


class LivePane(Vertical):
    DEFAULT_CSS = """
    LivePane { height: 1fr; }
    LivePane > #live-header { height: 1; padding: 0 1; background: $panel; }
    LivePane > #live-problem { height: auto; padding: 0 1; color: $text-error; display: none; }
    LivePane > #live-problem.-shown { display: block; }
    LivePane > #live-note { height: auto; padding: 0 1; color: $text-muted; }
    LivePane #live-body { height: 1fr; }
    LivePane #body-mcmc ChainTable { height: auto; max-height: 9; }
    LivePane #body-mcmc #mcmc-lower { height: 1fr; }
    LivePane #body-mcmc TracePlot { width: 1fr; }
    LivePane #body-mcmc WorstParams { width: 46%; max-width: 70; }
    LivePane #body-smc #smc-plots { height: 45%; min-height: 7; }
    LivePane #body-smc TracePlot { width: 1fr; }
    LivePane #body-smc #smc-lm { height: 1; padding: 0 1; color: $text-muted; }
    LivePane #live-empty { padding: 1 2; color: $text-muted; }
    LivePane #body-nothing { padding: 1 2; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.state: RunState = RunState()
        self.trace_index = 0
        self.shown_version = -1
        self.stale_note = ""

    def compose(self) -> ComposeResult:
        yield Static(Text(NO_FIT_YET), id="live-header")
        yield Static("", id="live-problem")
        with ContentSwitcher(initial="live-empty", id="live-body"):
            yield Static("Nothing is running. Press 2 for the fit setup, r to start, "
                         "or open a past run from Runs (5).", id="live-empty")
            with Vertical(id="body-svi"):
                yield LossPlot(id="loss-plot")
            with Vertical(id="body-mcmc"):
                yield ChainTable(id="chain-table")
                with Horizontal(id="mcmc-lower"):
                    yield TracePlot(id="mcmc-trace")
                    yield WorstParams(id="worst")
            yield Static("", id="body-nothing")
            with Vertical(id="body-smc"):
                with Horizontal(id="smc-plots"):
                    yield TracePlot(id="smc-ess")
                    yield TracePlot(id="smc-logz")
                yield Static("", id="smc-lm")
                yield ParticlesTable(id="particles")
        yield Static("", id="live-note")

    # ------------------------------------------------------------ rendering
    def show(self, state: RunState, force: bool = False) -> None:
        """Render `state` (skipped when nothing changed since the last call)."""
        if state is self.state and state.version == self.shown_version and not force:
            return
        self.state = state
        self.shown_version = state.version
        self.query_one("#live-header", Static).update(Text(state.status_line()))
        problem = state.problem()
        p = self.query_one("#live-problem", Static)
        p.update(Text(problem or ""))
        p.set_class(bool(problem), "-shown")
        switcher = self.query_one(ContentSwitcher)
        body = {"svi": "body-svi", "hmc": "body-mcmc", "nuts": "body-mcmc",
                "smc": "body-smc", "pathfinder": "body-nothing"}.get(state.method or "",
                                                                     "live-empty")
        if body == "body-mcmc" and state.nothing_sampled:
            body = "body-nothing"
        if switcher.current != body:
            switcher.current = body
        if body == "body-svi":
            self.query_one(LossPlot).show(state)
        elif body == "body-mcmc":
            self._show_mcmc(state)
        elif body == "body-smc":
            self._show_smc(state)
        elif body == "body-nothing":
            self.query_one("#body-nothing", Static).update(Text(
                pathfinder_text(state) if state.method == "pathfinder"
                else nothing_sampled_text(state)))
        self.query_one("#live-note", Static).update(Text(self.note_text()))

    def note_text(self) -> str:
        s = self.state
        parts = []
        if s.method == "svi":
            batch = s.batch_text()  # minibatch SVI: epoch, step in it, batch of rows
            if batch:
                parts.append(batch)
            if s.rate:
                parts.append(f"{s.rate:,.1f} steps/s")
            if s.eta is not None and not s.finished:
                parts.append(f"ETA {format_seconds(s.eta)}")
            if s.plateau:
                parts.append("the loss has stopped falling (last 20% of steps ≈ the 20% "
                             "before)")
            parts.append("l: log scale " + ("on" if self.query_one(LossPlot).log_scale else "off"))
        elif s.is_mcmc and not s.nothing_sampled:
            parts.append(f"v: trace ({TRACES[self.trace_index][1]})")
        elif s.method == "smc":
            parts.append(f"finished {s.num_finished}, dead {s.num_dead}, "
                         f"resampled at {len(s.resampled_steps)} steps")
        if s.importance is not None:
            parts.append(importance_text(s.importance))
        if s.warnings:
            parts.append(f"warning: {s.warnings[-1]}")
        if s.no_record and s.run_dir:
            held = s.folder_contents
            more = ", …" if len(held) > 3 else ""
            parts.append(f"{s.run_dir} holds no record" + (
                f" (only {', '.join(held[:3])}{more})" if held else " (left empty)"))
        elif s.finished and s.status != "interrupted" and s.run_dir:
            parts.append(f"record: {s.run_dir}")
        if self.stale_note:
            parts.append(self.stale_note)
        return " · ".join(parts)

    def _show_mcmc(self, s: RunState) -> None:
        self.query_one(ChainTable).show(s)
        key, title = TRACES[self.trace_index]
        series = {f"chain {c}": getattr(s, key)[c] for c in sorted(getattr(s, key))}
        vlines = [s.num_warmup] if s.num_warmup and s.step > s.num_warmup else []
        self.query_one("#mcmc-trace", TracePlot).show(series, title=title, xlabel="iteration",
                                                      vlines=vlines)
        self.query_one(WorstParams).show(s)

    def _show_smc(self, s: RunState) -> None:
        self.query_one("#smc-ess", TracePlot).show({"ess": s.ess}, title="ESS", xlabel="step",
                                                   vlines=s.resampled_steps)
        self.query_one("#smc-logz", TracePlot).show({"log Z": s.log_z}, title="log Ẑ",
                                                    xlabel="step")
        lm = s.lm_text()  # a pretrained LM: its name and the prompt, once
        line = self.query_one("#smc-lm", Static)
        line.update(Text(lm))
        line.display = bool(lm)
        self.query_one(ParticlesTable).show(s)

    def on_resize(self) -> None:
        self.call_after_refresh(self.show, self.state, True)  # decimate to the new width

    # ------------------------------------------------------------ actions
    def action_toggle_log(self) -> None:
        plot = self.query_one(LossPlot)
        plot.log_scale = not plot.log_scale
        self.show(self.state, force=True)

    def action_next_trace(self) -> None:
        self.trace_index = (self.trace_index + 1) % len(TRACES)
        self.show(self.state, force=True)


def pathfinder_text(state) -> str:
    """A Pathfinder fit's live body: a line per path with its last iteration, its loss
    (-log density while L-BFGS climbs) and its best ELBO once the normals are scored."""
    lines = []
    for i in range(max(state.num_chains, len(state.paths))):
        if i not in state.paths:
            lines.append(f"path {i + 1}: waiting")
            continue
        step, m = state.paths[i]
        what = (f"best ELBO {m['best_elbo']:.6g}" if "best_elbo" in m else
                f"loss {m['loss']:.6g}" if "loss" in m else "")
        lines.append(f"path {i + 1}: iteration {step}  {what}")
    return "\n".join(lines) or "Pathfinder: starting"
