"""The VS Code extension in editors/vscode, checked without VS Code.

`npm ci` from the committed lockfile and the TypeScript compile run once per test
session, in a copy of the extension under pytest's temporary directory (shared by the
xdist workers of one run, behind a file lock). Then:

* the grammar validator and `vscode-tmgrammar-test` over test/grammar/*.qvr;
* the node unit tests (server lookup, language configuration against examples/, the
  `qvr dash` command line, and the dashboard command and code lenses against a stand-in
  for the `vscode` module);
* the code-lens scan of exported programs against the qvr parser on every example;
* every example tokenized with the grammar, the way VS Code does, and compared with the
  qvr parser itself: comments, declared names, keywords, option keys, numbers, strings;
* `vsce package`, and what the .vsix holds.

VS Code itself is not started: @vscode/test-electron downloads it, and CI has no network
beyond the package registries. Everything here skips when node or npm is missing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qvr.sema.families import (BUILTINS, FAMILIES, OUTSIDE_CORE_FAMILIES, OUTSIDE_CORE_SPACES, SEMIRINGS,
                               SPACES)
from qvr.syntax.chunks import comments
from qvr.syntax.parser import RESERVED_WORDS, parse_module

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "editors" / "vscode"
EXAMPLES = sorted((ROOT / "examples").glob("*.qvr"))
NODE = shutil.which("node")
NPM = shutil.which("npm")

needs_node = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="node and npm are needed to build and test the VS Code extension (Node.js 20; "
    "apt-get install nodejs npm)",
)

# ------------------------------------------------------------------ build fixture


def _run(cmd: list[str], cwd: Path, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=dict(os.environ, **(env or {})), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )


def _output(proc: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclasses.dataclass
class Build:
    dir: Path
    steps: list[subprocess.CompletedProcess]

    def check(self) -> None:
        for step in self.steps:
            assert step.returncode == 0, _output(step)


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Build:
    """editors/vscode copied, `npm ci`-ed from the lockfile and compiled, once per run."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    work = shared / "qvr-vscode"
    record = shared / "qvr-vscode.json"
    with _locked(shared / "qvr-vscode.lock"):
        if not record.exists():
            shutil.rmtree(work, ignore_errors=True)  # left by an attempt that timed out
            shutil.copytree(EXT, work, ignore=shutil.ignore_patterns("node_modules", "out", "*.vsix"))
            steps = [_run([NPM, "ci", "--prefer-offline", "--no-audit", "--no-fund"], work, timeout=600)]
            if steps[-1].returncode == 0:
                steps.append(_run([NPM, "run", "compile"], work))
            record.write_text(json.dumps([[p.args, p.returncode, p.stdout, p.stderr] for p in steps]))
        steps = [subprocess.CompletedProcess(*row) for row in json.loads(record.read_text())]
    return Build(work, steps)


@pytest.fixture
def ext(build: Build) -> Path:
    build.check()
    return build.dir


# -------------------------------------------------------------------- the checks


@needs_node
def test_npm_ci_and_typescript_compile(build: Build):
    build.check()
    assert [p.args[1] for p in build.steps] == ["ci", "run"]
    for name in ("extension.js", "server.js", "dash.js", "programs.js", "dashboard.js"):
        assert (build.dir / "out" / name).is_file()


@needs_node
def test_grammar_is_valid(ext: Path):
    proc = _run([NODE, "scripts/validate-grammar.js", "syntaxes/qvr.tmLanguage.json"], ext)
    assert proc.returncode == 0, _output(proc)


@needs_node
def test_grammar_assertions(ext: Path):
    cases = sorted(p.name for p in (ext / "test" / "grammar").glob("*.qvr"))
    assert len(cases) >= 6
    proc = _run([str(ext / "node_modules" / ".bin" / "vscode-tmgrammar-test"), "-c", "test/grammar/*.qvr"], ext)
    assert proc.returncode == 0, _output(proc)
    # the tool reports each file it ran; make sure the glob did not come up short
    assert sorted(re.findall(r"test/grammar/(\S+\.qvr) run successfuly", proc.stdout)) == cases, proc.stdout


@needs_node
def test_node_unit_tests(ext: Path):
    files = sorted(str(p.relative_to(ext)) for p in (ext / "test" / "unit").glob("*.test.js"))
    proc = _run([NODE, "--test", *files], ext, env={"QVR_EXAMPLES": str(ROOT / "examples")})
    assert proc.returncode == 0, _output(proc)
    assert re.search(r"^# fail 0$", proc.stdout, re.M) and not re.search(r"^# pass 0$", proc.stdout, re.M)


