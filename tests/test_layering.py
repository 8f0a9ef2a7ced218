"""The layering rules of ARCHITECTURE.md, checked in fresh interpreters.

The front end (syntax, sema, analysis, ide) must import neither torch nor any LSP or TUI
library, and must know no LSP types.
"""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRONT_END = ["qvr", "qvr.text", "qvr.diagnostics", "qvr.syntax.parser", "qvr.sema.module",
             "qvr.analysis", "qvr.cli"]
HEAVY = ["torch", "pygls", "lsprotocol", "textual"]


@pytest.mark.parametrize("module", FRONT_END)
def test_front_end_imports_nothing_heavy(module):
    code = (f"import sys, {module}; heavy = {HEAVY!r}; "
            "print(','.join(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_check_runs_without_heavy_imports():
    code = ("import sys; from qvr.cli import main; rc = main(['check', 'examples']); "
            f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert "HEAVY=\n" in out.stdout + "\n"


def test_no_lsp_types_or_torch_in_front_end_sources():
    offenders = []
    for sub in ("syntax", "sema", "ide"):
        for f in (ROOT / "qvr" / sub).rglob("*.py"):
            for line in f.read_text(encoding="utf-8").splitlines():
                s = line.strip()
                if s.startswith(("import ", "from ")) and any(
                        f" {m}" in s.replace(".", " ") for m in ("torch", "pygls", "lsprotocol", "textual")):
                    offenders.append(f"{f.relative_to(ROOT)}: {s}")
    for f in (ROOT / "qvr").glob("*.py"):
        for line in f.read_text(encoding="utf-8").splitlines():
            s = line.strip()
            if s.startswith(("import pygls", "from pygls", "import lsprotocol", "from lsprotocol")):
                offenders.append(f"{f.relative_to(ROOT)}: {s}")
    assert offenders == []
