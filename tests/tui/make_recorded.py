"""Regenerate the recorded run folders the dashboard tests read (tests/tui/recorded/).

    QVR_MCMC_COMPILER=torchscript .venv/bin/python tests/tui/make_recorded.py

Each folder is a real run record (`qvr.runs`) written by `qvr.inference.fit` with a fixed
seed, small enough to keep in the repository:

* ``svi_transformer`` — SVI on examples/transformer_lm.qvr (40 steps, 8 synthetic rows:
  the seed model takes about a second a step on a shared 2-core machine);
* ``svi_regression`` — SVI on examples/regression_plates.qvr (600 steps, shipped data):
  long enough for the plateau note and decimation;
* ``nuts_regression`` — NUTS on examples/regression_plates.qvr (2 chains, 60 + 60);
* ``smc_recurrent`` — SMC generation from examples/recurrent_lm.qvr (16 particles);
* ``interrupted_svi`` — the SVI record cut after its 10th progress line, without a
  terminal event or summary (what a killed worker leaves: status ``interrupted``);
* ``failed_svi`` — a record that ends with `FitFailed` (a NaN loss at step 7), written
  by `RunWriter` directly;
* ``svi_attention`` — SVI on tests/tui/fixtures/attention_lm.qvr (one causal two-head
  attention layer, 60 steps) on its data file fixtures/data/attention_lm.json (written
  here first: 12 rows of 12 tokens of "the cat sat on the mat <eos>" sentences); the
  record holds ``circuits.npz`` and ``patterns.npz`` for the Circuits view.

Made by hand, not by this script:

* ``svi_cancelled_at_start`` — ``qvr run examples/regression_plates.qvr --method svi``
  sent SIGINT as soon as its events.jsonl appeared: cancelled before its first step (a
  summary with ``final_loss`` NaN and ``steps`` 0, no ``losses.npy``); then
  `_relativise`d, and the data path and run folder in run.json/events.jsonl made
  relative by hand.

The program paths inside run.json are rewritten relative to the repository root
(``examples/NAME.qvr``) so the folders do not depend on where they were made; the tests
copy them to a temporary folder before opening them.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "recorded"


def _fit(name, example, **cfg):
    import qvr
    import torch
    from qvr.inference import FitConfig, fit
    folder = OUT / name
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(cfg.get("seed", 0))
    path = ROOT / "examples" / example
    program = qvr.load(path)
    config = FitConfig(**cfg)
    config.progress_interval = 0.0 if cfg["method"] != "nuts" else 0.02
    res = fit(program, config=config, run_dir=folder, program_path=str(path))
    print(name, res.status, res.message, file=sys.stderr)
    _relativise(folder)
    return folder


def _relativise(folder: Path) -> None:
    meta_path = folder / "run.json"
    meta = json.loads(meta_path.read_text())
    p = meta.get("program", {}).get("path")
    if p:
        meta["program"]["path"] = os.path.relpath(p, ROOT)
    meta["host"] = "recorded"
    meta["pid"] = 0
    meta_path.write_text(json.dumps(meta, indent=1))
    # not needed by the dashboard's tests and large: the seed model's guide draws and
    # parameters (the SMC run's parameters are the untrained model's)
    for name in ("writer.lock", "samples.npz" if meta.get("method") == "svi" else "",
                 "params.npz" if p and "regression" not in p else "", "summary.txt"):
        if name and (folder / name).exists():
            (folder / name).unlink()


def _interrupted(src: Path) -> None:
    folder = OUT / "interrupted_svi"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    shutil.copy(src / "run.json", folder / "run.json")
    lines = (src / "events.jsonl").read_text().splitlines()
    kept, progress = [], 0
    for line in lines:
        kept.append(line)
        if '"type":"progress"' in line:
            progress += 1
            if progress == 10:
                break
    # plus a torn last line, as a writer killed mid-write leaves
    (folder / "events.jsonl").write_text("\n".join(kept) + "\n" + '{"type":"progress","met')


def _failed() -> None:
    from qvr.events import FitFailed, FitProgress, FitStarted, to_json
    folder = OUT / "failed_svi"
    shutil.rmtree(folder, ignore_errors=True)
    src = json.loads((OUT / "svi_regression" / "run.json").read_text())
    folder.mkdir()
    src["config"]["steps"] = 20
    (folder / "run.json").write_text(json.dumps(src, indent=1))
    events = [FitStarted("svi", 20, 1, src["config"], str(folder))]
    for i in range(1, 7):
        events.append(FitProgress("svi", "optimization", i, 20, 0,
                                  {"loss": 100.0 - i, "loss_mean": 100.0 - i}, 0.01 * i))
    events.append(FitFailed("the loss is nan at step 7 (the model's log density is not "
                            "finite at the current parameters)", 7, "NonFiniteLoss", 0.07))
    (folder / "events.jsonl").write_text("".join(to_json(e) + "\n" for e in events))
    (folder / "summary.json").write_text(json.dumps(
        {"status": "failed", "message": events[-1].message, "stats": {}, "parameters": {}}))


def _attention_data() -> None:
    """fixtures/data/attention_lm.json: rows of 12 tokens cut from a stream of sentences
    'the (cat|dog) (sat|ran) on the mat <eos>' (ids of attention_lm.vocab.json), and the
    next token of each position (the stream shifted by one)."""
    import numpy as np
    rng = np.random.default_rng(17)
    stream = []
    while len(stream) < 12 * 12 + 1:
        stream += [1, int(rng.choice([2, 3])), int(rng.choice([4, 5])), 6, 1, 7, 0]
    a = np.asarray(stream)
    x = a[:144].reshape(12, 12)
    y = a[1:145].reshape(12, 12)
    path = ROOT / "tests" / "tui" / "fixtures" / "data" / "attention_lm.json"
    rows = lambda m: "[\n" + ",\n".join("    " + json.dumps(r) for r in m.tolist()) + "\n  ]"
    path.write_text("{\n  \"x\": " + rows(x) + ",\n  \"next_token\": " + rows(y) + "\n}\n")


def main() -> None:
    os.environ.setdefault("QVR_MCMC_COMPILER", "torchscript")
    OUT.mkdir(exist_ok=True)
    _fit("svi_transformer", "transformer_lm.qvr", method="svi", steps=40, lr=0.01,
         synthetic=8, seed=1)
    svi = _fit("svi_regression", "regression_plates.qvr", method="svi", steps=600, lr=0.05,
               seed=1)
    _fit("nuts_regression", "regression_plates.qvr", method="nuts", num_warmup=60,
         num_samples=60, num_chains=2, seed=2, max_tree_depth=6)
    _fit("smc_recurrent", "recurrent_lm.qvr", method="smc", particles=16, max_len=12,
         seed=3)
    _interrupted(svi)
    _failed()
    _attention_data()
    _fit("svi_attention", "../tests/tui/fixtures/attention_lm.qvr", method="svi", steps=60,
         lr=0.05, seed=1)


if __name__ == "__main__":
    main()
