"""`qvr.inference.vi.svi.FusedAdam`: torch's fused Adam with a lean step; the same updates,
bit for bit, in every situation (lean path and torch's fallback)."""
import copy
import sys

import torch

from qvr.inference.vi.svi import FusedAdam, adam


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (5,), (), (2, 2, 2)]
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


def _grads(params, k, skip=None):
    for i, p in enumerate(params):
        p.grad = None if i == skip else torch.sin(p.detach() * (k + 1) + i)


def _run(make, steps=8, **kw):
    params = _params()
    opt = make(params, **kw)
    history = []
    for k in range(steps):
        opt.zero_grad()
        _grads(params, k, skip=1 if k == 4 else None)  # step 4: a parameter without grad
        if k == 5:
            opt.param_groups[0]["lr"] = 0.01  # a scheduler changing the learning rate
        if k == 6:  # a round trip through the state dict
            opt.load_state_dict(opt.state_dict())
        opt.step()
        history.append([p.detach().clone() for p in params])
    return opt, params, history


def test_fused_adam_updates_equal_torchs_bit_for_bit():
    for kw in ({"lr": 0.05}, {"lr": 0.1, "weight_decay": 0.1, "maximize": True}):
        ours, pa, ha = _run(lambda ps, **k: FusedAdam(ps, fused=True, **k), **kw)
        ref, pb, hb = _run(lambda ps, **k: torch.optim.Adam(ps, fused=True, **k), **kw)
        for xa, xb in zip(ha, hb):
            for a, b in zip(xa, xb):
                assert torch.equal(a, b)
        for a, b in zip(pa, pb):  # per-parameter state, step counters included
            sa, sb = ours.state[a], ref.state[b]
            assert float(sa["step"]) == float(sb["step"])
            assert torch.equal(sa["exp_avg"], sb["exp_avg"])
            assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
        assert float(ours.state[pa[1]]["step"]) == 7.0  # skipped once
        assert float(ours.state[pa[0]]["step"]) == 8.0


def test_fused_adam_takes_the_lean_path_and_runs_hooks_once():
    params = _params()
    opt = adam(params, 0.05)
    assert isinstance(opt, FusedAdam)
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append("pre"))
    opt.register_step_post_hook(lambda *a: calls.append("post"))
    for k in range(3):
        _grads(params, k)
        opt.step()
    assert opt._fast is not None  # built after the first (torch's) step
    assert calls == ["pre", "post"] * 3
    torch.optim.Adam(_params(), fused=True)  # torch now wraps Adam.step with its hooks too
    _grads(params, 3, skip=0)
    opt.step()  # fallback: torch's step, hooks still once
    assert calls == ["pre", "post"] * 4


def test_fused_adam_state_dict_round_trip_into_torch_adam():
    params = _params()
    opt = adam(params, 0.05)
    for k in range(3):
        _grads(params, k)
        opt.step()
    other = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ref = torch.optim.Adam(other, lr=0.05, fused=True)
    ref.load_state_dict(copy.deepcopy(opt.state_dict()))  # no shared state tensors
    _grads(params, 3)
    _grads(other, 3)
    opt.step()
    ref.step()
    for a, b in zip(params, other):
        assert torch.equal(a, b)


def test_a_torch_without_the_private_kernel_signature_gets_torchs_step(monkeypatch):
    real = torch._fused_adam_
    calls = []

    def changed(*args, **kwargs):
        # a PyTorch whose private kernel takes other arguments than the lean step passes
        # (torch's own step, which knows its kernel, still works)
        if sys._getframe(1).f_globals.get("__name__") == "qvr.inference.vi.svi":
            calls.append(1)
            raise TypeError("_fused_adam_() got an unexpected keyword argument")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_fused_adam_", changed)
    ours, pa, ha = _run(lambda ps, **k: FusedAdam(ps, fused=True, **k), lr=0.05)
    monkeypatch.setattr(torch, "_fused_adam_", real)
    ref, pb, hb = _run(lambda ps, **k: torch.optim.Adam(ps, fused=True, **k), lr=0.05)
    assert calls and not ours._lean  # the lean step was tried once, then given up
    for xa, xb in zip(ha, hb):
        for a, b in zip(xa, xb):
            assert torch.equal(a, b)
    for a, b in zip(pa, pb):
        assert torch.equal(ours.state[a]["step"], ref.state[b]["step"])
