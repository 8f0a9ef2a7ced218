"""A loss plot with one point (the first progress event of a fit) or a flat series draws
a readable axis: textual-plot's tick labels fail on an empty range (found under a loaded
machine, where the first refresh came after exactly one step)."""
import pytest
from textual.app import App

from qvr.events import FitProgress, FitStarted
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


@pytest.mark.parametrize("value", [198.28358459472656, 0.0, -3.5, 1e12])
def test_the_safe_formatter_labels_a_degenerate_range(value):
    from textual_plot.axis_formatter import NumericAxisFormatter

    from qvr_tui.widgets.axis import SafeNumericFormatter
    with pytest.raises(ValueError):  # textual-plot's own formatter, the bug we guard
        NumericAxisFormatter().get_ticks_and_labels(value, value)
    ticks, labels = SafeNumericFormatter().get_ticks_and_labels(value, value)
    assert len(set(ticks)) == len(ticks) >= 2 and min(ticks) <= value <= max(ticks)
    assert len(labels) == len(ticks)


@pytest.mark.parametrize("values, expected", [
    ([5.0], (4.0, 6.0)),
    ([2.0, 2.0, float("nan"), 2.0], (1.0, 3.0)),
    ([198.28358459472656, 198.2835845947266], (197.28358459472656, 199.28358459472656)),
    ([1.0, 2.0], None),
    ([], None),
    ([float("nan")], None),
])
def test_flat_limits_give_a_flat_series_a_unit_range(values, expected):
    """One rule for the loss plot and the trace plots (a flat trace: a constant parameter)."""
    from qvr_tui.widgets.axis import flat_limits
    got = flat_limits(values)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, rel=1e-12)
