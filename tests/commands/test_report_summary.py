"""What `qvr run` prints at the end and `qvr show RUN` prints for a saved run
(`qvr.commands.report`): the grouped summary covers every coordinate of every site, caps
at 20 sites with one closing line, a failed run says why; `qvr run --from` of a folder
that is not a run record is a usage error."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load, loads
from qvr.commands.report import MAX_ROWS, render_run
from qvr.inference import FitConfig, fit
from qvr.inference.criticism import diagnostics as dg
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]

WIDE = """
object A : FinSet 150
object Obs : FinSet 20
program wide : Obs -> Obs
    sample a : A <- Normal(0.0, 1.0)
    sample b : A <- Normal(0.0, 1.0)
    sample mu <- Normal(0.0, 1.0)
    observe y : Obs <- Normal(mu, 1.0)
    return mu
export wide
"""


def _table_rows(text: str) -> dict:
    """`{site: [cells...]}` of the grouped table in `render_run`'s text."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["site", "shape"])
    rows = {}
    for ln in lines[head + 1:]:
        if ln.startswith("("):
            break
        cells = ln.split()
        rows[cells[0]] = cells
    return rows


def test_nuts_summary_covers_every_coordinate_of_every_site(tmp_path):
    """301 coordinates (the summary used to stop at 200: `b`'s worst R-hat and lowest ESS
    were taken over its first 50 coordinates)."""
    torch.manual_seed(0)
    res = fit(loads(WIDE), {"y": torch.linspace(-1.0, 1.0, 20)},
              FitConfig(method="nuts", num_warmup=30, num_samples=20, num_chains=2, seed=1),
              run_dir=tmp_path / "r")
    run = open_run(tmp_path / "r")
    summary = run.summary
    assert summary["truncated"] == 0
    labels = [f"a[{i}]" for i in range(150)] + [f"b[{i}]" for i in range(150)] + ["mu"]
    assert list(summary["parameters"]) == labels
    b = res.samples["b"]
    assert b.shape == (2, 20, 150)
    site = summary["sites"]["b"]
    assert site["shape"] == [150] and site["size"] == 150 and site["n"] == 150
    rhat, ess = np.asarray(dg.split_rhat(b)), np.asarray(dg.ess_bulk(b))
    assert site["r_hat"] == pytest.approx(float(np.nanmax(rhat)), rel=1e-12)
    assert site["ess_bulk"] == pytest.approx(float(np.nanmin(ess)), rel=1e-12)
    means = b.mean(axis=(0, 1))
    assert (site["mean_lo"], site["mean_hi"]) == pytest.approx((means.min(), means.max()))
    assert summary["sites"]["mu"]["shape"] == [1]
    # summary.txt: every coordinate, as the closing line promises
    txt = (run.path / "summary.txt").read_text().splitlines()
    assert len(txt) == 1 + 301 and txt[-1].split()[0] == "mu"
    assert "more coordinates" not in "\n".join(txt)
    text = render_run(run)
    rows = _table_rows(text)
    assert rows["b"][1] == "150" and rows["a"][1] == "150" and rows["mu"][1] == "scalar"
    assert float(rows["b"][-1]) == pytest.approx(float(np.nanmax(rhat)), abs=5e-4)
    assert f"(every coordinate (301) in {run.path / 'summary.txt'})" in text.splitlines()


