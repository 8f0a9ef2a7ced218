"""What `fit` fits and with which data: exported morphisms, the choice of export,
synthetic host data drawn from its use, observed relations from the data file."""
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load, loads
from qvr.inference import FitConfig, fit
from qvr.inference.data.fit_data import DataError, synthesize
from qvr.inference.front.fitting import choose_export, model_of

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE_FIRST = """
object Site : FinSet 3
object Plot : FinSet 6
program effects(centre : Real) : Site -> Site
    sample effect : Site <- Normal(centre, 1.0)
    return effect
program a : Plot -> Plot
    sample mu <- Normal(0.0, 1.0)
    observe y : Plot <- Normal(mu, 1.0)
    return mu
program b : Plot -> Plot
    sample mu <- Normal(0.0, 1.0)
    observe z : Plot <- Normal(mu, 2.0)
    return mu
export effects
export a
export b
"""


def test_a_template_first_is_the_export_fitted_at_its_args():
    """A parametric program is fittable (at `FitConfig.args`): first, it is the default."""
    prog = loads(TEMPLATE_FIRST)
    assert choose_export(prog) == "effects"
    with pytest.raises(DataError, match=r"--arg NAME=VALUE \(missing: centre : Real\)"):
        fit(prog, {}, FitConfig(method="svi", steps=1))
    res = fit(prog, {}, FitConfig(method="svi", steps=3, args={"centre": 2.0}))
    assert res.status == "finished" and "loc_effect" in res.params
    res = fit(prog.exports["b"], {"z": torch.zeros(6)}, FitConfig(method="svi", steps=3))
    assert res.status == "finished" and "loc_mu" in res.params


def test_an_ambiguous_module_asks_for_an_export_and_lists_them():
    """The first export cannot be fitted and several others can (every export of a checked
    module can be fitted, so this is a module-like stand-in)."""
    from types import SimpleNamespace
    prog = loads(TEMPLATE_FIRST)
    module = SimpleNamespace(exports={"group": [prog.exports["a"]], "a": prog.exports["a"],
                                      "b": prog.exports["b"]})
    with pytest.raises(ValueError) as info:
        choose_export(module)
    assert str(info.value) == ("choose the export to fit with --export NAME; exports: "
                               "`group` (list), `a` (program), `b` (program)")
    with pytest.raises(DataError, match="--export NAME"):
        model_of(module)


def test_an_exported_morphism_fits_like_a_program_on_x_and_y():
    prog = load(ROOT / "examples" / "vae.qvr")
    auto = prog.exports["autoencoder"]
    model = model_of(auto)
    assert model.site_names == ["y"] or list(model.site_names) == ["y"]
    data, truth = synthesize(model, 5)
    assert data["x"].shape == (5, 64) and data["y"].shape == (5, 64)
    res = fit(auto, data, FitConfig(method="svi", steps=5, lr=0.01))
    assert res.status == "finished" and np.isfinite(res.losses).all()


def test_synthetic_host_data_is_drawn_from_how_the_program_uses_it():
    prog = load(ROOT / "examples" / "count_regression.qvr")
    torch.manual_seed(0)
    data, truth = synthesize(model_of(prog), 40)
    # `station_effect[dock_of]` (25 stations), `hour_effect[hour_of]` (24 hours): indices
    assert data["dock_of"].dtype == torch.long and data["dock_of"].shape == (40,)
    assert 0 <= int(data["dock_of"].min()) and int(data["dock_of"].max()) < 25
    assert int(data["hour_of"].max()) < 24 and data["hour_of"].dtype == torch.long
    # `temp_slope * temperature`: a covariate, standard normal
    assert data["temperature"].is_floating_point() and data["temperature"].shape == (40,)
    assert data["rented"].shape == (40,)
    assert {"base_rate", "station_effect", "hour_effect"} <= set(truth)
    res = fit(prog, config=FitConfig(method="svi", steps=3, synthetic=40))
    assert res.status == "finished"


def test_observed_relations_come_from_the_data_file(tmp_path):
    from qvr.commands.run import ModelError, load_program
    path = ROOT / "examples" / "knowledge_graph.qvr"
    program, export = load_program(str(path), None)  # the shipped table, from_data/...
    assert export == "residence"
    res = fit(program, config=FitConfig(method="svi", steps=3), program_path=str(path))
    assert res.status == "finished"
    copy = tmp_path / "kg.qvr"
    copy.write_text(path.read_text())
    with pytest.raises(ModelError, match=r'relation `located_in` needs its table '
                       r'`city_country`: give it in the data file under '
                       r'"from_data/city_country"'):
        load_program(str(copy), None)
