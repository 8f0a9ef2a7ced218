"""`QvrDash`: the dashboard's composition root (tabs, bindings, wiring; no business logic).

Tabs: Program (1), Setup (2), Live (3), Results (4), Runs (5).  Keys: ``r`` starts the fit
set up in Setup (``ctrl+r`` from a text field), ``x`` or ``ctrl+c`` cancels the running
fit cleanly (the first ``ctrl+c`` cancels, it does not quit), ``g`` sets up SMC generation
from the run shown (then ``r``), ``l`` log scale and ``v`` next trace on Live, ``c``
the attention circuits and ``p`` the predictive checks on Results, ``C`` compares the
marked runs by PSIS-LOO on Runs, ``d`` light/dark, ``?`` the keys, ``q`` quits (asking
first while a fit runs; the worker then stops after its step and saves everything).

Data flow: a `FitRunner` (worker process + record tail) or the tail of a record opened
while another process writes it feeds a `RunState`; a 10 Hz timer drains what arrived,
folds it, and hands the state to the Live pane.  A finished, reopened run is folded from
its record by the same code.  The UI process never imports torch.
"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Optional

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.widgets import Footer, Static, TabbedContent, TabPane, Tabs

from qvr_tui.fit_runner import FitRequest, FitRunner
from qvr_tui.screens.confirm import Confirm
from qvr_tui.screens.live import LivePane
from qvr_tui.screens.setup import SetupPane
from qvr_tui.state import CANCELLED_BEFORE_RECORD, RunState, fold_record

#: seconds between re-reads of the runs folder while the Runs tab is shown
RUNS_POLL_SECONDS = 2.0

__all__ = ["QvrDash", "TABS"]

TABS = ("program", "setup", "live", "results", "runs")


def _load_vocab(program: Optional[str], run=None) -> Optional[list]:
    if run is not None:
        try:
            seq = run.sequences
        except Exception:
            seq = None
        if seq and seq.get("vocab"):
            return list(seq["vocab"])
    if not program:
        return None
    from qvr.datafiles import DataFileError, find_vocab, load_vocab
    p = find_vocab(program)
    if p is None:
        return None
    try:
        return load_vocab(p)
    except (DataFileError, OSError):
        return None


def _exports_of(pane) -> list:
    """The exports the Setup pane offers (`ExportEntry`s; expressions are not chosen by
    name)."""
    return [e for e in pane.model.exports if e.kind != "expression"]


def _shown_path(path) -> str:
    """`path` relative to the working folder when it is inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


