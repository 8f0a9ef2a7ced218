"""Fits of programs whose sizes are read from the data (`object Row : FinSet N`) and
Stan data files used as they are (issue 36): what the program does not read is left out
with a note (probable typos pointed out), the sizes are in the run record, the same
program refits on another row count, a size that disagrees is an exact error."""
import json

import numpy as np
import pytest

import qvr
from qvr.inference import FitConfig, fit
from qvr.inference.data.fit_data import DataError
from qvr.events import FitWarning

REG = """object Row : FinSet N

program reg : Row -> Row
    data x : Row
    sample b <- Normal(0.0, 10.0)
    sample sigma <- HalfNormal(1.0)
    sample w : Row <- Normal(0.0, 1.0)
    let m = b * x + w
    observe y : Row <- Normal(m, sigma)
    return y

export reg
"""


def _stan_data(n: int) -> dict:
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    return {"N": n, "K": 1, "prior_only": 0, "xpred": [0.5], "Y": [1.0],
            "x": x.tolist(), "y": (2 * x + rng.normal(size=n)).tolist()}


def _fit(tmp_path, data_file, **cfg):
    notes = []
    res = fit(qvr.load(tmp_path / "reg.qvr"), config=FitConfig(
        method="svi", steps=3, seed=0, data=str(data_file), **cfg),
        on_event=lambda e: notes.append(e.message) if isinstance(e, FitWarning) else None,
        run_dir=tmp_path / f"run{len(list(tmp_path.glob('run*')))}")
    return res, notes, json.loads((tmp_path / res.run_dir / "run.json").read_text())


@pytest.fixture
def files(tmp_path):
    (tmp_path / "reg.qvr").write_text(REG)
    for n in (6, 11):
        (tmp_path / f"d{n}.json").write_text(json.dumps(_stan_data(n)))
    return tmp_path


def test_a_stan_data_file_is_used_as_is_and_refits_on_another_row_count(files):
    """The same program file on 6 and on 11 rows, no edit: `N` binds the size; `K`,
    `prior_only`, `xpred` and `Y` (a probable typo of `y`) are left out with one note."""
    for n in (6, 11):
        res, notes, record = _fit(files, files / f"d{n}.json")
        assert res.status == "finished"
        assert notes[0] == ("the data file's `K`, `prior_only`, `xpred`, `Y` are not read by "
                            "`reg`: left out (`Y` differs from `y` only in case: a typo?)")
        assert record["sizes"] == {"N": n}
        assert record["data"]["left_out"] == ["K", "prior_only", "xpred", "Y"]
        assert res.samples["w"].shape[-1:] == (n,) and res.samples["b"].shape[2:] == ()


def test_a_near_miss_is_pointed_out(files):
    d = _stan_data(6)
    d["sigmaa"] = 1.0
    (files / "near.json").write_text(json.dumps(d))
    _res, notes, _ = _fit(files, files / "near.json")
    assert notes[0].endswith("(`Y` differs from `y` only in case: a typo?; `sigmaa` is "
                             "close to `sigma`: a typo?)")


def test_a_size_that_disagrees_is_an_exact_error(files):
    d = _stan_data(6)
    d["N"] = 5
    (files / "bad.json").write_text(json.dumps(d))
    with pytest.raises(DataError) as e:
        _fit(files, files / "bad.json")
    assert str(e.value) == ("the size `N` of `Row` disagrees in the data: the data's `N` "
                            "entry is 5; `x` (typed by `Row`) has 6 rows; `y` (typed by `Row`) "
                            "has 6 rows")


def test_a_value_read_stays_checked(files):
    """Leaving out what is not read does not hide a missing value the program reads."""
    d = _stan_data(6)
    del d["x"]
    (files / "nox.json").write_text(json.dumps(d))
    with pytest.raises(DataError, match=r"`x`"):
        _fit(files, files / "nox.json")


def test_synthetic_rows_give_the_row_size(files):
    """`--synthetic R`: a size that counts rows (`observe y : Row`) is R unless given."""
    res = fit(qvr.load(files / "reg.qvr"), config=FitConfig(
        method="svi", steps=2, synthetic=4, seed=0), run_dir=files / "syn")
    assert res.status == "finished" and res.samples["w"].shape[-1:] == (4,)
    assert json.loads((files / "syn" / "run.json").read_text())["sizes"] == {"N": 4}


COEF = """object Row : FinSet N
object Coef : FinSet K
program p : Row -> Row
    sample beta : Coef <- Normal(0.0, 1.0)
    let s = sum(beta)
    observe y : Row <- Normal(s, 1.0)
    return y
export p
"""


def test_synthetic_data_needs_the_sizes_that_do_not_count_rows(tmp_path):
    with pytest.raises(DataError) as e:
        fit(qvr.loads(COEF), config=FitConfig(method="svi", steps=2, synthetic=4, seed=0))
    assert str(e.value) == (
        "the size `K` of `Coef` is not in the data: give it as the data's `K` entry, or "
        "give the values typed by `Coef` (`beta`); without data, give it with --size K=SIZE "
        "(FitConfig.sizes)")
    res = fit(qvr.loads(COEF), config=FitConfig(method="svi", steps=2, synthetic=4, seed=0,
                                                sizes={"K": 3}), run_dir=tmp_path / "r")
    assert res.samples["beta"].shape[-1:] == (3,)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["sizes"] == {"N": 4, "K": 3}


def test_sizes_for_a_program_without_any(tmp_path):
    prog = qvr.loads("object R : FinSet 3\nprogram p : R -> R\n"
                     "    sample mu <- Normal(0.0, 1.0)\n    observe y : R <- Normal(mu, 1.0)\n"
                     "    return y\nexport p\n")
    with pytest.raises(DataError) as e:
        fit(prog, {"y": np.zeros(3)}, FitConfig(method="svi", steps=2, sizes={"N": 3}))
    assert str(e.value) == "the program reads no size from the data: --size N=3 does not apply"
