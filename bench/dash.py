"""Figures for the terminal dashboard (`qvr dash`), not timed tests.

    QVR_MCMC_COMPILER=torchscript .venv/bin/python bench/dash.py [--svi-steps N]
        [--repeats N] [--real-100k] [--only paint|keys|throughput|memory]

1. **Start to first paint** — a fresh `python` process that imports the dashboard, opens
   examples/transformer_lm.qvr (check, highlighting, outline) and paints once (headless
   driver), from before `Popen` to the first paint; median and max of 5.  Goal < 1 s.
2. **Key press to repaint while a NUTS fit runs** — `qvr dash` in a real terminal (tmux,
   80x24) fitting examples/regression_plates.qvr with NUTS; `v` (next trace) pressed 30
   times, each time from `send-keys` to the new trace name being on the captured screen
   (the capture polls every 10 ms, so figures include up to ~10 ms of polling); p50 and p95.
   Goal p95 < 100 ms.
3. **Fit throughput under the dashboard** — the same SVI fit (regression_plates,
   `--svi-steps`, default 3000) run headless by `qvr run` and started from the dashboard
   (Pilot, the app's 10 Hz timer following the record), steps per second from each
   record's `FitFinished.elapsed`; the two are interleaved (headless, dashboard,
   headless, ...) `--repeats` times each (default 3) and the median of the per-pair
   ratios is reported, so a change in the machine's load hits both sides.  Goal ≥ 0.9x.
4. **Memory of the UI process, and the repaint** — for records of 10,000 and 100,000
   SVI progress events (every step reported: the worst case; a real fit reports at most
   20 a second), a fresh child process opens the record with the dashboard's code path
   and reports its resident memory (VmRSS) before and after, and the peak (VmHWM); the
   two sizes side by side show whether memory grows with the run's length.  The same
   child times the repaint itself — `LivePane.show(state, force=True)` called directly
   (decimating the series to the plot's width and replotting) and the loss plot drawing
   its canvases (`render()`), median and max of 50;
   the key-press figure is the latency of Pilot's `press("l")` (the event loop, the
   toggle and a repaint), labelled as such.  With `--real-100k` the 100k record comes
   from a real 100,000-step fit instead (about 10 minutes here).

The machine's load is printed with the figures: on a shared 2-core machine they vary.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = os.path.abspath(sys.executable)
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "tui"))


def env():
    return dict(os.environ, QVR_MCMC_COMPILER=os.environ.get("QVR_MCMC_COMPILER",
                                                              "torchscript"))


# ---------------------------------------------------------------- 1. first paint
CHILD_PAINT = r"""
import sys, time
t0 = float(sys.argv[1])
from qvr_tui.app import QvrDash
class Timed(QvrDash):
    def _first_paint(self):
        print("PAINT", time.time() - t0, flush=True)
        self.exit()
