"""`qvr run FILE --method smc`: output, run folder, exit statuses, Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

ROOT = Path(__file__).resolve().parents[2]
TRANSFORMER = str(ROOT / "examples" / "transformer_lm.qvr")


class Out:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def qvr_run(capsys):
    """``qvr run ARGS --runs-dir RUNS`` in this process (a subprocess only for Ctrl-C)."""
    from qvr.cli import main

    def call(*args, runs):
        try:
            rc = main(["run", *args, "--runs-dir", str(runs)])
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code
        out, err = capsys.readouterr()
        return Out(rc, out, err)
    return call


def only_folder(runs: Path) -> Path:
    folders = list(runs.iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def test_smc_run_prints_top_sequences_and_fills_the_run_folder(tmp_path, qvr_run):
    from qvr.runs import open_run
    out = qvr_run(TRANSFORMER, "--method", "smc", "--particles", "16", "--expansion", "3",
                  "--max-len", "8", "--eos", "1", "--bos", "0", "--forbid", "5",
                  "--forbid", "2,3", "--top", "4", "--name", "demo", runs=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("smc: log Z = ") and "steps" in lines[0]
    assert lines[1].split() == ["weight", "len", "sequence"]
    rows = lines[2:]
    assert 1 <= len(rows) <= 4
    weights = [float(r.split()[0]) for r in rows]
    assert weights == sorted(weights, reverse=True) and sum(weights) <= 1 + 1e-9
    folder = only_folder(tmp_path)
    assert folder.name.startswith("demo-")
    assert str(folder) in out.stderr
    run = open_run(folder)
    assert run.status == "finished" and run.config["particles"] == 16
    assert run.config["forbid"] == [[5], [2, 3]]
    result = run.sequences
    progress = [e for e in run.events() if type(e).__name__ == "FitProgress"]
    steps = [e.step for e in progress]  # throttled: first, last, and increasing
    assert steps[0] == 1 and steps[-1] == result["num_steps"] and steps == sorted(set(steps))
    assert {"ess", "num_finished", "log_Z", "resampled"} <= set(progress[0].metrics)
    assert progress[-1].metrics["log_Z"] == pytest.approx(result["log_Z"])
    assert len(result["particles"]) == 16 and result["mode"] == "last-token"
    for p in result["particles"]:
        assert 5 not in p["tokens"] and p["finished"] == (p["tokens"][-1] == 1)
    assert abs(sum(t["weight"] for t in result["top"]) - 1) < 1e-9
    assert float(lines[0].split()[4].rstrip(",")) == pytest.approx(result["log_Z"], abs=1e-6)


def test_usage_errors_exit_two(tmp_path, qvr_run):
    out = qvr_run(TRANSFORMER, "--method", "smc", "--eos", "1", "--particles", "0",
                  runs=tmp_path)
    assert out.returncode == 2 and "--particles: must be an integer >= 1, got 0" in out.stderr
    out = qvr_run(TRANSFORMER, "--method", "smc", "--eos", "1", "--particles", "0", runs=tmp_path)
    assert out.returncode == 2 and "--particles" in out.stderr
    out = qvr_run(str(tmp_path / "missing.qvr"), "--method", "smc", "--eos", "1", runs=tmp_path)
    assert out.returncode == 2 and "no such file" in out.stderr
    assert not tmp_path.exists() or not any(p.is_dir() for p in tmp_path.iterdir())


@pytest.mark.parametrize("source,message", [
    ("object A : FinSet 3\nlet f = nope\n", "QVR102"),  # a front-end error
    (None, "Token -> Token"),  # a program that is no next-token model
])
def test_model_errors_exit_one_without_traceback(tmp_path, qvr_run, source, message):
    path = ROOT / "examples" / "hmm.qvr"
    if source is not None:
        path = tmp_path / "bad.qvr"
        path.write_text(source)
    out = qvr_run(str(path), "--method", "smc", "--eos", "1", runs=tmp_path / "runs")
    assert out.returncode == 1, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_bad_token_id_is_a_model_error(tmp_path, qvr_run):
    out = qvr_run(TRANSFORMER, "--method", "smc", "--eos", "99", "--bos", "0", runs=tmp_path)
    assert out.returncode == 1 and "eos=99" in out.stderr
    assert (only_folder(tmp_path) / "error.txt").read_text().strip().endswith("(0..31)")


def test_ctrl_c_stops_after_the_step_and_keeps_everything(tmp_path):
    from qvr.runs import open_run
    proc = subprocess.Popen(
        [sys.executable, "-m", "qvr.cli", "run", TRANSFORMER, "--method", "smc", "--eos", "1",
         "--min-len", "100000", "--particles", "16", "--expansion", "4", "--max-len", "100000",
         "--runs-dir", str(tmp_path)],  # ending is ruled out and K = 4: the run cannot end by itself
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    events = None
    while time.monotonic() < deadline:  # wait for three steps on disk
        found = list(tmp_path.glob("*/events.jsonl"))
        if found and found[0].read_text().count('"type":"progress"') >= 3:
            events = found[0]
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    assert events is not None, "the run did not start"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    folder = events.parent
    assert str(folder) in stderr and "Traceback" not in stderr
    run = open_run(folder)
    assert run.status == "cancelled"
    result = run.sequences
    assert result["cancelled"] is True
    steps = [e.step for e in run.events() if type(e).__name__ == "FitProgress"]
    assert steps == sorted(set(steps)) and steps[-1] == result["num_steps"]
    assert "[cancelled]" in stdout


def test_options_of_another_method_are_rejected(tmp_path, qvr_run):
    out = qvr_run(TRANSFORMER, "--method", "smc", "--steps", "5", "--eos", "1", runs=tmp_path)
    assert out.returncode == 2
    assert "--steps is an option of --method svi, not of --method smc" in out.stderr
    out = qvr_run(TRANSFORMER, "--method", "svi", "--no-cache", runs=tmp_path)
    assert out.returncode == 2 and "--no-cache is an option of --method smc" in out.stderr


def test_the_end_token_comes_from_the_shipped_vocabulary_or_a_clear_message(tmp_path,
                                                                          qvr_run):
    src = tmp_path / "lm.qvr"
    src.write_text(Path(TRANSFORMER).read_text())
    out = qvr_run(str(src), "--method", "smc", "--particles", "2", runs=tmp_path / "runs")
    assert out.returncode == 1 and "--eos ID" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "data").mkdir()
    vocab = ["<bos>", "<eos>"] + [chr(ord("a") + i) for i in range(30)]
    (tmp_path / "data" / "lm.vocab.json").write_text(json.dumps(vocab))
    out = qvr_run(str(src), "--method", "smc", "--particles", "4", "--max-len", "4",
                  runs=tmp_path / "runs2")
    assert out.returncode == 0, out.stderr
    from qvr.runs import open_run
    run = open_run(only_folder(tmp_path / "runs2"))
    assert run.sequences["eos"] == 1 and run.sequences["vocab"] == vocab
    top = run.sequences["top"][0]
    expected = "".join(vocab[t] for t in top["tokens"] if t != 1)
    assert top["text"] == expected


def test_a_vocabulary_given_with_vocab_names_the_tokens(tmp_path, qvr_run):
    """`--vocab FILE` replaces the shipped vocabulary: the record's sequences and the
    `--forbid` words use it; a file that does not load is a usage error before any run
    folder is made."""
    import json
    from qvr.runs import open_run
    words = [f"t{i}" for i in range(64)]
    vocab = tmp_path / "words.json"
    vocab.write_text(json.dumps(words))
    runs = tmp_path / "runs"
    out = qvr_run(TRANSFORMER, "--method", "smc", "--particles", "8", "--max-len", "6",
                  "--eos", "1", "--bos", "0", "--forbid", "t5", "--vocab", str(vocab),
                  runs=runs)
    assert out.returncode == 0, out.stderr
    run = open_run(only_folder(runs))
    assert run.sequences["vocab"][:64] == words
    assert run.config["forbid"] == [["t5"]]  # as given; resolved through the vocabulary
    for p in run.sequences["particles"]:
        assert 5 not in p["tokens"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a list"}))
    for path, message in [(tmp_path / "none.json", "no such file"),
                          (bad, "a vocabulary must be a JSON list of strings")]:
        out = qvr_run(TRANSFORMER, "--method", "smc", "--vocab", str(path),
                      runs=tmp_path / "runs2")
        assert out.returncode == 2 and message in out.stderr
        assert out.stderr.count("\n") == 1 and not (tmp_path / "runs2").exists()