@needs_node
def test_vsce_package(ext: Path, tmp_path: Path):
    # `npm run package` in a clone: its node_modules is hard-linked to the shared one, and
    # vscode:prepublish (the compile, tested above) is dropped so that nothing rewrites out/.
    clone = tmp_path / "ext"
    shutil.copytree(ext, clone, symlinks=True, ignore=shutil.ignore_patterns("node_modules"))
    shutil.copytree(ext / "node_modules", clone / "node_modules", symlinks=True, copy_function=os.link)
    manifest = json.loads((clone / "package.json").read_text())
    del manifest["scripts"]["vscode:prepublish"]
    (clone / "package.json").write_text(json.dumps(manifest, indent=2))
    proc = _run([NPM, "run", "package"], clone)
    assert proc.returncode == 0, _output(proc)
    out = clone / "qvr.vsix"
    names = set(zipfile.ZipFile(out).namelist())
    for needed in ("extension/package.json", "extension/out/extension.js", "extension/out/server.js",
                   "extension/out/dash.js", "extension/out/programs.js", "extension/out/dashboard.js",
                   "extension/syntaxes/qvr.tmLanguage.json", "extension/language-configuration.json",
                   "extension/readme.md", "extension/node_modules/vscode-languageclient/package.json"):
        assert needed in names
    for name in names:
        assert not name.startswith(("extension/src/", "extension/test/", "extension/scripts/",
                                    "extension/node_modules/typescript/", "extension/node_modules/@vscode/vsce/"))


# --------------------------------------------------------- manifest (no node needed)


def test_manifest_matches_the_extension():
    manifest = json.loads((EXT / "package.json").read_text())
    contributes = manifest["contributes"]
    [language] = contributes["languages"]
    assert language["id"] == "qvr" and language["extensions"] == [".qvr"]
    assert (EXT / language["configuration"]).is_file()
    [grammar] = contributes["grammars"]
    assert grammar["language"] == "qvr"
    assert json.loads((EXT / grammar["path"]).read_text())["scopeName"] == grammar["scopeName"] == "source.qvr"
    assert set(contributes["configuration"]["properties"]) == {
        "qvr.server.path", "qvr.server.args", "qvr.trace.server", "qvr.cli.path"}
    source = (EXT / "src" / "extension.ts").read_text()
    dashboard = (EXT / "src" / "dashboard.ts").read_text()
    commands = {c["command"]: c for c in contributes["commands"]}
    assert set(commands) == {"qvr.restartServer", "qvr.showServerOutput",
                             "qvr.openDashboard", "qvr.fitSvi", "qvr.fitNuts", "qvr.fitSmc"}
    for command in commands:
        assert f"registerCommand('{command}'" in source + dashboard
        assert commands[command]["category"] == "QVR"
    assert commands["qvr.openDashboard"]["title"] == "Open Dashboard"
    assert [commands[f"qvr.fit{m}"]["title"] for m in ("Svi", "Nuts", "Smc")] == [
        "Fit with SVI", "Fit with NUTS", "Fit with SMC"]
    # the dashboard commands are offered only where there is a .qvr file to open
    palette = {m["command"]: m["when"] for m in contributes["menus"]["commandPalette"]}
    assert set(palette) == {"qvr.openDashboard", "qvr.fitSvi", "qvr.fitNuts", "qvr.fitSmc"}
    assert set(palette.values()) == {"editorLangId == qvr || resourceExtname == .qvr"}
    assert "registerDashboard(context, log)" in source
    # no activation events listed: VS Code (1.74+) activates on the contributed language
    # and commands by itself
    assert manifest["activationEvents"] == [] and manifest["engines"]["vscode"] == "^1.91.0"
    # "qvr" is the client id from which vscode-languageclient reads qvr.trace.server
    assert "new LanguageClient('qvr'," in source
    assert manifest["main"] == "./out/extension.js"
    # exact versions, and the lockfile agrees with them
    lock = json.loads((EXT / "package-lock.json").read_text())
    root = lock["packages"][""]
    for kind in ("dependencies", "devDependencies"):
        assert root[kind] == manifest[kind]
        for name, version in manifest[kind].items():
            assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
            assert lock["packages"][f"node_modules/{name}"]["version"] == version
    # resolved URLs and hashes let `npm ci` fetch tarballs (or take them from the npm
    # cache) without asking the registry for package metadata first
    for key, entry in lock["packages"].items():
        if key and not entry.get("link"):
            assert entry.get("resolved", "").startswith("https://") and entry.get("integrity"), key


