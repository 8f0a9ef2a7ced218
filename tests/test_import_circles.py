"""No import circles: the file-level import graph of qvr/, lsp/qvr_lsp/, tui/qvr_tui/.

An edge A -> B means file A imports file B, at module level or inside a function (lazy
imports count: they tie the files together as much).  `import x.y`, `from x import y` and
relative imports are read with `ast`; `from pkg import name` goes to the submodule file when
`name` is one, else to the package's `__init__.py`.  An import by a file of one of its own
ancestor packages (`import qvr` in a module of qvr/runs/) draws no edge here: Python has begun
running that package before the file, so it is no circle (`tests/test_layering.py` reads
such imports too, `import_graph(ancestors=True)`: the root package is a layer above them).
A circle is a strongly connected component of more than one file.  Issue 38 removed the
last ones: any circle fails this test (`ALLOWED` is empty and stays so).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"qvr": "qvr", "qvr_lsp": "lsp/qvr_lsp", "qvr_tui": "tui/qvr_tui"}

# Circles tolerated: none since issue 38 (a new circle is broken, not listed here).
ALLOWED: set = set()


def modules(root: Path = ROOT, packages: dict = PACKAGES) -> dict:
    """Dotted module name -> file path relative to `root`."""
    out = {}
    for pkg, folder in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([pkg, *parts])] = path.relative_to(root).as_posix()
    return out


def _ancestors(name: str) -> set:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph(root: Path = ROOT, packages: dict = PACKAGES, ancestors: bool = False) -> dict:
    """File -> set of files it imports (see the module docstring for the rules); with
    `ancestors`, also the `__init__.py` of an enclosing package the file imports by name."""
    mods = modules(root, packages)

    def known(name):  # the module itself, else the nearest enclosing package we have
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, rel in mods.items():
        is_pkg = rel.endswith("__init__.py")
        targets = set()
        for node in ast.walk(ast.parse((root / rel).read_text(encoding="utf-8"), rel)):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name if is_pkg else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    full = ".".join(p for p in (base, node.module) if p)
                else:
                    full = node.module or ""
                for a in node.names:
                    sub = f"{full}.{a.name}"
                    targets.add(sub if sub in mods else known(full))
        targets -= {None, name, *(() if ancestors else _ancestors(name))}
        graph[rel] = {mods[t] for t in targets}
    return graph


def circles(graph: dict) -> set:
    """The strongly connected components of more than one node (iterative Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], set()
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.add(frozenset(comp))
    return found


def describe(comps) -> str:
    return "\n".join("  " + ", ".join(sorted(c)) for c in sorted(comps, key=sorted))


def check(found: set, allowed: set = ALLOWED) -> None:
    new, gone = found - allowed, allowed - found
    assert not new, (f"new import circle(s) (files that import each other, lazy imports "
                     f"included); break them:\n{describe(new)}")
    assert not gone, (f"circle(s) of the allow-list no longer found as listed: update "
                      f"ALLOWED in {Path(__file__).name}:\n{describe(gone)}")


def test_no_import_circles():
    check(circles(import_graph()))


def test_circles_of_a_small_graph():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"},
         "g": {"g"}, "h": set()}
    assert circles(g) == {frozenset("abc"), frozenset("de")}
    assert circles({"x": {"y"}, "y": set()}) == set()


def test_a_planted_circle_fails_and_is_named(tmp_path):
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("def face():\n    from p.sub import low\n")
    (pkg / "sub" / "low.py").write_text("import p.sub\n")  # an ancestor: no edge
    (pkg / "a.py").write_text("from p.b import g\n")
    (pkg / "b.py").write_text("def g():\n    from . import c\n")  # lazy, relative
    (pkg / "c.py").write_text("from p import a\n")  # a submodule named in `from p import`
    graph = import_graph(tmp_path, {"p": "p"})
    assert graph["p/c.py"] == {"p/a.py"} and graph["p/sub/low.py"] == set()
    found = circles(graph)
    assert found == {frozenset({"p/a.py", "p/b.py", "p/c.py"})}
    try:
        check(found, allowed=set())
    except AssertionError as e:
        assert "p/a.py, p/b.py, p/c.py" in str(e)
    else:
        raise AssertionError("a new circle passed")