def test_svi_grouped_table_gives_each_site_its_true_shape(tmp_path):
    """The topic model's 8,800 coordinates: `doc_topics` is 100x8 (it read 25x8, the
    first 200 coordinates) and `topic_words` 8x1000 (it was missing)."""
    path = ROOT / "examples" / "topic_model.qvr"
    fit(load(path), config=FitConfig(method="svi", steps=2, seed=0, pointwise=False),
        run_dir=tmp_path / "r", program_path=str(path))
    run = open_run(tmp_path / "r")
    text = render_run(run)
    rows = _table_rows(text)
    assert rows["doc_topics"][1] == "100×8" and rows["topic_words"][1] == "8×1000"
    lines = text.splitlines()
    # the table's closing line; then the guide's Pareto k-hat (2 steps: far above 0.7)
    at = lines.index(f"(every coordinate (8800) in {run.path / 'summary.txt'})")
    assert lines[at + 1].startswith("Pareto k-hat ") and lines[at + 2].startswith("warning: ")
    txt = (run.path / "summary.txt").read_text().splitlines()
    assert len(txt) == 1 + 8800 and txt[-1].split()[0] == "topic_words[7,999]"
    sites = run.summary["sites"]
    assert sites["doc_topics"]["size"] == 800 and sites["topic_words"]["size"] == 8000
    # a simplex row's means sum to one: the row's range brackets 1/8
    assert sites["doc_topics"]["mean_lo"] < 1 / 8 < sites["doc_topics"]["mean_hi"]


def _record_with_sites(tmp_path, n_sites: int):
    """A finished NUTS-like record of `n_sites` scalar sites whose R-hat grows with the
    site's index (chain offsets of growing size)."""
    from qvr.events import FitFinished, FitStarted
    from qvr.inference.methods.fit_result import FitResult
    from qvr.inference.front.save import save_results
    from qvr.runs import RunWriter
    rng = np.random.default_rng(0)
    samples = {}
    for i in range(n_sites):
        x = rng.standard_normal((2, 200, 1))
        x[1] += 0.05 * i  # chain 1 drifts away from chain 0
        samples[f"s{i:02d}"] = x
    w = RunWriter(tmp_path / "r", {"method": "nuts", "program": {}})
    w.write(FitStarted("nuts", 10, 2))
    result = FitResult("nuts")
    result.summary = dg.summary(samples)
    save_results(w, result, "finished", "")
    w.write(FitFinished({}, 1.0))
    w.close()
    return open_run(tmp_path / "r"), result.summary


def test_grouped_summary_shows_at_most_20_sites_worst_r_hat_first(tmp_path):
    run, summ = _record_with_sites(tmp_path, 25)
    lines = render_run(run).splitlines()
    assert lines[1].split() == ["site", "shape", "mean", "sd", "5%", "95%", "ess_bulk",
                                "ess_tail", "r_hat"]
    body = lines[2:-1]
    assert len(body) == MAX_ROWS == 20
    r_hats = [float(ln.split()[-1]) for ln in body]
    assert r_hats == sorted(r_hats, reverse=True)
    worst = sorted(summ.rows, key=lambda k: -summ.rows[k]["r_hat"])[:20]
    assert [ln.split()[0] for ln in body] == worst
    assert lines[-1] == (f"(5 more sites; every coordinate (25) in "
                         f"{run.path / 'summary.txt'})")
    # `qvr show --rows N`
    shown = render_run(run, max_rows=3).splitlines()
    assert len(shown) == 2 + 3 + 1 and shown[-1].startswith("(22 more sites; ")


def test_a_run_whose_checks_fail_gets_a_warning_per_check(tmp_path):
    """Under the table, one `warning:` line per failed check, with its remedy (the
    dashboard's thresholds); none for a run whose checks pass."""
    run, _ = _record_with_sites(tmp_path, 3)
    data = json.loads((run.path / "summary.json").read_text())
    data["stats"] = {"num_chains": 2, "num_samples": 200, "total_divergences": 3,
                     "max_r_hat": 1.002, "min_ess_bulk": 390.0, "min_ess_tail": 300.0}
    (run.path / "summary.json").write_text(json.dumps(data))
    warnings = [ln for ln in render_run(run).splitlines() if ln.startswith("warning: ")]
    assert [w.split(":")[1].strip() for w in warnings] == ["3 divergent draws after warmup"]
    data["stats"]["max_r_hat"] = 1.2
    (run.path / "summary.json").write_text(json.dumps(data))
    warnings = [ln for ln in render_run(run).splitlines() if ln.startswith("warning: ")]
    assert warnings[1] == ("warning: max R-hat 1.200 > 1.01: the chains disagree, they have "
                           "not converged to one posterior; try a longer --warmup, or "
                           "reparameterise")
    assert len(warnings) == 2


