"""Stan's U-turn checks across the halves of every merge (`ops.turning_across`, the
top-level checks of `NUTSKernel._build` and of the compiled transition): against a
recursive reference on random momentum sequences, and their effect where NumPyro's
checks alone let trajectories run on (an iid Normal in 10 dimensions)."""
import pytest
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


def _turns_dz(pa, pb, dz):
    return bool((pa @ dz) <= 0) or bool((pb @ dz) <= 0)


def _reference_stop_dz(z, p, across: bool) -> int:
    """`_reference_stop` for the displacement criterion: a span from leaf `a` to leaf
    `b` turns when `(z_b - z_a) . p_a <= 0` or `(z_b - z_a) . p_b <= 0`."""
    for n in range(1, len(p), 2):
        size = 2
        while (n + 1) % size == 0:
            a = n + 1 - size
            if _turns_dz(p[a], p[n], z[n] - z[a]):
                return n
            if across and size >= 4:
                mid = a + size // 2 - 1
                if _turns_dz(p[a], p[mid + 1], z[mid + 1] - z[a]):
                    return n
                if _turns_dz(p[mid], p[n], z[n] - z[mid]):
                    return n
            size *= 2
    return -1


def _drifting_momenta(gen, C, L, D=3):
    """Momenta that drift round slowly (so subtrees of 4-16 leaves turn) plus noise:
    `(L, C, D)`."""
    angle = torch.rand(C, 1, generator=gen) * 0.8 + 0.1
    t = torch.arange(L, dtype=torch.float64).unsqueeze(0) * angle
    p = torch.stack([torch.cos(t), torch.sin(t), 0.3 * torch.ones_like(t)], -1)
    return (p + 0.6 * torch.randn(C, L, D, generator=gen, dtype=torch.float64)).transpose(0, 1)


def _masked_stops(z, p, inv, direction, uturn: str) -> list:
    """Per chain, the leaf at which `ops.uturn_update`'s masked checks stop a 16-leaf
    subtree (leaves `z[n]`, `p[n]`), or -1."""
    L, C, D = p.shape
    K = 5
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
            z[n], p[n], p[n] * inv, no_div, running, psum, ck_a, ck_v, ck_x, store, check,
            direction, uturn)
        stop = torch.where(running & ~still, torch.full_like(stop, n), stop)
        running = still
    return stop.tolist()


def test_displacement_checks_stop_where_the_recursive_definition_does():
    """Forward and backward subtrees: positions are drifted by the velocities (a
    diagonal metric), and a backward subtree's leaves run against the trajectory's
    order, its momenta kept in the forward orientation."""
    gen = torch.Generator().manual_seed(1)
    C, D, L = 400, 3, 16
    p = _drifting_momenta(gen, C, L)
    inv = torch.rand(C, D, generator=gen, dtype=torch.float64) + 0.5
    direction = torch.where(torch.rand(C, 1, generator=gen) < 0.5, -1.0, 1.0).double()
    z = torch.cumsum(0.3 * direction * inv * p, 0)  # leaf n's position as built
    stop = _masked_stops(z, p, inv, direction, "displacement")
    want, plain = [], []
    for c in range(C):
        # in trajectory order a backward subtree's leaves are reversed; Stan's recursion
        # over the reversed leaves tests the same spans (a span's test is symmetric)
        zc, pc = z[:, c], p[:, c]
        if float(direction[c]) < 0:
            zc = -zc  # (z_b - z_a) * direction: the build order's differences, oriented
        want.append(_reference_stop_dz(zc, pc, True))
        plain.append(_reference_stop_dz(zc, pc, False))
    assert stop == want
    assert sum(a != b for a, b in zip(want, plain)) >= 20
    assert len({s for s in want if s >= 0}) >= 4  # subtrees of several sizes turned


def test_masked_checks_stop_where_the_recursive_definition_does():
    gen = torch.Generator().manual_seed(0)
    C, D, L = 400, 3, 16
    p = _drifting_momenta(gen, C, L)
    inv = torch.rand(C, D, generator=gen, dtype=torch.float64) + 0.5
    stop = _masked_stops(p, p, inv, torch.ones(C, 1, dtype=torch.float64), "momentum")
    want = [_reference_stop(p[:, c], inv[c], True) for c in range(C)]
    assert stop == want
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


