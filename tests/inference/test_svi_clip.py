"""SVI's gradient clipping (`SVI(clip_norm=...)`), the flow guide's default: the update is
the clipped gradient's, and a flow fit whose intercept sits far from the guide's start
(kid_scores-like, lr 0.01) stays finite where the unclipped one drew non-finite values."""
import math

import numpy as np
import torch

from qvr import loads
from qvr.inference import FitConfig, fit
from qvr.inference.vi.joint_guides import FlowGuide
from qvr.inference.vi.svi import SVI


class _Quadratic:
    """A loss `1000 * sum(w)`: gradient 1000 per coordinate, norm 2000 for two."""

    def __call__(self, model, guide, x, observations):
        return 1000.0 * guide.w.sum()


def test_clip_norm_scales_the_gradient_to_the_norm_before_the_step():
    guide = torch.nn.Module()
    guide.w = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD(guide.parameters(), lr=1.0)
    svi = SVI(torch.nn.Module(), guide, opt, _Quadratic(), clip_norm=3.0)
    svi.step(None)
    # gradient (1000, 1000, 1000, 1000), norm 2000, clipped to 3: each coordinate 1.5
    assert np.allclose(guide.w.detach().numpy(), -1.5, rtol=1e-5)
    assert FlowGuide.clip_norm == 10.0


FAR = """
object Row : FinSet 60
program far : Row -> Row
    sample a <- Normal(0.0, 100.0)
    sample s <- HalfNormal(50.0)
    observe y : Row <- Normal(a, s)
    return a
export far
"""


def test_a_flow_fit_far_from_its_start_stays_finite():
    g = torch.Generator().manual_seed(0)
    y = 40.0 + 15.0 * torch.randn(60, generator=g)
    res = fit(loads(FAR), {"y": y}, FitConfig(method="svi", guide="flow", steps=600,
                                                lr=0.01, seed=0, pointwise=False))
    assert res.status == "finished", res.message
    assert all(math.isfinite(v) for v in res.losses)
    # the posterior mean of `a` is the sample mean (flat prior against 60 rows): within
    # 3 posterior sds (15 / sqrt(60) ~ 1.9) after 600 steps
    a = float(np.mean(res.samples["a"]))
    assert abs(a - float(y.mean())) < 3 * 15.0 / math.sqrt(60)
