"""The Runs pane: past runs of one program from its runs folder; reopen any, overlay two.

`RunsPane(program_path, runs_dir="runs")` is a container an app composes.  It lists
`qvr.runs.list_runs(runs_dir, program=program_path)` (newest first) in a `RunsTable`
with each run's status (finished, cancelled, failed, interrupted, running), method,
start time, key number (SVI final loss, MCMC max R-hat, SMC log Z-hat) and a *stale*
mark when the program's text has changed since.  Keys: Enter opens the run under the
cursor (posts `RunsPane.OpenRun(path)`); space marks a run; ``o`` with two runs marked
overlays their curves in one plot below the table (SVI losses, MCMC mean log density
per draw, SMC log Z-hat per step; `runs_model.curve`) and posts
`RunsPane.Overlay(paths)`; ``C`` with two or more runs marked compares them by PSIS-LOO
(`qvr.inference.criticism.checks.compare`, in a worker thread: it imports arviz-stats) in a
`CompareTable` below the table, with the verdict under it, and posts
`RunsPane.Compared(comparison)`; runs that cannot be compared (fitted to different data,
no pointwise terms) get the refusal as the message line.  The overlay and the
comparison take the same place: showing one hides the other.  F5 calls
`refresh_runs()` (the app calls it too, e.g. when a fit ends, and `refresh_if_changed()`
every few seconds while the tab is shown: runs written by other processes appear and
their statuses follow).  Torch-free.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.worker import get_current_worker
from textual.message import Message
from textual.widgets import DataTable, Static
from textual_plot import HiResMode, PlotWidget

from qvr.runs import RunRecordError, open_run
from qvr_tui.predictive_model import Comparison, compare_runs
from qvr_tui.runs_model import curve, run_rows
from qvr_tui.screens.results import display_path
from qvr_tui.widgets.param_plots import CHAIN_COLOURS, decimate, make_plot, points_for
from qvr_tui.widgets.compare_table import CompareTable
from qvr_tui.widgets.runs_table import RunsTable

__all__ = ["RunsPane"]


class RunsPane(Vertical):
    """See the module docstring."""

    DEFAULT_CSS = """
    RunsPane { height: 1fr; }
    RunsPane > #runs-header { height: 1; padding: 0 1; background: $panel; }
    RunsPane > #runs-table { height: 1fr; min-height: 4; }
    RunsPane > #runs-overlay { height: 1fr; min-height: 8; border: round $border; display: none; }
    RunsPane > #runs-overlay.-shown { display: block; }
    RunsPane > #runs-message { height: auto; padding: 0 1; color: $text-warning; }
    RunsPane > #runs-compare { height: auto; display: none; border: round $border; }
    RunsPane > #runs-compare.-shown { display: block; }
    RunsPane #compare-verdict { height: auto; padding: 0 1; }
    """

    BINDINGS = [
        Binding("space", "mark", "Mark"),
        Binding("o", "overlay", "Overlay 2"),
        Binding("C", "compare", "Compare"),
        Binding("f5", "refresh_runs", "Refresh"),
    ]

    class OpenRun(Message):
        """Enter on a run: the app shows it in the Results pane."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = Path(path)

    class Overlay(Message):
        """Two runs' curves were overlaid (in this pane's plot)."""

        def __init__(self, paths: list[Path]) -> None:
            super().__init__()
            self.paths = [Path(p) for p in paths]

    class Compared(Message):
        """The marked runs were compared (`comparison.error`: the refusal, or why not)."""

        def __init__(self, comparison: Comparison) -> None:
            super().__init__()
            self.comparison = comparison
            self.paths = list(comparison.paths)

    def __init__(self, program_path, runs_dir="runs", *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.program_path = Path(program_path)
        self.runs_dir = Path(runs_dir)
        self.overlay_series: list[tuple[str, int]] = []  # (label, points) drawn
        self.comparison: Optional[Comparison] = None  # the last one shown (or refused)
        self._compare_generation = 0

    def compose(self) -> ComposeResult:
        yield Static("", id="runs-header")
        yield RunsTable(id="runs-table")
        yield make_plot("runs-overlay", "overlay")
        with Vertical(id="runs-compare"):
            yield CompareTable(id="compare-table")
            yield Static("", id="compare-verdict")
        yield Static("", id="runs-message")

    def on_mount(self) -> None:
        self.refresh_runs()

    @property
    def table(self) -> RunsTable:
        return self.query_one("#runs-table", RunsTable)

    def refresh_runs(self) -> None:
        """Re-read the runs folder (statuses of running runs change)."""
        rows = run_rows(self.runs_dir, self.program_path)
        self.table.set_runs(rows)
        head = Text()
        head.append(f"Runs of {self.program_path.name}", style="bold")
        head.append(f" in {display_path(self.runs_dir)}/ ({len(rows)}) · enter open · "
                    f"space mark · o overlay · C compare")
        self.query_one("#runs-header", Static).update(head)
        if not rows:
            self._say(f"No runs of {self.program_path.name} in {display_path(self.runs_dir)}/ yet.")
        elif not self.overlay_series and self.comparison is None:
            self._say("")

    def action_refresh_runs(self) -> None:
        self.refresh_runs()

    def refresh_if_changed(self) -> bool:
        """Re-read the runs folder and redraw the table only when a run appeared, went or
        changed status or key number (the app calls it every few seconds while the tab
        is shown); returns whether it redrew."""
        rows = run_rows(self.runs_dir, self.program_path)
        def key(rs):  # str: a NaN key number equals itself
            return [(r.path, r.status, str(r.key_value)) for r in rs]
        if key(rows) == key(self.table.runs):
            return False
        self.refresh_runs()
        return True

    def _say(self, text: str) -> None:
        self.query_one("#runs-message", Static).update(text)

    @on(DataTable.RowSelected, "#runs-table")
    def _on_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        r = self.table.run_at_cursor()
        if r is not None:
            self.post_message(self.OpenRun(r.path))

    def action_mark(self) -> None:
        self.table.toggle_mark()
        n = len(self.table.marked)
        self._say(f"{n} marked" + (" · o overlays them, C compares them" if n == 2 else
                                   " · mark two runs to overlay or compare" if n < 2 else
                                   " · o overlays the last two, C compares them all"))

    def action_overlay(self) -> None:
        marked = self.table.marked
        if len(marked) < 2:
            self._say("Mark two runs with space, then press o.")
            return
        self.overlay(marked[-2:])

    def overlay(self, paths) -> bool:
        """Draw the curves of the runs in `paths` in one plot; False (with a message)
        when they cannot be read or their curves are of different kinds."""
        curves = []
        for p in paths:
            try:
                curves.append((Path(p), *curve(open_run(p))))
            except (RunRecordError, OSError, ValueError) as exc:
                self._say(f"Cannot overlay {Path(p).name}: {exc}")
                return False
        kinds = {c[1] for c in curves}
        if len(kinds) > 1:
            self._say("Cannot overlay curves of different kinds: "
                      + ", ".join(f"{c[0].name} ({c[1]})" for c in curves))
            return False
        plot = self.query_one("#runs-overlay", PlotWidget)
        plot.clear()
        self.overlay_series = []
        for i, (p, label, x, y) in enumerate(curves):
            if len(y) == 0:
                continue
            xd, yd = decimate(np.asarray(x, float), np.asarray(y, float), points_for(plot))
            plot.plot(xd, yd, line_style=CHAIN_COLOURS[i % len(CHAIN_COLOURS)],
                      hires_mode=HiResMode.BRAILLE, label=p.name)
            self.overlay_series.append((p.name, len(xd)))
        plot.show_legend(is_visible=True)
        plot.border_title = f"{next(iter(kinds))}: " + " vs ".join(
            f"{p.name}" for p, *_ in curves)
        plot.add_class("-shown")
        self.query_one("#runs-compare").remove_class("-shown")  # one or the other
        self.comparison = None
        empty = [p.name for p, _, _, y in curves if len(y) == 0]
        self._say(f"nothing recorded to draw for {', '.join(empty)}" if empty else "")
        self.post_message(self.Overlay([c[0] for c in curves]))
        return True

    # ------------------------------------------------------------ comparison
    def action_compare(self) -> None:
        marked = self.table.marked
        if len(marked) < 2:
            self._say("Mark two or more runs with space, then press C to compare them.")
            return
        self.compare(marked)

    def compare(self, paths) -> None:
        """Compare the runs in `paths` by PSIS-LOO in a worker thread (the newest request
        wins); the table, or the refusal, shows when it is done (`Compared`)."""
        paths = [Path(p) for p in paths]
        self._compare_generation += 1
        gen = self._compare_generation
        self._say(f"comparing {len(paths)} runs by PSIS-LOO …")
        self.run_worker(lambda: self._compare_thread(paths, gen), thread=True,
                        group="runs-compare", exit_on_error=False)

    def _compare_thread(self, paths: list, gen: int) -> None:
        try:
            result = compare_runs(paths)
        except Exception as exc:  # compare_runs says its failures; this is a bug
            result = Comparison(error=f"cannot compare: {type(exc).__name__}: {exc}",
                                paths=tuple(paths))
        if get_current_worker().is_cancelled:
            return
        self.app.call_from_thread(self._show_comparison, result, gen)

    def _show_comparison(self, result: Comparison, gen: int) -> None:
        if gen != self._compare_generation or not self.is_attached:
            return  # a newer comparison was asked for
        self.comparison = result
        box = self.query_one("#runs-compare")
        if result.error:
            box.remove_class("-shown")
            self._say(result.error)
        else:
            self.query_one("#compare-table", CompareTable).show(result)
            verdict = self.query_one("#compare-verdict", Static)
            verdict.update(Text(result.verdict, style="bold") if result.verdict else "")
            box.border_title = f"PSIS-LOO comparison of {len(result.rows)} runs"
            box.add_class("-shown")
            self.query_one("#runs-overlay").remove_class("-shown")  # one or the other
            self.overlay_series = []
            warn = [r.name for r in result.rows if r.warning]
            self._say(f"high Pareto k in {', '.join(warn)}: "
                      f"{'its' if len(warn) == 1 else 'their'} LOO is unreliable"
                      if warn else "")
        self.post_message(self.Compared(result))
