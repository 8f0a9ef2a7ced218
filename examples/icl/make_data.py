"""In-context linear regression tasks (seed 003) and the data file of `icl_regression.qvr`.

    python examples/icl/make_data.py      # rewrites examples/data/icl_regression.json

One *task* is a sequence of L + 1 tokens z_t = (x_t, y_t) in R^(d+1) (the seed's setting,
d = 5, L = 8 d = 40):

* beta ~ N(0, I_d) (one per task), x_1..x_L, x_q ~ N(0, I_d) i.i.d.;
* context tokens t = 1..L: y_t = beta . x_t + eps_t, eps_t ~ N(0, sigma^2) with
  sigma = noise_std * sqrt(d) = 0.01 sqrt(d) (the seed's `noise_std * sqrt(dx)`);
* the query token, last: z_q = (x_q, 0); its target is y_q = beta . x_q, without noise
  (as in the seed).

What the QVR program observes (design E5, missing entries): the program input ``x`` holds
the tokens, shape (tasks, L + 1, d + 1); the observed site ``y`` holds, per task and
position, the value to predict there, shape (tasks, L + 1, 1): missing (NaN; ``null`` in
the JSON file) at the L context positions and y_q at the query.  The squared loss of the
seed, at the query only, is then the Normal log-density of the one observed entry.

`sample_tasks` is the generator the study (`run_study.py`) also draws its fresh training
and test batches from.  The shipped file is small (32 tasks, values rounded: x to 2
decimals, y to 3, y computed from the rounded x so that the file's tasks are exactly
linear up to the stated noise); `main` rewrites it byte for byte (a test checks).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
D = 5                 # dimension of x (the seed's d)
NOISE_STD = 0.01      # the seed's noise_std: the noise sd is NOISE_STD * sqrt(d)
SEED = 3003           # seed of the shipped file
TASKS = 32            # tasks in the shipped file


def context_length(d: int) -> int:
    """The seed's L = 8 d context pairs."""
    return 8 * d


def sample_tasks(rng: np.random.Generator, n: int, d: int = D, L: int | None = None,
                 noise_std: float = NOISE_STD, digits: tuple[int, int] | None = None):
    """`n` tasks: `(z, y, beta)` with z (n, L+1, d+1) float64 tokens (query last, its y
    coordinate 0), y (n, L+1, 1) the observed values (NaN but at the query, where it is
    y_q = beta . x_q) and beta (n, d).  With `digits = (dx, dy)`, x is rounded to dx
    decimals before y is computed and y to dy decimals (the shipped file)."""
    L = context_length(d) if L is None else L
    x = rng.standard_normal((n, L + 1, d))
    if digits is not None:
        x = np.round(x, digits[0])
    beta = rng.standard_normal((n, d))
    signal = np.einsum("ntd,nd->nt", x, beta)
    noise = math.sqrt(d) * noise_std * rng.standard_normal((n, L))
    y_ctx = signal[:, :L] + noise
    y_q = signal[:, L]
    if digits is not None:
        y_ctx, y_q = np.round(y_ctx, digits[1]), np.round(y_q, digits[1])
    z = np.concatenate([x, np.zeros((n, L + 1, 1))], axis=2)
    z[:, :L, d] = y_ctx
    y = np.full((n, L + 1, 1), np.nan)
    y[:, L, 0] = y_q
    return z, y, beta


def _rows(a) -> list:
    """Nested lists with NaN written as None (JSON null: a missing entry)."""
    return [[[None if math.isnan(v) else v for v in row] for row in task] for task in a]


def icl_regression() -> dict:
    """The shipped data: 32 tasks of the seed's setting (d = 5, L = 40)."""
    z, y, _ = sample_tasks(np.random.default_rng(SEED), TASKS, digits=(2, 3))
    # -0.0 would print as "-0.0": a rounding artefact, not a value
    z = np.where(z == 0.0, 0.0, z)
    y = np.where(y == 0.0, 0.0, y)
    return {"x": _rows(z.tolist()), "y": _rows(y.tolist())}


def write_json(out: Path, name: str, obj: dict) -> None:
    """`out/name`: one task per line (diffs stay readable)."""
    parts = []
    for key, tasks in obj.items():
        rows = ",\n    ".join(json.dumps(t) for t in tasks)
        parts.append(f"  {json.dumps(key)}: [\n    {rows}\n  ]")
    (Path(out) / name).write_text("{\n" + ",\n".join(parts) + "\n}\n", encoding="utf-8")


def main(out: Path = DATA) -> None:
    """Write ``icl_regression.json`` into `out` (default: examples/data)."""
    write_json(out, "icl_regression.json", icl_regression())


if __name__ == "__main__":
    main()
