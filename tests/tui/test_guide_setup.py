"""The SVI guide in the dashboard's Setup (`FitConfig.guide`): its row for SVI, a valid
``lowrank:K`` into the config, an unknown family an error in place."""
import pytest
from textual.widgets import Input

from conftest import option_error as err, setup_tab


@pytest.mark.asyncio
async def test_setup_guide_row_for_svi(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        await pilot.pause()
        row = setup.query_one("#row-guide")
        assert row.display  # SVI is the first method
        field = setup.query_one("#opt-guide", Input)
        assert field.value == "meanfield"
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.guide == "meanfield"
        field.value = "LowRank:8"
        await pilot.pause()
        assert err(setup, "guide") == ""
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.guide == "lowrank:8"
        field.value = "banana"
        await pilot.pause()
        assert err(setup, "guide").startswith("unknown guide 'banana'; expected one of "
                                              "meanfield, fullrank, lowrank:K, flow")
        assert "guide" in setup.build_config()[1]
        setup.preset("nuts")
        await pilot.pause()
        assert not row.display  # SVI only
