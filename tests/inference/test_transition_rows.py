"""One compiled NUTS transition for every row count (`qvr.inference.mcmc.transition_rows`,
issue 37.3): the probes of a fit, the template they give (and the programs that give
none), the symbolic graph, and a package built at one row count that runs another's data
and agrees with PyTorch there; a NUTS run at a new row count samples on it from its
first iteration."""
import os
import shutil

import numpy as np
import pytest
import torch

from qvr.inference.front.fitting import fit
from qvr.inference.mcmc import potential
from qvr.inference.mcmc import transition as TR
from qvr.inference.mcmc import transition_cache as TC
from qvr.inference.mcmc import transition_rows as RW
from qvr.runtime.load import loads

HAVE_CC = shutil.which(os.environ.get("CXX", "g++")) is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C++ compiler for Inductor")

REGRESSION = """\
object Row : FinSet N
object Coef : FinSet 2

program regression : Row -> Row
    data design : Row * Coef
    sample beta : Coef <- Normal(0.0, 5.0)
    sample sigma <- HalfNormal(2.0)
    observe y : Row <- Normal(design @ beta, sigma)
    return y

export regression
"""

#: a latent per row: the position's size is the row count
PER_ROW = """\
object Row : FinSet N

program per_row : Row -> Row
    sample mu <- Normal(0.0, 5.0)
    sample theta : Row <- Normal(mu, 1.0)
    observe y : Row <- Normal(theta, 1.0)
    return y

export per_row
"""


def regression_data(n: int, seed: int = 4) -> dict:
    g = np.random.default_rng(seed)
    design = np.stack([np.ones(n), g.normal(size=n)], -1)
    y = design @ np.array([1.0, -0.5]) + 0.8 * g.normal(size=n)
    return {"design": design.tolist(), "y": y.tolist()}


