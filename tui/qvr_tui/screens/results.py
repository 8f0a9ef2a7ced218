"""The Results pane: what one run record holds, for any method and any status.

`ResultsPane(run_path, program_path=None)` is a container an app composes (a tab or a
mode); `show_run(path)` switches it to another record (None: nothing open).  The stale
check reads the program file the record names (``program_path`` stands in when that file
is gone).  Data comes
from `qvr_tui.results_model.load_results` (torch-free; the table's rows from
`qvr_tui.table_model`, the plots' from `qvr_tui.plots_model`); this module only lays it out.

* Always: a header with the method, the status (finished / cancelled / failed with its
  message / interrupted / running), a *partial* note when the record ends before its
  summary (then everything is rebuilt from the draws chunks and events), a stale mark
  when the program file's text is no longer the text that was run (the record's
  ``program.sha256`` against `program_model.source_sha256` of the file now), and the run
  folder.
* MCMC: `ChecksRow` (Stan's five checks, green/red), the `SummaryTable` grouped by site
  (``s`` cycles the sort: record order, worst R-hat first, lowest bulk ESS, lowest tail
  ESS, name; ``/`` filters by substring; Enter expands a site to its coordinates, and
  folds it again from one of them; ← → scroll a wide table),
  and below it the `ParamPlots` of the coordinate under the cursor (per-chain trace with
  divergent draws, rank plot, histogram); on a 2-D site ``h`` shows its heatmap instead,
  ``m`` switches posterior mean / sd.  ``e`` exports the draws to ArviZ NetCDF
  (``RUN/posterior.nc``) when ArviZ is installed, else says how to install it.
* SVI: final loss and ELBO, the loss curve, the guide's locations/scales per site (in
  the site's unconstrained space: ``u 3×3`` beside a 3×4 simplex plate); on a matrix
  the heatmap of its location (``m``: scale).  A minibatch fit's header adds its batch
  and epochs, and the processes of a torchrun launch (`results_model.batch_facts`).
* An approximation (SVI, Laplace, Pathfinder; any run whose stats hold it): its Pareto
  k-hat in the notes below the header (``ⓘ Pareto k-hat 0.64 (1000 draws): usable (0.5
  to 0.7)``) and above 0.7 the run's warning with its advice (``⚠ Pareto k-hat 0.98 >
  0.7: ...``); a record without one shows neither.
* Recorded quantities (``record v = e``, E9.6) are rows like sites, their names followed
  by `RECORDED_MARK`: MCMC plots their draws as a site's; SVI lists their posterior mean
  and sd over the guide's draws in the guide table (a matrix: its heatmap).
* SMC: log Z-hat and the top sequences with their weights (text through the record's
  vocabulary; steering a pretrained LM, the record's detokenised continuations, the model
  and the prompt on the header's second line).
* Circuits (a fitted program with attention layers: the record holds ``circuits.npz``):
  ``c`` switches to the `CircuitsView` (per layer and head the QK and OV circuit heatmaps
  and the attention pattern of a recorded input sequence; its keys in its own docstring)
  and back.  A record read again while it is written keeps the view and the choice.
* Predictive checks (issue 25; any run): ``p`` switches to the `PredictiveView` and back:
  per observed site the observed distribution against its replicates, the test
  statistics with p-values (red where extreme), the per-group summary, the LOO-PIT, and
  the `LooPanel` (elpd_loo, SE, p_loo, the Pareto-k plot, the high-k rows); a record
  without them says why in one line.  The checks are read from the finished record
  (``ppc.json``, ``loo.json``), by the live view and a reopened run alike.

The record is read in a worker thread (`show_run` returns at once; the newest request
wins); a record still being written (status running) is read again every
`RUNNING_REFRESH` seconds until it ends.  Messages: `ResultsPane.Loaded(results)` once a record is shown (None: nothing or
an unreadable folder, the reason in `load_error`); `ResultsPane.Exported(path, message)`
after an ArviZ export attempt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Input, Static
from textual_plot import HiResMode, PlotWidget

from qvr.runs import RunRecordError, open_run
from qvr_tui.program_model import read_program, source_sha256
from qvr_tui.arviz_export import ArvizMissing, export_arviz
from qvr_tui.plots_model import param_series, site_matrix
from qvr_tui.results_data import Results, squeeze_shape
from qvr_tui.results_model import batch_facts, load_results
from qvr_tui.table_model import SORT_KEYS, table_rows
from qvr_tui.widgets.checks import ChecksRow
from qvr_tui.widgets.circuits import CircuitsView
from qvr_tui.widgets.heatmap import Heatmap
from qvr_tui.widgets.param_plots import ParamPlots, decimate, make_plot, points_for
from qvr_tui.widgets.predictive import PredictiveView
from qvr_tui.widgets.summary_table import SummaryTable, fmt

__all__ = ["ResultsPane", "stale_note", "status_text", "display_path"]

SORT_ORDER = tuple(SORT_KEYS)  # order, r_hat, ess_bulk, ess_tail, name
#: after the name of a recorded quantity (``record v = e``, E9.6) in the summary and guide
#: tables (as `qvr show` marks it)
RECORDED_MARK = " (recorded)"


class _Summary(SummaryTable):
    """The summary table, a recorded quantity's site row marked `RECORDED_MARK`."""

    def cells(self, r):
        cells = super().cells(r)
        if r.coord is None and getattr(r.row, "recorded", False):
            cells[0] = f"{cells[0]}{RECORDED_MARK}"
        return cells


