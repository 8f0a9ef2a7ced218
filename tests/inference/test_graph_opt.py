"""The peephole simplifier of traced density graphs (exact rewrites, and the matrix-product
rewrite of term-by-term linear predictors, exact up to float rounding)."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize, grad_and_value, vmap

from qvr.inference.mcmc.graph_opt import count_ops, simplify


def _trace(fn, *args):
    return make_fx(functionalize(fn))(*args)


def test_identities_zeros_and_summed_unsqueeze_vanish():
    def f(z):
        a = z.view(z.shape) * 1 + torch.zeros_like(z)
        b = (a - torch.zeros(3).sum()).unsqueeze(-1).sum(-1)
        return b.expand(b.shape) ** 1.0 / 1
    z = torch.randn(4, 3)
    gm = _trace(f, z)
    before = count_ops(gm)
    simplify(gm)
    assert count_ops(gm) == 0 < before
    assert torch.equal(gm(z), f(z))


def test_common_subexpressions_are_shared_and_views_chained():
    def f(z):
        return z.view(2, 6).view(12) * z.view(12).exp() + z.view(12).exp()
    z = torch.randn(3, 4)
    gm = _trace(f, z)
    simplify(gm)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert ops.count("aten.exp.default") == 1
    assert ops.count("aten.view.default") == 1
    assert torch.equal(gm(z), f(z))


def test_a_batched_value_and_gradient_is_unchanged_and_smaller():
    def lp(z):
        mu, log_s = z[0], z[1:]
        s = log_s.exp()
        return (-0.5 * ((z[1:] - mu) / s) ** 2 - log_s).sum() + torch.zeros(()) - 0.5 * mu ** 2
    fn = vmap(grad_and_value(lp))
    z = torch.randn(4, 5)
    gm = _trace(fn, z)
    before = count_ops(gm)
    simplify(gm)
    assert count_ops(gm) < before
    for a, b in zip(gm(z), fn(z)):
        assert torch.allclose(a, b, rtol=0, atol=0)


def test_graphs_with_in_place_operations_are_left_alone():
    def f(z):
        y = z * 1
        y.add_(1.0)
        return y
    gm = make_fx(f)(torch.randn(3))
    before = count_ops(gm)
    simplify(gm)
    assert count_ops(gm) == before


def test_gradient_of_a_flat_vector_cut_into_sites_becomes_one_cat():
    def lp(z):
        a, b, c = z[0:1], z[1:4], z[4:]
        return (a ** 2).sum() + (b.exp()).sum() + (c * 3.0).sum()
    fn = vmap(grad_and_value(lp))
    z = torch.randn(4, 6)
    gm = _trace(fn, z)
    simplify(gm)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.slice_backward.default" not in ops and ops.count("aten.cat.default") == 1
    assert not any("ones_like" in o for o in ops)  # the gradient seed became a constant
    for a, b in zip(gm(z), fn(z)):
        assert torch.equal(a, b)


def test_gradient_of_a_vector_read_element_by_element_becomes_one_stack():
    def lp(z):
        b = z[1:]
        return -0.5 * z[0] ** 2 + b[0] * 2.0 + b[1] * b[2] + b[3].exp()
    fn = vmap(grad_and_value(lp))
    z = torch.randn(4, 5)
    gm = _trace(fn, z)
    simplify(gm)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "aten.select_backward.default" not in ops and "aten.slice_backward.default" not in ops
    for a, b in zip(gm(z), fn(z)):
        assert torch.allclose(a, b, rtol=0, atol=0)


def _logistic_like(columns, order):
    X = [torch.randn(50, generator=torch.Generator().manual_seed(j)) for j in range(columns)]

    def lp(z):
        beta = z[1:]
        eta = z[0]
        for j in order:
            eta = eta + beta[j] * X[j]
        return torch.nn.functional.logsigmoid(eta).sum() - 0.5 * (z ** 2).sum()
    return lp


@pytest.mark.parametrize("order", [list(range(6)), [3, 1, 4, 0]])
def test_a_linear_predictor_written_term_by_term_becomes_matrix_products(order):
    fn = vmap(grad_and_value(_logistic_like(6, order)))
    z = torch.randn(4, 7)
    gm = _trace(fn, z)
    before = count_ops(gm)
    simplify(gm)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    # the predictor; and its gradient when every column is used (then the gradient
    # pieces tile the coefficient vector)
    assert ops.count("aten.mm.default") == (2 if len(order) == 6 else 1)
    assert count_ops(gm) < before - 2 * len(order)
    for a, b in zip(gm(z), fn(z)):  # same up to float rounding (summation order)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
