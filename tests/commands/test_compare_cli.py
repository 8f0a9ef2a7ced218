"""`qvr compare` and `qvr.compare`: runs fitted to the same data ranked by PSIS-LOO, the
difference and its SE from the paired rows, stacking weights, a verdict; refusals (other
data, no hash, no pointwise terms, other rows) exit 2 with a message that names the runs;
`qvr show` prints the LOO and predictive-checks lines.  Fake records (numpy)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from predictive_records import conjugate_normal, normal_logpdf, write_record  # noqa: E402

import qvr  # noqa: E402
from qvr.cli import main  # noqa: E402
from qvr.inference.criticism.checks import CompareError  # noqa: E402

pytest.importorskip("arviz_stats")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(20)
    return rng.normal(1.0, 2.0, size=80)


def _right(path, y, **kw):
    """The model that generated the data (sigma 2)."""
    m = conjugate_normal(y, 2.0, chains=2, draws=500, seed=21)
    return write_record(path, log_lik={"y": m["log_lik"]}, y_rep={"y": m["y_rep"]},
                        observed={"y": y}, posterior={"mu": m["mu"]}, export="right",
                        program="/models/rentals.qvr", **kw), m


def _wrong(path, y, **kw):
    """Too narrow a likelihood (sigma 1)."""
    m = conjugate_normal(y, 1.0, chains=2, draws=500, seed=22)
    return write_record(path, log_lik={"y": m["log_lik"]}, y_rep={"y": m["y_rep"]},
                        observed={"y": y}, posterior={"mu": m["mu"]}, export="narrow",
                        program="/models/rentals.qvr", **kw), m


@pytest.fixture(scope="module")
def pair(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("runs")
    a, ma = _right(root / "right-1", data)
    b, mb = _wrong(root / "narrow-1", data)
    return a, b, ma, mb


def test_compare_ranks_the_better_model_first_with_the_paired_se(pair):
    a, b, ma, mb = pair
    out = qvr.compare([b, a])  # order given does not matter
    best, second = out["runs"]
    assert (best["name"], second["name"]) == ("right", "narrow")
    assert (best["rank"], second["rank"]) == (1, 2)
    assert best["run_id"] == "right-1" and best["export"] == "right"
    assert out["n_rows"] == 80 and out["data_sha256"] == "d" * 64
    # exact LOO of both models: the difference and its SE from the paired rows
    diff_i = ma["exact_loo_i"] - mb["exact_loo_i"]
    assert second["elpd_diff"] == pytest.approx(diff_i.sum(), abs=0.1)
    assert second["dse"] == pytest.approx(np.sqrt(80 * np.var(diff_i)), rel=0.02)
    assert best["elpd_diff"] == 0.0 and best["dse"] == 0.0
    assert best["elpd_loo"] == pytest.approx(ma["exact_loo_i"].sum(), abs=0.2)  # 1000 draws
    assert best["weight"] + second["weight"] == pytest.approx(1.0, abs=1e-6)
    assert best["weight"] > 0.9
    z = second["elpd_diff"] / second["dse"]
    assert z > 2
    assert out["verdict"] == (f"right predicts better than narrow by "
                              f"{second['elpd_diff']:.3g} ± {second['dse']:.2g} ({z:.1f} SE)")


def test_a_difference_within_two_se_is_no_clear_difference(tmp_path, data):
    a, _ = _right(tmp_path / "a", data)
    m = conjugate_normal(data, 2.05, chains=2, draws=500, seed=23)
    b = write_record(tmp_path / "b", log_lik={"y": m["log_lik"]}, y_rep={"y": m["y_rep"]},
                     observed={"y": data}, export="wider")
    out = qvr.compare([a, b])
    assert out["verdict"].startswith("no clear difference between ")
    assert out["verdict"].endswith("< 2 SE)")


def test_refusals_name_the_runs_and_the_reason(tmp_path, data, pair):
    a, _, _, _ = pair
    other, _ = _wrong(tmp_path / "other-data", data, data_sha256="e" * 64)
    with pytest.raises(CompareError) as err:
        qvr.compare([a, other])
    msg = str(err.value)
    assert "right-1" in msg and "other-data" in msg
    assert "d" * 64 in msg and "e" * 64 in msg and "different data" in msg
    nohash, _ = _wrong(tmp_path / "nohash", data, data_sha256=None)
    with pytest.raises(CompareError, match="nohash records no data hash"):
        qvr.compare([a, nohash])
    from qvr.runs.writer import RunWriter
    with RunWriter(tmp_path / "old", {"method": "nuts"}):
        pass
    with pytest.raises(CompareError, match="old .*no pointwise.*re-run it with this qvr"):
        qvr.compare([a, tmp_path / "old"])
    m = conjugate_normal(data[:40], 2.0, chains=2, draws=500, seed=24)
    short = write_record(tmp_path / "short", log_lik={"y": m["log_lik"]},
                         y_rep={"y": m["y_rep"]}, observed={"y": data[:40]})
    with pytest.raises(CompareError, match=r"different LOO rows \(80 vs 40"):
        qvr.compare([a, short])
    with pytest.raises(CompareError, match="two or more runs"):
        qvr.compare([a])


def test_cli_text_json_and_exit_codes(pair, tmp_path, data, capsys, monkeypatch):
    a, b, _, _ = pair
    assert main(["compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split() == ["rank", "run", "program/export", "elpd_loo", "SE",
                               "elpd_diff", "dSE", "p_loo", "weight", "warnings"]
    assert text[1].split()[:3] == ["1", "right-1", "rentals.qvr/right"]
    assert text[2].split()[:3] == ["2", "narrow-1", "rentals.qvr/narrow"]
    assert text[-1].startswith("right predicts better than narrow by ")
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in out["runs"]] == ["right-1", "narrow-1"]
    assert out["verdict"].startswith("right predicts better")
    # a run id under runs/
    monkeypatch.chdir(a.parent.parent)
    (a.parent.parent / "runs").mkdir(exist_ok=True)
    (a.parent.parent / "runs" / "right-1").symlink_to(a)
    (a.parent.parent / "runs" / "narrow-1").symlink_to(b)
    assert main(["compare", "right-1", "narrow-1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["run_id"] == "right-1"
    # refusals: exit 2, one message on stderr
    other, _ = _wrong(tmp_path / "other-data", data, data_sha256="e" * 64)
    assert main(["compare", str(a), str(other)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.startswith("qvr compare: runs right-1 and other-data")
    assert main(["compare", str(a), str(tmp_path / "nowhere")]) == 2
    assert "no such run folder" in capsys.readouterr().err


def test_show_prints_loo_and_predictive_checks(pair, capsys):
    a, _, ma, _ = pair
    from qvr.inference.criticism.checks import write_checks
    loo, _ = write_checks(a)
    assert main(["show", str(a)]) == 0
    out = capsys.readouterr().out
    assert f"LOO: elpd_loo {loo['elpd_loo']:.1f} (SE {loo['se']:.1f}), p_loo " \
           f"{loo['p_loo']:.1f}, 80 rows; Pareto k: all below 0.67" in out  # 1000 draws
    assert "Predictive checks (posterior, 1000 draws):" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("  y: "))
    assert line.startswith("  y: mean p=") and "LOO-PIT uniformity p=" in line


def test_show_lists_high_k_rows(tmp_path):
    """An outlier under a tight model: its row is named with its k."""
    rng = np.random.default_rng(25)
    y = rng.normal(size=30)
    y[4] = 12.0
    m = conjugate_normal(y, 1.0, chains=2, draws=500, seed=26)
    path = write_record(tmp_path / "outlier", log_lik={"y": m["log_lik"]},
                        y_rep={"y": m["y_rep"]}, observed={"y": y})
    from qvr.commands.report import render_run
    from qvr.runs import open_run
    text = render_run(open_run(path))
    line = next(ln for ln in text.splitlines() if ln.startswith("LOO: "))
    assert "Pareto k: 1 row above 0.67 (y[4] " in line
    assert normal_logpdf(0.0, 0.0, 1.0) < 0  # helper importable from the shared module


def test_compare_and_checks_stay_torch_free(pair):
    """The dashboard's UI process imports `qvr.inference.criticism.checks`: never torch, and ArviZ's
    statistics only when a check is computed."""
    import subprocess
    a, b, _, _ = pair
    root = Path(__file__).resolve().parents[2]
    code = ("import sys, qvr, qvr.inference.criticism.checks, qvr.commands.compare; "
            "lazy = 'arviz_stats' not in sys.modules; "
            f"out = qvr.compare([{str(a)!r}, {str(b)!r}]); "
            "print(lazy, 'torch' in sys.modules, out['runs'][0]['run_id'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "right-1"]