def fitted_target(source: str, data: dict, monkeypatch, **config):
    """The `ProgramTarget` a NUTS fit of `source` on `data` samples (a one-draw fit)."""
    made = []
    real = potential.make_target

    def keep(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(potential, "make_target", keep)
    fit(loads(source), data, {"method": "nuts", "num_warmup": 1, "num_samples": 1,
                              "num_chains": 4, "seed": 0, **config})
    return made[0]


@pytest.fixture(scope="module")
def probed():
    """The regression's target at 40 rows, its graph and its probes (39 and 38 rows)."""
    mp = pytest.MonkeyPatch()
    try:
        target = fitted_target(REGRESSION, regression_data(40), mp)
    finally:
        mp.undo()
    z0 = torch.zeros(4, target.dim) + 0.1
    graph = target.density_graph(z0)
    return target, z0, graph, RW.probes(target, graph, z0)


def test_a_regression_probes_to_a_template(probed):
    target, z0, graph, got = probed
    assert target.resized is not None and target.dim == 3
    graphs, sizes = got
    assert sizes == [40, 39, 38] and graphs[0] is graph
    tmpl, why = RW.template(graphs, sizes)
    assert why is None and tmpl.n == 40
    assert any(k == 1 for k, _ in tmpl.ints)  # the row count shows as a literal ...
    assert all(k in (0, 1) for dims in tmpl.dims for k, _ in dims)  # ... and as sizes
    # the template reads each graph's own row count from its data, and only this
    # program's graphs key with it: a prior's other scale is data (a lifted constant),
    # another family is another graph
    key = RW.rows_key(*RW.prepared(graph), z0, False, 1000.0, "momentum", 10, True, 8)
    for g, n in zip(graphs, sizes):
        lifted, consts = RW.prepared(g)
        assert tmpl.row_count(consts) == n and tmpl.matches(lifted, consts) == n
        assert RW.rows_key(lifted, consts, z0, False, 1000.0, "momentum", 10, True, 8) == key
    for change, same in (("HalfNormal(3.0)", True), ("HalfCauchy(2.0)", False)):
        other = fitted_target(REGRESSION.replace("HalfNormal(2.0)", change),
                              regression_data(30), pytest.MonkeyPatch())
        lifted, consts = RW.prepared(other.density_graph(z0))
        assert (RW.rows_key(lifted, consts, z0, False, 1000.0, "momentum", 10, True, 8)
                == key) is same
        assert (tmpl.matches(lifted, consts) == 30) is same


def test_a_large_density_is_not_probed(probed, monkeypatch):
    """The probes are traced before the run's first draw: past `PROBE_MAX_OPS` operations
    a run keeps a package per row count instead of waiting for them."""
    target, z0, graph, _ = probed
    ops = target.operation_count(z0)
    monkeypatch.setattr(RW, "PROBE_MAX_OPS", ops - 1)
    assert RW.probes(target, graph, z0) is None
    monkeypatch.setattr(RW, "PROBE_MAX_OPS", ops)
    assert RW.probes(target, graph, z0)[1] == [40, 39, 38]


def test_the_symbolic_graph_computes_at_every_row_count(probed):
    """The symbolic graph built at 40 rows gives, on the 38-row data, exactly what the
    38-row graph gives (sizes read from the data, not written in)."""
    _, z0, _, (graphs, sizes) = probed
    tmpl, _ = RW.template(graphs, sizes)
    lifted40, _ = RW.prepared(graphs[0])
    generic = RW.symbolic(lifted40, tmpl)
    assert "sym_size" in generic.code
    z = torch.randn(4, z0.shape[1], generator=torch.Generator().manual_seed(2))
    for g in graphs:
        lifted, consts = RW.prepared(g)
        want = lifted(z, *consts)
        got = generic(z, *consts)
        assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_programs_without_one_graph_for_all_rows_say_why(monkeypatch):
    """A size that also counts a latent changes the position's size: it is no row count,
    and the fit gives no probes.  Graphs that differ other than in sizes give no
    template, with the reason."""
    target = fitted_target(PER_ROW, {"y": [0.1 * i for i in range(12)]}, monkeypatch)
    z0 = torch.zeros(4, target.dim) + 0.1
    assert target.dim == 13 and target.resized is None
    assert RW.probes(target, target.density_graph(z0), z0) is None

    def graph(scale: float, n: int):
        root = torch.nn.Module()
        root.data = torch.ones(4, n)
        g = torch.fx.Graph()
        z = g.placeholder("z")
        x = g.call_function(torch.ops.aten.expand.default, (g.get_attr("data"), [4, n]))
        s = g.call_function(torch.ops.aten.mul.Tensor, (x, scale))
        lp = g.call_function(torch.ops.aten.sum.dim_IntList, (s, [1]))
        g.output((z, lp))
        return torch.fx.GraphModule(root, g)

    good = [graph(2.0, n) for n in (5, 4, 3)]
    assert RW.template(good, [5, 4, 3])[0] is not None
    assert RW.template([graph(1.0 / n, n) for n in (5, 4, 3)], [5, 4, 3]) == (
        None, "a number in the density is computed from the row count")
    assert RW.template(good[:2], [5, 4]) == (None, "three graphs at three row counts are needed")


@needs_cc
def test_a_package_built_at_one_row_count_runs_another(probed, tmp_path, monkeypatch):
    """Built from the 40-row graph and its probes, the generic package is found for the
    same program at 30 rows, agrees with PyTorch's loop on the 30-row data, and a NUTS
    run at 30 rows samples on it from its first iteration (its own package is compiled in
    the background for later runs)."""
    target, z0, graph, (graphs, sizes) = probed
    T = TR.block_size(4, target.dim, 10)
    settings = (False, 1000.0, "momentum", 10, True, T)
    path, why = RW.build(graphs, sizes, z0, *settings, directory=tmp_path)
    assert why is None and path.name.startswith("rows-") and path.is_file()
    assert (tmp_path / f"{path.stem}.check.pt").is_file()
    other = target.resized(10)[1]  # 30 rows
    g30 = other.density_graph(z0)
    assert not TC.is_cached(g30, z0, *settings, directory=tmp_path)
    ct, note = RW.load(g30, z0, *settings, directory=tmp_path)
    assert ct is not None, note
    assert note.startswith("the whole NUTS transition loaded from the disk cache, built for "
                           "40 rows and reused at 30")
    args = TR.example_inputs(g30, z0 - 0.4, False, 10, T, seed=21, limit=3)
    want = TR.BlockOut(*TR.block_function(g30, *settings[:5])(*args))
    got = ct(*(args[:8] + args[10:]))
    assert TR.blocks_agree(want, got) and int(got.passes) > 3
    # the same template with one fixed size changed matches nothing
    kept = torch.load(tmp_path / f"{path.stem}.check.pt")
    tmpl = RW.RowTemplate(**kept["template"])
    lifted, consts = RW.prepared(g30)
    assert tmpl.matches(lifted, consts) == 30
    bent = RW.RowTemplate(tmpl.n, tmpl.source, tuple(
        (k, c + 1) if k == 0 and i == 0 else (k, c) for i, (k, c) in enumerate(tmpl.ints)),
        tmpl.dims)
    assert bent.matches(lifted, consts) is None
    # a load runs the package on its last check's inputs: other outputs than it gave
    # when it was built reject it, and it is deleted
    elsewhere = tmp_path / "altered"
    elsewhere.mkdir()
    shutil.copy(path, elsewhere / path.name)
    kept["want"][0] = kept["want"][0] + 1.0
    torch.save(kept, elsewhere / f"{path.stem}.check.pt")
    assert RW.load(g30, z0, *settings, directory=elsewhere) == (
        None, "the compiled transition for any row count disagrees with what it gave when "
              "it was built")
    assert list(elsewhere.iterdir()) == []
    # a damaged check file (a full disk, a killed writer): the package and it are deleted,
    # so that the next first run builds them again
    shutil.copy(path, elsewhere / path.name)
    (elsewhere / f"{path.stem}.check.pt").write_bytes(b"not a check")
    assert RW.load(g30, z0, *settings, directory=elsewhere) == (None, None)
    assert list(elsewhere.iterdir()) == []
    # a run at 30 rows: the generic package from the first iteration, its own package
    # started in the background (recorded here, not run)
    started = []
    monkeypatch.setattr(TC, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(RW.packages, "cache_dir", lambda: tmp_path)

    class Recorded:
        def __init__(self, *a, **k):
            started.append((a, k))

    monkeypatch.setattr(TC, "BackgroundCompile", Recorded)
    monkeypatch.setenv("QVR_MCMC_COMPILER", "auto")
    result = fit(loads(REGRESSION), regression_data(30),
                 {"method": "nuts", "num_warmup": 200, "num_samples": 200,
                  "num_chains": 4, "seed": 3})
    notes = " ".join(result.stats.get("compiler_notes", []))
    assert "built for 40 rows and reused at 30" in notes, result.stats
    assert result.stats.get("compiler") == "transition"
    assert len(started) == 1 and "rows" not in started[0][1]


def test_the_worker_hands_the_probes_to_a_second_worker(tmp_path, monkeypatch):
    """After the run's own package (`compile_transition`, stood in for here), a job with
    probes starts a second worker on a copy of it marked ``rows_only`` (the run waits for
    the first worker only), and that one builds the package for every row count."""
    import subprocess
    from qvr.inference.mcmc import compile_worker as CW
    monkeypatch.setattr(TC, "compile_transition", lambda *a, **k: (object(), "built"))
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **k: started.append(argv))
    z0 = torch.zeros(4, 3)
    job = tmp_path / "k.job.1.pt"
    g = torch.fx.symbolic_trace(torch.nn.Identity())
    torch.save({"graph": g, "z0": z0, "device": "cpu",
                "settings": (False, 1000.0, "momentum", 10, True, 8),
                "directory": str(tmp_path), "rows": ([g, g, g], [5, 4, 3])}, job)
    assert CW.main([str(job)]) == 0 and not job.exists()
    rows_job = tmp_path / "k.rows-job.1.pt"
    assert [a[-1] for a in started] == [str(rows_job)]
    assert torch.load(rows_job, weights_only=False)["rows_only"] is True
    built = []
    monkeypatch.setattr(RW, "build", lambda graphs, sizes, *a, **k: built.append(sizes)
                        or (tmp_path / "rows-x.pt2", None))
    assert CW.main([str(rows_job)]) == 0
    assert built == [[5, 4, 3]] and not rows_job.exists()
