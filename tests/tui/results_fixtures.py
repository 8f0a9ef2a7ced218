"""The recorded run folders of tests/tui/fixtures/runs (made by make_results_fixtures.py),
copied to a temporary folder with run.json pointing at a copy of the program there, so
the tests do not depend on where the checkout lives and may edit the program."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUNS = FIXTURES / "runs"
TINY_RUNS = ("nuts", "svi", "failed", "interrupted")


def copy_runs(tmp_path: Path) -> tuple[Path, Path]:
    """(runs_dir, program) in `tmp_path`: every fixture run; those of tiny.qvr name the
    copied program, the SMC run keeps examples/recurrent_lm.qvr."""
    program = tmp_path / "tiny.qvr"
    shutil.copyfile(FIXTURES / "tiny.qvr", program)
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    for name in TINY_RUNS:
        meta_path = runs / name / "run.json"
        meta = json.loads(meta_path.read_text())
        meta["program"]["path"] = str(program.resolve())
        meta_path.write_text(json.dumps(meta))
    return runs, program
