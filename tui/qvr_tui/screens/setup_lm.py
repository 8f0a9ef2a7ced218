"""The Setup pane's pretrained-LM part (`LMFields`, a mixin of
`qvr_tui.screens.setup.SetupPane`; issue 40): SMC's ``lm`` field as typed, the pretrained
model the chosen export steers (docs/extensions.md E10), the rows hidden while one is
steered, and the model's checks in the form's `_check`."""
from __future__ import annotations

from typing import Optional

from textual.css.query import NoMatches
from textual.widgets import Input

from qvr_tui.widgets.form_rows import EMPTY_MEANS, OptionRow

__all__ = ["LMFields"]


class LMFields:
    """See the module docstring.  Needs the pane's `method`, `program_path` and
    `export()`, and its ``#vocab-row``, ``#start-row`` and ``#opt-lm`` widgets."""

    def lm(self) -> Optional[str]:
        """SMC's pretrained language model as typed (None: none, or another method)."""
        if self.method != "smc":
            return None
        try:
            text = self.query_one("#opt-lm", Input).value
        except NoMatches:  # not composed yet: its first value
            try:
                text = self.query_one("#row-lm", OptionRow).value or ""
            except NoMatches:
                return None
        return text.strip() or None

    def program_lm(self):
        """The pretrained model the chosen export steers (docs/extensions.md E10:
        ``morphism lm : Token -> Token [role=pretrained, model="..."]``), a
        `qvr.sema.pretrained_export.Steered`, or None (torch-free; the checked module is
        cached by its text)."""
        if not self.program_path:
            return None
        from qvr.sema.pretrained_export import steered_in_file
        try:
            export = self.export()
        except NoMatches:  # not mounted yet
            export = None
        return steered_in_file(self.program_path, export)

    def steers_lm(self) -> bool:
        """SMC on a pretrained LM: one typed in the field, or the program's own."""
        return self.method == "smc" and (self.lm() is not None or
                                         self.program_lm() is not None)

    def _show_lm_rows(self) -> None:
        """The vocabulary and "start from" rows are the program's model's: hidden while
        SMC steers a pretrained LM (its tokenizer gives the text; `qvr run --from` is
        refused with ``--lm``).  The model field's placeholder names the program's own
        pretrained model when it has one (what an empty field steers)."""
        if not self.is_mounted:
            return
        lm = self.steers_lm()
        self.query_one("#vocab-row").display = self.method == "smc" and not lm
        self.query_one("#start-row").display = not lm
        try:
            field = self.query_one("#opt-lm", Input)
        except NoMatches:
            return
        own = self.program_lm() if self.method == "smc" else None
        field.placeholder = f"program's: {own.spelled}" if own is not None else \
            EMPTY_MEANS["lm"]


    def _program_lm_values(self, values: dict) -> None:
        """SMC with an empty model field on an export that steers a pretrained LM: the
        values name its folder (and dtype), as `qvr run` does without ``--lm``, so that
        the request and the record name the model."""
        if self.method != "smc" or values.get("lm") is not None:
            return
        own = self.program_lm()
        if own is not None:
            values["lm"] = own.folder
            if values.get("lm_dtype", "float32") == "float32":
                values["lm_dtype"] = own.dtype

    def _check_lm(self, values: dict, errors: dict) -> None:
        """The model typed is a folder or a cached model with a model's files (in
        place; `qvr_tui.lm_source.lm_error`: files only, no torch here)."""
        if self.method == "smc" and values.get("lm") and "lm" not in errors:
            from qvr_tui.lm_source import lm_error
            message = lm_error(str(values["lm"]))
            if message:
                errors["lm"] = message
