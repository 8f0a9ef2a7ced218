"""Fake fitted runs for the prediction tests (`qvr.inference.front.predict`): a conjugate
Normal-Normal regression with known noise, whose posterior and posterior predictive are
known in closed form, and run records holding exact posterior draws (numpy).

Model: ``b ~ Normal(0, TAU)``, ``y_i ~ Normal(b * x_i, SIGMA)``.  Posterior
``b | y ~ Normal(m, v)``, ``v = 1 / (1/TAU^2 + sum x^2 / SIGMA^2)``, ``m = v sum x y /
SIGMA^2``; at a new ``x*`` the predictive is ``Normal(m x*, SIGMA^2 + x*^2 v)``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

TAU, SIGMA = 2.0, 0.5
X = np.array([-1.0, -0.5, 0.2, 0.8, 1.5, 2.0])
Y = np.array([-1.4, -0.2, 0.6, 1.1, 2.4, 2.7])
X_NEW = np.array([0.0, 1.0, 3.0, -2.0])

PROGRAM = """\
object Row : FinSet 6

program reg : Row -> Row
    data xc : Row
    sample b <- Normal(0.0, 2.0)
    let mu = b * xc
    record mean_y = mu
    observe y : Row <- Normal(mu, 0.5)
    return y

export reg
"""


#: the same regression with its row count read from the data (`object Row : FinSet N`),
#: and a row effect `u` (one value per row, prior Normal(0, 1)): new rows draw their own
SIZED = PROGRAM.replace("FinSet 6", "FinSet N").replace(
    "    let mu = b * xc\n",
    "    sample u : Row <- Normal(0.0, 1.0)\n    let mu = b * xc + u\n")


def posterior() -> tuple[float, float]:
    """``(m, v)``: the posterior mean and variance of ``b``."""
    v = 1.0 / (1.0 / TAU ** 2 + float((X ** 2).sum()) / SIGMA ** 2)
    return v * float((X * Y).sum()) / SIGMA ** 2, v


def predictive(x_new=X_NEW) -> tuple[np.ndarray, np.ndarray]:
    """The closed-form predictive mean and variance at `x_new`."""
    m, v = posterior()
    x_new = np.asarray(x_new, dtype=float)
    return m * x_new, SIGMA ** 2 + x_new ** 2 * v


def write_program(folder: Path, text: str = PROGRAM) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "reg.qvr"
    path.write_text(text, encoding="utf-8")
    data = folder / "data"
    data.mkdir(exist_ok=True)
    (data / "reg.json").write_text(json.dumps({"xc": X.tolist(), "y": Y.tolist()}))
    return path


def write_fit(folder: Path, program: Path, chains: int = 2, draws: int = 2000,
              seed: int = 0, method: str = "nuts", samples: dict | None = None,
              status: str = "finished") -> Path:
    """A finished run record of `program` whose ``samples.npz`` holds exact posterior
    draws of ``b`` (``(chains, draws, 1)``, as a scalar site is saved)."""
    from qvr.events import FitCancelled, FitFinished, FitStarted
    from qvr.inference.front.save import summary_json
    from qvr.runs import RunWriter
    m, v = posterior()
    if samples is None:
        rng = np.random.default_rng(seed)
        samples = {"b": m + np.sqrt(v) * rng.standard_normal((chains, draws, 1))}
    sha = hashlib.sha256(program.read_text(encoding="utf-8").encode()).hexdigest()
    meta = {"program": {"path": str(program.resolve()), "sha256": sha, "export": None},
            "method": method, "config": {"dtype": "float64", "args": {}}, "seed": seed,
            "data": {"kind": "shipped", "path": str(program.parent / "data" / "reg.json")},
            "start_from": None}
    with RunWriter(folder, meta) as w:
        w.write(FitStarted(method=method, total_steps=draws, num_chains=chains))
        if samples:
            w.save_arrays("samples.npz", samples)
        w.write_text("summary.json", summary_json(
            {"status": status, "message": "", "method": method,
             "stats": {"num_chains": chains, "num_samples": draws}, "sites": {},
             "recorded": [], "parameters": {}, "truncated": 0}))
        w.write(FitFinished() if status == "finished" else FitCancelled())
    return folder
