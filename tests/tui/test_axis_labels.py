"""A plot's y-axis title is redrawn on a blank margin when it changes: textual-plot writes
it into its ``#margin-top`` canvas without clearing it, which left "step sizee" after
"acceptance" (NUTS Live, ``v``) and "loslossog)" after the log-scale toggle (SVI Live,
``l`` twice).  `widgets.axis.set_axis_labels` clears the canvas on a change."""
import pytest
from textual.app import App
from textual_hires_canvas import Canvas

from qvr.events import FitProgress, FitStarted
from qvr_tui.series import Series
from qvr_tui.state import RunState
from qvr_tui.widgets.loss_plot import LossPlot
from qvr_tui.widgets.trace_plot import TracePlot


class Harness(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self):
        yield self.widget


def title_row(plot) -> str:
    """The y title as drawn: the top margin's text, stripped."""
    canvas = plot.query_one("#margin-top", Canvas)
    return canvas.render_line(0).text.strip()


@pytest.mark.asyncio
async def test_trace_titles_replace_each_other():
    plot = TracePlot()
    app = Harness(plot)
    async with app.run_test(size=(80, 24)) as pilot:
        s = Series()
        for i in range(5):
            s.append(i, 0.5 + 0.1 * i)
        for title in ("acceptance", "step size", "log density", "tree depth", "acceptance"):
            plot.show({"chain 0": s}, title=title, xlabel="iteration")
            await pilot.pause()
            assert title_row(plot) == title


@pytest.mark.asyncio
async def test_loss_title_after_the_log_toggle_twice():
    plot = LossPlot()
    app = Harness(plot)
    async with app.run_test(size=(80, 24)) as pilot:
        state = RunState()
        state.apply([FitStarted("svi", 10)] + [
            FitProgress("svi", "optimization", i + 1, 10, metrics={"loss": 100.0 / (i + 1)})
            for i in range(10)])
        seen = []
        for log in (False, True, False):
            plot.log_scale = log
            plot.show(state)
            await pilot.pause()
            seen.append(title_row(plot))
        assert seen == ["loss", "loss (log)", "loss"]
