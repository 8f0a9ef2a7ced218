"""Readers probing ``writer.lock`` at the same time never take each other for the writer:
a dead run reads as ``interrupted`` from any number of processes (`Run.writer_alive`
probes with a shared lock; an exclusive probe was refused by the other reader's probe,
and a dead run read as ``running``)."""
import os
import subprocess
import sys
from pathlib import Path

from qvr.events import FitProgress, FitStarted
from qvr.runs import RunWriter, open_run

ROOT = Path(__file__).resolve().parents[2]
PROBES = 20_000

PROBE_SCRIPT = """
import sys
from qvr.runs import open_run
run = open_run(sys.argv[1])
n = int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # go: both readers probe at once
print(sum(run.writer_alive() for _ in range(n)), flush=True)
"""


def test_two_readers_probing_at_once_never_see_a_live_writer(tmp_path):
    folder = tmp_path / "r"
    w = RunWriter(folder, {"method": "svi", "program": {}})
    w.write(FitStarted("svi", 10))
    w.write(FitProgress("svi", "optimization", 1, 10, metrics={"loss": 3.0}))
    assert open_run(folder).writer_alive()  # the writer's exclusive lock is seen
    w.close()  # the writer goes away without a terminal event
    run = open_run(folder)
    assert run.status == "interrupted" and not run.writer_alive()

    script = tmp_path / "probe.py"
    script.write_text(PROBE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(script), str(folder), str(PROBES)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        alive = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            alive.append(int(out.strip()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert alive == [0, 0]
    assert open_run(folder).status == "interrupted"


def test_a_live_writer_is_seen_by_a_reader_in_another_process(tmp_path):
    folder = tmp_path / "r"
    w = RunWriter(folder, {"method": "svi", "program": {}})
    try:
        w.write(FitStarted("svi", 10))
        script = tmp_path / "probe.py"
        script.write_text(PROBE_SCRIPT)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, str(script), str(folder), "50"], env=env,
                             input="go\n", capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["ready", "50"]
    finally:
        w.close()
