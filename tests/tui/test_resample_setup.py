"""``--resample`` in the dashboard's Setup (`FitConfig.resample`): a Select in SVI's
options below the guide, its value into the config, ``psis`` with ``--guide map`` an error
in place (as `FitConfig.errors` words it), ``amis`` with laplace and Pathfinder (whose
``psis`` is refused in place), no row for other methods."""
import pytest
from textual.widgets import Input, Select

from conftest import option_error as err, setup_tab

pytestmark = pytest.mark.asyncio


async def test_the_resample_row_of_svi(tmp_path):
    async with setup_tab(tmp_path) as (app, pilot, setup):
        await pilot.pause()
        row = setup.query_one("#row-resample")
        assert row.display  # SVI is the first method
        names = [r.id for r in setup.method_rows()]
        assert names.index("row-resample") == names.index("row-guide") + 1
        select = setup.query_one("#opt-resample", Select)
        assert select.value == "none"
        select.value = "psis"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {} and cfg.resample == "psis"
        setup.query_one("#opt-guide", Input).value = "map"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {"resample": "psis needs draws with a density, and --guide map is "
                                      "one point (the mode): use --guide laplace"}
        assert err(setup, "resample").startswith("psis needs draws with a density")
        setup.query_one("#opt-guide", Input).value = "laplace"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {} and (cfg.guide, cfg.resample) == ("laplace", "psis")
        select.value = "amis"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {} and (cfg.guide, cfg.resample) == ("laplace", "amis")
        setup.preset("pathfinder")
        await pilot.pause()
        row = setup.query_one("#row-resample")
        select = setup.query_one("#opt-resample", Select)
        assert row.display  # Pathfinder takes amis (its own draws are PSIS-resampled)
        cfg, errors = setup.build_config()
        assert errors == {} and (cfg.method, cfg.resample) == ("pathfinder", "amis")
        select.value = "psis"
        await pilot.pause()
        cfg, errors = setup.build_config()
        assert errors == {"resample": "Pathfinder resamples its draws by PSIS always: drop "
                                      "it, or use --resample amis"}
        setup.preset("nuts")
        await pilot.pause()
        assert not setup.query_one("#row-resample").display  # SVI's and Pathfinder's only
