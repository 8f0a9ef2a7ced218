"""Heatmap: exact colours of the half-block cells, the legend, and block-mean downsampling."""
import numpy as np
import pytest

from qvr_tui.widgets.heatmap import (MIDDLE, NEGATIVE, POSITIVE, SEQ_HIGH, SEQ_LOW, Heatmap, colour,
                                     downsample)

from conftest import Harness

M = np.arange(-8.0, 8.0).reshape(4, 4)  # -8 .. 7, row-major


def rgb(c):
    return tuple(c.triplet) if c is not None else None


def test_colour_maps():
    assert colour(-8, -8, 7) == NEGATIVE
    assert colour(0, -8, 7) == MIDDLE
    assert colour(8, -8, 7) == POSITIVE  # symmetric: +8 would be the far end
    assert colour(7, -8, 7) == (187, 52, 69)  # 247 + (178-247)*7/8 = 186.625 etc.; 68.5 -> 69
    assert colour(-4, -8, 7) == (140, 175, 210)
    assert colour(2.0, 2.0, 4.0, diverging=False) == SEQ_LOW
    assert colour(4.0, 2.0, 4.0, diverging=False) == SEQ_HIGH
    assert colour(float("nan"), 0, 1) == (128, 128, 128)
    assert colour(3.0, 3.0, 3.0, diverging=False) == (124, 146, 181)  # a constant matrix: the middle


def test_downsample_block_means_and_shapes():
    small, fr, fc = downsample(M, 8, 8)
    assert small is not None and small.shape == (4, 4) and (fr, fc) == (1, 1)
    means, fr, fc = downsample(M, 2, 2)
    assert (fr, fc) == (2, 2)
    np.testing.assert_array_equal(means, [[-5.5, -3.5], [2.5, 4.5]])
    big = np.random.default_rng(0).normal(size=(101, 300))
    means, fr, fc = downsample(big, 20, 50)
    assert means.shape == (17, 50) and (fr, fc) == (6, 6)
    np.testing.assert_allclose(means[0, 0], big[:6, :6].mean(), rtol=1e-12)
    np.testing.assert_allclose(means[-1, -1], big[96:, 294:].mean(), rtol=1e-12)  # a partial block
    with_nan = np.array([[1.0, np.nan], [3.0, np.nan]])
    means, _, _ = downsample(with_nan, 1, 1)
    np.testing.assert_array_equal(means, [[2.0]])


@pytest.mark.asyncio
async def test_corner_cells_of_a_4x4_matrix():
    app = Harness(Heatmap(M, "W"))
    async with app.run_test(size=(40, 10)):
        hm = app.query_one(Heatmap)
        assert hm.size.height == 4 and hm.grid.shape == (4, 4)
        # cell (0, 0) shows rows 0 and 1 of column 0: -8 above, -4 below
        assert hm.cell_colours(0, 0) == (NEGATIVE, (140, 175, 210))
        # cell (1, 3) shows rows 2 and 3 of column 3: 3 above, 7 below
        assert hm.cell_colours(1, 3) == ((221, 163, 171), (187, 52, 69))
        heat = [s for s in hm.render_line(2) if s.text == "▀"]  # the first heat row (after labels)
        assert len(heat) == 4
        assert (rgb(heat[0].style.color), rgb(heat[0].style.bgcolor)) == (NEGATIVE, (140, 175, 210))
        last = [s for s in hm.render_line(3) if s.text == "▀"][-1]
        assert (rgb(last.style.color), rgb(last.style.bgcolor)) == ((221, 163, 171), (187, 52, 69))
        assert "".join(s.text for s in hm.render_line(0)).startswith("W  min -8 ")
        assert "max 7" in "".join(s.text for s in hm.render_line(0))
        assert "".join(s.text for s in hm.render_line(1)).rstrip() == "  0"  # column labels
        assert "".join(s.text for s in hm.render_line(3)).startswith("2 ▀")  # row label


@pytest.mark.asyncio
async def test_large_matrix_is_downsampled_to_the_widget():
    big = np.random.default_rng(1).normal(size=(200, 300))
    hm = Heatmap(big, "big", diverging=False)
    hm.styles.height = 12
    hm.styles.width = 52
    app = Harness(hm)
    async with app.run_test(size=(60, 20)):
        # 12 lines: legend, column labels, 10 heat rows = 20 matrix rows; 52 - 4 label
        # cells = 48 columns at most: blocks of ceil(300/48) = 7 columns give 43
        assert hm.grid.shape == (20, 43) and hm.factors == (10, 7)
        assert "max 4.41  10x7 means" in "".join(s.text for s in hm.render_line(0))
        hm.set_matrix(M)
        assert hm.cell_colours(0, 0)[0] == SEQ_LOW and hm.grid.shape == (4, 4)
