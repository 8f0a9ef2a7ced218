"""Messages the dashboard's panes post up to the app (data flows down as attributes).

* `StartFit(request)` — the Setup pane asks for a fit (a `fit_runner.FitRequest`).
* `SetupInvalid(errors)` — the run key was pressed with invalid options (``{field: message}``).
"""
from __future__ import annotations

from textual.message import Message

__all__ = ["StartFit", "SetupInvalid"]


class StartFit(Message):
    def __init__(self, request) -> None:
        super().__init__()
        self.request = request


class SetupInvalid(Message):
    def __init__(self, errors: dict) -> None:
        super().__init__()
        self.errors = dict(errors)