def test_a_record_whose_summary_lists_only_some_coordinates_says_so(tmp_path):
    """A summary written before summaries were complete: no per-site rows, 200 of the
    coordinates; the closing line must not promise every coordinate."""
    run, _ = _record_with_sites(tmp_path, 3)
    data = json.loads((run.path / "summary.json").read_text())
    del data["sites"]
    data["parameters"] = dict(list(data["parameters"].items())[:2])
    data["truncated"] = 1
    (run.path / "summary.json").write_text(json.dumps(data))
    last = render_run(run).splitlines()[-1]
    assert last == (f"(the first 2 of 3 coordinates in {run.path / 'summary.txt'}; "
                    f"the rows above cover those only)")


def test_a_run_stopped_before_its_first_draw_says_so(tmp_path):
    """Cancelled during warmup (or while NUTS compiled): the record keeps every chain
    with no draws, and the report says it stopped before the first draw instead of
    claiming the program has no latent sites."""
    n = [0]

    def stop():
        n[0] += 1
        return n[0] > 3  # a few warmup iterations, then stop

    path = ROOT / "examples" / "eight_schools.qvr"
    result = fit(load(path), config={"method": "nuts", "num_warmup": 50, "num_samples": 50,
                                     "num_chains": 3, "seed": 0},
                 run_dir=tmp_path / "r", program_path=str(path), should_stop=stop)
    assert result.status == "cancelled"
    run = open_run(tmp_path / "r")
    lines = render_run(run).splitlines()
    assert lines[:2] == ["nuts: 3 chains, stopped before the first draw [cancelled]",
                         "(no draws to summarise)"]


def test_show_of_a_failed_smc_run_says_what_happened(tmp_path):
    path = ROOT / "examples" / "recurrent_lm.qvr"
    with pytest.raises(ValueError, match="not in the program's vocabulary"):
        fit(load(path), config=FitConfig(method="smc", particles=2, max_len=3,
                                         forbid=[["qqqq"]]),
            run_dir=tmp_path / "r", program_path=str(path))
    run = open_run(tmp_path / "r")
    assert run.status == "failed" and run.sequences is None
    lines = render_run(run).splitlines()
    assert lines == ["smc: no summary [failed]",
                     "failed: --forbid qqqq: `qqqq` is not in the program's vocabulary"]


def test_a_failed_run_without_a_summary_gives_the_recorded_message(tmp_path):
    from qvr.events import FitFailed, FitStarted
    from qvr.runs import RunWriter
    w = RunWriter(tmp_path / "r", {"method": "smc", "program": {}})
    w.write(FitStarted("smc", 10))
    w.write(FitFailed("the model's logits are not finite at step 2", 2, "DataError", 1.0))
    w.close()
    lines = render_run(open_run(tmp_path / "r")).splitlines()
    assert lines[:2] == ["smc: no summary [failed]",
                         "failed: the model's logits are not finite at step 2"]
    assert "positive weight" not in "\n".join(lines)


def test_from_a_folder_that_is_not_a_run_record_is_a_usage_error(tmp_path, capsys):
    from qvr.cli import main
    prog = tmp_path / "p.qvr"
    prog.write_text(WIDE)
    (tmp_path / "not-a-run").mkdir()
    rc = main(["run", str(prog), "--method", "svi", "--steps", "2", "--synthetic", "5",
               "--from", str(tmp_path / "not-a-run"), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"qvr run: --from {tmp_path / 'not-a-run'}: not a run record (no run.json)\n"
    assert not (tmp_path / "runs").exists()  # found before the new run's folder
