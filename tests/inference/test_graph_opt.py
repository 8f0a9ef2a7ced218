"""The peephole simplifier of traced density graphs: exact rewrites only."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize, grad_and_value, vmap

from qvr.inference.graph_opt import count_ops, simplify


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