def stale_note(run_sha256: Optional[str], program_path: Optional[str]) -> str:
    """"" when the program file still has the text that was run, else why not."""
    if not program_path:
        return ""
    try:
        now = source_sha256(read_program(program_path))
    except (OSError, UnicodeDecodeError):
        return f"program {program_path} is gone or unreadable"
    if run_sha256 and now != run_sha256:
        return f"made from an older text of {Path(program_path).name}"
    return ""


def display_path(path) -> str:
    """`path` relative to the working directory when it lies below it (as typed)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def status_text(res: Results) -> Text:
    """The header's status part, coloured by outcome."""
    style = {"finished": "bold green", "failed": "bold red", "cancelled": "bold yellow",
             "interrupted": "bold yellow", "running": "bold cyan"}.get(res.status, "bold")
    t = Text(res.status, style=style)
    if res.status == "failed" and res.message:
        t.append(f": {res.message}", style="red")
    elif res.message and res.status != "finished":
        t.append(f": {res.message}")
    return t


def _dims(shape) -> str:
    return "×".join(map(str, shape)) or "scalar"


def guide_shape_text(g) -> str:
    """The shape column of the SVI guide table: the site's shape, and the guide's own in
    ``(u …)`` when its coordinates are unconstrained (`GuideSite.unconstrained`: a 3×4
    simplex plate reads ``3×4 (u 3×3)``).  Length-1 axes are not a difference (the rule
    is `GuideSite`'s): a site of shape 1 whose guide holds one number reads ``scalar``
    (it read ``1 (u scalar)``), an 8-vector with an 8×1 guide reads ``8``."""
    if g.site_shape is None:
        return _dims(g.squeezed)
    if g.unconstrained:
        return f"{_dims(tuple(g.site_shape))} (u {_dims(g.shape)})"
    return _dims(squeeze_shape(g.site_shape))