class QvrDash(App):
    CSS_PATH = str(Path(__file__).with_name("app.tcss"))  # absolute: subclasses elsewhere
    TITLE = "qvr dash"
    BINDINGS = [
        Binding("1", "tab('program')", "Program", show=False),
        Binding("2", "tab('setup')", "Setup", show=False),
        Binding("3", "tab('live')", "Live", show=False),
        Binding("4", "tab('results')", "Results", show=False),
        Binding("5", "tab('runs')", "Runs", show=False),
        Binding("r", "start_fit", "Run"),
        Binding("ctrl+r", "start_fit", "Run", show=False, priority=True),
        Binding("x", "cancel_fit", "Cancel"),
        Binding("ctrl+c", "cancel_key", "Cancel fit", show=False, priority=True),
        Binding("g", "generate", "SMC from run"),
        Binding("l", "live('toggle_log')", "Log scale"),
        Binding("v", "live('next_trace')", "Trace"),
        Binding("c", "results('toggle_circuits')", "Circuits"),
        Binding("p", "results('toggle_predictive')", "Predictive"),
        Binding("d", "toggle_dark", "Theme", show=False),
        Binding("question_mark", "help", "Keys"),
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, program: Optional[str] = None, run: Optional[str] = None,
                 start: Optional[str] = None, runs_dir="runs", python: str = sys.executable,
                 watch: bool = True, poll_interval: float = 0.1,
                 export: Optional[str] = None) -> None:
        super().__init__()
        self.export = export  # the export chosen at start (`qvr dash FILE --export NAME`)
        self.run_path = Path(run) if run else None
        self.opened = None
        if self.run_path is not None and program is None:
            program = self._program_of_run(self.run_path)
        self.program = str(program) if program else None
        self.start_method = start
        self.runs_dir = Path(runs_dir)
        self.python = python
        self.watch = watch
        self.poll_interval = poll_interval
        self.state = RunState()
        self.runner: Optional[FitRunner] = None
        self.last_runner: Optional[FitRunner] = None
        self.follow = None  # Tail of a record another process is writing
        self.shown_run: Optional[Path] = None
        self.painted = False
        self.ready = asyncio.Event()  # every tab mounted and wired
        self._start_asked = False  # `r` pressed before `ready`: start when it is set
        self.initial_tab = "live" if self.run_path else "program"
        self._bindings_for: tuple = ()  # (method, status, idle) the footer keys were for

    @staticmethod
    def _program_of_run(path: Path) -> Optional[str]:
        from qvr.runs import RunRecordError, open_run
        try:
            p = open_run(path).program.get("path")
        except RunRecordError:
            return None
        return p if p and Path(p).is_file() else None

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        # The first tab shown is composed at once; the others are mounted right after the
        # first paint (`_mount_rest`), so the dashboard shows something sooner.
        initial = self.initial_tab
        with TabbedContent(id="tabs", initial=initial):
            for name, title in zip(TABS, ("Program", "Setup", "Live", "Results", "Runs")):
                with TabPane(title, id=name):
                    if name == initial:
                        yield self._content(name)
        yield Footer()

    def _content(self, name: str):
        if name == "program":
            if self.program:
                from qvr_tui.screens.program import ProgramPane
                return ProgramPane(self.program, watch=self.watch, id="program-pane")
            return Static("No program open: `qvr dash FILE`.", id="no-program")
        if name == "setup":
            return SetupPane(self.program, self.runs_dir, id="setup-pane")
        if name == "live":
            return LivePane(id="live-pane")
        if name == "results":
            from qvr_tui.screens.results import ResultsPane
            return ResultsPane(self.run_path, id="results-pane")
        if self.program:
            from qvr_tui.screens.runs import RunsPane
            return RunsPane(self.program, self.runs_dir, id="runs-pane")
        return Static("No program open.", id="no-runs")

    def _program_pane(self):
        try:
            from qvr_tui.screens.program import ProgramPane
            return self.query_one(ProgramPane)
        except Exception:
            return None

    @property
    def live(self) -> LivePane:
        return self.query_one(LivePane)

    @property
    def setup_pane(self) -> SetupPane:
        return self.query_one(SetupPane)

    def on_mount(self) -> None:
        self.call_after_refresh(self._first_paint)

    def _first_paint(self) -> None:
        self.painted = True
        self.run_worker(self._mount_rest(), group="mount", exit_on_error=True)

    async def _mount_rest(self) -> None:
        """Mount the tabs not shown first, then wire them (exports, blocker, a run to
        open, a fit to start); `ready` is set when done."""
        for name in TABS:
            if name != self.initial_tab:  # (a key may already have chosen another tab)
                await self.query_one(f"TabPane#{name}", TabPane).mount(self._content(name))
                if name == "setup" and self.query_one(TabbedContent).active == "setup":
                    self.setup_pane.focus_first()  # the tab was chosen before it was built
        pane = self._program_pane()
        if pane is not None:
            self.setup_pane.set_blocker(pane.run_blocker())
            self.setup_pane.set_exports(_exports_of(pane), prefer=self.export)
        self.set_interval(self.poll_interval, self.tick)
        # the Runs list follows runs written by other processes (a `qvr run` in another
        # terminal, a torchrun launch): re-read while its tab is shown
        self.set_interval(RUNS_POLL_SECONDS, self._poll_runs)
        if self.run_path is not None:
            self.open_run(self.run_path)
        if not self.start_method and self.setup_pane.program_lm() is not None:
            self.setup_pane.preset("smc")  # E10: a pretrained LM is steered, never fitted
        self.ready.set()
        if self.start_method:
            self.setup_pane.preset(self.start_method)
            self.action_start_fit()
        elif self._start_asked:  # the run key came while the tabs were still mounting
            self.action_start_fit()

    # ------------------------------------------------------------ the timer
    def tick(self) -> None:
        """Drain what arrived since the last tick and repaint what changed."""
        if not self.screen_stack:  # the app is closing: a last timer tick finds no screen
            return
        r = self.runner
        if r is not None:
            events = r.poll()
            if events:
                self.state.apply(events)
            if r.outcome is not None:
                self._fit_ended(r)
        elif self.follow is not None:
            alive = self.follow.run.writer_alive()
            events = self.follow.poll()
            if events:
                self.state.apply(events)
            if self.follow.terminal is None and not alive:
                self.state.mark_interrupted("the process writing the record is gone")
            if self.follow.terminal is not None or not alive:
                self.follow = None
        if self.state.is_mcmc and not self.state.finished:
            self.state.update_diagnostics()
        shown = (self.state.method, self.state.status, self.runner is None)
        if shown != self._bindings_for:  # the keys that apply changed (check_action)
            self._bindings_for = shown
            self.refresh_bindings()
        try:
            live = self.live
            live.show(self.state)
        except NoMatches:  # the app is closing, or the Live tab is not mounted yet
            return

    def _fit_ended(self, r: FitRunner) -> None:
        self.runner = None
        self.last_runner = r
        outcome = r.outcome
        if outcome in ("interrupted",) or (outcome == "failed" and r.tail is None):
            if r.tail is None:  # no record: say why, and that the folder holds none
                try:
                    held = sorted(p.name for p in Path(r.run_dir).iterdir())
                except OSError:
                    held = []
                if r.cancel_requests > 0:
                    # `x` came before the worker wrote run.json: its exit ("qvr:
                    # interrupted") is the cancel, not a failure to start
                    outcome = "cancelled_early"
                    self.state.cancelled_before_record(held)
                else:
                    self.state.start_failed(r.message, held)
            else:
                self.state.mark_interrupted(r.message)
        self.state.update_diagnostics(force=True)
        severity = {"finished": "information", "cancelled": "warning",
                    "cancelled_early": "warning"}.get(outcome, "error")
        text = {"finished": f"fit finished: {r.run_dir}",
                "cancelled": f"fit cancelled; everything so far is saved in {r.run_dir}",
                "cancelled_early": f"fit {CANCELLED_BEFORE_RECORD}: nothing was saved"}.get(
            outcome, self.state.problem() or r.message)
        self.notify(text, severity=severity, timeout=8)
        if r.tail is not None:
            self._show_results(r.run_dir)
        self._refresh_runs()

    def _show_results(self, path: Path) -> None:
        self.shown_run = Path(path)
        try:
            self.query_one("#results-pane").show_run(path)
        except Exception as exc:  # the Results pane must not take the app down
            self.notify(f"cannot show results: {exc}", severity="error")

    def _poll_runs(self) -> None:
        try:
            if self.query_one(TabbedContent).active != "runs":
                return
            runs = self.query_one("#runs-pane")
        except Exception:
            return
        poll = getattr(runs, "refresh_if_changed", None)
        if poll is not None:
            poll()

    def on_tabbed_content_tab_activated(self, event) -> None:
        if getattr(getattr(event, "pane", None), "id", None) == "runs":
            self._poll_runs()

    def _refresh_runs(self) -> None:
        self.setup_pane.refresh_runs()
        try:
            runs = self.query_one("#runs-pane")
        except Exception:
            return
        for name in ("refresh_runs", "reload", "refresh_list"):
            if hasattr(runs, name):
                getattr(runs, name)()
                break

    # ------------------------------------------------------------ runs
    def open_run(self, path) -> None:
        """Show a saved (or still written) record on Live and Results."""
        from qvr.runs import RunRecordError, open_run
        try:
            run = open_run(path)
        except RunRecordError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return
        self.opened = run
        state = RunState(vocab=_load_vocab(self.program, run))
        tail = run.tail()
        alive = run.writer_alive()
        fold_record(state, tail)  # in pieces: memory flat however long the record
        state.run_dir = _shown_path(run.path)
        if tail.terminal is None and not alive:
            state.mark_interrupted("the writer stopped without finishing the record "
                                   "(killed?); shown up to its last complete step")
        self.follow = tail if (tail.terminal is None and alive) else None
        state.update_diagnostics(force=True)
        if self.runner is None:
            self.state = state
            self.live.show(state)
        self._show_results(run.path)
        self._mark_stale(run)

    def _mark_stale(self, run) -> None:
        pane = self._program_pane()
        sha = run.source_sha256
        stale = bool(pane is not None and sha and pane.is_stale(sha))
        self.live.stale_note = "made from an older text of the program" if stale else ""
        self.live.show(self.state, force=True)

    def on_runs_pane_open_run(self, event) -> None:
        self.open_run(event.path)
        self.query_one(TabbedContent).active = "live"

    def on_program_pane_program_changed(self, event) -> None:
        if not self.ready.is_set():
            return
        pane = event.pane
        self.setup_pane.set_blocker(pane.run_blocker())
        if not pane.model.has_errors:  # exports, and a template's parameters, may change
            self.setup_pane.set_exports(_exports_of(pane))
        if self.shown_run is not None:
            from qvr.runs import RunRecordError, open_run
            try:
                self._mark_stale(open_run(self.shown_run))
            except RunRecordError:
                pass

    # ------------------------------------------------------------ actions
    def check_action(self, action: str, parameters) -> Optional[bool]:
        """A pane's keys are shown (and work) while its tab is shown and they apply to
        what it shows: ``l`` for an SVI run, ``v`` for HMC/NUTS, ``c`` for a run with
        circuits, ``p`` for any run shown (asked of the Results pane); neither ``v`` nor
        ``g`` for an MCMC fit with nothing to sample (no chain, no draw).  False hides a key from the footer;
        `tick` and the Results pane call `refresh_bindings` when that changes."""
        if action in ("live", "results"):  # a pane's keys, shown while it is the tab
            try:
                if self.query_one(TabbedContent).active != action:
                    return False
            except Exception:
                return False
            name = parameters[0] if parameters else ""
            if action == "live":
                return {"toggle_log": self.state.method == "svi",
                        "next_trace": self.state.is_mcmc and not self.state.nothing_sampled
                        }.get(name, True)
            try:
                pane = self.query_one("#results-pane")
            except NoMatches:
                return False
            return pane.check_action(name, ()) is not False
        if action == "cancel_fit":  # `x`: shown while a fit runs (Ctrl-C always works)
            return self.runner is not None
        if action == "generate":  # `g`: from a finished SVI/HMC/NUTS run that has draws
            return self._can_generate()
        return True

    def _can_generate(self) -> bool:
        return self.shown_run is not None and self.state.status == "finished" and \
            self.state.method in ("svi", "hmc", "nuts") and not self.state.nothing_sampled

    def on_tabbed_content_tab_activated(self, event) -> None:
        self.refresh_bindings()
        if event.pane is not None and event.pane.id == "setup":
            for pane in self.query(SetupPane):
                pane.focus_first()

    def action_live(self, name: str) -> None:
        if not self.ready.is_set():
            return
        getattr(self.live, f"action_{name}")()

    def action_results(self, name: str) -> None:
        """A Results pane key pressed while the focus is outside the pane (on the tab
        bar after ``4``): the pane's action all the same."""
        if not self.ready.is_set():
            return
        try:
            pane = self.query_one("#results-pane")
        except NoMatches:
            return
        getattr(pane, f"action_{name}")()

    def action_tab(self, name: str) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = name
        pane = tabs.get_pane(name)
        focused = self.focused
        if name == "setup" and self.query(SetupPane):
            self.setup_pane.focus_first()  # now, so that keys typed next land in the form
        elif name == "runs" and self.query("#runs-table"):
            # the pane's header says "enter open": enter must reach the table, not the tab bar
            self.query_one("#runs-table").focus()
        elif focused is not None and pane not in focused.ancestors_with_self:
            # focus left in a hidden pane would bring its tab back: move it to the tab bar
            tabs.query_one(Tabs).focus()

    def action_start_fit(self) -> None:
        if not self.ready.is_set():
            self._start_asked = True  # kept, not dropped: started once every tab is wired
            return
        self._start_asked = False
        if self.runner is not None:
            self.notify("a fit is running: x cancels it", severity="warning")
            return
        if not self.program:
            self.notify("no program open: start with `qvr dash FILE`", severity="error")
            return
        pane = self._program_pane()
        if pane is not None and not pane.can_run:
            self.notify(pane.run_blocker() or "the program has errors", severity="error",
                        timeout=8)
            self.action_tab("program")
            return
        setup = self.setup_pane
        cfg, errors = setup.build_config()
        if errors:
            self.action_tab("setup")
            first = next(iter(errors.items()))
            self.notify(f"fix the options first: {first[0]}: {first[1]}", severity="error",
                        timeout=8)
            return
        from qvr.runs import RecordError, new_run_dir
        try:
            run_dir = new_run_dir(self.runs_dir, Path(self.program).stem)
        except RecordError as exc:
            self.state = RunState()
            self.state.status = "failed"
            self.state.message = str(exc)
            self.live.show(self.state, force=True)
            self.notify(str(exc), severity="error", timeout=8)
            return
        request = setup.build_request(str(run_dir))
        self.begin(request)

    def begin(self, request: FitRequest) -> FitRunner:
        vocab = (request.vocab or _load_vocab(self.program)) \
            if request.config.method == "smc" else None
        self.state = RunState(vocab=vocab)
        self.state.requested = request.config.method
        if request.config.method == "smc":  # the program's own potentials (E10), shown
            from qvr.sema.pretrained_export import steered_in_file  # (torch-free)
            own = steered_in_file(request.program, request.export)
            self.state.potentials = tuple(sc.name for sc in own.scores) if own else ()
        self.state.run_dir = _shown_path(request.run_dir)
        self.live.stale_note = ""
        self.follow = None
        self.runner = FitRunner(request, python=self.python).start()
        self.shown_run = Path(request.run_dir)
        self.live.show(self.state, force=True)
        self.action_tab("live")
        return self.runner

    def action_cancel_key(self) -> None:
        """Ctrl-C: cancels a running fit, else says that nothing runs (never quits)."""
        self.action_cancel_fit()

    def action_cancel_fit(self) -> None:
        r = self.runner
        if r is None or not r.cancel():
            self.notify("no fit is running (q quits)")
            return
        if r.cancel_requests == 1:
            self.notify("stopping after this step; everything so far is kept "
                        "(cancel again to abort)", severity="warning")
        else:
            self.notify("aborting the fit", severity="warning")

    def action_generate(self) -> None:
        """Set up SMC generation from the finished run shown (then `r` starts it)."""
        if not self.ready.is_set():
            return
        run_dir = self.shown_run
        if run_dir is None or not self._can_generate():
            self.notify("g needs a finished SVI/HMC/NUTS run on Live", severity="warning")
            return
        self.setup_pane.preset("smc", start_from=str(run_dir))
        self.action_tab("setup")
        self.notify(f"SMC from {run_dir.name}: r starts it")

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def action_quit_app(self) -> None:
        if self.runner is None:
            self.exit()
            return

        def answer(yes: Optional[bool]) -> None:
            if yes:
                if self.runner is not None:
                    self.runner.cancel()  # it stops after its step and saves everything
                self.exit()

        self.push_screen(Confirm("A fit is running. Cancel it (everything so far is saved) "
                                 "and quit?"), answer)
