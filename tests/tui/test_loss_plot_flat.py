"""A loss plot with one point (the first progress event of a fit) or a flat series draws
a readable axis: textual-plot's tick labels fail on an empty range (found under a loaded
machine, where the first refresh came after exactly one step)."""
import pytest
from textual.app import App

from qvr.inference.events import FitProgress, FitStarted
from qvr_tui.state import RunState
from qvr_tui.widgets.loss_plot import LossPlot


class Harness(App):
    def compose(self):
        yield LossPlot()


@pytest.mark.asyncio
@pytest.mark.parametrize("log_scale", [False, True])
@pytest.mark.parametrize("losses", [[198.28], [5.0, 5.0, 5.0],
                                    [198.28358459472656, 198.2835845947266]])  # 1 ulp
async def test_one_point_or_a_flat_loss_renders(losses, log_scale):
    app = Harness()
    async with app.run_test(size=(80, 24)) as pilot:
        state = RunState()
        state.apply([FitStarted("svi", 10)] + [
            FitProgress("svi", "optimization", i + 1, 10, metrics={"loss": v})
            for i, v in enumerate(losses)])
        plot = app.query_one(LossPlot)
        plot.log_scale = log_scale
        plot.show(state)
        await pilot.pause()
        assert plot.plotted_points[0] == len(losses)
        assert plot.render_lines(plot.region.reset_offset)  # draws without raising
