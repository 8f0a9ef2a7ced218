"""`WorstParams`: the running rank-normalised R-hat and bulk/tail ESS of the worst
parameters (highest R-hat first), with their thresholds coloured (R-hat > 1.01, ESS < 100
per chain in red)."""
from __future__ import annotations

import math

from rich.text import Text
from textual.widgets import Static

__all__ = ["WorstParams"]


class WorstParams(Static):
    DEFAULT_CSS = "WorstParams { height: auto; padding: 0 1; }"

    def show(self, state) -> None:
        self.lines = self.lines_for(state)
        self.update(Text("\n").join(self.lines))

    @staticmethod
    def lines_for(state) -> list[Text]:
        if not state.worst:
            need = 20
            have = min(state.draws_per_chain().values(), default=0)
            return [Text(f"R-hat / ESS: after {need} draws per chain (now {have})",
                         style="dim")]
        chains = max(1, len(state.chains))
        out = [Text(f"worst after {state.diagnostics_draws} draws/chain", style="bold"),
               Text(f"(R-hat ≤ 1.01, ESS ≥ {100 * chains})", style="dim")]
        width = max(9, max(len(r.name) for r in state.worst))
        out.append(Text(f"{'parameter':<{width}}  R-hat ESS bulk/tail", style="dim"))
        for r in state.worst:
            t = Text(f"{r.name:<{width}}  ")
            bad_r = not math.isfinite(r.r_hat) or r.r_hat > 1.01
            t.append(f"{r.r_hat:5.3f}", style="red" if bad_r else "green")
            for sep, v in ((" ", r.ess_bulk), ("/", r.ess_tail)):
                bad = not math.isfinite(v) or v < 100 * chains
                t.append(sep)
                t.append(f"{v:.0f}" if math.isfinite(v) else "nan", style="red" if bad else "green")
            out.append(t)
        return out