Timed(program=sys.argv[2], watch=False).run(headless=True, size=(80, 24))
"""


def first_paint(n: int = 5) -> dict:
    out = []
    for _ in range(n):
        t0 = time.time()
        r = subprocess.run([PY, "-c", CHILD_PAINT, repr(t0), str(EXAMPLES / "transformer_lm.qvr")],
                           capture_output=True, text=True, cwd=ROOT, env=env(), timeout=120)
        m = re.search(r"PAINT ([0-9.]+)", r.stdout)
        if not m:
            raise RuntimeError(r.stderr[-2000:])
        out.append(float(m.group(1)))
    return {"median_s": statistics.median(out), "max_s": max(out), "all_s": out}


# ---------------------------------------------------------------- 2. key latency
class Tmux:
    def __init__(self):
        self.base = ["tmux", "-L", f"qvr-dash-bench-{os.getpid()}", "-f", "/dev/null"]

    def __call__(self, *a):
        return subprocess.run([*self.base, *a], capture_output=True, text=True)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "app").stdout

    def wait(self, pattern, limit=300.0, poll=0.01):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            s = self.screen()
            if re.search(pattern, s):
                return s
            time.sleep(poll)
        raise RuntimeError(f"{pattern!r} not on screen:\n{self.screen()}")


def key_latency(presses: int = 30) -> dict:
    if shutil.which("tmux") is None:
        return {"skipped": "tmux not installed"}
    tmp = Path(tempfile.mkdtemp(prefix="qvr-dash-bench-"))
    t = Tmux()
    cmd = (f"cd {tmp} && QVR_MCMC_COMPILER=torchscript TERM=xterm-256color "
           f"{PY} -m qvr_tui {EXAMPLES / 'regression_plates.qvr'}")
    t("new-session", "-d", "-s", "app", "-x", "80", "-y", "24", cmd)
    try:
        t.wait(r"checks clean")
        t("send-keys", "-t", "app", "2")
        t.wait(r"SVI options")
        t("send-keys", "-t", "app", "Enter")
        t.wait(r"\bNUTS\b")
        for k in ("Down", "Down", "Enter"):
            t("send-keys", "-t", "app", k)
        t.wait(r"NUTS options")
        t("send-keys", "-t", "app", "C-r")
        t.wait(r"\n 0\s+warmup\s+\d+/500")
        names = ["step size", "log density", "tree depth", "acceptance"]
        lat = []
        for i in range(presses):
            want = names[i % len(names)]
            t0 = time.perf_counter()
            t("send-keys", "-t", "app", "v")
            t.wait(re.escape(f"v: trace ({want})"), limit=10)
            lat.append(time.perf_counter() - t0)
        running = "NUTS running" in t.screen()
        t("send-keys", "-t", "app", "x")
        t.wait(r"NUTS cancelled")
    finally:
        t("kill-server")
        shutil.rmtree(tmp, ignore_errors=True)
    lat.sort()
    return {"p50_ms": 1000 * lat[len(lat) // 2],
            "p95_ms": 1000 * lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))],
            "max_ms": 1000 * lat[-1], "fit_running_throughout": running}


# ---------------------------------------------------------------- 3. throughput
def _rate(run_dir: Path, steps: int) -> float:
    from qvr.events import FitFinished
    from qvr.runs import open_run
    ev = [e for e in open_run(run_dir).events(load_draws=False) if isinstance(e, FitFinished)]
    if not ev:
        raise RuntimeError(f"{run_dir}: the fit did not finish")
    return steps / ev[0].elapsed


def _headless(prog: str, steps: int, run_dir: Path) -> float:
    subprocess.run([PY, "-m", "qvr.cli", "run", prog, "--method", "svi", "--steps", str(steps),
                    "--run-dir", str(run_dir)], capture_output=True, cwd=run_dir.parent,
                   env=env(), check=True, timeout=3600)
    return _rate(run_dir, steps)


def _dashboard(prog: str, steps: int, runs_dir: Path) -> float:
    import asyncio

    from qvr_tui.app import QvrDash

    async def dash() -> Path:
        app = QvrDash(program=prog, runs_dir=runs_dir, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.ready.wait()
            app.setup_pane.set_value("steps", str(steps))
            await pilot.pause()
            await pilot.press("r")
            run_dir = app.runner.run_dir
            while not (app.state.finished and app.runner is None):
                await pilot.pause(0.05)
            return run_dir

    os.environ.update(env())
    return _rate(asyncio.run(dash()), steps)


def throughput(steps: int, repeats: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="qvr-dash-bench-"))
    prog = str(EXAMPLES / "regression_plates.qvr")
    headless, dashed = [], []
    for i in range(repeats):  # interleaved: a drift in the load hits both sides
        headless.append(_headless(prog, steps, tmp / f"headless-{i}"))
        dashed.append(_dashboard(prog, steps, tmp / "runs"))
    shutil.rmtree(tmp, ignore_errors=True)
    ratios = [d / h for d, h in zip(dashed, headless)]
    return {"steps": steps, "repeats": repeats, "headless_steps_per_s": headless,
            "dash_steps_per_s": dashed, "ratios": ratios,
            "median_ratio": statistics.median(ratios)}


# ---------------------------------------------------------------- 4. memory
CHILD_MEM = r"""
import asyncio, statistics, sys, time
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
from qvr_tui.app import QvrDash
from qvr_tui.screens.live import LivePane
from qvr_tui.widgets.loss_plot import LossPlot
import qvr.runs, numpy
before = status("VmRSS")
async def main():
    t0 = time.perf_counter()
    app = QvrDash(program=None, run=sys.argv[1], watch=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.ready.wait()
        await pilot.pause()
        t1 = time.perf_counter()
        await pilot.press("3")
        await pilot.pause()
        live = app.query_one(LivePane)
        plot = app.query_one(LossPlot)
        show = []
        for _ in range(50):  # the repaint work itself: decimate, replot, draw the canvases
            a = time.perf_counter()
            live.show(app.state, force=True)
            plot.render()  # textual-plot draws into its canvases here
            show.append(time.perf_counter() - a)
        keys = []
        for _ in range(10):  # Pilot's key press: event loop + toggle + repaint
            a = time.perf_counter()
            await pilot.press("l")
            keys.append(time.perf_counter() - a)
        print("MEM", before, status("VmRSS"), status("VmHWM"), len(app.state.loss),
              t1 - t0, statistics.median(show), max(show), statistics.median(keys),
              "torch" in sys.modules)
asyncio.run(main())
"""


def synthetic_record(folder: Path, steps: int) -> None:
    import math
    from qvr.events import FitFinished, FitProgress, FitStarted, to_json
    folder.mkdir(parents=True)
    cfg = {"method": "svi", "steps": steps}
    (folder / "run.json").write_text(json.dumps({"format": 1, "method": "svi", "config": cfg,
                                                 "program": {}}))
    with open(folder / "events.jsonl", "w") as fh:
        fh.write(to_json(FitStarted("svi", steps, 1, cfg)) + "\n")
        for i in range(1, steps + 1):
            loss = 1000 * math.exp(-i / 20000) + 10 + math.sin(i) * 3
            fh.write(to_json(FitProgress("svi", "optimization", i, steps, 0,
                                         {"loss": loss, "loss_mean": loss}, i / 150)) + "\n")
        fh.write(to_json(FitFinished({}, steps / 150)) + "\n")
    # as a finished SVI record has them (the Results pane reads the curve from losses.npy)
    import numpy as np
    i = np.arange(1, steps + 1)
    np.save(folder / "losses.npy", 1000 * np.exp(-i / 20000) + 10 + np.sin(i) * 3)
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "stats": {}}))


def _memory_of(rec: Path, label: str) -> dict:
    r = subprocess.run([PY, "-c", CHILD_MEM, str(rec)], capture_output=True, text=True,
                       cwd=ROOT, env=env(), timeout=600)
    m = re.search(r"MEM" + r" (\S+)" * 9, r.stdout)
    if not m:
        raise RuntimeError(r.stdout[-1000:] + r.stderr[-2000:])
    g = m.groups()
    return {"record": label, "rss_before_mb": float(g[0]), "rss_after_mb": float(g[1]),
            "rss_peak_mb": float(g[2]), "points": int(g[3]), "open_and_paint_s": float(g[4]),
            "repaint_show_median_ms": 1000 * float(g[5]),
            "repaint_show_max_ms": 1000 * float(g[6]),
            "key_press_pilot_median_ms": 1000 * float(g[7]), "torch_loaded": g[8] == "True"}


def memory(real: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="qvr-dash-bench-"))
    out = {}
    try:
        for n in (10_000, 100_000):
            rec = tmp / f"svi{n}"
            if real and n == 100_000:
                subprocess.run([PY, "-m", "qvr.cli", "run", str(EXAMPLES / "regression_plates.qvr"),
                                "--method", "svi", "--steps", str(n), "--run-dir", str(rec)],
                               capture_output=True, cwd=tmp, env=env(), check=True,
                               timeout=7200)
                label = f"real {n}-step fit"
            else:
                synthetic_record(rec, n)
                label = f"{n} progress events (synthetic)"
            out[f"{n // 1000}k"] = _memory_of(rec, label)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    small, big = out["10k"], out["100k"]
    out["growth_mb_per_10k_events"] = (big["rss_after_mb"] - small["rss_after_mb"]) / 9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--svi-steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3,
                    help="headless/dashboard pairs for the throughput (at least 2)")
    ap.add_argument("--real-100k", action="store_true")
    ap.add_argument("--only", choices=("paint", "keys", "throughput", "memory"))
    a = ap.parse_args()
    print(f"load average {os.getloadavg()}, {os.cpu_count()} CPUs")
    steps = {"paint": lambda: first_paint(), "keys": lambda: key_latency(),
             "throughput": lambda: throughput(a.svi_steps, max(2, a.repeats)),
             "memory": lambda: memory(a.real_100k)}
    for name, f in steps.items():
        if a.only and a.only != name:
            continue
        t0 = time.perf_counter()
        res = f()
        print(f"{name}: {json.dumps(res, default=lambda v: round(v, 4))} "
              f"({time.perf_counter() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
