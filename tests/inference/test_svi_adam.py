"""`qvr.inference.vi.svi.adam`: torch's Adam with its fastest implementation, same updates."""
import torch

from qvr.inference.vi.svi import adam


def test_adam_makes_the_updates_of_torch_adam():
    torch.manual_seed(0)
    init = [torch.randn(3, 4), torch.randn(5, dtype=torch.float64)]
    ours = [torch.nn.Parameter(t.clone()) for t in init]
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    opt, opt_ref = adam(ours, 0.05), torch.optim.Adam(ref, lr=0.05)
    assert opt.defaults["fused"] or opt.defaults["foreach"]
    for _ in range(5):
        for params, o in ((ours, opt), (ref, opt_ref)):
            o.zero_grad()
            sum(((p - 1.0) ** 2).sum() for p in params).backward()
            o.step()
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, atol=1e-6)
