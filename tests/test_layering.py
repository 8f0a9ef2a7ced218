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


# The layers of ARCHITECTURE.md, bottom first.  Each layer is a list of groups of files (a
# folder ends in "/"); a file may import the files of its own group and of lower layers, and
# the groups of one layer are independent (neither imports the other).  Lazy imports count
# (a function that needs something of a higher layer gets it passed down, or lives above),
# and so does an import of an enclosing package by name (`import qvr` in qvr/runs/: the root
# package is a layer above the records).  Every file of qvr/, lsp/qvr_lsp/ and tui/qvr_tui/
# belongs to a group: a new top-level module or package is placed here.
LAYERS = [
    [["qvr/text.py"], ["qvr/version.py"], ["qvr/record_analyses.py"], ["qvr/events.py"],
     ["qvr/datafiles.py", "qvr/mapped_arrays.py"], ["qvr/internal_error.py"]],
    [["qvr/diagnostics.py"]],
    [["qvr/syntax/"]],
    [["qvr/sema/"]],
    [["qvr/analysis.py"]],
    [["qvr/ide/"]],
    [["lsp/qvr_lsp/"], ["qvr/runtime/"], ["qvr/runs/"]],
    [["qvr/smc/"], ["qvr/continuous/", "qvr/core/", "qvr/dsl.py"]],
    # qvr/inference/: its rooms, bottom first (ARCHITECTURE.md, "Inference rooms")
    [["qvr/inference/config.py"], ["qvr/inference/trace.py"], ["qvr/inference/distributed/"],
     ["qvr/inference/enumeration/"], ["qvr/inference/threads.py"]],
    [["qvr/inference/programs/"], ["qvr/inference/data/"], ["qvr/inference/criticism/"]],
    [["qvr/inference/vi/"], ["qvr/inference/mcmc/"]],
    [["qvr/inference/methods/"]],
    [["qvr/inference/front/"]],
    [["qvr/inference/__init__.py"]],
    [["qvr/__init__.py"], ["tui/qvr_tui/"]],
    [["qvr/commands/"]],
    [["qvr/cli.py"]],
    [["qvr/__main__.py"]],
]


def place(path: str, layers=LAYERS):
    """(layer, group) of a file: its longest matching entry; None when it has none."""
    best, found = -1, None
    for i, layer in enumerate(layers):
        for j, group in enumerate(layer):
            for entry in group:
                hit = path == entry or (entry.endswith("/") and path.startswith(entry))
                if hit and len(entry) > best:
                    best, found = len(entry), (i, j)
    return found


def layer_violations(graph: dict, layers=LAYERS) -> list:
    """The imports of `graph` that go up a layer or across independent groups, and the
    files no group holds, as sentences."""
    out = [f"{f}: in no layer of LAYERS (tests/test_layering.py): place it"
           for f in sorted(graph) if place(f, layers) is None]
    for a in sorted(graph):
        pa = place(a, layers)
        for b in sorted(graph[a]):
            pb = place(b, layers)
            if pa is None or pb is None or pa == pb or pa[0] > pb[0]:
                continue
            how = "a higher layer" if pb[0] > pa[0] else "an independent group of its layer"
            out.append(f"{a} imports {b}, {how}")
    return out


def test_no_import_runs_up_a_layer():
    from test_import_circles import import_graph
    bad = layer_violations(import_graph(ancestors=True))
    assert bad == [], "imports against the layering (lazy ones included):\n  " + "\n  ".join(bad)


def test_a_planted_upward_import_fails_and_is_named(tmp_path):
    """The check can fail: a lazy import of a higher layer, an import of the enclosing
    package by name, an import across independent groups and an unplaced file."""
    from test_import_circles import import_graph
    pkg = tmp_path / "p"
    for d in ("low", "mid", "side"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("def top():\n    from p.mid import m\n")
    (pkg / "low" / "a.py").write_text("def f():\n    from p.mid.m import g\n")  # lazy, up
    (pkg / "low" / "b.py").write_text("import p\n")  # the root package, above
    (pkg / "mid" / "m.py").write_text("from p.low import a\nfrom p.side import s\n")
    (pkg / "side" / "s.py").write_text("")
    (pkg / "stray.py").write_text("")
    layers = [[["p/low/"]], [["p/mid/"], ["p/side/"]], [["p/__init__.py"]]]
    bad = layer_violations(import_graph(tmp_path, {"p": "p"}, ancestors=True), layers)
    assert bad == ["p/stray.py: in no layer of LAYERS (tests/test_layering.py): place it",
                   "p/low/a.py imports p/mid/m.py, a higher layer",
                   "p/low/b.py imports p/__init__.py, a higher layer",
                   "p/mid/m.py imports p/side/s.py, an independent group of its layer"]
    # without the ancestor edges `import p` is not seen
    assert "p/low/b.py imports p/__init__.py, a higher layer" not in layer_violations(
        import_graph(tmp_path, {"p": "p"}), layers)


def test_the_inference_rooms_refuse_imports_against_their_order():
    """The rooms of qvr/inference (ARCHITECTURE.md, "Inference rooms") as LAYERS places
    them: a loop importing the front door, VI and MCMC importing each other, criticism
    importing VI, and a loose new file are each named."""
    graph = {"qvr/inference/methods/svi.py": {"qvr/inference/front/fitting.py"},
             "qvr/inference/vi/guides.py": {"qvr/inference/mcmc/potential.py"},
             "qvr/inference/criticism/pointwise.py": {"qvr/inference/vi/guides.py",
                                                      "qvr/inference/enumeration/enumerate.py"},
             "qvr/inference/mcmc/driver.py": {"qvr/inference/criticism/diagnostics.py",
                                              "qvr/inference/config.py"},
             "qvr/inference/stray.py": set()}
    assert layer_violations(graph) == [
        "qvr/inference/stray.py: in no layer of LAYERS (tests/test_layering.py): place it",
        "qvr/inference/criticism/pointwise.py imports qvr/inference/vi/guides.py, a higher layer",
        "qvr/inference/methods/svi.py imports qvr/inference/front/fitting.py, a higher layer",
        "qvr/inference/vi/guides.py imports qvr/inference/mcmc/potential.py, "
        "an independent group of its layer"]
