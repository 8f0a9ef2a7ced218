"""Every runnable example fits out of the box: with its shipped data and with synthetic
data, by SVI and by NUTS, with small budgets, to finite results.  The cells that truly
cannot run are pinned here and listed in the README with their reasons.

The shipped data is cut to its first rows (arrays whose leading size is the number of
observed rows) to keep the suite's budget; the full files are exercised by
`tests/test_example_data.py`."""
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.qvr")
                  if p.read_text().startswith("# runnable: yes"))
ROWS = 12

#: (example, method, data) -> the start of the message it stops with (README, "Examples
#: that cannot run")
CANNOT = {
    ("pcfg_deduction", "svi", "shipped"): "nothing to fit: the program has no parameters",
    ("pcfg_deduction", "svi", "synthetic"): "synthetic data cannot be drawn from this "
                                            "program: host data `tokens`",
    ("pcfg_deduction", "nuts", "synthetic"): "synthetic data cannot be drawn from this "
                                             "program: host data `tokens`",
    **{(name, method, "synthetic"): f"synthetic data cannot be drawn from this program: "
                                    f"program `{export}`: `{site}` has an improper flat prior"
       for name, export, site in [("kid_scores", "kid_score_regression", "beta"),
                                  ("garch_volatility", "garch11", "mu")]
       for method in ("svi", "nuts")},
    # its series length `N` is read from the data, and no observed site counts synthetic
    # rows (the forward pass is a score); with `--size N=100`, its flat prior on `mu`
    **{("hmm_forward", method, "synthetic"): "the size `N` of `Time` is not in the data: "
                                            "give it as the data's `N` entry, or give the "
                                            "values typed by `Time` (`y`); without data, "
                                            "give it with --size N=SIZE (FitConfig.sizes)"
       for method in ("svi", "nuts")},
    # synthetic host data are N(0, 1) draws: the observation times `ts` are not increasing
    **{("lotka_volterra", method, "synthetic"): "synthetic data cannot be drawn from this "
                                               "program: program `lotka_volterra`, step `z`: "
                                               "the times of `ode` must be strictly increasing"
       for method in ("svi", "nuts")},
}


#: examples whose objects fix the size of their data (the posteriordb posteriors): shipped
#: whole (a few hundred rows at most)
WHOLE = {"ar_series", "eight_schools", "garch_volatility", "gp_counts", "hmm_forward",
         "kid_scores", "lotka_volterra"}


def first_rows(data: dict, rows: int) -> dict:
    sizes = [len(v) for k, v in data.items() if k != "x" and np.ndim(v) >= 1]
    n = len(data["x"]) if "x" in data else (sizes[0] if sizes else 0)
    if n <= rows:
        return data
    return {k: (v[:rows] if np.ndim(v) >= 1 and len(v) == n else v) for k, v in data.items()}


@pytest.mark.parametrize("data", ["shipped", "synthetic"])
@pytest.mark.parametrize("method", ["svi", "nuts"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_every_runnable_example_fits(name, method, data, monkeypatch):
    monkeypatch.setenv("QVR_MCMC_COMPILER", "torchscript")
    # the ODE solve uncompiled: its compile (~20 s cold, tests/runtime/test_ode_*.py)
    # outweighs the few solves of these fits (lotka_volterra nuts: 28 s against 14 s)
    from qvr.runtime import dopri5
    monkeypatch.setattr(dopri5, "COMPILE_AFTER", None)
    from qvr.commands.run import load_program
    from qvr.datafiles import find_data, load_data
    from qvr.inference import FitConfig, fit
    from qvr.inference.data.fit_data import DataError
    torch.manual_seed(0)
    path = ROOT / "examples" / f"{name}.qvr"
    program, export = load_program(str(path), None)
    given = None
    if data == "shipped":
        arrays = load_data(find_data(path))
        given = {k: v for k, v in arrays.items() if not k.startswith("from_data/")}
        given = given if name in WHOLE else first_rows(given, ROWS)
    cfg = FitConfig(method=method, steps=4, num_warmup=3, num_samples=3, num_chains=1,
                    max_tree_depth=4, synthetic=4 if data == "synthetic" else None, seed=0)
    expected = CANNOT.get((name, method, data))
    if expected is not None:
        with pytest.raises(DataError) as info:
            fit(program, given, cfg, program_path=str(path))
        assert str(info.value).startswith(expected)
        return
    res = fit(program, given, cfg, program_path=str(path))
    assert res.status == "finished", res.message
    if method == "svi":
        assert len(res.losses) == 4 and np.isfinite(res.losses).all()
    values = list(res.samples.values())
    assert all(np.isfinite(np.asarray(v, dtype=float)).all() for v in values)
    if method == "nuts" and not values:  # every latent finite: summed out exactly
        assert np.isfinite(res.stats["log_marginal_likelihood"])
