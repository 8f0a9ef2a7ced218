"""Sizes read from the data (`object Row : FinSet N`, issue 36): `qvr.runtime.bind_sizes`
compiles one program on data of any row count; exact log densities against scipy; the
sizes' sources and their exact errors."""
import numpy as np
import pytest
import torch
from scipy import stats

import qvr
from qvr.runtime import SizeError, bind_sizes
from qvr.runtime.sizes import SizedExport, UnboundProgram, resolve_sizes, sized_values

REG = """object Row : FinSet N
object Coef : FinSet 2

program reg : Row -> Row
    data x : Row * Coef
    sample beta : Coef <- Normal(0.0, 10.0)
    sample sigma <- HalfNormal(1.0)
    sample w : Row <- Normal(0.0, 1.0)
    let m = x @ beta + w
    observe y : Row <- Normal(m, sigma)
    return y

export reg
"""


def _data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, generator=g, dtype=torch.float64), \
        torch.randn(n, generator=g, dtype=torch.float64)


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("n", [5, 8])
def test_one_program_two_row_counts_exact_log_density(n, float64):
    """The same unbound program, bound on 5 and on 8 rows: the per-row latent has N
    entries and the log density is scipy's to 1e-10 (float64)."""
    prog = qvr.loads(REG)
    assert isinstance(prog, UnboundProgram) and prog.size_names == ("N",)
    x, y = _data(n, n)
    e = bind_sizes(prog.exports["reg"], {"x": x, "y": y})
    assert e.qvr_binding.sizes == {"N": n} and e.domain.size == n
    beta = torch.tensor([0.3, -0.7], dtype=torch.float64)
    sigma = torch.tensor(1.5, dtype=torch.float64)
    w = torch.linspace(-1, 1, n, dtype=torch.float64)
    drawn = e.execute(torch.zeros(n, 1), {"x": x, "y": y, "beta": beta, "sigma": sigma},
                      score=False).sites["w"].value
    assert tuple(drawn.shape[-1:]) == (n,)
    lj = e.log_joint(torch.zeros(n, 1), {"x": x, "y": y, "beta": beta, "sigma": sigma,
                                          "w": w})
    ref = (stats.norm.logpdf(beta.numpy(), 0, 10).sum() + stats.halfnorm.logpdf(1.5)
           + stats.norm.logpdf(w.numpy(), 0, 1).sum()
           + stats.norm.logpdf(y.numpy(), (x @ beta + w).numpy(), 1.5).sum())
    assert float(lj.sum()) == pytest.approx(ref, abs=1e-10)


def test_a_bound_program_rebinds_on_other_data():
    """`bind_sizes` on a bound module or export compiles it again with the new sizes."""
    x, y = _data(5, 0)
    whole = bind_sizes(qvr.loads(REG), {"x": x, "y": y})
    assert whole.sizes == {"N": 5}
    again = bind_sizes(whole.exports["reg"], {"N": 12})
    assert again.qvr_binding.sizes == {"N": 12} and again.domain.size == 12
    assert bind_sizes(whole, {"N": 3}).sizes == {"N": 3}


def test_load_binds_with_sizes_or_data():
    prog = qvr.loads(REG, sizes={"N": 7})
    assert prog.sizes == {"N": 7} and prog.exports["reg"].domain.size == 7
    x, y = _data(4, 1)
    assert qvr.loads(REG, data={"x": x, "y": y}).sizes == {"N": 4}


def test_where_the_sizes_show_in_the_data():
    tm = qvr.loads(REG).typed
    assert sized_values(tm) == {"N": [("x", -2, "Row"), ("w", -1, "Row"), ("y", -1, "Row")]}
    assert resolve_sizes(tm, {"N": np.array(6)}) == {"N": 6}
    assert resolve_sizes(tm, {"y": np.zeros(9)}, {"N": 9}) == {"N": 9}


