"""The rows of the Fit setup form (`qvr_tui.screens.setup.SetupPane`): `FieldRow` (name,
editor, error in place, help) and its two kinds, `OptionRow` (a `FitConfig` option: an
`Input`, or a `Select` for a choice; `LEFT_OUT_CHOICES` are not offered, an empty field
is its default, `EMPTY_MEANS` says what that means) and `ParamRow` (a parameter of a
parametric program: a number).
"""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Input, Label, Select, Static

from qvr.inference.config import FitConfig, parse_arg_value

__all__ = ["FieldRow", "OptionRow", "ParamRow", "opt_of", "text_of", "LIST_SEPARATOR",
           "LEFT_OUT_CHOICES", "EMPTY_MEANS", "SHORT_HELP"]

LIST_SEPARATOR = ";"
# choices `FitConfig` has that the form does not offer, with the reason.  The dashboard
# starts one worker process (``qvr run --config``, never under torchrun / ``--nproc``):
# chains "distributed" over the ranks of a launch would be a world of one there, which
# runs as "vectorized" — offering it would promise processes that never start.  A value
# shipped with the program (``data/NAME.fit.json``) that is left out here shows as the
# default instead (`OptionRow.value`).
LEFT_OUT_CHOICES = {"chain_method": ("distributed",)}
# what an empty field means, for options whose default is None and reads better said
# (the placeholder; others say "default")
EMPTY_MEANS = {"batch_size": "all rows", "lm": "the program's"}
# the help beside a row where FitConfig's (written for `qvr run --help`) would take five
# lines of the narrow help column at 80x24
SHORT_HELP = {"lm": "SMC: a pretrained causal LM, a model folder or a name in the Hugging "
                    "Face cache (empty: the program's own model)"}


def text_of(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return f" {LIST_SEPARATOR} ".join(",".join(map(str, v)) if isinstance(v, (list, tuple))
                                          else str(v) for v in value)
    return str(value)


def opt_of(name: str):
    return next(opt for f, opt in FitConfig.options() if f.name == name)


class FieldRow(Horizontal):
    """A row of the form: name, editor, error in place (`set_error`), help (hidden while
    an error shows).  `OptionRow` and `ParamRow` are its two kinds."""

    DEFAULT_CSS = """
    FieldRow { height: auto; }
    FieldRow > .opt-name { width: 16; padding: 0 1 0 0; }
    FieldRow > Input, FieldRow > Select { width: 18; }
    FieldRow > .opt-error { width: 1fr; color: $text-error; padding: 0 1; }
    FieldRow > .opt-help { width: 1fr; color: $text-muted; padding: 0 1; }
    FieldRow > .opt-error.-empty { display: none; }
    FieldRow > .opt-help.-hidden { display: none; }
    """

    def set_error(self, message: Optional[str]) -> None:
        err = self.query_one(".opt-error", Static)
        err.update(Text(message or ""))
        err.set_class(not message, "-empty")
        self.query_one(".opt-help", Static).set_class(bool(message), "-hidden")


class OptionRow(FieldRow):
    """One option: name, editor, error in place, help."""

    def __init__(self, name: str, opt, value, **kw) -> None:
        super().__init__(**kw)
        self.opt_name = name
        self.opt = opt
        if value in LEFT_OUT_CHOICES.get(name, ()):
            value = FitConfig.default(name)  # not offered here (see LEFT_OUT_CHOICES)
        self.value = value  # the first value: also what an emptied field means

    @property
    def choices(self) -> tuple:
        """The choices the form offers (`FitConfig`'s, less `LEFT_OUT_CHOICES`)."""
        left_out = LEFT_OUT_CHOICES.get(self.opt_name, ())
        return tuple(c for c in self.opt.choices or () if c not in left_out)

    def compose(self) -> ComposeResult:
        yield Label(self.opt_name, classes="opt-name")
        if self.opt.choices or isinstance(FitConfig.default(self.opt_name), bool):
            if self.opt.choices:
                choices = [(str(c), c) for c in self.choices]
                allow_blank = FitConfig.default(self.opt_name) is None
            else:
                choices = [("on", True), ("off", False)]
                allow_blank = False
            yield Select(choices, type_to_search=False,
                         value=self.value if self.value is not None else Select.NULL,
                         allow_blank=allow_blank, prompt="default", compact=True,
                         id=f"opt-{self.opt_name}")
        else:
            yield Input(text_of(self.value), compact=True, id=f"opt-{self.opt_name}",
                        placeholder=EMPTY_MEANS.get(self.opt_name, "default")
                        if self.value is None else "default")
        yield Static("", classes="opt-error -empty")
        yield Static(Text(SHORT_HELP.get(self.opt_name) or FitConfig.help_of(self.opt_name)),
                     classes="opt-help")

    def raw(self):
        w = self.query_one(f"#opt-{self.opt_name}")
        if isinstance(w, Select):
            return None if w.value is Select.NULL else w.value
        return w.value

    def parse(self):
        """The option's value, or raises ValueError with the message to show.  An empty
        field is the row's default (its placeholder says "default", or what the default
        means, `EMPTY_MEANS`: ``batch_size`` empty is all rows): the value shipped with the
        program when there is one, else FitConfig's."""
        raw = self.raw()
        if not isinstance(raw, str):
            return raw
        if not raw.strip():
            return self.value
        if self.opt.repeat:
            parts = [p.strip() for p in raw.split(LIST_SEPARATOR) if p.strip()]
            return [self.opt.parse(p) for p in parts]
        return self.opt.parse(raw)


class ParamRow(FieldRow):
    """One parameter of a parametric program: name, number, error in place, its type.
    `key` (``args.NAME``) names it among the form's fields and errors."""

    def __init__(self, export: str, param: str, type_text: str, text: str = "",
                 **kw) -> None:
        super().__init__(classes="arg-row", **kw)
        self.export = export
        self.param = param
        self.type_text = type_text
        self.text = text  # the first text (what `parse` reads until the row is composed)

    @property
    def key(self) -> str:
        return f"args.{self.param}"

    def compose(self) -> ComposeResult:
        yield Label(self.param, classes="opt-name")
        yield Input(self.text, placeholder=f"a number ({self.type_text})", compact=True,
                    classes="arg-value")
        yield Static("", classes="opt-error -empty")
        yield Static(Text(f"{self.param} : {self.type_text}, a parameter of the parametric "
                          f"program `{self.export}`"), classes="opt-help")

    @property
    def input(self) -> Input:
        return self.query_one(Input)

    def parse(self) -> float:
        """The number, or raises ValueError with the message to show (a number is needed:
        a parameter has no default)."""
        try:
            raw = self.input.value
        except NoMatches:  # mounted, not composed yet
            raw = self.text
        if not raw.strip():
            raise ValueError(f"give a number ({self.param} : {self.type_text})")
        return parse_arg_value(raw)
