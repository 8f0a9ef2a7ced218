"""The Fit setup pane: export, method, the method's options, data, seed, device, dtype,
start-from.

The options of a method are generated from `FitConfig.options(method)` (name, default,
help and parser come from the one declaration `qvr run` also reads): each is a compact
`Input` (or a `Select` for a choice), prefilled with its default; an invalid value is
shown in place, beside the option, as the parser or `FitConfig.errors()` words it (the
rows: `qvr_tui.widgets.form_rows`).
Values typed for one method are kept when switching to another and back.  An optional
number left empty is its default, said by the placeholder (SVI's ``batch_size``: "all
rows").  HMC/NUTS's ``chain_method`` does not offer "distributed" (`LEFT_OUT_CHOICES`:
the dashboard runs one worker process, not a torchrun launch).

When the chosen export is a parametric program (a template, ``program p(spread : Real)``),
a "parameters" section has one row per parameter (names and types from the checked
program, `qvr_tui.program_model.ExportEntry.params`), each needing a number, checked in
place like the options; they become `FitConfig.args`, which the worker's ``qvr run
--config`` receives.  Switching the export shows its parameters' rows (numbers typed for
another export stay with it); `set_exports` is how the app gives the exports.

Data (SVI, HMC, NUTS): the data shipped beside the program (``data/NAME.json``, found
with `qvr.datafiles.find_data`) when there is some, a data file, or N synthetic rows drawn
from the prior predictive.  "Start from" lists this program's finished runs (newest
first): fit a language model with SVI, then pick SMC and start from it (`preset`).

Every field is checked when it changes (the same parse and `FitConfig` checks as the run
key): its error shows beside it at once and goes when the value is valid again; an error
on another field is cleared when that field became valid (a cross-field check), never
added: a field not touched yet is judged when the run key is pressed.

SMC's vocabulary (token id -> text for the live particles): a path, or empty for the one
found next to the program (``data/NAME.vocab.json``); a relative path is looked up in the
program's folder first, then in the working folder (the placeholder says so); a file that
does not load is an error in place.  A file is loaded once per distinct path (and
modification time), not at every keystroke nor again for the request.  It reaches the
Live view through `FitRequest.vocab` and the worker (``qvr run --vocab``) through
`FitRequest.vocab_path`, so the record holds it too.

SMC's pretrained language model (``lm``, issue 40): its rows come first among SMC's
options (`FIRST_ROWS`: the model, the prompt, the text constraints), so that they show
without scrolling at 80x24.  The model field takes a folder or a Hugging Face cache name,
checked in place by looking at files (`qvr_tui.lm_source.lm_error`: no torch in this
process; the pane's part in `qvr_tui.screens.setup_lm`); empty is the program's own next-token model — a pretrained one when the export
steers a ``role=pretrained`` morphism (`program_lm`: the placeholder names it, and the
request names its folder as ``lm``, as `qvr run` does).  While a pretrained model is
steered, the vocabulary and "start from" rows (the program's model's) are hidden and not
sent.

The pane does not start fits: `build_request(run_dir)` returns a `FitRequest` (or None,
after showing the errors); the app's run key calls it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Input, Label, Select, Static

from qvr.inference.config import METHODS, FitConfig
from qvr_tui.fit_runner import FitRequest
from qvr_tui.screens.setup_lm import LMFields
from qvr_tui.widgets.form_rows import OptionRow, ParamRow, opt_of

__all__ = ["SetupPane", "COMMON", "METHOD_LABELS"]

METHOD_LABELS = {"svi": "SVI", "hmc": "HMC", "nuts": "NUTS", "smc": "SMC",
                 "prior": "Prior predictive", "pathfinder": "Pathfinder"}
# shown in the common section (not generated per method), or not shown at all
# (`args`: the "parameters" section, a row per parameter of a parametric export;
# `sizes`: read from the data a program is fitted on, `FinSet N`)
COMMON = ("method", "seed", "device", "dtype", "args", "sizes", "data", "synthetic",
          "progress_interval")
# the rows of the "common" section: options of every method, shown whatever the method
COMMON_ROWS = ("seed", "device", "dtype")
# SMC's rows that come first, in this order (the others follow in FitConfig's order): the
# language model and what steers it, seen without scrolling at 80x24
FIRST_ROWS = ("lm", "prompt", "forbid", "require", "forbid_letters", "max_word_len",
              "template", "lm_dtype")


class SetupPane(LMFields, VerticalScroll):
    """See the module docstring."""

    DEFAULT_CSS = """
    SetupPane { height: 1fr; padding: 0 1; }
    SetupPane .section { text-style: bold; margin-top: 1; }
    SetupPane #setup-status { color: $text-muted; }
    SetupPane #setup-status.-blocked { color: $text-error; }
    SetupPane #method-options { height: auto; }
    SetupPane #template-args { height: auto; }
    """

    def __init__(self, program_path: Optional[str], runs_dir="runs",
                 exports: tuple = (), **kw) -> None:
        super().__init__(**kw)
        self.program_path = program_path
        self.runs_dir = Path(runs_dir)
        self.exports: list[str] = []
        self.export_params: dict[str, tuple] = {}  # export -> ((param, type), ...)
        self._take_exports(exports)
        self._arg_rows: dict[tuple[str, str], ParamRow] = {}  # (export, param) -> row
        self.method = "svi"
        self.errors: dict[str, str] = {}
        self.blocker: Optional[str] = None
        self.shipped = None
        self.shipped_opts: dict = {}  # data/NAME.fit.json: the program's own defaults
        self.shipped_note: Optional[str] = None
        self._vocab_loaded = None  # ((path, mtime, size), (words, error)): the last file read
        if program_path:
            from qvr.datafiles import find_data
            from qvr.inference.config import shipped_options
            self.shipped = find_data(program_path)
            try:
                path, self.shipped_opts = shipped_options(program_path)
            except ValueError as exc:
                self.shipped_note = f"{exc} (ignored)"
            else:
                if path is not None:
                    self.shipped_note = f"defaults from {path.parent.name}/{path.name}"

    def _take_exports(self, exports) -> None:
        """Names, or entries with ``name`` and ``params`` (`ExportEntry`)."""
        self.exports = [e if isinstance(e, str) else e.name for e in exports]
        self.export_params = {e.name: tuple(getattr(e, "params", ()) or ())
                              for e in exports if not isinstance(e, str)}

    def initial(self, name: str):
        """An option's first value in the form: shipped with the program, else FitConfig's."""
        return self.shipped_opts.get(name, FitConfig.default(name))

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static("", id="setup-status")
        with Horizontal(classes="row"):
            yield Label("method", classes="opt-name")
            yield Select([(METHOD_LABELS[m], m) for m in METHODS], type_to_search=False,
                         value=self.method,
                         allow_blank=False, compact=True, id="method")
            yield Label("  export", classes="opt-name")
            yield Select([(e, e) for e in self.exports] or [("(first)", "")],
                         type_to_search=False,
                         value=self.exports[0] if self.exports else "", allow_blank=False,
                         compact=True, id="export")
        yield Static("", classes="section", id="args-title")
        yield Vertical(id="template-args")
        yield Static("data", classes="section", id="data-title")
        with Horizontal(classes="row", id="data-row"):
            kinds = []
            if self.shipped is not None:
                kinds.append(("shipped data", "shipped"))
            kinds += [("synthetic rows", "synthetic"), ("a data file", "file")]
            yield Select(kinds, type_to_search=False, value=kinds[0][1], allow_blank=False,
                         compact=True,
                         id="data-kind")
            yield Input("" if self.shipped else "8", placeholder="path or rows", compact=True,
                        id="data-value")
            yield Static("", id="data-error")
        yield Static("common", classes="section")
        for name in COMMON_ROWS:
            yield OptionRow(name, opt_of(name), self.initial(name), id=f"row-{name}")
        with Horizontal(classes="row", id="start-row"):
            yield Label("start from", classes="opt-name")
            yield Select(self._start_choices(), type_to_search=False, value=Select.NULL,
                         allow_blank=True,
                         prompt="nothing (fresh parameters)", compact=True, id="start-from")
        with Horizontal(classes="row", id="vocab-row"):
            yield Label("vocabulary", classes="opt-name")
            yield Input("", placeholder=self._vocab_placeholder(), compact=True, id="vocab")
            yield Static("", id="vocab-error")
        yield Static("", classes="section", id="method-title")
        yield Vertical(id="method-options")

    DEFAULT_CSS += """
    SetupPane .row { height: auto; }
    SetupPane .row > .opt-name { width: 16; }
    SetupPane .row > Select { width: 24; }
    SetupPane #data-row > Select { width: 28; }
    SetupPane #data-row > Input { width: 24; }
    SetupPane #data-error { color: $text-muted; padding: 0 1; width: 1fr; }
    SetupPane #data-error.-error { color: $text-error; }
    SetupPane #start-from { width: 1fr; }
    SetupPane #vocab-row > Input { width: 1fr; }
    SetupPane #vocab-error { color: $text-error; padding: 0 1; width: auto; max-width: 50%; }
    """

    def on_mount(self) -> None:
        self._mount_options()
        self._show_arg_rows()
        self._update_data_row()
        self._update_status()
        self.call_after_refresh(self._show_lm_rows)  # a model shipped with the program

    def _start_choices(self) -> list[tuple[str, str]]:
        if not self.program_path:
            return []
        from qvr.runs import list_runs
        out = []
        for run in list_runs(self.runs_dir, program=self.program_path)[:30]:
            try:
                status = run.status
            except Exception:  # a record being written or damaged: not offered
                continue
            if status == "finished" and run.method in ("svi", "hmc", "nuts"):
                out.append((f"{run.path.name} ({run.method})", str(run.path)))
        return out

    def refresh_runs(self) -> None:
        sel = self.query_one("#start-from", Select)
        keep = sel.value
        choices = self._start_choices()
        sel.set_options(choices)
        if keep is not Select.NULL and keep in [v for _, v in choices]:
            sel.value = keep

    def _mount_options(self) -> None:
        """Every method's option rows are mounted once; the current method's are shown
        (so values typed for one method stay when switching to another and back)."""
        box = self.query_one("#method-options", Vertical)
        if not box.children:
            rows = [OptionRow(f.name, opt, self.initial(f.name), id=f"row-{f.name}")
                    for f, opt in FitConfig.options() if f.name not in COMMON]
            rows.sort(key=lambda r: FIRST_ROWS.index(r.opt_name)  # stable: the others
                      if r.opt_name in FIRST_ROWS else len(FIRST_ROWS))  # keep their order
            for row in rows:
                row.display = self._row_shown(row)
            box.mount_all(rows)
        else:
            self._show_method_rows()
        self.query_one("#method-title", Static).update(
            Text(f"{METHOD_LABELS[self.method]} options"))
        fitting = self.method != "smc"
        self.query_one("#data-row").display = fitting
        self.query_one("#data-title").display = fitting
        self._show_lm_rows()

    def _show_method_rows(self) -> None:
        for row in self.query("#method-options OptionRow"):
            row.display = self._row_shown(row)

    def _row_shown(self, row) -> bool:
        """A row of the current method's options; `start_at` only once a run to start from
        is chosen (it says what to take from that run: meaningless without one)."""
        if self.method not in row.opt.methods:
            return False
        if row.opt_name == "start_at":
            try:
                return self.query_one("#start-from", Select).value is not Select.NULL
            except NoMatches:  # not mounted yet
                return False
        return True

    def method_rows(self) -> list:
        """The option rows of the current method, in declaration order."""
        return [r for r in self.query("#method-options OptionRow")
                if self.method in r.opt.methods]

    def _vocab_placeholder(self) -> str:
        if not self.program_path:
            return "path/to/vocab.json"
        from qvr.datafiles import find_vocab
        found = find_vocab(self.program_path)
        where = " (relative: from the program's folder, else the working folder)"
        return (f"empty: {found.parent.name}/{found.name}" if found is not None else
                "path/to/vocab.json (none next to the program)") + where

    def _vocab_file(self, text: str) -> Path:
        """The file a vocabulary path names: absolute as given; relative, in the
        program's folder when it is there, else in the working folder."""
        p = Path(text).expanduser()
        if not p.is_absolute() and self.program_path:
            beside = Path(self.program_path).parent / p
            if beside.is_file():
                return beside
        return p

    def vocab(self) -> tuple[Optional[list], Optional[str]]:
        """(the vocabulary given in the field, or None for the one found next to the
        program; an error message or None).  Loaded once per distinct file (path and
        modification time): the field calls this at every keystroke."""
        text = self.query_one("#vocab", Input).value.strip()
        if not text:
            return None, None
        from qvr.datafiles import DataFileError, load_vocab
        path = self._vocab_file(text)
        try:
            st = path.stat()
        except OSError:
            st = None
        if st is None or not path.is_file():
            where = "" if Path(text).is_absolute() or not self.program_path else \
                " (looked in the program's folder and the working folder)"
            return None, f"{text}: no such file{where}"
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
        if self._vocab_loaded is not None and self._vocab_loaded[0] == key:
            return self._vocab_loaded[1]
        try:
            got = (load_vocab(path), None)
        except (DataFileError, OSError, ValueError) as exc:
            got = (None, str(exc))
        self._vocab_loaded = (key, got)
        return got

    def _vocab_path(self) -> Optional[str]:
        """The vocabulary file given in the field (None: the one beside the program)."""
        text = self.query_one("#vocab", Input).value.strip()
        return str(self._vocab_file(text).resolve()) if text else None

    def _show_vocab_error(self, message: Optional[str]) -> None:
        self.query_one("#vocab-error", Static).update(Text(message or ""))

    # ------------------------------------------------------------ events
    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "method" and event.value != self.method and \
                event.value is not Select.NULL:
            self.method = str(event.value)
            self._mount_options()
            self.validate()
        elif event.select.id == "start-from":
            self._show_method_rows()  # `start_at` appears with a run to start from
        elif event.select.id == "export":
            self._show_arg_rows()  # the chosen export's parameters, if it has any
            self._show_lm_rows()  # and the pretrained model it steers, if any
        elif event.select.id == "data-kind":
            self._update_data_row()
            self.validate("data")  # the old kind's error (a missing file) no longer applies
        elif (event.select.id or "").startswith("opt-"):
            self.validate(event.select.id[4:])

    def on_input_changed(self, event: Input.Changed) -> None:
        wid = event.input.id or ""
        if isinstance(event.input.parent, ParamRow):
            self.validate(event.input.parent.key)
        elif wid.startswith("opt-"):
            self.validate(wid[4:])
            if wid == "opt-lm":
                self._show_lm_rows()
        elif wid == "data-value":
            self.validate("data")
        elif wid == "vocab":
            self._show_vocab_error(self.vocab()[1])

    def validate(self, changed: Optional[str] = None) -> None:
        """Check the form after field `changed` changed (None: the method): that field's
        error is shown or cleared, the others' errors only cleared when they are valid
        now (see the module docstring)."""
        if not self.is_mounted:
            return
        cfg, errors, data_error, rows = self._check()
        self.errors = errors
        for name, row in rows.items():
            if name == changed or not errors.get(name):
                row.set_error(errors.get(name))
        if changed == "data" or not data_error:
            self._show_data_error(data_error)

    def _update_data_row(self) -> None:
        kind = self.query_one("#data-kind", Select).value
        inp = self.query_one("#data-value", Input)
        inp.display = kind != "shipped"
        hint = f"{self.shipped.parent.name}/{self.shipped.name}" \
            if kind == "shipped" and self.shipped is not None else ""
        self.query_one("#data-error", Static).update(Text(hint))
        inp.placeholder = "rows, e.g. 8" if kind == "synthetic" else "path/to/data.json"

    def set_blocker(self, blocker: Optional[str]) -> None:
        """Why the program cannot be run (from the Program pane), or None."""
        self.blocker = blocker
        if self.is_mounted:
            self._update_status()

    def _update_status(self) -> None:
        st = self.query_one("#setup-status", Static)
        if self.blocker:
            st.update(Text(self.blocker))
        elif not self.program_path:
            st.update(Text("no program open: start with `qvr dash FILE`"))
        else:
            note = f" · {self.shipped_note}" if self.shipped_note else ""
            st.update(Text(f"{Path(self.program_path).name}: r starts the fit "
                           f"(ctrl+r from a text field){note}"))
        st.set_class(bool(self.blocker) or not self.program_path, "-blocked")

    # ------------------------------------------------------------ public
    def focus_first(self) -> None:
        """Focus the method selector (Tab then walks export, data, seed, device, dtype,
        start from and the method's options in order)."""
        self.query_one("#method", Select).focus()

    def preset(self, method: Optional[str] = None, start_from: Optional[str] = None) -> None:
        """Choose a method and/or a run to start from (e.g. SMC from a fitted LM)."""
        if method is not None and method != self.method:
            self.query_one("#method", Select).value = method
            self.method = method
            self._mount_options()
        if start_from is not None:
            self.refresh_runs()
            sel = self.query_one("#start-from", Select)
            values = [v for _, v in sel._options if v is not Select.NULL]
            if str(start_from) not in values:
                sel.set_options([(Path(start_from).name, str(start_from))] +
                                [(p, v) for p, v in sel._options if v is not Select.NULL])
            sel.value = str(start_from)

    def set_exports(self, exports, prefer: Optional[str] = None) -> None:
        """The program's exports (`ExportEntry`s, or names): the export selector's choices
        (`prefer`, else the one chosen, else the first, stays chosen) and the parameters
        asked for each parametric one."""
        self._take_exports(exports)
        if not self.is_mounted or not self.exports:
            return
        sel = self.query_one("#export", Select)
        keep = sel.value
        sel.set_options([(e, e) for e in self.exports])
        sel.value = prefer if prefer in self.exports else \
            keep if keep in self.exports else self.exports[0]
        self._show_arg_rows()
        self._show_lm_rows()  # the program may name a pretrained LM now, or no longer

    def export(self) -> Optional[str]:
        """The chosen export's name (None: the first, as `qvr run` chooses)."""
        value = self.query_one("#export", Select).value
        return value if isinstance(value, str) and value else None

    def _export_fitted(self) -> Optional[str]:
        """The chosen export, else the first (the one `qvr run` fits)."""
        return self.export() or (self.exports[0] if self.exports else None)

    def arg_rows(self) -> list[ParamRow]:
        """The parameter rows of the chosen export (empty unless it is parametric)."""
        export = self._export_fitted()
        return [self._arg_rows[(export, p)] for p, _ in self.export_params.get(export, ())
                if (export, p) in self._arg_rows]

    def _show_arg_rows(self) -> None:
        """Mount the chosen export's parameter rows (once per export and parameter, so
        numbers typed stay when switching exports) and show only those."""
        if not self.is_mounted:
            return
        export = self._export_fitted()
        params = self.export_params.get(export, ())
        box = self.query_one("#template-args", Vertical)
        given = self.initial("args") or {}
        new = []
        for param, type_text in params:
            if (export, param) not in self._arg_rows:
                value = given.get(param) if isinstance(given, dict) else None
                row = ParamRow(export, param, type_text,
                               "" if value is None else f"{value:g}"
                               if isinstance(value, (int, float)) else str(value))
                self._arg_rows[(export, param)] = row
                new.append(row)
        if new:
            box.mount_all(new)
        shown = {(export, p) for p, _ in params}
        for key, row in self._arg_rows.items():
            row.display = key in shown
        title = self.query_one("#args-title", Static)
        title.update(Text(f"parameters of {export} (a parametric program)" if params else ""))
        title.display = bool(params)
        box.display = bool(params)

    def set_arg(self, name: str, text: str) -> None:
        """Type `text` into the chosen export's parameter `name` (tests and presets)."""
        row = next(r for r in self.arg_rows() if r.param == name)
        row.input.value = text

    def set_value(self, name: str, text: str) -> None:
        """Type `text` into option `name` (tests and presets)."""
        w = self.query_one(f"#opt-{name}")
        w.value = text

    def build_config(self) -> tuple[Optional[FitConfig], dict[str, str]]:
        """The options as a `FitConfig` and the errors by field (every one shown in
        place)."""
        cfg, errors, data_error, rows = self._check()
        for name, row in rows.items():
            row.set_error(errors.get(name))
        self._show_data_error(data_error)
        if self.method == "smc" and not self.steers_lm():
            vocab_error = self.vocab()[1]
            self._show_vocab_error(vocab_error)
            if vocab_error:
                errors["vocab"] = vocab_error
        self.errors = errors
        return (None if errors else cfg), errors

    def _show_data_error(self, data_error: Optional[str]) -> None:
        de = self.query_one("#data-error", Static)
        if data_error:
            de.update(Text(data_error))
        else:
            self._update_data_row()
        de.set_class(bool(data_error), "-error")

    def _check(self):
        """(config or None, errors by field, the data row's error, the option rows shown):
        the form parsed and checked by `FitConfig`, nothing shown."""
        values: dict[str, object] = {"method": self.method}
        errors: dict[str, str] = {}
        rows = {r.opt_name: r for r in self.query(OptionRow)
                if r.opt_name in COMMON_ROWS or self.method in r.opt.methods}
        for name, row in rows.items():
            try:
                values[name] = row.parse()
            except ValueError as exc:
                errors[name] = str(exc)
        args = {}  # a parametric export's parameters (FitConfig.args)
        for row in self.arg_rows():
            rows[row.key] = row
            try:
                args[row.param] = row.parse()
            except ValueError as exc:
                errors[row.key] = str(exc)
        values["args"] = args
        self._program_lm_values(values)
        data_error = None
        if self.method != "smc":
            kind = self.query_one("#data-kind", Select).value
            text = self.query_one("#data-value", Input).value.strip()
            if kind == "file":
                if not text:
                    data_error = "give the data file's path"
                elif not Path(text).is_file():
                    data_error = f"{text}: no such file"
                else:
                    values["data"] = text
            elif kind == "synthetic":
                try:
                    values["synthetic"] = int(text or "8")
                except ValueError:
                    data_error = f"expected a number of rows, got {text!r}"
        cfg = None
        try:
            cfg = FitConfig(**{k: v for k, v in values.items() if k not in errors})
            errors.update({k: v for k, v in cfg.errors().items() if k not in errors})
        except TypeError as exc:  # pragma: no cover - a field the form does not know
            errors["method"] = str(exc)
        self._check_lm(values, errors)
        if data_error or "data" in errors or "synthetic" in errors:
            data_error = data_error or errors.get("data") or errors.get("synthetic")
            errors["data"] = data_error
        return (None if errors else cfg), errors, data_error, rows

    def build_request(self, run_dir: str) -> Optional[FitRequest]:
        cfg, errors = self.build_config()
        if cfg is None or not self.program_path:
            return None
        start = self.query_one("#start-from", Select).value
        own = not self.steers_lm()  # the program's own token model (not a pretrained LM)
        return FitRequest(program=self.program_path, config=cfg, run_dir=run_dir,
                          export=self.export(),
                          start_from=None if start is Select.NULL or not own else str(start),
                          vocab=self.vocab()[0] if self.method == "smc" and own else None,
                          vocab_path=self._vocab_path()
                          if self.method == "smc" and own else None)
