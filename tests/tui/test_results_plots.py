"""decimate keeps a series' envelope within about the asked number of points; the
trace marks divergent draws."""
import numpy as np
import pytest

from qvr_tui.widgets.param_plots import decimate


def test_short_series_unchanged():
    x, y = np.arange(10.0), np.arange(10.0) ** 2
    xd, yd = decimate(x, y, 40)
    assert xd.tolist() == x.tolist() and yd.tolist() == y.tolist()


def test_spike_and_dip_survive():
    y = np.zeros(1000)
    y[517], y[800] = 9.0, -4.0
    xd, yd = decimate(np.arange(1000.0), y, 100)
    assert len(xd) <= 100
    assert 9.0 in yd.tolist() and -4.0 in yd.tolist()
    assert 517.0 in xd.tolist() and 800.0 in xd.tolist()
    assert np.all(np.diff(xd) > 0)  # still in index order, no duplicates
    assert xd[0] == 0.0


def test_nan_dropped():
    y = np.array([1.0, np.nan, 2.0, np.inf, 3.0])
    xd, yd = decimate(np.arange(5.0), y, 40)
    assert xd.tolist() == [0.0, 2.0, 4.0] and yd.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.asyncio
async def test_divergent_draws_marked():
    from conftest import Harness
    from qvr_tui.plots_model import param_series
    from qvr_tui.results_data import Results
    from qvr_tui.widgets.param_plots import ParamPlots
    from pathlib import Path

    res = Results(path=Path("."), method="nuts", status="finished")
    rng = np.random.default_rng(3)
    res.draws = {"w": rng.normal(size=(3, 50, 2, 2))}
    div = np.zeros((3, 50), bool)
    div[1, [4, 9, 33]] = True
    res.sample_stats = {"diverging": div}
    s = param_series(res, "w[1,0]")
    assert [d.tolist() for d in s.divergent] == [[], [4, 9, 33], []]
    plots = ParamPlots()
    app = Harness(plots)
    async with app.run_test(size=(100, 20)) as pilot:
        plots.show(s)
        await pilot.pause()
        assert plots.plotted["trace"] == [("line", 50)] * 3 + [("divergent", 3)]
        assert plots.query_one("#plot-trace").border_title == "trace w[1,0] (x 3 divergent)"
        assert plots.plotted["rank"] == [("line", 10)] * 3
