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
             "qvr.analysis", "qvr.cli", "qvr.inference.config", "qvr.events",
             "qvr.runs", "qvr.commands.report"]
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


def _lint_imports(cwd, pythonpath, config=None):
    import shutil
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, "--no-cache", *([config] if config else [])], cwd=cwd,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"})


def test_import_linter_contracts_are_kept():
    out = _lint_imports(ROOT, f"{ROOT}:{ROOT / 'lsp'}:{ROOT / 'tui'}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_the_library_contract_fails_on_a_planted_command_line_import(tmp_path):
    """The contract can fail: a copy of the package with `import qvr.commands` planted in
    `qvr/inference` breaks it, naming the module."""
    import shutil
    import tomllib
    shutil.copytree(ROOT / "qvr", tmp_path / "qvr",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "qvr" / "inference" / "planted.py").write_text("import qvr.commands\n")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["id"] == "library-below-command-line")
    lines = ["[importlinter]", "root_packages =", "    qvr", "",
             "[importlinter:contract:library-below-command-line]",
             f"name = {contract['name']}", "type = forbidden", "source_modules ="]
    lines += [f"    {m}" for m in contract["source_modules"]] + ["forbidden_modules ="]
    lines += [f"    {m}" for m in contract["forbidden_modules"]]
    (tmp_path / ".importlinter").write_text("\n".join(lines) + "\n")
    out = _lint_imports(tmp_path, str(tmp_path), ".importlinter")
    assert out.returncode != 0
    assert "BROKEN" in out.stdout and "qvr.inference.planted -> qvr.commands" in out.stdout
