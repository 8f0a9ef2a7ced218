"""Stan's U-turn checks across the halves of every merge (`ops.turning_across`, the
top-level checks of `NUTSKernel._build` and of the compiled transition): against a
recursive reference on random momentum sequences, and their effect where NumPyro's
checks alone let trajectories run on (an iid Normal in 10 dimensions)."""
import torch

from qvr import loads
from qvr.inference import MCMC, NUTSKernel
from qvr.inference.mcmc import ops
from qvr.inference.mcmc import tick as T


def _turns(va, vb, rho):
    return bool((va @ rho) <= 0) or bool((vb @ rho) <= 0)


def _reference_stop(p, inv, across: bool) -> int:
    """The first leaf at which a power-of-two sub-subtree ending there turns (Stan's
    recursive `build_tree`: the subtree's own check, and with `across` the checks of
    its left half with the right half's first leaf and of the left half's last leaf
    with its right half), or -1."""
    v = p * inv
    for n in range(1, len(p), 2):
        size = 2
        while (n + 1) % size == 0:
            a = n + 1 - size
            if _turns(v[a], v[n], p[a:n + 1].sum(0)):
                return n
            if across and size >= 4:
                mid = a + size // 2 - 1
                if _turns(v[a], v[mid + 1], p[a:mid + 1].sum(0) + p[mid + 1]):
                    return n
                if _turns(v[mid], v[n], p[mid] + p[mid + 1:n + 1].sum(0)):
                    return n
            size *= 2
    return -1


def test_masked_checks_stop_where_the_recursive_definition_does():
    gen = torch.Generator().manual_seed(0)
    C, D, K, L = 400, 3, 5, 16
    # momenta that drift round slowly (so subtrees of 4-16 leaves turn) plus noise
    angle = torch.rand(C, 1, generator=gen) * 0.8 + 0.1
    t = torch.arange(L, dtype=torch.float64).unsqueeze(0) * angle
    p = torch.stack([torch.cos(t), torch.sin(t), 0.3 * torch.ones_like(t)], -1)
    p = (p + 0.6 * torch.randn(C, L, D, generator=gen, dtype=torch.float64)).transpose(0, 1)
    inv = torch.rand(C, D, generator=gen, dtype=torch.float64) + 0.5
    psum = torch.zeros(C, D, dtype=torch.float64)
    ck_a = torch.zeros(K, C, D, dtype=torch.float64)
    ck_v = torch.zeros_like(ck_a)
    ck_x = torch.zeros(3 * K, C, D, dtype=torch.float64)
    running = torch.ones(C, dtype=torch.bool)
    stop = torch.full((C,), -1)
    no_div = torch.zeros(C, dtype=torch.bool)
    for n in range(L):
        store, check = T.checkpoint_masks(n, K)
        psum, ck_a, ck_v, ck_x, still = ops.uturn_update(
            p[n], p[n], p[n] * inv, no_div, running, psum, ck_a, ck_v, ck_x, store, check,
            torch.ones(C, 1, dtype=torch.float64), True)
        stop = torch.where(running & ~still, torch.full_like(stop, n), stop)
        running = still
    want = [_reference_stop(p[:, c], inv[c], True) for c in range(C)]
    assert stop.tolist() == want
    # the checks across the halves decided some of these chains
    plain = [_reference_stop(p[:, c], inv[c], False) for c in range(C)]
    differ = sum(a != b for a, b in zip(want, plain))
    assert differ >= 20, differ


IID = """
object I : FinSet 10
program iid : I -> I
    sample x : I <- Normal(0.0, 1.0)
    return x
export iid
"""


def test_iid_normal_trajectories_stop_as_stan_and_nutpie_stop_them():
    """An iid Normal in 10 dimensions at step size 0.88 (nutpie's adapted step there):
    nutpie 0.16 takes 4.76 leapfrogs per draw; with only the checks of whole subtrees
    (NumPyro's iterative NUTS, ours before) 10.7, the trajectory running past its
    U-turn."""
    torch.manual_seed(1)
    model = loads(IID).morphism
    kernel = NUTSKernel(step_size=0.88, adapt_step_size=False, adapt_mass_matrix=False)
    r = MCMC(kernel, num_warmup=0, num_samples=500, num_chains=4).run(
        model, torch.zeros(1, 1), {})
    steps = float(r.num_steps.double().mean())
    assert 4.0 < steps < 6.0, steps
    x = r.samples["x"].reshape(-1, 10)
    assert float(x.mean(0).abs().max()) < 0.15  # 2000 draws: MCSE about 0.03
    assert float((x.std(0) - 1).abs().max()) < 0.1
