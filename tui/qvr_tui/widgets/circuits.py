"""`CircuitsView`: per attention layer and head, the QK and OV circuits of a fitted program
and the attention pattern of one of the recorded input sequences.

Layout (works from 80x24 up): a bar naming the layer, head and sequence shown and the
keys; on the left the QK circuit W_Q[h]^T W_K[h] (dA x dA) above the OV circuit
W_O[:, head h] W_V[h] (dB x dA), each a `Heatmap` with its diverging legend centred at 0
(blue negative, white 0, red positive, symmetric in the largest |value|); on the right
the `PatternMap` of the chosen sequence (T x T, queries down, keys across, tokens on the
axes).  The matrices are per head: heads of one layer are compared by stepping through
them, each on its own scale (the legend gives it).

Keys (the view takes the focus when it is shown): ← → (or [ ]) the head, ↑ ↓ (or { })
the layer, , . (or < >) the sequence.  Both heatmaps are drawn at one zoom (an
entry 2x2 pixels when both have room, else 1x1), so their entries look alike.  Heads wrap within the layer; the head index is kept
when the layer changes (clamped to its number of heads).

Data: a `qvr_tui.circuits_model.Circuits`; nothing here reads files.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from qvr_tui.circuits_model import Circuits, CircuitLayer
from qvr_tui.widgets.heatmap import Heatmap
from qvr_tui.widgets.pattern import PatternMap

__all__ = ["CircuitsView"]


class CircuitsView(Vertical, can_focus=True):
    """See the module docstring."""

    DEFAULT_CSS = """
    CircuitsView { height: 1fr; }
    CircuitsView:focus { background-tint: $foreground 0%; }
    CircuitsView > #circuits-bar { height: 1; padding: 0 1; background: $boost; }
    CircuitsView > #circuits-body { height: 1fr; }
    CircuitsView #circuits-left { width: 36; height: 1fr; padding: 0 1 0 1; }
    CircuitsView #circuits-right { width: 1fr; height: 1fr; padding: 0 1 0 1; }
    CircuitsView .circuit-title { height: 1; color: $text-muted; }
    CircuitsView #qk-heatmap, CircuitsView #ov-heatmap { height: 1fr; }
    """

    BINDINGS = [
        Binding("right", "head(1)", "Next head"),
        Binding("left", "head(-1)", "Prev head", show=False),
        Binding("right_square_bracket", "head(1)", "Next head", show=False),
        Binding("left_square_bracket", "head(-1)", "Prev head", show=False),
        Binding("down", "layer(1)", "Next layer"),
        Binding("up", "layer(-1)", "Prev layer", show=False),
        Binding("right_curly_bracket", "layer(1)", "Next layer", show=False),
        Binding("left_curly_bracket", "layer(-1)", "Prev layer", show=False),
        Binding("full_stop", "sequence(1)", "Next sequence"),
        Binding("comma", "sequence(-1)", "Prev sequence", show=False),
        Binding("greater_than_sign", "sequence(1)", "Next sequence", show=False),
        Binding("less_than_sign", "sequence(-1)", "Prev sequence", show=False),
    ]

    def __init__(self, *, id=None, classes=None) -> None:
        super().__init__(id=id, classes=classes)
        self.circuits: Optional[Circuits] = None
        self.layer_index = 0
        self.head = 0
        self.sequence = 0

    def compose(self) -> ComposeResult:
        yield Static("", id="circuits-bar")
        with Horizontal(id="circuits-body"):
            with Vertical(id="circuits-left"):
                yield Static("", id="qk-title", classes="circuit-title")
                yield Heatmap(np.zeros((1, 1)), max_zoom=2, id="qk-heatmap")
                yield Static("", id="ov-title", classes="circuit-title")
                yield Heatmap(np.zeros((1, 1)), max_zoom=2, id="ov-heatmap")
            with Vertical(id="circuits-right"):
                yield PatternMap(id="pattern-map")

    # ------------------------------------------------------------ data
    def show(self, circuits: Optional[Circuits], keep: bool = False) -> None:
        """Show `circuits` (from the first layer, head and sequence unless `keep`: a
        record read again keeps the choice where it still exists)."""
        self.circuits = circuits
        if not keep:
            self.layer_index = self.head = self.sequence = 0
        self._clamp()
        self._redraw()

    @property
    def current_layer(self) -> Optional[CircuitLayer]:
        c = self.circuits
        if c is None or not c.layers:
            return None
        return c.layers[self.layer_index]

    def _clamp(self) -> None:
        c = self.circuits
        if c is None or not c.layers:
            self.layer_index = self.head = self.sequence = 0
            return
        self.layer_index = min(max(self.layer_index, 0), len(c.layers) - 1)
        self.head = min(max(self.head, 0), c.layers[self.layer_index].heads - 1)
        self.sequence = min(max(self.sequence, 0), max(c.num_sequences - 1, 0))

    # ------------------------------------------------------------ keys
    def action_head(self, step: int) -> None:
        layer = self.current_layer
        if layer is None:
            return
        self.head = (self.head + step) % layer.heads
        self._redraw()

    def action_layer(self, step: int) -> None:
        c = self.circuits
        if c is None or not c.layers:
            return
        self.layer_index = (self.layer_index + step) % len(c.layers)
        self._clamp()
        self._redraw()

    def action_sequence(self, step: int) -> None:
        c = self.circuits
        if c is None or c.num_sequences == 0:
            return
        self.sequence = (self.sequence + step) % c.num_sequences
        self._redraw()

    # ------------------------------------------------------------ drawing
    def bar_text(self) -> Text:
        c, layer = self.circuits, self.current_layer
        t = Text(no_wrap=True, overflow="ellipsis")
        if layer is None:
            t.append("no attention circuits in this record")
            return t
        t.append("layer ")
        t.append(layer.name, style="bold")
        t.append(f" {self.layer_index + 1}/{len(c.layers)} · ")
        t.append(f"head {self.head}", style="bold")
        t.append(f" of {layer.heads}")
        if c.num_sequences:
            t.append(" · ")
            t.append(f"seq {self.sequence + 1}", style="bold")
            t.append(f"/{c.num_sequences}")
        t.append("   ")
        keys = "←→ head  ↑↓ layer" + ("  ,. seq" if c.num_sequences > 1 else "")
        t.append(keys, style="dim")
        return t

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#circuits-bar", Static).update(self.bar_text())
        qk = self.query_one("#qk-heatmap", Heatmap)
        ov = self.query_one("#ov-heatmap", Heatmap)
        pattern = self.query_one("#pattern-map", PatternMap)
        layer = self.current_layer
        if layer is None:
            for w in (qk, ov):
                w.set_matrix(np.zeros((1, 1)), "")
            pattern.show_message("")
            return
        h = self.head
        qk.diverging = ov.diverging = True
        qk.set_matrix(layer.qk[h], "")
        ov.set_matrix(layer.ov[h], "")
        self.call_after_refresh(self._sync_zoom)  # (the shapes may differ between layers)
        self.query_one("#qk-title", Static).update(Text.assemble(
            ("QK circuit ", "bold"), f"{layer.d_in}×{layer.d_in}  query ↓ key →",
            no_wrap=True, overflow="ellipsis"))
        self.query_one("#ov-title", Static).update(Text.assemble(
            ("OV circuit ", "bold"), f"{layer.d_out}×{layer.d_in}  out ↓ in →",
            no_wrap=True, overflow="ellipsis"))
        c = self.circuits
        if layer.pattern is None or c.num_sequences == 0:
            pattern.show_message(c.note or "no attention patterns in this record")
            return
        s = self.sequence
        labels = c.labels[s] if s < len(c.labels) else ()
        pattern.set_pattern(layer.pattern[s, h], labels, "attention pattern")

    def on_mount(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        self.call_after_refresh(self._sync_zoom)

    def _sync_zoom(self) -> None:
        """One zoom for both circuit heatmaps (at most 2: an entry is then one line of
        two cells), the largest both can take, so that their entries look alike."""
        maps = list(self.query(Heatmap))
        if not maps:
            return
        z = max(1, min(2, *(m.fit_zoom() for m in maps)))
        for m in maps:
            m.set_max_zoom(z)
