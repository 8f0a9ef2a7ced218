"""`qvr predict RUN --data NEW`: a prediction record made from a fitted run (exact
posterior draws of a conjugate regression in a fake record), printed per element as
`qvr show` prints it; usage errors exit 2, a run or data that cannot predict exits 1
with a message naming the file and the cause, and leaves no empty folder."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from predict_records import X_NEW, write_fit, write_program  # noqa: E402

from qvr.cli import main  # noqa: E402
from qvr.runs import open_run  # noqa: E402


@pytest.fixture()
def fitted(tmp_path):
    program = write_program(tmp_path / "prog")
    run = write_fit(tmp_path / "runs" / "reg-fit", program)
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"xc": X_NEW.tolist()}))
    return run, new, program


def _row(label, r):
    return [label] + [format(r[c], ".3g") for c in ("mean", "sd", "q5", "q50", "q95")]


def test_predict_writes_a_record_that_show_prints(fitted, tmp_path, capsys):
    run, new, program = fitted
    out = tmp_path / "runs" / "pred"
    assert main(["predict", str(run), "--data", str(new), "--draws", "100", "--seed", "5",
                 "--run-dir", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [f"qvr predict: run folder {out}",
                                        f"qvr predict: results in {out}"]
    rec = open_run(out)
    assert (rec.method, rec.status) == ("predict", "finished")
    params = rec.summary["parameters"]
    assert list(params) == ["y[0]", "y[1]", "y[2]", "y[3]", "mean_y[0]", "mean_y[1]",
                            "mean_y[2]", "mean_y[3]"]
    lines = printed.out.splitlines()
    assert lines[0] == f"program {program.resolve()}, predicted from {run}"
    assert lines[1] == ("predict: y, mean_y at 4 new rows, 2 chains x 50 draws (every 40th) "
                        "of reg-fit (nuts)")
    assert lines[2] == f"new data: {new.resolve()}"
    assert lines[3].split() == ["element", "mean", "sd", "5%", "50%", "95%"]
    assert [ln.split() for ln in lines[4:8]] == [_row(f"y[{i}]", params[f"y[{i}]"])
                                                 for i in range(4)]
    assert lines[8].split()[:2] == ["mean_y[0]", "(recorded)"]
    assert lines[12] == (f"(every element (8) in {out / 'summary.txt'}, the draws in "
                         f"{out / 'samples.npz'})")
    # `qvr show` prints the same record the same way
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith(f"program {program.resolve()}, started ")
    assert shown[1] == "options: seed 5, dtype float64, draws 100"
    assert shown[2:] == lines[1:]
    assert main(["show", str(out), "--rows", "2"]) == 0
    short = capsys.readouterr().out.splitlines()
    assert short[-1] == (f"(6 more elements; every element (8) in {out / 'summary.txt'}, "
                         f"the draws in {out / 'samples.npz'})")


def test_the_folder_defaults_to_beside_the_run(fitted, capsys):
    run, new, _ = fitted
    assert main(["predict", str(run), "--data", str(new), "--draws", "4", "--seed", "1"]) == 0
    made = [p.name for p in run.parent.iterdir() if p.name != "reg-fit"]
    assert len(made) == 1 and made[0].startswith("reg-predict-")


def test_usage_errors_exit_2(fitted, tmp_path, capsys):
    run, new, _ = fitted
    assert main(["predict", str(tmp_path / "nope"), "--data", str(new)]) == 2
    assert capsys.readouterr().err == f"qvr predict: {tmp_path / 'nope'}: no such run folder\n"
    assert main(["predict", str(run), "--data", str(tmp_path / "no.json")]) == 2
    assert capsys.readouterr().err == \
        f"qvr predict: --data {tmp_path / 'no.json'}: no such data file or folder\n"
    assert main(["predict", str(run), "--data", str(new), "--draws", "0"]) == 2
    assert capsys.readouterr().err == "qvr predict: --draws 0: must be at least 1\n"


def test_a_missing_covariate_exits_1_and_leaves_no_folder(fitted, tmp_path, capsys):
    run, _, _ = fitted
    bad = tmp_path / "bad.json"
    bad.write_text('{"x_c": [1.0]}')
    before = sorted(p.name for p in run.parent.iterdir())
    assert main(["predict", str(run), "--data", str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"qvr predict: {bad}: the program reads `xc` (host data), which the "
                       f"data does not give")
    assert sorted(p.name for p in run.parent.iterdir()) == before