CORR = """
object One : FinSet 1
program corr : One -> One
    sample a <- Normal(0.0, 1.0)
    let m = 0.95 * a
    sample b <- Normal(m, 0.3122499)
    return a
export corr
"""


def test_displacement_trees_are_nutpies_and_sample_the_posterior():
    """A 2-D Gaussian with correlation 0.95 at nutpie's adapted step (0.57) and metric
    (0.295): the displacement criterion takes nutpie's 5.7 leapfrogs per draw (a
    reference recursive implementation of it: 5.64), the momentum criterion Stan's 7.0,
    and both sample the posterior."""
    model = loads(CORR).morphism
    steps = {}
    for uturn in ("displacement", "momentum"):
        torch.manual_seed(3)
        kernel = NUTSKernel(step_size=0.57, adapt_step_size=False, adapt_mass_matrix=False,
                            uturn=uturn)
        kernel.initial_inv_metric = torch.tensor([0.295, 0.295])
        r = MCMC(kernel, num_warmup=0, num_samples=1500, num_chains=4).run(
            model, torch.zeros(1, 1), {})
        steps[uturn] = float(r.num_steps.double().mean())
        a = r.samples["a"].reshape(-1).double()
        b = r.samples["b"].reshape(-1).double()
        # 6000 draws, ESS > 1000: MCSE of the mean < 0.032, of the sd < 0.025
        assert abs(float(a.mean())) < 0.13 and abs(float(b.mean())) < 0.13
        assert abs(float(a.std()) - 1) < 0.1 and abs(float(b.std()) - 1) < 0.1
        assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1]) - 0.95) < 0.02
    assert 5.2 < steps["displacement"] < 6.3, steps
    assert 6.6 < steps["momentum"] < 7.6, steps


def test_the_fit_config_and_the_record_carry_the_criterion(tmp_path):
    from qvr.inference import fit
    from qvr.inference.config import ConfigError, FitConfig
    from qvr.inference.methods.mcmc import kernel_of
    from qvr.runs import open_run
    assert kernel_of(FitConfig(method="nuts")).uturn == "momentum"
    assert kernel_of(FitConfig(method="nuts", uturn="displacement")).uturn == "displacement"
    try:
        FitConfig(method="nuts", uturn="position").validate()
    except ConfigError as exc:
        assert str(exc) == "uturn: must be one of momentum, displacement; got 'position'"
    else:
        raise AssertionError("the spec's criterion is a kernel option only")
    res = fit(loads(CORR), config={"method": "nuts", "uturn": "displacement", "seed": 1,
                                   "num_warmup": 100, "num_samples": 100, "num_chains": 2,
                                   "pointwise": False}, run_dir=str(tmp_path / "run"))
    assert res.status == "finished", res.message
    assert open_run(res.run_dir).config["uturn"] == "displacement"


def test_the_fit_config_and_the_record_carry_the_step_jitter(tmp_path):
    """`step_jitter` (``--step-jitter``): None is the kernel's default (NUTS 0.1 as
    nutpie, HMC 0 as Stan); a value reaches the kernel and the run's record; out of
    [0, 1) it is refused with the option's name."""
    from qvr.inference import fit
    from qvr.inference.config import ConfigError, FitConfig
    from qvr.inference.methods.mcmc import kernel_of
    from qvr.runs import open_run
    assert kernel_of(FitConfig(method="nuts")).step_size_jitter == 0.1
    assert kernel_of(FitConfig(method="hmc")).step_size_jitter == 0.0
    assert kernel_of(FitConfig(method="nuts", step_jitter=0.0)).step_size_jitter == 0.0
    assert kernel_of(FitConfig(method="hmc", step_jitter=0.3)).step_size_jitter == 0.3
    with pytest.raises(ConfigError, match=r"step_jitter: must be a number in \[0, 1\), "
                                          r"got 1\.0"):
        FitConfig(method="nuts", step_jitter=1.0).validate()
    res = fit(loads(CORR), config={"method": "nuts", "step_jitter": 0.0, "seed": 1,
                                   "num_warmup": 100, "num_samples": 100, "num_chains": 2,
                                   "pointwise": False}, run_dir=str(tmp_path / "run"))
    assert res.status == "finished", res.message
    assert open_run(res.run_dir).config["step_jitter"] == 0.0
