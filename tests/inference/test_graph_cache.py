"""The disk cache of compiled densities (`qvr.inference.mcmc.graph_cache`): a second target of
the same program and data loads its compiled function instead of tracing, with the same
values; anything else (other data, a broken or stale file) is traced afresh."""
from __future__ import annotations

import shutil

import pytest
import torch

from qvr import loads
from qvr.inference.mcmc import graph_cache
from qvr.inference.mcmc import transition as TR
from qvr.inference.mcmc import transition_cache as TC
from qvr.inference.mcmc import transition_graph as TG
from qvr.inference.mcmc.potential import ProgramTarget, make_target

from helpers import mu_sigma


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("QVR_CACHE_DIR", str(tmp_path))
    return tmp_path / "densities"


def _target(y):
    return make_target(loads(mu_sigma(len(y))).morphism, torch.zeros(len(y), 1),
                       {"y": torch.tensor(y)})


Y = [0.3, -1.2, 2.5, 0.8, 1.1]
Z = torch.tensor([[0.1, -0.3], [1.0, 0.2], [-0.5, 0.4]])


def _stored(cache) -> list:
    return sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []


def test_a_second_target_loads_the_compiled_density_with_the_same_values(cache):
    first = _target(Y)
    v1, g1 = first.log_density_and_grad(Z)
    assert first.graph_cache_notes == {3: "traced and stored in the disk cache"}
    names = _stored(cache)
    assert len(names) == 2 and {n.rsplit(".", 1)[1] for n in names} == {"pt", "ts"}
    second = _target(Y)
    v2, g2 = second.log_density_and_grad(Z)
    assert second.graph_cache_notes == {3: "loaded from the disk cache"}
    assert isinstance(second.compiled_for(Z), torch.jit.ScriptModule)
    assert torch.equal(v1, v2) and torch.equal(g1, g2)
    # the FX graph (for a whole-transition compile) is read when asked for: the same
    # code, so the compiled transition the first run built is found by the second
    assert second.density_graph(Z).code == first.density_graph(Z).code
    keys = {TC.cache_key(t.density_graph(Z), Z, False, 1000.0, True, 10, True, 8)
            for t in (first, second)}
    assert len(keys) == 1
    # another point is not another function; another chain count is
    _target(Y).log_density_and_grad(Z + 1.0)
    assert _stored(cache) == names
    four = _target(Y)
    four.log_density_and_grad(torch.zeros(4, 2))
    assert four.graph_cache_notes == {4: "traced and stored in the disk cache"}


def test_other_data_is_another_function(cache):
    _target(Y).log_density_and_grad(Z)
    other = _target([y + 1.0 for y in Y])
    v, g = other.log_density_and_grad(Z)
    assert other.graph_cache_notes == {3: "traced and stored in the disk cache"}
    assert len(_stored(cache)) == 4
    fresh = _target([y + 1.0 for y in Y])
    fresh.compile = False  # the program's own (eager) values
    v_ref, g_ref = fresh.log_density_and_grad(Z)
    assert torch.allclose(v, v_ref, rtol=1e-5) and torch.allclose(g, g_ref, rtol=1e-5)


def test_a_broken_file_is_deleted_and_the_density_traced_again(cache):
    v1, g1 = _target(Y).log_density_and_grad(Z)
    for path in cache.iterdir():
        path.write_bytes(b"not a compiled function")
    again = _target(Y)
    v2, g2 = again.log_density_and_grad(Z)
    assert again.graph_cache_notes == {3: "traced and stored in the disk cache"}
    assert torch.equal(v1, v2) and torch.equal(g1, g2)
    # rewritten: the next target loads it
    last = _target(Y)
    last.log_density_and_grad(Z)
    assert last.graph_cache_notes == {3: "loaded from the disk cache"}


def test_a_stale_file_fails_the_check_and_is_replaced(cache, tmp_path):
    # another model's function under this model's key: its values differ
    _target(Y).log_density_and_grad(Z)
    mine = {p.suffix: p for p in cache.iterdir()}
    aside = tmp_path / "aside"
    aside.mkdir()
    for p in mine.values():
        shutil.move(p, aside / p.name)
    _target([y + 1.0 for y in Y]).log_density_and_grad(Z)
    for p in cache.iterdir():  # the other data's files, renamed to this model's key
        p.rename(mine[p.suffix])
    stale = _target(Y)
    v, g = stale.log_density_and_grad(Z)
    assert stale.graph_cache_notes == {3: "traced and stored in the disk cache"}
    ref = _target(Y)
    ref.compile = False
    v_ref, g_ref = ref.log_density_and_grad(Z)
    assert torch.allclose(v, v_ref, rtol=1e-5) and torch.allclose(g, g_ref, rtol=1e-5)


def test_the_fingerprint_digests_constants_not_the_point():
    def f(c):
        const = torch.tensor([c, 2.0])

        def fn(z):
            return (z * const[0]).sum(-1) + const[1]
        return fn

    z = torch.randn(3, 2)
    keys = [graph_cache.fingerprint(f(c), point)[1]
            for c, point in ((1.5, z), (1.5, z + 1.0), (2.5, z))]
    assert keys[0] is not None and keys[0] == keys[1] != keys[2]
    out, key = graph_cache.fingerprint(f(1.5), z)
    assert torch.equal(out, f(1.5)(z))
    # the shape is part of it
    assert graph_cache.fingerprint(f(1.5), torch.randn(4, 2))[1] != keys[0]