class ResultsPane(Vertical):
    """See the module docstring."""

    DEFAULT_CSS = """
    ResultsPane { height: 1fr; }
    ResultsPane > #results-header { height: auto; max-height: 3; padding: 0 1; background: $panel; }
    ResultsPane > #results-notes { height: auto; padding: 0 1; color: $text-warning; }
    ResultsPane > #results-notes.-empty { display: none; }
    ResultsPane #results-switcher { height: 1fr; }
    ResultsPane #mcmc, ResultsPane #svi, ResultsPane #smc, ResultsPane #empty { height: 1fr; }
    ResultsPane #circuits, ResultsPane #predictive { height: 1fr; }
    ResultsPane #results-filter { height: 1; border: none; padding: 0 1; display: none; }
    ResultsPane #results-filter.-shown { display: block; }
    ResultsPane #summary-bar { height: 1; padding: 0 1; color: $text-muted; }
    ResultsPane #summary { height: 1fr; min-height: 4; }
    ResultsPane #detail { height: 1fr; min-height: 6; }
    ResultsPane #param-heatmap, ResultsPane #svi-heatmap { height: 1fr; }
    ResultsPane #svi-top { height: 1fr; }
    ResultsPane #svi-loss { width: 1fr; min-width: 24; border: round $border; }
    ResultsPane #guide-table { width: auto; max-width: 70%; }
    ResultsPane #svi-detail { height: 1fr; }
    ResultsPane #smc-table { height: 1fr; }
    ResultsPane #results-footer { height: 1; padding: 0 1; color: $text-muted; background: $panel; }
    """

    RUNNING_REFRESH = 3.0  # seconds between re-reads of a record that is still written

    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("h", "toggle_heatmap", "Heatmap"),
        Binding("m", "toggle_stat", "Mean/sd"),
        Binding("e", "export", "ArviZ"),
        Binding("c", "toggle_circuits", "Circuits"),
        Binding("p", "toggle_predictive", "Predictive"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    class Loaded(Message):
        def __init__(self, pane: "ResultsPane", results: Optional[Results]) -> None:
            super().__init__()
            self.pane = pane
            self.results = results

        @property
        def control(self) -> "ResultsPane":
            return self.pane

    class Exported(Message):
        def __init__(self, pane: "ResultsPane", path: Optional[Path], message: str) -> None:
            super().__init__()
            self.pane = pane
            self.path = path
            self.message = message

        @property
        def control(self) -> "ResultsPane":
            return self.pane

    def __init__(self, run_path: Optional[Path] = None, program_path=None, *, id=None,
                 classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.run_path = Path(run_path) if run_path is not None else None
        self.program_path = str(program_path) if program_path is not None else None
        self.results: Optional[Results] = None
        self.load_error = ""
        self.stale = ""
        self.sort = "order"
        self.query_text = ""
        self.expanded: set = set()
        self.heatmap_on = False
        self.stat = "mean"
        self.selected: Optional[str] = None  # coordinate label or site shown in the detail
        self.last_export = ""
        self.circuits_on = False  # the Circuits view is shown instead of the method's view
        self.predictive_on = False  # the predictive checks are shown instead
        self._generation = 0

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static("", id="results-header")
        yield Static("", id="results-notes", classes="-empty")
        with ContentSwitcher(initial="empty", id="results-switcher"):
            yield Static("No run open. Open one from the Runs tab, or start a fit.", id="empty")
            with Vertical(id="mcmc"):
                yield ChecksRow(id="checks")
                yield Input(placeholder="filter sites and coordinates", id="results-filter")
                yield Static("", id="summary-bar")
                yield _Summary(id="summary")
                with ContentSwitcher(initial="param-plots", id="detail"):
                    yield ParamPlots(id="param-plots")
                    yield Heatmap(np.zeros((1, 1)), id="param-heatmap")
            with Vertical(id="svi"):
                with Horizontal(id="svi-top"):
                    yield make_plot("svi-loss", "loss")
                    yield DataTable(id="guide-table", cursor_type="row", zebra_stripes=True)
                yield Heatmap(np.zeros((1, 1)), id="svi-heatmap")
            with Vertical(id="smc"):
                yield DataTable(id="smc-table", cursor_type="row", zebra_stripes=True)
            yield CircuitsView(id="circuits")
            yield PredictiveView(id="predictive")
        yield Static("", id="results-footer")

    def on_mount(self) -> None:
        self.query_one("#svi-heatmap", Heatmap).display = False
        self._load()

    # ------------------------------------------------------------------ loading
    def show_run(self, path) -> None:
        """Show the record in folder `path` (None: nothing)."""
        self.run_path = Path(path) if path is not None else None
        self.sort, self.query_text, self.expanded = "order", "", set()
        self.heatmap_on, self.stat, self.selected = False, "mean", None
        self.circuits_on = self.predictive_on = False
        box = self.query_one("#results-filter", Input)  # the filter was reset: so is its box
        with box.prevent(Input.Changed):
            box.value = ""
        box.remove_class("-shown")
        self._load()

    def _load(self) -> None:
        """Read the record off the UI thread (a partial record with many coordinates is
        summarised from its draws, which takes seconds); the newest request wins."""
        self._generation += 1
        gen, path = self._generation, self.run_path
        if path is None:
            self._apply(None, "", gen)
            return
        self.query_one("#results-header", Static).update(f"Loading {display_path(path)} …")
        self.run_worker(lambda: self._read(path, gen), thread=True, group="results-load",
                        exit_on_error=False)

    def _read(self, path: Path, gen: int) -> None:
        try:
            res, err = load_results(open_run(path)), ""
        except (RunRecordError, OSError, ValueError) as exc:
            res, err = None, str(exc)
        except Exception as exc:  # a bug: said in the pane, never a crash of the app
            res, err = None, f"{path}: cannot show the results: {type(exc).__name__}: {exc}"
        self.app.call_from_thread(self._apply, res, err, gen)

    def _apply(self, res: Optional[Results], err: str, gen: int) -> None:
        if gen != self._generation or not self.is_attached:
            return  # a newer show_run superseded this load
        same = (self.results is not None and res is not None
                and self.results.path == res.path)
        self.results, self.load_error, self.stale = res, err, ""
        if res is not None:
            # the recorded program file; the given one when that is gone (a moved checkout)
            path = res.program_path
            if self.program_path and (not path or not Path(path).exists()):
                path = self.program_path
            self.stale = stale_note(res.source_sha256, path)
        self._render_header()
        switcher = self.query_one("#results-switcher", ContentSwitcher)
        if res is None:
            switcher.current = "empty"
            self.query_one("#empty", Static).update(
                self.load_error or "No run open. Open one from the Runs tab, or start a fit.")
        elif res.is_mcmc:
            switcher.current = "mcmc"
            self._fill_mcmc()
        elif res.method in ("svi", "prior", "predict", "pathfinder"):  # draws: shown
            # as SVI's guide draws (prior, predicted, Pathfinder's)
            switcher.current = "svi"
            self._fill_svi()
        else:
            switcher.current = "smc"
            self._fill_smc()
        circuits = res.circuits if res is not None else None
        self.query_one("#circuits", CircuitsView).show(circuits, keep=same)
        if circuits is None:
            self.circuits_on = False
        elif self.circuits_on:
            switcher.current = "circuits"
        self.query_one("#predictive", PredictiveView).show(
            res.predictive if res is not None else None, res.loo if res is not None else None,
            res.predictive_note if res is not None else "", keep=same)
        if res is None:
            self.predictive_on = False
        elif self.predictive_on:
            switcher.current = "predictive"
        if res is not None and res.status == "running":
            # a fit still writing this record: read it again shortly (newest read wins)
            self.set_timer(self.RUNNING_REFRESH, lambda: self._reload_running(gen))
        self.refresh_bindings()  # the keys shown depend on the run (check_action)
        self.app.refresh_bindings()  # the app's `c` too
        self.post_message(self.Loaded(self, res))

    # ------------------------------------------------------------------ keys shown
    def check_action(self, action: str, parameters) -> Optional[bool]:
        """Hide (and disable) the keys that do nothing for the run shown: filter, sort
        and the ArviZ export are MCMC keys, the heatmap needs a matrix site (MCMC: any
        site, checked on the row; SVI: a matrix guide site), ``c`` needs circuits.  An
        MCMC run without chains (nothing to sample: `Results.note`) has none of the MCMC
        keys: there is nothing to filter, sort, export or draw.
        `_apply` calls `refresh_bindings` when another run is shown."""
        res = self.results
        chains = res is not None and res.is_mcmc and res.num_chains > 0
        if action in ("filter", "cycle_sort", "export"):
            return chains
        if action == "toggle_heatmap":
            return chains or (res is not None and any(g.is_matrix for g in res.guide))
        if action == "toggle_stat":
            return chains or (res is not None and res.method == "svi")
        if action == "toggle_circuits":
            return res is not None and res.circuits is not None
        if action == "toggle_predictive":  # any run: the view says when it has none
            return res is not None
        return True

    def _reload_running(self, gen: int) -> None:
        if gen == self._generation and self.results is not None \
                and self.results.status == "running":
            self._load()

    def _render_header(self) -> None:
        res = self.results
        header = self.query_one("#results-header", Static)
        notes = self.query_one("#results-notes", Static)
        footer = self.query_one("#results-footer", Static)
        if res is None:
            header.update(Text("Results", style="bold"))
            notes.update("")
            notes.add_class("-empty")
            footer.update(str(self.run_path) if self.run_path else "")
            return
        t = Text()
        t.append(f"{res.method.upper()} ", style="bold")
        t.append(res.path.name + "  ")
        t.append_text(status_text(res))
        facts = batch_facts(res)  # minibatch SVI, processes of a launch; else empty
        if facts:
            t.append(f" · {facts}", style="dim")
        header.update(t)
        lines = []
        if self.stale:
            lines.append(f"⚠ stale: {self.stale}")
        if res.partial:
            lines.append(f"◐ {res.partial_note}")
        if res.note:
            lines.append(f"ⓘ {res.note}")
        if res.khat:  # an approximation (SVI, Laplace, Pathfinder): how good it is
            lines.append(f"ⓘ {res.khat}")
        if res.khat_warning:
            lines.append(f"⚠ {res.khat_warning}")
        if res.metric_note:
            lines.append(f"ⓘ {res.metric_note}")
        notes.update("\n".join(lines))
        notes.set_class(not lines, "-empty")
        keys = "  e: export draws to ArviZ" if res.is_mcmc and res.num_chains else ""
        if res.circuits is not None:
            keys += "  c: circuits"
        keys += "  p: predictive checks"
        footer.update(Text(f"run folder: {display_path(res.path)}{keys}", overflow="ellipsis",
                           no_wrap=True))

    # ------------------------------------------------------------------ MCMC
    def _fill_mcmc(self) -> None:
        res = self.results
        chains = bool(res.num_chains)  # none: nothing was sampled (the note says why)
        for wid in ("#checks", "#summary", "#detail"):
            self.query_one(wid).display = chains
        checks = self.query_one("#checks", ChecksRow)
        self.run_worker(checks.set_checks(res.checks), exclusive=True, group="checks")
        self._refresh_table()
        self._update_detail()

    def _refresh_table(self) -> None:
        res = self.results
        rows = table_rows(res.sites, self.sort, self.query_text, self.expanded)
        table = self.query_one("#summary", SummaryTable)
        table.show(rows, res.num_chains, self.expanded)
        n_coords = sum(len(s.coords) for s in res.sites)
        n_rec = sum(1 for s in res.sites if s.recorded)
        rec = f" ({n_rec} recorded)" if n_rec else ""
        bar = (f"{len(res.sites)} sites{rec}, {n_coords} coordinates, {res.num_chains} chains × "
               f"{res.num_draws} draws · sort: {SORT_KEYS[self.sort][0]} (s)")
        if not res.num_chains and res.note:
            bar = "no chain ran: nothing to summarise"  # the note above says why
        if self.query_text:
            bar += f" · filter “{self.query_text}”: {sum(1 for r in rows if r.depth == 0)} sites"
        if res.truncated:
            bar += f" · {res.truncated} coordinates not summarised"
        self.query_one("#summary-bar", Static).update(bar)

    def current_label(self) -> Optional[str]:
        """The coordinate (or site) under the summary cursor."""
        r = self.query_one("#summary", SummaryTable).row_at_cursor()
        if r is None:
            return None
        if r.coord is not None:
            return r.coord.label
        return r.site

    def _update_detail(self) -> None:
        res = self.results
        if res is None or not res.is_mcmc:
            return
        table = self.query_one("#summary", SummaryTable)
        r = table.row_at_cursor()
        detail = self.query_one("#detail", ContentSwitcher)
        plots = self.query_one("#param-plots", ParamPlots)
        if r is None:
            plots.clear()
            return
        if self.heatmap_on and r.row.is_matrix:
            m = site_matrix(res, r.site, self.stat)
            hm = self.query_one("#param-heatmap", Heatmap)
            hm.diverging = self.stat == "mean"
            hm.set_matrix(m, f"{r.site} posterior {self.stat} {r.row.shape_text} (m: mean/sd)")
            detail.current = "param-heatmap"
            self.selected = r.site
            return
        detail.current = "param-plots"
        label = r.coord.label if r.coord is not None else (
            r.site if not r.row.shape else r.row.coords[0].label)
        if label == self.selected and plots.series is not None:
            return
        self.selected = label
        s = param_series(res, label)
        if s is None:
            plots.clear()
        else:
            plots.show(s)

    @on(DataTable.RowHighlighted, "#summary")
    def _on_highlight(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._update_detail()

    @on(DataTable.RowSelected, "#summary")
    def _on_select(self, event: DataTable.RowSelected) -> None:
        event.stop()
        r = self.query_one("#summary", SummaryTable).row_at_cursor()
        if r is None or not r.row.shape:
            return
        if r.coord is None:
            self._set_expanded(r.site, r.site not in self.expanded)
        else:  # on a coordinate: fold its site and go back to it
            self.action_expand(False)

    def _set_expanded(self, site: str, on_: bool) -> None:
        if on_:
            self.expanded.add(site)
        else:
            self.expanded.discard(site)
        self._refresh_table()
        self._update_detail()

    def action_expand(self, on_: bool) -> None:
        if self.results is None or not self.results.is_mcmc:
            return
        r = self.query_one("#summary", SummaryTable).row_at_cursor()
        if r is None or not r.row.shape:
            return
        if not on_ and r.coord is not None:  # ← on a coordinate: back to its site
            self._set_expanded(r.site, False)
            keys = [x.key for x in self.query_one("#summary", SummaryTable).rows_shown]
            self.query_one("#summary", SummaryTable).move_cursor(row=keys.index(r.site))
            return
        self._set_expanded(r.site, on_)

    def action_cycle_sort(self) -> None:
        if self.results is None or not self.results.is_mcmc:
            return
        self.sort = SORT_ORDER[(SORT_ORDER.index(self.sort) + 1) % len(SORT_ORDER)]
        self._refresh_table()
        self.query_one("#summary", SummaryTable).move_cursor(row=0)
        self._update_detail()

    def set_sort(self, key: str) -> None:
        if key not in SORT_KEYS:
            raise ValueError(f"unknown sort {key!r} (one of {', '.join(SORT_KEYS)})")
        self.sort = key
        self._refresh_table()
        self._update_detail()

    def action_filter(self) -> None:
        if self.results is None or not self.results.is_mcmc:
            return
        box = self.query_one("#results-filter", Input)
        box.add_class("-shown")
        box.value = self.query_text
        box.focus()

    def set_filter(self, text: str) -> None:
        self.query_text = text
        self._refresh_table()
        self._update_detail()

    @on(Input.Changed, "#results-filter")
    def _on_filter_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.set_filter(event.value)

    @on(Input.Submitted, "#results-filter")
    def _on_filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one("#summary", SummaryTable).focus()
        if not self.query_text:
            self.query_one("#results-filter", Input).remove_class("-shown")

    def action_clear_filter(self) -> None:
        box = self.query_one("#results-filter", Input)
        box.remove_class("-shown")
        if self.query_text:
            self.set_filter("")
        if self.results is not None and self.results.is_mcmc:
            self.query_one("#summary", SummaryTable).focus()

    def action_toggle_heatmap(self) -> None:
        res = self.results
        if res is None:
            return
        if res.method == "svi":
            hm = self.query_one("#svi-heatmap", Heatmap)
            hm.display = not hm.display
            self._update_svi_heatmap()
            return
        if not res.is_mcmc:
            return
        r = self.query_one("#summary", SummaryTable).row_at_cursor()
        if r is None or not r.row.is_matrix:
            self.notify("The heatmap is for 2-D sites (a matrix); this one is not.",
                        severity="warning", timeout=3)
            return
        self.heatmap_on = not self.heatmap_on
        self._update_detail()

    def action_toggle_stat(self) -> None:
        self.stat = "sd" if self.stat == "mean" else "mean"
        if self.results is not None and self.results.method == "svi":
            self._update_svi_heatmap()
        else:
            self._update_detail()

    def action_export(self) -> None:
        res = self.results
        if res is None or not res.is_mcmc:
            self.notify("Only MCMC draws are exported to ArviZ.", severity="warning", timeout=3)
            return
        try:
            path = export_arviz(res)
        except ArvizMissing as exc:
            self.last_export = str(exc)
            self.notify(str(exc), severity="warning", timeout=6)
            self.post_message(self.Exported(self, None, str(exc)))
            return
        except (ValueError, OSError) as exc:
            self.last_export = str(exc)
            self.notify(str(exc), severity="error", timeout=6)
            self.post_message(self.Exported(self, None, str(exc)))
            return
        self.last_export = f"draws written to {path}"
        self.notify(self.last_export, timeout=4)
        self.post_message(self.Exported(self, path, self.last_export))

    # ------------------------------------------------------------------ circuits
    def _method_view(self) -> str:
        res = self.results
        if res is None:
            return "empty"
        return "mcmc" if res.is_mcmc else "svi" if res.method in ("svi", "prior", "predict",
                                                                   "pathfinder") \
            else "smc"

    def action_toggle_circuits(self) -> None:
        """``c``: the Circuits view of a run with attention circuits, and back."""
        res = self.results
        if res is None:
            return
        if res.circuits is None:
            self.notify("This run has no attention circuits (the program has no "
                        "role=attention layer, or the fit did not record them).",
                        severity="warning", timeout=4)
            return
        switcher = self.query_one("#results-switcher", ContentSwitcher)
        self.circuits_on = not self.circuits_on
        self.predictive_on = False
        switcher.current = "circuits" if self.circuits_on else self._method_view()
        if self.circuits_on:
            self.query_one("#circuits", CircuitsView).focus()
        else:
            self._focus_method_view()

    def _focus_method_view(self) -> None:
        view = {"mcmc": "#summary", "svi": "#guide-table", "smc": "#smc-table"}.get(
            self._method_view())
        if view:
            self.query_one(view).focus()

    # ------------------------------------------------------------------ predictive checks
    def action_toggle_predictive(self) -> None:
        """``p``: the predictive checks and PSIS-LOO of the run (`PredictiveView`; a run
        without them: the view's one line says why), and back."""
        if self.results is None:
            return
        switcher = self.query_one("#results-switcher", ContentSwitcher)
        self.predictive_on = not self.predictive_on
        self.circuits_on = False
        switcher.current = "predictive" if self.predictive_on else self._method_view()
        if self.predictive_on:
            self.query_one("#predictive", PredictiveView).focus()
        else:
            self._focus_method_view()

    # ------------------------------------------------------------------ SVI
    def _fill_svi(self) -> None:
        res = self.results
        loss = self.query_one("#svi-loss", PlotWidget)
        loss.clear()
        if res.losses is not None and len(res.losses):
            y = np.asarray(res.losses, dtype=float)
            x, y = decimate(np.arange(1, len(y) + 1, dtype=float), y, points_for(loss))
            loss.plot(x, y, line_style="#1f77b4", hires_mode=HiResMode.BRAILLE, label="loss")
        title = "loss"
        if res.method == "prior":
            title = (f"prior predictive: {res.stats.get('num_samples', '?')} draws, nothing "
                     f"fitted · p: the checks against the data")
        elif res.final_loss is None and (res.losses is None or not len(res.losses)) and \
                res.status != "running":
            title = "no step was taken: no loss"
        elif res.final_loss is not None:
            title = f"final loss {fmt(res.final_loss, 6)} · ELBO {fmt(res.final_elbo, 6)}"
            if res.losses is not None:
                title += f" · {len(res.losses)} steps"
        loss.border_title = title
        table = self.query_one("#guide-table", DataTable)
        table.clear(columns=True)
        rec = any(g.recorded for g in res.guide)  # E9.6: recorded rows give mean and sd
        # prior and predicted draws: nothing was optimised
        loss.display = res.method not in ("prior", "predict", "pathfinder")
        if res.method == "pathfinder":  # its resampled draws (the paths: `qvr show`)
            table.add_columns("site", "shape", "mean", "sd")
        elif res.method == "prior":
            table.add_columns("site", "shape", "prior mean", "prior sd")
        elif res.method == "predict":
            table.add_columns("site", "shape", "predicted mean", "predicted sd")
        else:
            table.add_columns("site", "shape", "guide loc" + (" · mean" if rec else ""),
                              "guide scale" + (" · sd" if rec else ""))
        for g in res.guide:
            loc = g.loc.reshape(-1)
            sc = g.scale.reshape(-1) if g.scale is not None else None

            def rng(a):
                if a is None or not a.size:
                    return ""
                return fmt(float(a[0])) if a.size == 1 else f"{fmt(float(a.min()), 3)}..{fmt(float(a.max()), 3)}"
            table.add_row(("▦ " if g.is_matrix else "  ") + g.site
                          + (RECORDED_MARK if g.recorded else ""), guide_shape_text(g),
                          rng(loc), rng(sc), key=g.site)
        self._update_svi_heatmap()

    @on(DataTable.RowHighlighted, "#guide-table")
    def _on_guide_highlight(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._update_svi_heatmap()

    def _guide_at_cursor(self):
        res = self.results
        table = self.query_one("#guide-table", DataTable)
        if not res.guide or table.cursor_row < 0 or table.cursor_row >= len(res.guide):
            return None
        return res.guide[table.cursor_row]

    def _update_svi_heatmap(self) -> None:
        g = self._guide_at_cursor()
        hm = self.query_one("#svi-heatmap", Heatmap)
        if g is None or not g.is_matrix:
            hm.display = False
            return
        hm.display = True
        which = "loc" if self.stat == "mean" else "scale"
        m = g.matrix(which)
        if m is None:  # a guide without a scale
            hm.display = False
            return
        hm.diverging = which == "loc"
        space = " unconstrained" if g.unconstrained else ""
        if g.recorded:  # a recorded quantity: its posterior mean/sd over the guide's draws
            stat = "mean" if which == "loc" else "sd"
            hm.set_matrix(m, f"{g.site}{RECORDED_MARK} posterior {stat} (m: mean/sd)")
            return
        hm.set_matrix(m, f"{g.site} guide {which}{space} (m: loc/scale)")

    # ------------------------------------------------------------------ SMC
    def _fill_smc(self) -> None:
        res = self.results
        table = self.query_one("#smc-table", DataTable)
        table.clear(columns=True)
        table.add_columns("#", "weight", "", "len", "sequence")
        wmax = max((r.weight for r in res.sequences), default=0.0) or 1.0
        for i, r in enumerate(res.sequences):
            bar = "█" * max(0, round(10 * r.weight / wmax)) if r.weight == r.weight else ""
            seq = repr(r.text) if r.text is not None else " ".join(map(str, r.tokens))
            table.add_row(str(i + 1), f"{r.weight:.4f}", Text(bar, style="cyan"),
                          str(len(r.tokens)), seq)
        table.border_title = (f"log Z-hat = {res.log_Z:.4f}" if res.log_Z is not None
                              else "log Z-hat: n/a")
        notes = self.query_one("#results-header", Static)
        t = Text()
        t.append("SMC ", style="bold")
        t.append(res.path.name + "  ")
        t.append_text(status_text(res))
        t.append(f"  log Z-hat {res.log_Z:.4f}" if res.log_Z is not None else "  log Z-hat n/a")
        if res.lm:  # a pretrained LM: the sequences continue its prompt
            from qvr_tui.lm_source import lm_label
            t.append(f"\n{lm_label(res.lm)} · " +
                     (f"prompt \"{res.prompt}\"" if res.prompt else "no prompt") +
                     (f" · potentials {', '.join(res.potentials)} (program)"
                      if res.potentials else ""),
                     style="dim")
        notes.update(t)
