"""`qvr dash` in a real terminal (a detached tmux session, 80x24), driven by keys only:
SVI on the seed transformer until the loss shown has fallen and the run is finished; a
NUTS fit cancelled with the key, its run folder complete.  Every wait reads the screen
(capture-pane) until a text appears, with a safety limit; no fixed sleeps."""
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from qvr.runs import list_runs

from conftest import EXAMPLES

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux not installed (apt-get install tmux)")
QVR = Path(sys.executable).parent / "qvr"
LIMIT = 300  # seconds: a safety limit on waiting for a screen, not a timing assertion


class Tmux:
    def __init__(self, socket: str):
        self.base = [TMUX, "-L", socket, "-f", "/dev/null"]  # private server, no user config

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=check)

    def start(self, command: str, cwd: Path) -> None:
        env = f"cd {cwd} && QVR_MCMC_COMPILER=torchscript TERM=xterm-256color "
        self("kill-server", check=False)  # a server left by an interrupted run
        self("new-session", "-d", "-s", "app", "-x", "80", "-y", "24", env + command)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "app").stdout

    def keys(self, *keys: str) -> None:
        for k in keys:
            self("send-keys", "-t", "app", k)

    def wait_for(self, pattern: str, limit: float = LIMIT) -> re.Match:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            m = re.search(pattern, self.screen())
            if m:
                return m
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not on screen after {limit}s:\n{self.screen()}")


@pytest.fixture
def tmux():
    # a server of its own per test: a server just killed by the previous test may still be
    # exiting when the next one starts on the same socket
    t = Tmux(f"qvr-dash-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    yield t
    t("kill-server", check=False)


def test_svi_on_the_seed_transformer_by_keys(tmux, tmp_path):
    tmux.start(f"{QVR} dash {EXAMPLES / 'transformer_lm.qvr'}", tmp_path)
    tmux.wait_for(r"transformer_lm\.qvr — checks clean")
    tmux.keys("2")  # Setup: the method selector is focused
    tmux.wait_for(r"SVI options")
    tmux.wait_for(r"elbo_particles\s+1\b")  # the method's rows are mounted (a busy
    # machine mounts them after the title: Tabs sent before would stop short)
    # Tab: export, data kind, seed, device, dtype, start from, draws, steps (the shipped
    # data is chosen)
    tmux.keys(*["Tab"] * 8, "C-a", "C-k")  # to `steps`, then clear it
    tmux.wait_for(r"steps\s+default\b")
    tmux.keys("1", "2")
    tmux.wait_for(r"steps\s+12\b")
    tmux.keys("C-r")
    first = tmux.wait_for(r"SVI running · step (\d+)/12 · .*loss ([-0-9.e+]+)")
    first_loss = float(first.group(2))
    done = tmux.wait_for(r"SVI finished · step 12/12 · .*loss ([-0-9.e+]+)")
    last_loss = float(done.group(1))
    assert last_loss < first_loss, (first_loss, last_loss)
    runs = list_runs(tmp_path / "runs")
    assert len(runs) == 1 and runs[0].status == "finished"
    losses = runs[0].losses()
    assert len(losses) == 12 and losses[-1] < losses[0]


def test_cancel_a_nuts_fit_with_the_key(tmux, tmp_path):
    tmux.start(f"{QVR} dash {EXAMPLES / 'regression_plates.qvr'}", tmp_path)
    tmux.wait_for(r"regression_plates\.qvr — checks clean")
    tmux.keys("2")
    tmux.wait_for(r"SVI options")
    tmux.keys("Enter")  # open the method list
    tmux.wait_for(r"\bNUTS\b")  # the list is open (NUTS is nowhere else)
    tmux.keys("Down", "Down", "Enter")  # SVI -> HMC -> NUTS
    tmux.wait_for(r"NUTS options")
    tmux.keys("C-r")
    tmux.wait_for(r"\n 0\s+warmup\s+\d+/500")  # the chain rows are live
    tmux.keys("x")
    tmux.wait_for(r"NUTS cancelled")
    runs = list_runs(tmp_path / "runs")
    assert len(runs) == 1
    run = runs[0]
    assert run.status == "cancelled" and run.summary["status"] == "cancelled"
    events = run.events(load_draws=False)
    assert type(events[0]).__name__ == "FitStarted"
    assert type(events[-1]).__name__ == "FitCancelled"
    assert not run.writer_alive()