def test_build_output_is_not_committed():
    ignored = (EXT / ".gitignore").read_text().split()
    assert {"node_modules/", "out/", "*.vsix"} <= set(ignored)


# ------------------------------------------- the grammar against the qvr parser

ALL_FAMILIES = set(FAMILIES) | set(OUTSIDE_CORE_FAMILIES)


def _words(regex: str) -> set[str]:
    """The literal words of an alternation such as `\\b(?:exp|log)\\b(?=\\s*\\()`."""
    return set(re.findall(r"\w+", re.sub(r"\\[a-zA-Z]", "", regex)))


def test_grammar_word_lists_match_the_checker():
    """Families, builtins, spaces and semirings in the grammar are the checker's own tables
    (editors/word_lists.py copies them; the tables grow with the language)."""
    grammar = json.loads((EXT / "syntaxes" / "qvr.tmLanguage.json").read_text())
    repository = grammar["repository"]
    expression = repository["expression"]["patterns"]
    assert {"include": "#families"} in expression and {"include": "#morphism-builtins"} in expression
    assert repository["families"]["name"] == "support.type.family.qvr"
    assert _words(repository["families"]["match"]) == ALL_FAMILIES
    # every builtin in let, score and record steps (E9: `sum`, `log_density`, `fold`, `scan`, ...)
    assert repository["builtins"]["name"] == "support.function.builtin.qvr"
    from qvr.sema.steering_scores import TEXT_FUNCTIONS  # E10: steering score steps
    assert _words(repository["builtins"]["match"]) == set(BUILTINS) | set(TEXT_FUNCTIONS)
    assert {"log_density", "sum", "fold", "scan", "cholesky"} <= set(BUILTINS)
    # outside a let step, a reserved word (the combinator `scan`) is not a builtin
    assert _words(repository["morphism-builtins"]["match"]) == \
        (set(BUILTINS) | set(TEXT_FUNCTIONS)) - RESERVED_WORDS
    assert "scan" not in _words(repository["morphism-builtins"]["match"])
    spaces = {w for w in _words(repository["spaces"]["match"]) if not w.isdigit()}  # `(?=\\s+[0-9])`
    assert spaces == set(SPACES) | set(OUTSIDE_CORE_SPACES)
    let_expression = repository["let-expression"]["patterns"]
    for rule in ("#builtins", "#families", "#lambda", "#let-operators"):
        assert {"include": rule} in let_expression
    option_values = json.dumps(repository["option-block"])
    assert all(semiring in option_values for semiring in SEMIRINGS)


