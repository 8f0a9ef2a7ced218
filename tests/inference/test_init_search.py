"""`init_strategy="optimize"` (`qvr.inference.mcmc.init_search`): chains start in the
main mode of a posterior with a separated minor mode, where the default start can leave a
chain in the minor one for the whole run."""
import math

import pytest
import torch

from qvr.inference.mcmc.driver import MCMC
from qvr.inference.mcmc.init_search import optimized_starts
from qvr.inference.mcmc.nuts import NUTSKernel
from qvr.inference.mcmc.potential import FunctionTarget

#: two well-separated Gaussian bumps in the first coordinate: the minor one at -1.2
#: (sd 0.15, 30 nats lower), the main one at 1.0 (sd 0.3); the second coordinate N(0, 1)
MINOR, MAIN = -1.2, 1.0


def bimodal(z):
    x, y = z[..., 0], z[..., 1]
    minor = -0.5 * ((x - MINOR) / 0.15) ** 2 - 30.0
    main = -0.5 * ((x - MAIN) / 0.3) ** 2
    return torch.logaddexp(minor, main) - 0.5 * y ** 2


def test_the_starts_are_near_the_highest_point_the_climb_found():
    target = FunctionTarget(bimodal, 2)
    g = torch.Generator().manual_seed(0)
    z0, note = optimized_starts(target, 4, torch.float32, torch.device("cpu"), g)
    assert z0.shape == (4, 2)
    # the best point is the main mode's top (1.0, 0); the jitter is 0.1 per coordinate
    assert float((z0[:, 0] - MAIN).abs().max()) < 0.5, z0
    assert float(z0[:, 1].abs().max()) < 0.5, z0
    assert len(set(z0[:, 0].tolist())) == 4  # jittered: not one point
    assert note.startswith("init optimize: 32 starts climbed 400 steps; the chains start "
                           "near the highest point (log density ")
    best = float(note.split("(log density ")[1].split(";")[0])
    assert abs(best - 0.0) < 0.05  # the main mode's top, log density 0


def test_nuts_from_the_climb_samples_the_main_mode_and_says_how_it_started():
    """Every chain of a NUTS run started by the climb samples the main mode (mean 1.0, sd
    0.3, within 5 MCSE); the run's events carry the note."""
    torch.manual_seed(5)
    notes = []
    kernel = NUTSKernel(compiler="torchscript")
    r = MCMC(kernel, num_warmup=150, num_samples=300, num_chains=4,
             init_strategy="optimize").run(
        None, target=FunctionTarget(bimodal, 2),
        on_event=lambda e: notes.append(getattr(e, "message", None)))
    x = r.unconstrained[..., 0]  # (chains, draws)
    assert x.shape == (4, 300)
    for c in range(4):
        mean = float(x[c].mean())
        mcse = 0.3 / math.sqrt(300 / 4)  # an ESS of at least a quarter of the draws
        assert abs(mean - MAIN) < 5 * mcse, (c, mean)
    said = [n for n in notes if n and n.startswith("init optimize: ")]
    assert said[0] == "init optimize: climbing 400 steps from 32 starts", notes
    assert said[1].startswith("init optimize: 32 starts climbed 400 steps"), notes


def test_a_density_that_is_nowhere_finite_is_a_clear_error():
    target = FunctionTarget(lambda z: torch.full(z.shape[:-1], -float("inf")), 2)
    with pytest.raises(ValueError, match="init optimize: no start reached a finite "
                                         "log density"):
        optimized_starts(target, 2, torch.float32, torch.device("cpu"),
                         torch.Generator().manual_seed(0))


def test_the_option_is_offered_by_the_command_line_and_the_config(capsys):
    from qvr.cli import main
    from qvr.inference.config import ConfigError, FitConfig
    assert FitConfig(method="nuts", init_strategy="optimize").validate().init_strategy \
        == "optimize"
    with pytest.raises(ConfigError, match="init_strategy"):
        FitConfig(method="nuts", init_strategy="best").validate()
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "{prior,zero,optimize,pathfinder}" in capsys.readouterr().out
