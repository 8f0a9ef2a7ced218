"""``qvr run --resample psis`` (`qvr.inference.methods.guide_resample`): the k-hat line of
the summary says the draws were resampled, with their ESS; the record keeps the resampled
draws (``samples.npz``), its pointwise terms, LOO and predictive checks are made of them
(as posterior draws, no ``log_q``), and ``qvr show`` prints the same lines.  Refusals are
usage errors (exit 2) in one line: ``--guide map``, ``--method pathfinder``, an unknown
value."""
import contextlib
import io
import json
import numpy as np
import pytest
from scipy import stats

from helpers import mu_sigma
from qvr.cli import main
from qvr.runs import open_run


def _main(argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resample")
    (tmp / "ms.qvr").write_text(mu_sigma(20))
    y = 1.3 + 0.8 * np.random.default_rng(5).standard_normal(20)
    (tmp / "ms.json").write_text(json.dumps({"y": y.round(3).tolist()}))
    return tmp


@pytest.fixture(scope="module")
def resampled_run(files):
    rc, out, err = _main(["run", str(files / "ms.qvr"), "--method", "svi", "--guide",
                          "fullrank", "--steps", "1500", "--seed", "0", "--resample", "psis",
                          "--data", str(files / "ms.json"),
                          "--runs-dir", str(files / "runs")])
    assert rc == 0, err
    (folder,) = (files / "runs").iterdir()
    return out, folder


def test_the_summary_says_the_draws_were_resampled(resampled_run):
    out, folder = resampled_run
    st = json.loads((folder / "summary.json").read_text())["stats"]
    assert st["resampled"] is True and st["khat"] < 0.7
    k, ess = st["khat"], st["resample_ess"]
    assert 100 < ess <= 4000
    assert (f"Pareto k-hat {k:.2f} (4000 draws): {'good (below 0.5)' if k < 0.5 else 'usable (0.5 to 0.7)'}"
            f"; draws resampled by PSIS (ESS {ess:.0f})") in out.splitlines()
    assert any(line.startswith("LOO: elpd_loo ") for line in out.splitlines())


def test_the_record_holds_the_resampled_draws_and_their_pointwise_terms(resampled_run):
    _, folder = resampled_run
    run = open_run(folder)
    draws = run.samples()
    mu, sigma = (np.asarray(draws[s], dtype=np.float64).reshape(-1) for s in ("mu", "sigma"))
    assert mu.shape == (1000,)
    assert len(np.unique(mu)) < 1000  # drawn with replacement
    rows = run.summary["parameters"]
    assert rows["mu"]["mean"] == pytest.approx(mu.mean(), rel=1e-5)
    meta = run.pointwise_meta
    assert meta["kind"] == "posterior" and meta["importance"] is False
    assert meta["draws"] == 1000
    y = np.asarray(json.loads((folder.parent.parent / "ms.json").read_text())["y"])
    ll = np.asarray(run.log_likelihood()["y"], dtype=np.float64).reshape(1000, 20)
    expect = stats.norm.logpdf(y[None], mu[:, None], sigma[:, None])
    assert np.allclose(ll, expect, atol=1e-3)  # float32 terms of these very draws


def test_qvr_show_prints_the_same_lines(resampled_run, capsys):
    out, folder = resampled_run
    assert main(["show", str(folder)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1].startswith("options: ") and shown[1].endswith(
        "steps 1500, guide fullrank, resample psis")  # after the data file's path
    assert shown[2:] == out.splitlines()


@pytest.mark.parametrize("extra, message", [
    (["--method", "svi", "--guide", "map", "--resample", "psis"],
     "qvr run: --resample: psis needs draws with a density, and --guide map is one point "
     "(the mode): use --guide laplace"),
    (["--method", "pathfinder", "--resample", "psis"],
     "qvr run: --resample: Pathfinder resamples its draws by PSIS always: drop it, or use "
     "--resample amis"),
    (["--method", "svi", "--guide", "fullrank", "--resample", "amis"],
     "qvr run: --resample: amis starts from a Normal over every latent: use --guide laplace "
     "or --method pathfinder (with --guide fullrank: --resample psis)"),
    (["--method", "nuts", "--resample", "amis"],
     "qvr run: --resample is an option of --method svi|pathfinder, not of --method nuts"),
])
def test_refusals_are_one_line_usage_errors(files, extra, message):
    rc, out, err = _main(["run", str(files / "ms.qvr"), *extra, "--data",
                          str(files / "ms.json"), "--runs-dir", str(files / "refused")])
    assert rc == 2
    assert err.splitlines() == [message]
    assert not (files / "refused").exists()


def test_an_unknown_value_is_a_usage_error(files):
    rc, _, err = _main(["run", str(files / "ms.qvr"), "--method", "svi", "--resample",
                        "bootstrap", "--runs-dir", str(files / "refused")])
    assert rc == 2
    assert "argument --resample: invalid choice: 'bootstrap' (choose from 'none', 'psis', " \
        "'amis')" in err


@pytest.mark.parametrize("method", [["--method", "svi", "--guide", "laplace"],
                                    ["--method", "pathfinder"]])
def test_amis_resamples_laplace_and_pathfinder(files, method):
    """``--resample amis``: the k-hat line names it, the record keeps its draws, LOO runs
    on them, and `qvr show` prints the same lines."""
    runs = files / f"amis-{method[1]}"
    rc, out, err = _main(["run", str(files / "ms.qvr"), *method, "--seed", "0",
                          "--resample", "amis", "--data", str(files / "ms.json"),
                          "--runs-dir", str(runs)])
    assert rc == 0, err
    (folder,) = runs.iterdir()
    st = json.loads((folder / "summary.json").read_text())["stats"]
    assert st["resample_method"] == "amis" and st["amis_resampled"] is True
    k, ess, n = st["khat"], st["resample_ess"], st["resample_draws"]
    assert k < 0.5 and n == 114000 and st["khat_draws"] == n
    assert (f"Pareto k-hat {k:.2f} ({n} draws): good (below 0.5); draws resampled by "
            f"adaptive importance sampling (8 rounds, {n:,} draws, ESS {ess:.0f})") \
        in out.splitlines()
    assert any(line.startswith("LOO: elpd_loo ") for line in out.splitlines())
    run = open_run(folder)
    mu = np.asarray(run.samples()["mu"], dtype=np.float64).reshape(-1)
    assert mu.shape == (1000,) and len(np.unique(mu)) < 1000
    assert run.summary["parameters"]["mu"]["mean"] == pytest.approx(mu.mean(), rel=1e-5)
    if method[1] == "pathfinder":  # its headline names where its draws came from
        assert out.splitlines()[0].startswith("pathfinder: 4 paths, ")
        assert "1000 draws resampled (adaptive importance sampling)" in out.splitlines()[0]
    rc, shown, _ = _main(["show", str(folder)])
    assert rc == 0
    assert shown.splitlines()[2:] == out.splitlines()  # the same lines, after the options
