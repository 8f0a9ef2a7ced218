"""Stan's five MCMC checks at a glance: one chip per check, green when it passes, red when
it fails, grey when the record cannot tell (`qvr_tui.mcmc_checks.Check`).

A chip shows a mark (✓ ✗ ?), the check's name, its value and its threshold on two lines;
the longer detail (worst coordinate, per-chain values) is the chip's tooltip.  Colours are
the theme's success/error variables, so they follow light and dark themes.
"""
from __future__ import annotations

from typing import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from qvr_tui.mcmc_checks import Check

__all__ = ["ChecksRow", "CheckChip", "MARKS"]

MARKS = {True: "✓", False: "✗", None: "?"}


class CheckChip(Static):
    """One check (see the module docstring); CSS class -ok, -bad or -na."""

    def __init__(self, check: Check, **kwargs) -> None:
        super().__init__(self.text_of(check), **kwargs)
        self.check = check
        self.add_class(self.css_class(check))
        if check.detail:
            self.tooltip = check.detail

    @staticmethod
    def css_class(check: Check) -> str:
        return {True: "-ok", False: "-bad", None: "-na"}[check.ok]

    @staticmethod
    def text_of(check: Check) -> str:
        return f"{MARKS[check.ok]} {check.name}\n{check.value} ({check.threshold})"


class ChecksRow(Horizontal):
    """The row of check chips; `set_checks(checks)` replaces them."""

    DEFAULT_CSS = """
    ChecksRow { height: 2; width: 1fr; }
    ChecksRow > CheckChip { width: 1fr; height: 2; padding: 0 0 0 1; margin-right: 1; }
    ChecksRow > CheckChip.-ok { background: $success-muted; color: $text-success; }
    ChecksRow > CheckChip.-bad { background: $error-muted; color: $text-error; text-style: bold; }
    ChecksRow > CheckChip.-na { background: $boost; color: $text-muted; }
    """

    def __init__(self, checks: Sequence[Check] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self.checks = tuple(checks)

    def compose(self) -> ComposeResult:
        for c in self.checks:
            yield CheckChip(c, id=f"check-{c.key}")

    async def set_checks(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)
        await self.remove_children()
        await self.mount_all([CheckChip(c, id=f"check-{c.key}") for c in self.checks])
