"""The Setup pane's common section has a `dtype` row (`FitConfig.dtype`): a Select of
float32/float64 shown for every method, whose value reaches the fit's config."""
import pytest
from textual.widgets import Select

from qvr.inference.config import FitConfig

from conftest import setup_tab

pytestmark = pytest.mark.asyncio


async def test_the_dtype_row_is_a_common_select(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        row = setup.query_one("#row-dtype")
        select = setup.query_one("#opt-dtype", Select)
        assert select.value == FitConfig.default("dtype") == "float32"
        assert not setup.query("#method-options #row-dtype")  # not a method's row
        for method in ("svi", "hmc", "nuts", "smc"):
            setup.preset(method)
            await pilot.pause()
            assert row.display
        setup.preset("nuts")
        await pilot.pause()
        select.value = "float64"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.dtype == "float64"
