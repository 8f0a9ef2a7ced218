"""decimate keeps a series' envelope within about the asked number of points."""
import numpy as np

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