def test_the_cache_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setattr(ProgramTarget, "cache_graphs", False)
    t = _target(Y)
    t.log_density_and_grad(Z)
    assert t.graph_cache_notes == {} and _stored(cache) == []


def test_what_cannot_be_digested_gives_no_key_and_the_same_values():
    sparse = torch.eye(2).to_sparse()

    def fn(z):
        return torch.sparse.mm(sparse, z.t()).t().sum(-1)

    z = torch.randn(3, 2)
    out, key = graph_cache.fingerprint(fn, z)
    assert key is None and torch.equal(out, fn(z))


def test_a_graph_gone_from_disk_is_traced_again_when_asked_for(cache):
    first = _target(Y)
    first.log_density_and_grad(Z)
    later = _target(Y)
    later.log_density_and_grad(Z)
    assert later.graph_cache_notes == {3: "loaded from the disk cache"}
    for path in cache.glob("*.pt"):
        path.unlink()
    graph = later.density_graph(Z)
    assert isinstance(graph, torch.fx.GraphModule)
    g, v = graph(Z)
    v_ref, g_ref = first.log_density_and_grad(Z)
    assert torch.allclose(v, v_ref) and torch.allclose(g, g_ref)


def test_a_function_on_disk_is_used_whatever_one_evaluation_costs(cache, monkeypatch):
    """The eager path spares slow densities the tracing; a stored function costs none."""
    _target(Y).log_density_and_grad(Z)
    monkeypatch.setattr(ProgramTarget, "compile_below_s", 0.0)  # every density "slow" ...
    monkeypatch.setattr(ProgramTarget, "compile_max_ops", 0)  # ... and "large"
    cached = _target(Y)
    cached.log_density_and_grad(Z)
    assert cached.graph_cache_notes == {3: "loaded from the disk cache"}
    assert cached.compiled_for(Z) is not None
    fresh = _target([y + 1.0 for y in Y])
    fresh.log_density_and_grad(Z)
    assert fresh.compiled_for(Z) is None and fresh.graph_cache_notes == {}
    assert fresh.compile_notes[3].startswith("evaluated eagerly")


def test_a_short_run_is_not_traced_unless_its_graph_is_on_disk(cache, monkeypatch):
    """`expected_evaluations` (the driver sets it from the kernel): a run whose eager
    evaluations cost less than tracing (`trace_s_per_op` per operation; forced here both
    ways) evaluates eagerly and says why; a graph on disk is used whatever the run's
    length; unknown (None), the other rules decide."""
    from qvr.inference import HMCKernel, MCMC, NUTSKernel
    assert HMCKernel(num_steps=3).expected_evaluations(10, 20) == 30 * 3 + 30
    assert NUTSKernel(max_tree_depth=10).expected_evaluations(10, 20) == 30 * 31 + 30
    assert NUTSKernel(max_tree_depth=3).expected_evaluations(10, 20) == 30 * 7 + 30
    monkeypatch.delenv("QVR_MCMC_COMPILER", raising=False)
    assert NUTSKernel(compiler="transition").expected_evaluations(10, 20) is None
    assert NUTSKernel(compiler="inductor").expected_evaluations(10, 20) is None
    from qvr.inference.mcmc.transition import AUTO_MIN_ITERATIONS
    assert NUTSKernel().expected_evaluations(AUTO_MIN_ITERATIONS, 0) is None  # the loop's
    assert NUTSKernel().expected_evaluations(AUTO_MIN_ITERATIONS - 1, 0) is not None
    monkeypatch.setattr(ProgramTarget, "trace_s_per_op", 1e9)  # tracing never pays
    short = _target(Y)
    MCMC(HMCKernel(num_steps=2), num_warmup=3, num_samples=3, num_chains=3).run(
        None, target=short)
    assert short.expected_evaluations == 6 * 2 + 30
    assert short.compiled_for(Z) is None and _stored(cache) == []
    assert short.compile_notes[3].startswith(
        "evaluated eagerly: a short run (about 42 evaluations of ")
    assert short.compile_notes[3].endswith(" ms) costs less than tracing the density")
    short.expected_evaluations = None  # a later run of unknown length decides again
    assert short.compiled_for(Z) is not None and 3 not in short.compile_notes
    assert short.graph_cache_notes == {3: "traced and stored in the disk cache"}
    shutil.rmtree(cache)
    unknown = _target(Y)  # no run: nothing expected, traced as before
    assert unknown.compiled_for(Z) is not None and len(_stored(cache)) == 2
    again = _target(Y)
    MCMC(HMCKernel(num_steps=2), num_warmup=3, num_samples=3, num_chains=3).run(
        None, target=again)
    assert again.graph_cache_notes == {3: "loaded from the disk cache"}
    monkeypatch.setattr(ProgramTarget, "trace_s_per_op", 0.0)  # tracing always pays
    other = make_target(loads(mu_sigma(4)).morphism, torch.zeros(4, 1),
                        {"y": torch.tensor(Y[:4])})
    MCMC(HMCKernel(num_steps=2), num_warmup=3, num_samples=3, num_chains=3).run(
        None, target=other)
    assert other.graph_cache_notes == {3: "traced and stored in the disk cache"}
