"""Make the recorded run folders the Results/Runs tests read (tests/tui/fixtures/runs/).

Real short fits through `qvr.inference.fit(..., run_dir=...)`, the call the dashboard's
worker and `qvr run` make, so the records are what a fit writes:

* ``nuts``        — NUTS on fixtures/tiny.qvr (two scalars and a 3x4 Dirichlet plate), 2 chains;
* ``svi``         — SVI on the same model;
* ``smc``         — SMC generation from examples/recurrent_lm.qvr, a few particles;
* ``interrupted`` — a copy of ``nuts`` whose events.jsonl is cut in the middle of a line
  after about half the sampling draws, without summary.json / samples.npz / summary.txt;
* ``failed``      — SVI on data with a category out of range (the fit fails at once).

To keep the fixtures small (< 200 kB) progress is reported every second or so (so draws
come in a few chunks), and files no test reads are removed: ``summary.txt``, SVI's
``samples.npz`` (draws from the fitted guide) and SMC's ``params.npz`` (the language
model's weights).

Run from the repository root (a few minutes on two cores):

    QVR_MCMC_COMPILER=torchscript .venv/bin/python tests/tui/make_results_fixtures.py

The records name the program by absolute path; the tests copy them to a temporary folder
and point ``run.json`` at the program there (`tests/tui/results_fixtures.py`).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures"
RUNS = FIX / "runs"
ROOT = HERE.parents[1]


def qvr_run(name: str, program: Path, method: str, config: dict, drop: tuple = ()) -> Path:
    """One fit into RUNS/name, as the worker makes it: load the program (seeded first, as
    `qvr run` does) and call `qvr.inference.fit` with the record folder.  Not through the
    command line, because `qvr run` reports progress every 0.05 s (a chunk file per draw)
    and the fixtures must stay small: here progress comes every `progress_interval`."""
    import torch

    import qvr
    from qvr.inference import fit
    from qvr.inference.config import FitConfig

    run_dir = RUNS / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    torch.manual_seed(config.get("seed", 0))
    prog = qvr.load(program)
    try:
        res = fit(prog, config=FitConfig(method=method, **config), run_dir=run_dir)
        print(f"{name}: {res.status} {res.message}")
    except Exception as exc:  # the failed fixture: reported as FitFailed, then raised
        print(f"{name}: raised {type(exc).__name__}: {exc}")
    for junk in ("summary.txt", *drop):
        (run_dir / junk).unlink(missing_ok=True)
    return run_dir


def interrupted_copy(src: Path) -> Path:
    dst = RUNS / "interrupted"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    for name in ("summary.json", "samples.npz", "summary.txt"):
        (dst / name).unlink(missing_ok=True)
    lines = (dst / "events.jsonl").read_bytes().split(b"\n")
    lines = [ln for ln in lines if ln]
    # keep events up to the middle of the sampling draws, then half of the next line
    draw_lines = [i for i, ln in enumerate(lines) if b'"type":"draws"' in ln]
    cut = draw_lines[len(draw_lines) // 2]
    kept = lines[:cut]
    torn = lines[cut][: len(lines[cut]) // 2]
    (dst / "events.jsonl").write_bytes(b"\n".join(kept) + b"\n" + torn)
    # drop the chunk files no kept line refers to (keeps the fixtures small)
    refs = {json.loads(ln)["file"] for ln in kept if b'"type":"draws"' in ln}
    for f in (dst / "draws").iterdir():
        if f"draws/{f.name}" not in refs:
            f.unlink()
    return dst


def main() -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    tiny = FIX / "tiny.qvr"
    data = FIX / "tiny.json"
    nuts = qvr_run("nuts", tiny, "nuts", {"seed": 1, "data": str(data), "num_warmup": 60,
                                          "num_samples": 60, "num_chains": 2,
                                          "progress_interval": 2.0})
    qvr_run("svi", tiny, "svi", {"seed": 1, "data": str(data), "steps": 300, "lr": 0.05,
                                  "progress_interval": 1.0}, drop=("samples.npz",))
    qvr_run("smc", ROOT / "examples" / "recurrent_lm.qvr", "smc",
            {"seed": 1, "particles": 6, "max_len": 8, "top": 4, "progress_interval": 0.2},
            drop=("params.npz",))
    bad = FIX / ".failed-data.json"
    d = json.loads(data.read_text())
    d["y"][5] = 9  # Cat has 4 classes
    bad.write_text(json.dumps(d))
    qvr_run("failed", tiny, "svi", {"seed": 1, "data": str(bad), "steps": 10})
    bad.unlink()
    interrupted_copy(nuts)
    total = sum(f.stat().st_size for f in RUNS.rglob("*") if f.is_file())
    print(f"fixtures: {total} bytes under {RUNS}")


if __name__ == "__main__":
    main()