def test_sizes_that_disagree_are_an_exact_error():
    with pytest.raises(SizeError) as e:
        bind_sizes(qvr.loads(REG), {"N": 5, "x": np.zeros((6, 2)), "y": np.zeros(6)})
    assert str(e.value) == (
        "the size `N` of `Row` disagrees in the data: the data's `N` entry is 5; `x` (typed "
        "by `Row`) has 6 rows; `y` (typed by `Row`) has 6 rows")
    with pytest.raises(SizeError) as e:
        bind_sizes(qvr.loads(REG), {"y": np.zeros(6)}, {"N": 4})
    assert str(e.value) == (
        "the size `N` of `Row` disagrees in the data: it is given as 4 (--size N=4, "
        "FitConfig.sizes); `y` (typed by `Row`) has 6 rows")


def test_a_missing_or_bad_size_is_an_exact_error():
    with pytest.raises(SizeError) as e:
        bind_sizes(qvr.loads(REG), {})
    assert str(e.value) == (
        "the size `N` of `Row` is not in the data: give it as the data's `N` entry, or give "
        "the values typed by `Row` (`x`, `w`, `y`); without data, give it with --size "
        "N=SIZE (FitConfig.sizes)")
    with pytest.raises(SizeError) as e:
        bind_sizes(qvr.loads(REG), {"N": 2.5})
    assert str(e.value) == "the data's `N` entry (the size of `Row`) must be a whole number, got 2.5"
    with pytest.raises(SizeError) as e:
        bind_sizes(qvr.loads(REG), {}, {"M": 3})
    assert str(e.value) == ("the program has no size named `M` (its sizes read from the "
                            "data: `N`)")


def test_an_unbound_export_says_how_to_bind_it():
    e = qvr.loads(REG).exports["reg"]
    assert isinstance(e, SizedExport) and e.kind == "program"
    with pytest.raises(AttributeError) as err:
        e.log_joint
    assert str(err.value) == (
        "`reg` has sizes read from the data (N): bind them first "
        "(qvr.runtime.bind_sizes(export, data) or qvr.load(path, data=..., sizes=...)); "
        "`.log_joint` exists once bound")


REAL = """object Row : FinSet N
object Feat : Real K

program p : Row -> Row
    data z : Feat
    sample mu <- Normal(0.0, 1.0)
    let s = sum(z)
    observe y : Row <- Normal(mu, 1.0)
    return y

export p
"""


def test_real_n_takes_its_dimension_from_the_data():
    """`Real K`: the last axis of a value typed by it (two sizes, each from the data)."""
    prog = qvr.loads(REAL)
    assert prog.size_names == ("N", "K")
    e = bind_sizes(prog, {"z": np.zeros(3), "y": np.zeros(4)})
    assert e.sizes == {"N": 4, "K": 3}


def test_a_size_error_counts_one_row_in_the_singular():
    from qvr.runtime.sizes import resolve_sizes
    from qvr.sema.typed import typed_module
    tm = typed_module("object Row : FinSet N\nprogram p : Row -> Row\n    data x : Row\n"
                      "    sample b <- Normal(0.0, 1.0)\n    observe y : Row <- Normal(b * x, 1.0)\n"
                      "    return y\nexport p\n", "t.qvr")
    with pytest.raises(SizeError) as err:
        resolve_sizes(tm, {"N": 3, "x": [1.0]}, None)
    assert "`x` (typed by `Row`) has 1 row" in str(err.value)
    assert "1 rows" not in str(err.value)


def test_an_unbound_module_s_morphism_is_its_first_export_and_says_how_to_bind_it():
    import qvr
    from qvr.inference import fit
    from qvr.runtime.sizes import SizedExport
    p = qvr.loads("object Row : FinSet N\nprogram p : Row -> Row\n    sample b <- Normal(0.0, 1.0)\n"
                  "    observe y : Row <- Normal(b, 1.0)\n    return y\nexport p\n")
    assert isinstance(p.morphism, SizedExport) and p.morphism is p.exports["p"]
    with pytest.raises(AttributeError) as err:
        p.morphism.execute
    assert str(err.value).startswith("`p` has sizes read from the data (N): bind them first")
    res = fit(p.morphism, {"y": [0.1, 0.4, -0.2]}, {"method": "svi", "steps": 5, "seed": 0})
    assert res.status == "finished"
