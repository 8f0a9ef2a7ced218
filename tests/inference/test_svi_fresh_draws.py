"""SVI draws fresh common random numbers at every step (`SVI.step`): step i evaluates every
composite's Monte-Carlo density with `mc_seed = i` and restores the spec's seed after, so
an optimiser cannot fit the draws themselves."""
import torch

import qvr
from qvr.inference import ELBO, SVI, AutoNormalGuide
from qvr.runtime.combinators import Compose

TEXT = """\
object X : Real 2
morphism f : X -> X [role=kernel] ~ Normal
morphism g : X -> X [role=kernel] ~ Normal
let h = f >> g
program p : X -> X
    observe y <- h
    return y
export p
"""


def test_each_step_uses_its_own_draws_and_restores_the_seed():
    torch.manual_seed(0)
    program = qvr.loads(TEXT)
    comps = [m for m in program.modules() if isinstance(m, Compose)]
    assert comps and all(c.mc_seed == 0 for c in comps)
    seen = []
    elbo = ELBO()

    def objective(model, guide, x, obs):
        seen.append(sorted({c.mc_seed for c in comps}))
        return elbo(model, guide, x, obs)

    x, y = torch.randn(5, 2), torch.randn(5, 2)
    guide = AutoNormalGuide(program, observed_names={"y"})
    params = list(program.parameters()) + list(guide.parameters())
    svi = SVI(program, guide, torch.optim.Adam(params, lr=0.01), objective)
    losses = [svi.step(x, {"y": y}) for _ in range(3)]
    assert seen == [[1], [2], [3]]
    assert all(c.mc_seed == 0 for c in comps)
    # the loss outside a step is the spec's deterministic estimate (mc_seed 0)
    assert svi.evaluate_loss(x, {"y": y}) == svi.evaluate_loss(x, {"y": y})
    assert len(set(losses)) == 3


def test_the_draws_option_sets_every_composites_draws():
    from qvr.inference import FitConfig, fit
    torch.manual_seed(0)
    program = qvr.loads(TEXT)
    comps = [m for m in program.modules() if isinstance(m, Compose)]
    assert {c.n_intermediate for c in comps} == {100}  # runtime spec 4.1
    x, y = torch.randn(5, 2), torch.randn(5, 2)
    res = fit(program, {"x": x, "y": y}, FitConfig(method="svi", steps=2, draws=7))
    assert res.status == "finished"
    assert {c.n_intermediate for c in comps} == {7}
    assert list(FitConfig.from_dict({"method": "svi", "draws": 0}).errors()) == ["draws"]


def test_draws_is_a_command_line_option():
    import argparse
    from qvr.commands.run import add_fit_options, config_from_args
    p = argparse.ArgumentParser()
    p.add_argument("--method", default="svi")
    add_fit_options(p)
    assert config_from_args(p.parse_args(["--method", "svi", "--draws", "16"])).draws == 16
