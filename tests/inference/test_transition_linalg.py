"""A density with a factorisation check compiles into the whole NUTS transition (issue
36.10: posteriordb's gp_regr, a GP regression scored through `cholesky`, `tri_solve` and
`logdet`, failed with "Expected positional argument for parameter arg45_1": the check's
raise inside `torch.while_loop` made `torch.export` lift a constant it did not keep)."""
import os
import shutil

import numpy as np
import pytest
import torch

import qvr
from qvr.inference.front.fitting import split_data
from qvr.inference.mcmc import transition as TR
from qvr.inference.mcmc import transition_cache as TC
from qvr.inference.mcmc import transition_graph as TG
from qvr.inference.mcmc.potential import make_target

HAVE_CC = shutil.which(os.environ.get("CXX", "g++")) is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C++ compiler for Inductor")

GP_REGR = """
object Point : FinSet 11

program gp_regr : Point -> Point
    data x : Point
    data y : Point
    sample rho <- Gamma(25.0, 4.0)
    sample alpha <- Normal(0.0, 2.0) [lower=0.0]
    sample sigma <- Normal(0.0, 1.0) [lower=0.0]
    let cov = factor i : Point, j : Point in square(alpha) * exp(-0.5 * square(x[i] - x[j]) / square(rho))
    let k = cov + square(sigma) * eye(Point)
    let chol = cholesky(k)
    let w = tri_solve(chol, y)
    score lik = -0.5 * sum(square(w)) - 0.5 * logdet(k)
    return w

export gp_regr
"""

DATA = {"x": np.array([-10., -8, -6, -4, -2, 0, 2, 4, 6, 8, 10]),
        "y": np.array([4.75906, 1.59423, 2.99548, 5.27501, 1.66472, 2.24347, 2.8914,
                       4.08681, 4.60588, 0.802364, 3.92136])}


@pytest.fixture(scope="module")
def gp_target():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    model = qvr.loads(GP_REGR).morphism
    model.to(dtype=torch.float64)
    x, obs = split_data(model, DATA, torch.device("cpu"))
    yield make_target(model, x, obs)
    torch.set_default_dtype(old)


def _is_check(n):
    return n.op == "call_function" and n.target is torch.ops.aten._linalg_check_errors.default


def test_the_checks_become_a_nan_log_density_of_the_failed_chains(gp_target):
    z = torch.full((4, gp_target.dim), 0.1)
    graph = gp_target.density_graph(z)
    assert any(_is_check(n) for n in graph.graph.nodes)
    built = TG.without_error_checks(graph)
    assert not any(_is_check(n) for n in built.graph.nodes)
    assert any(_is_check(n) for n in graph.graph.nodes)  # the original is untouched
    g0, lp0 = graph(z)
    g1, lp1 = built(z)
    assert torch.equal(g0, g1) and torch.equal(lp0, lp1)
    # chain 2 (rho, alpha, sigma = 1, e^-400, e^-400): the kernel matrix is exactly 0, the
    # solve in logdet's gradient raises (the graph as traced), and gives a NaN log density
    # for that chain alone (without the check)
    bad = z.clone()
    bad[2] = torch.tensor([0.0, -400.0, -400.0])
    with pytest.raises(RuntimeError, match="singular"):
        graph(bad)
    _, lp = built(bad)
    assert torch.isnan(lp[2]) and bool(torch.isfinite(lp[[0, 1, 3]]).all())
    assert torch.equal(lp[[0, 1, 3]], lp0[[0, 1, 3]])


@pytest.mark.skipif(HAVE_CC, reason="with a C++ compiler the compile test below exports, "
                    "decomposes and runs the same transition (11 s saved)")
def test_the_transition_of_a_gp_exports_and_decomposes(gp_target):
    """What AOTInductor runs first (the export's decompositions) no longer fails: checked
    here where there is no C++ compiler to go on to compile it."""
    z0 = torch.full((4, gp_target.dim), 0.1)
    graph = TG.without_error_checks(gp_target.density_graph(z0))
    K, T = 10, TR.block_size(4, gp_target.dim, 10)
    fn = TR.block_function(graph, False, 1000.0, True, K, True, torch.while_loop)

    class Transition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.density = graph

        def forward(self, *args):
            return fn(*args)

    example = TR.example_inputs(graph, z0, False, K, T)
    with torch.no_grad():
        ep = torch.export.export(Transition(), tuple(example), strict=True)
        ep.run_decompositions()


@needs_cc
def test_the_transition_of_a_gp_compiles(gp_target, tmp_path):
    z0 = torch.full((4, gp_target.dim), 0.1)
    graph = gp_target.density_graph(z0)
    T = TR.block_size(4, gp_target.dim, 10)
    ct, note = TC.compile_transition(graph, z0, False, 1000.0, True, 10, True, T,
                                     tmp_path / "transitions")
    assert ct is not None, note
    assert note.startswith("the whole NUTS transition compiled by AOTInductor")
    args = TR.example_inputs(graph, z0 - 0.2, False, 10, T, seed=3, limit=2)
    want = TR.BlockOut(*TR.block_function(graph, False, 1000.0, True, 10, True)(*args))
    assert TR.blocks_agree(want, ct(*(args[:8] + args[10:])))
