"""`qvr.inference.criticism.diagnostics.summary`: every coordinate by default, one row per site
folded from all its coordinates (`Summary.sites`), and tied draws ranked by their mean
rank (vectorised over the coordinates)."""
import numpy as np
import pytest

from qvr.inference.criticism import diagnostics as dg


def test_ties_get_their_mean_rank_in_every_row():
    a = np.array([[[3.0, 1.0], [3.0, 2.0]],        # ranks 3.5 1 3.5 2
                  [[5.0, 5.0], [5.0, 0.0]],        # ranks 3 3 3 1
                  [[0.0, 1.0], [2.0, 3.0]]])       # no tie
    assert dg._ranks(a).tolist() == [[[3.5, 1.0], [3.5, 2.0]],
                                     [[3.0, 3.0], [3.0, 1.0]],
                                     [[1.0, 2.0], [3.0, 4.0]]]


def test_every_coordinate_by_default_and_each_site_folded_from_all_of_them():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((2, 100, 30, 10))
    w[1, :, 29, 9] += 3.0  # the last coordinate: chains disagree (worst R-hat)
    s = dg.summary({"w": w, "mu": rng.standard_normal((2, 100, 1))})
    assert len(s.rows) == 301 and s.truncated == 0
    site = s.sites["w"]
    assert site["shape"] == [30, 10] and site["size"] == site["n"] == 300
    assert site["r_hat"] == s.rows["w[29,9]"]["r_hat"] == \
        max(r["r_hat"] for k, r in s.rows.items() if k.startswith("w["))
    assert site["ess_bulk"] == min(r["ess_bulk"] for k, r in s.rows.items()
                                   if k.startswith("w["))
    means = w.mean(axis=(0, 1))
    assert (site["mean_lo"], site["mean_hi"]) == pytest.approx((means.min(), means.max()))
    assert s.sites["mu"]["shape"] == [1] and s.sites["mu"]["size"] == 1
    assert str(s).splitlines()[-1].split()[0] == "mu"


def test_a_capped_summary_says_how_much_of_a_site_it_covers():
    x = np.random.default_rng(4).standard_normal((2, 50, 150))
    s = dg.summary({"a": x, "b": x}, max_coordinates=200)
    assert s.truncated == 100 and len(s.rows) == 200
    assert (s.sites["a"]["n"], s.sites["a"]["size"]) == (150, 150)
    assert (s.sites["b"]["n"], s.sites["b"]["size"]) == (50, 150)


def test_a_site_row_leaves_out_nan_coordinates():
    row = dg.site_row((3,), {"mean": np.array([1.0, np.nan, 3.0]),
                             "r_hat": np.array([np.nan, np.nan, np.nan])})
    assert row == {"shape": [3], "size": 3, "n": 3, "mean_lo": 1.0, "mean_hi": 3.0,
                   "r_hat": row["r_hat"]}
    assert np.isnan(row["r_hat"])