def test_word_lists_are_up_to_date():
    """`python editors/word_lists.py --check`: the grammar and the Neovim syntax file list
    exactly what the checker's tables hold now (run it without --check to refresh them)."""
    proc = subprocess.run([sys.executable, str(ROOT / "editors" / "word_lists.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "word lists up to date"


#: (AST node class, field) -> the scope the grammar must give the text of that field.
#: A scope also matches its sub-scopes (`support.function` matches
#: `support.function.dagger.qvr`).
EXPECTED = {
    ("ObjectDecl", "kw"): "storage.type.object.qvr",
    ("ObjectDecl", "name"): "entity.name.type.object.qvr",
    ("MorphismDecl", "kw"): "storage.type.morphism.qvr",
    ("MorphismDecl", "name"): "entity.name.function.morphism.qvr",
    ("MorphInit", "tilde"): "keyword.operator.initializer.qvr",
    ("LetDecl", "kw"): "storage.type.let.qvr",
    ("LetDecl", "name"): "entity.name.function.let.qvr",
    ("ExportDecl", "kw"): "keyword.other.export.qvr",
    ("CompositionDecl", "kw"): "storage.type.composition.qvr",
    ("CompositionDecl", "name"): "support.constant.composition-rule.qvr",
    ("CompositionDecl", "level"): "support.constant.composition-level.qvr",
    ("ProgramDecl", "kw"): "storage.type.program.qvr",
    ("ProgramDecl", "name"): "entity.name.function.program.qvr",
    ("Param", "name"): "variable.parameter.qvr",
    ("DeductionDecl", "kw"): "storage.type.deduction.qvr",
    ("DeductionDecl", "name"): "entity.name.namespace.deduction.qvr",
    ("SampleStep", "kw"): "keyword.control.sample.qvr",
    ("SampleStep", "bind"): "variable.other.definition.qvr",
    ("ObserveStep", "kw"): "keyword.control.observe.qvr",
    ("ObserveStep", "bind"): "variable.other.definition.qvr",
    ("MarginalizeStep", "kw"): "keyword.control.marginalize.qvr",
    ("MarginalizeStep", "bind"): "variable.other.definition.qvr",
    ("LetStep", "kw"): "keyword.control.let.qvr",
    ("LetStep", "bind"): "variable.other.definition.qvr",
    ("ScoreStep", "kw"): "keyword.control.score.qvr",
    ("ScoreStep", "bind"): "variable.other.definition.qvr",
    ("ReturnStep", "kw"): "keyword.control.return.qvr",
    # extension E9: `data X : T` steps, `record v = e` (a LetStep, see RECORD_KW), lambdas
    ("DataStep", "kw"): "keyword.control.data.qvr",
    ("DataStep", "bind"): "variable.other.definition.qvr",
    ("ELambda", "params"): "variable.parameter.lambda.qvr",
    ("OptionEntry", "key"): "entity.other.attribute-name.option.qvr",
    ("PragmaEntry", "key"): "entity.other.attribute-name.pragma.qvr",
    ("AtomsEntry", "kw"): "keyword.other.atoms.qvr",
    ("AtomsEntry", "names"): "entity.name.constant.atom.qvr",
    ("BindersEntry", "kw"): "keyword.other.binders.qvr",
    ("BindersEntry", "names"): "entity.name.constant.binder.qvr",
    ("RuleEntry", "kw"): "keyword.other.rule.qvr",
    ("RuleEntry", "name"): "entity.name.function.rule.qvr",
    ("RuleEntry", "turnstile"): "keyword.operator.turnstile.qvr",
    ("LexiconBlock", "kw"): "keyword.other.lexicon.qvr",
    ("TName", "name"): "entity.name.type.qvr",
    ("TAtom", "kw_span"): "storage.type.builtin.qvr",
    ("TAtom", "size_span"): "constant.numeric.integer.qvr",
    ("MFan", "kw"): "keyword.other.combinator.qvr",
    ("MStack", "kw"): "keyword.other.combinator.qvr",
    ("MStack", "count_span"): "constant.numeric.integer.qvr",
    ("MRepeat", "kw"): "keyword.other.combinator.qvr",
    ("MRepeat", "count_span"): "constant.numeric.integer.qvr",
    ("MScan", "kw"): "keyword.other.combinator.qvr",
    ("MCompose", "op"): "keyword.operator.compose.qvr",
    ("MTensor", "op"): "keyword.operator.tensor.qvr",
    ("MPostfix", "name"): "support.function",
    ("MCall", "callee"): "support.function.constructor.qvr",
    ("EFactor", "kw"): "keyword.other.factor.qvr",
    ("FactorBinder", "name"): "variable.parameter.binder.qvr",
    ("FactorCase", "label_span"): "constant.numeric.integer.qvr",
    ("ECall", "callee"): "support.function.builtin.qvr",
    ("EMethod", "method"): "support.function.method.qvr",
    # `@` in a let-expression (E9) is keyword.operator.arithmetic.matmul.qvr
    ("EBinOp", "op_span"): "keyword.operator.arithmetic",
    ("ENeg", "op"): "keyword.operator.arithmetic.qvr",
    ("Number", "span"): "constant.numeric",
    ("StringLit", "span"): "string.quoted.double.qvr",
}


#: the scope of the keyword of a `record v = e` step (a LetStep with `recorded`)
RECORD_KW = "keyword.control.record.qvr"

#: option key -> the scope of its (name) value
OPTION_VALUES = {
    "role": "constant.language.role.qvr",
    "reduction": "constant.language.option-value.qvr",
    "semiring": "constant.language.option-value.qvr",
    "init": "constant.language.option-value.qvr",
}


def _nodes(node, cls: str):
    """Every AST node of class `cls` under `node`."""
    if isinstance(node, tuple):
        for item in node:
            yield from _nodes(item, cls)
    elif dataclasses.is_dataclass(node):
        if type(node).__name__ == cls:
            yield node
        for f in dataclasses.fields(node):
            yield from _nodes(getattr(node, f.name), cls)


def _spans(node, offset: int, parent: str = "", field: str = ""):
    """Yields (class, field, start, end, node) for every span in an AST, in document offsets."""
    if isinstance(node, tuple):
        for item in node:
            yield from _spans(item, offset, parent, field)
        return
    if not dataclasses.is_dataclass(node):
        return
    name = type(node).__name__
    if name == "Span":
        yield parent, field, node.start + offset, node.end + offset, node
        return
    if name == "Name":
        yield parent, field, node.span.start + offset, node.span.end + offset, node
        return
    if name in ("Number", "StringLit"):
        yield name, "span", node.span.start + offset, node.span.end + offset, node
        return
    for f in dataclasses.fields(node):
        if f.name != "span":
            yield from _spans(getattr(node, f.name), offset, name, f.name)


@pytest.fixture(scope="module")
def tokenized(build: Build) -> dict[Path, list]:
    build.check()
    proc = _run([NODE, "scripts/tokenize.js", *map(str, EXAMPLES)], build.dir, timeout=120)
    assert proc.returncode == 0, _output(proc)
    return {Path(k): v for k, v in json.loads(proc.stdout).items()}


class Scopes:
    """The TextMate scopes of every character of one tokenized file."""

    def __init__(self, text: str, lines: list):
        self.text = text
        self.lines = lines
        self.starts = [0]
        for line in text.split("\n")[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.at = {}
        for number, line in enumerate(lines):
            for start, end, scopes in line["tokens"]:
                for col in range(start, end):
                    self.at[self.starts[number] + col] = scopes

    def where(self, offset: int) -> str:
        line = max(i for i, s in enumerate(self.starts) if s <= offset)
        return f"{line + 1}:{offset - self.starts[line] + 1}"

    def has(self, offset: int, scope: str) -> bool:
        return any(s == scope or s.startswith(scope + ".") for s in self.at.get(offset, ()))


@needs_node
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_tokenize_like_the_parser_reads_them(path: Path, tokenized):
    text = path.read_text()
    scopes = Scopes(text, tokenized[path])
    problems = []

    # 1. A new top-level statement starts with no region (string, bracket, comment,
    #    declaration header) left open by an earlier line.
    for number, (line, info) in enumerate(zip(text.split("\n"), scopes.lines)):
        if re.match(r"[A-Za-z]", line) and info["depth"] != 1:
            problems.append(f"{number + 1}: statement starts inside an open region: {line}")

    # 2. Comments: exactly the characters qvr's own comment scanner calls comments.
    kinds = {"line": "comment.line.number-sign.qvr", "doc": "comment.line.documentation.qvr",
             "block": "comment.block.qvr"}
    in_comment = set()
    for span, _, kind in comments(text):
        for offset in range(span.start, span.end):
            if text[offset] == "\n":
                continue
            in_comment.add(offset)
            if not scopes.has(offset, kinds[kind]):
                problems.append(f"{scopes.where(offset)}: {kind} comment not scoped {kinds[kind]}")
                break
    for offset in scopes.at:
        if offset not in in_comment and scopes.has(offset, "comment"):
            problems.append(f"{scopes.where(offset)}: code scoped as a comment")
            break

    # 3. Every span the parser records (declared names, keywords, option keys, ...).
    module = parse_module(text)
    assert not [d for d in module.diagnostics if d.is_error]
    for start, _, parsed in module.chunks:
        if parsed.decl is None:
            continue
        records = {s.kw.start + start for s in _nodes(parsed.decl, "LetStep") if s.recorded}
        checks = [(cls, field, begin, end,
                   RECORD_KW if (cls, field) == ("LetStep", "kw") and begin in records else EXPECTED.get((cls, field)),
                   node)
                  for cls, field, begin, end, node in _spans(parsed.decl, start)]
        checks += [("OptionEntry", f"value of {e.key.text}", e.value.span.start + start, e.value.span.end + start,
                    OPTION_VALUES[e.key.text], e.value)
                   for e in _nodes(parsed.decl, "OptionEntry")
                   if e.key.text in OPTION_VALUES and type(e.value).__name__ == "OVName"]
        for cls, field, begin, end, expected, node in checks:
            if cls in ("MName", "Target") and field == "name" and node.text in ALL_FAMILIES:
                expected = "support.type.family.qvr"
            if cls == "ECall" and node.text not in BUILTINS:  # logical forms in a lexicon
                expected = None
            if expected is None:
                continue
            for offset in range(begin, end):
                if not scopes.has(offset, expected):
                    problems.append(f"{scopes.where(offset)}: {text[begin:end]!r} ({cls}.{field}) "
                                    f"is {scopes.at.get(offset)}, expected {expected}")
                    break

    # 4. Nothing is scoped invalid.
    for offset, s in scopes.at.items():
        if any(x.startswith("invalid") for x in s):
            problems.append(f"{scopes.where(offset)}: invalid scope {s}")
            break

    assert not problems, "\n".join(problems)


def test_every_row_of_the_table_is_exercised_by_the_examples():
    """Guards EXPECTED against rows that no example exercises (they would test nothing)."""
    seen = set()
    for path in EXAMPLES:
        for start, _, parsed in parse_module(path.read_text()).chunks:
            if parsed.decl is not None:
                seen.update((cls, field) for cls, field, *_ in _spans(parsed.decl, start))
    assert set(EXPECTED) - seen == set()


# ------------------------------------------- code lenses against the qvr parser


def _exported_programs(path: Path) -> list[dict]:
    """What the qvr parser says the code lenses must mark: each `program NAME` exported
    by a plain `export NAME`, at NAME, the first export flagged primary."""
    text = path.read_text()
    module = parse_module(text)
    programs, exports = {}, []
    for start, _, parsed in module.chunks:
        decl = parsed.decl
        if type(decl).__name__ == "ProgramDecl" and decl.name.text not in programs:
            programs[decl.name.text] = decl.name.span.start + start
        elif type(decl).__name__ == "ExportDecl":
            expr = decl.expr
            exports.append(expr.name.text if type(expr).__name__ == "MName" else None)
    found = []
    for name in dict.fromkeys(e for e in exports if e is not None):
        if name in programs:
            offset = programs[name]
            line = text.count("\n", 0, offset)
            column = offset - (text.rfind("\n", 0, offset) + 1)
            found.append({"name": name, "line": line, "start": column, "end": column + len(name),
                          "primary": name == exports[0]})
    return sorted(found, key=lambda p: p["line"])


@needs_node
def test_code_lenses_mark_the_exported_programs_the_parser_finds(ext: Path):
    script = ("const {exportedPrograms} = require('./out/programs.js'); const fs = require('fs');"
              "const out = {}; for (const f of process.argv.slice(1)) "
              "out[f] = exportedPrograms(fs.readFileSync(f, 'utf8'));"
              "process.stdout.write(JSON.stringify(out));")
    proc = _run([NODE, "-e", script, *map(str, EXAMPLES)], ext, timeout=120)
    assert proc.returncode == 0, _output(proc)
    got = json.loads(proc.stdout)
    expected = {str(path): _exported_programs(path) for path in EXAMPLES}
    assert got == expected
    assert sum(len(v) for v in expected.values()) >= 15  # the examples do exercise it


def _dash_parser():
    """The argument parser of `qvr dash` itself."""
    import argparse

    from qvr.commands import dash
    parser = argparse.ArgumentParser(prog="qvr", exit_on_error=False)
    dash.register(parser.add_subparsers(dest="command", required=True))
    return parser


@needs_node
def test_the_dash_command_line_is_what_qvr_dash_parses(ext: Path):
    """The arguments src/dash.ts builds, read by the real `qvr dash` parser."""
    file = "/home/ann/my models/it's a mix.qvr"
    script = ("const {dashArgs, METHODS} = require('./out/dash.js'); const file = process.argv[1];"
              "process.stdout.write(JSON.stringify([dashArgs({file}), "
              "...METHODS.map((method) => dashArgs({file, method}))]));")
    proc = _run([NODE, "-e", script, file], ext)
    assert proc.returncode == 0, _output(proc)
    parser = _dash_parser()
    parsed = [parser.parse_args(args) for args in json.loads(proc.stdout)]
    assert [(a.command, a.file, a.start, a.run) for a in parsed] == [
        ("dash", file, None, None), ("dash", file, "svi", None), ("dash", file, "hmc", None),
        ("dash", file, "nuts", None), ("dash", file, "smc", None)]
