"""The Neovim plugin in editors/nvim, driven by a real headless Neovim.

Each test starts `nvim --headless -u tests/editors/nvim/init.lua FILE -c 'luafile SCRIPT'`:
init.lua puts the plugin from this repository on the runtimepath and nothing from the
user's configuration (the XDG directories point into a temporary folder). The Lua
script writes a JSON report that the test checks.

* Without a server: filetype detection, buffer settings, highlighting groups on the
  tokens of an example, indentation on every example, typing with auto-indent, and how
  `require('qvr')` finds `qvr-lsp` (fake executables in temporary folders), and
  `:QvrDash` (the command, its completion, the command list it builds, a terminal
  split running a fake `qvr`, its error messages).
* With `qvr-lsp` (skipped, with the reason, when it is not installed): an example with a
  planted error is opened in a project whose `.venv/bin/qvr-lsp` is the real server;
  the test checks the diagnostic, a hover with the morphism's type and go-to-definition.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qvr.sema.families import BUILTINS, FAMILIES, OUTSIDE_CORE_FAMILIES, OUTSIDE_CORE_SPACES, SPACES

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent / "nvim"
PLUGIN = ROOT / "editors" / "nvim"
EXAMPLES = sorted((ROOT / "examples").glob("*.qvr"))
SEED = ROOT / "examples" / "transformer_lm.qvr"
NVIM = shutil.which("nvim")

pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim is not installed (apt-get install neovim; scripts/setup.sh does it as root)")


def _server() -> Path | None:
    """The qvr-lsp of this checkout's environment, if it is installed."""
    for candidate in (ROOT / ".venv" / "bin" / "qvr-lsp", Path(sys.executable).parent / "qvr-lsp"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("qvr-lsp")
    return Path(found) if found else None


def nvim(script: str, files: list[Path], cwd: Path, env: dict | None = None, timeout: int = 60) -> dict:
    """Runs a test script in headless Neovim and returns its JSON report."""
    result = cwd / f"{script}.json"
    result.unlink(missing_ok=True)
    xdg = cwd / "xdg"
    full_env = dict(
        os.environ,
        QVR_RESULT=str(result),
        XDG_CONFIG_HOME=str(xdg / "config"),
        XDG_DATA_HOME=str(xdg / "data"),
        XDG_STATE_HOME=str(xdg / "state"),
        XDG_CACHE_HOME=str(xdg / "cache"),
        **(env or {}),
    )
    proc = subprocess.run(
        [NVIM, "--headless", "-u", str(HERE / "init.lua"), *map(str, files),
         "-c", f"luafile {HERE / (script + '.lua')}"],
        cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
    assert result.exists(), f"nvim wrote no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads(result.read_text())
    assert report.get("ok") and proc.returncode == 0, (report.get("error"), proc.stderr)
    return report


def plant_error(project: Path) -> Path:
    """The seed example with the export misspelled: QVR102 at the last line."""
    text = SEED.read_text()
    assert "\nexport transformer_lm\n" in text
    model = project / "model.qvr"
    model.write_text(text.replace("\nexport transformer_lm\n", "\nexport transformer_lmm\n"))
    return model


def find(text: str, line_pattern: str, token: str) -> tuple[int, int]:
    """0-based (line, column) of the first whole-word `token` on the first line matching."""
    for number, line in enumerate(text.split("\n")):
        if re.search(line_pattern, line):
            before = r"(?<!\w)" if re.match(r"\w", token) else ""
            after = r"(?!\w)" if re.search(r"\w$", token) else ""
            return number, re.search(before + re.escape(token) + after, line).start()
    raise AssertionError(f"no line matches {line_pattern!r}")


# ------------------------------------------------------------------ no server needed


@pytest.fixture(scope="module")
def seed_report(tmp_path_factory) -> tuple[str, dict]:
    project = tmp_path_factory.mktemp("nvim-highlight")
    model = plant_error(project)
    return model.read_text(), nvim("highlight", [model], project)


def test_filetype_and_buffer_settings(seed_report):
    _, report = seed_report
    [buffer] = report["buffers"]
    assert buffer["filetype"] == "qvr" and buffer["syntax"] == "qvr"
    assert buffer["commentstring"] == "# %s"
    assert buffer["comments"] == ":##,:#!,:#"
    assert buffer["shiftwidth"] == 4 and buffer["expandtab"] is True
    assert buffer["indentexpr"] == "GetQvrIndent(v:lnum)"


# (line pattern, token) -> (qvr syntax group, the standard group it links to)
SEED_GROUPS = [
    (r"^# runnable", "runnable", "qvrComment", "Comment"),
    (r"^## Transformer", "Transformer", "qvrDocComment", "SpecialComment"),
    (r"^object Token", "object", "qvrDeclaration", "Keyword"),
    (r"^object Token", "Token", "qvrTypeName", "Type"),
    (r"^object Token", "FinSet", "qvrBuiltinType", "Type"),
    (r"^object Token", "32", "qvrNumber", "Number"),
    (r"^morphism head", "head", "qvrFunctionName", "Function"),
    (r"^morphism head", "role", "qvrOptionKey", "Identifier"),
    (r"^morphism head", "kernel", "qvrRoleValue", "Constant"),
    (r"^morphism head", "replicate", "qvrOptionKey", "Identifier"),
    (r"^morphism head", "0.1", "qvrFloat", "Float"),
    (r"^morphism head", "~", "qvrOperator", "Operator"),
    (r"^morphism head", "Normal", "qvrFamily", "Structure"),
    (r"^morphism lm_head", "Categorical", "qvrFamily", "Structure"),
    (r"^let layer", "let", "qvrDeclaration", "Keyword"),
    (r"^let layer", "layer", "qvrFunctionName", "Function"),
    (r"^let layer", "fan", "qvrCombinator", "Keyword"),
    (r"^let layer", ">>", "qvrOperator", "Operator"),
    (r"^let backbone", "stack", "qvrCombinator", "Keyword"),
    (r"^program", "program", "qvrDeclaration", "Keyword"),
    (r"^program", "transformer_lm", "qvrFunctionName", "Function"),
    (r"^program", "->", "qvrOperator", "Operator"),
    (r"sample h", "sample", "qvrStep", "Statement"),
    (r"sample h", "h", "qvrLocalName", "Identifier"),
    (r"sample h", "<-", "qvrOperator", "Operator"),
    (r"observe next_token", "next_token", "qvrLocalName", "Identifier"),
    (r"return next_token", "return", "qvrStep", "Statement"),
    (r"^export", "export", "qvrKeyword", "Keyword"),
]


@pytest.mark.parametrize("pattern,token,group,linked", SEED_GROUPS,
                         ids=[f"{p[1]}@{p[0]}" for p in SEED_GROUPS])
def test_highlight_groups_on_the_seed_program(seed_report, pattern, token, group, linked):
    text, report = seed_report
    line, col = find(text, pattern, token)
    groups = report["buffers"][0]["lines"][line]["groups"]
    assert {tuple(groups[c]) for c in range(col, col + len(token))} == {(group, linked)}


TRICKY = """\
## doc comment with object and 1.5
#! also a doc comment
#![inner] is a pragma
object Level : Real 1 [low=-1.5e-3, high=2.0]   # trailing comment
#{ block comment
object NotCode : FinSet 3 }#
morphism f : Level -> Level [role=let] ~ g.dagger @ identity(Level)
deduction D : Level -> Level [semiring=Viterbi]
    atoms A, B
    rule r : A |- B #[learnable, bounded]
    lexicon
        "x # not a comment" : A = A
program p(centre : Real) : Level -> Level
    marginalize z <- Bernoulli(0.5) [reduction=logsumexp]
        let rule = factor b : Level in exp(b)
    score s = chart.goal_weight()
    return s
morphism open : A -> B [role=kernel,
object After : FinSet 2
"""

TRICKY_GROUPS = [
    (r"^## doc", "object", "qvrDocComment"),
    (r"^## doc", "1.5", "qvrDocComment"),
    (r"^#! also", "also", "qvrDocComment"),
    (r"^#!\[inner", "inner", "qvrPragmaKey"),
    (r"^object Level", "low", "qvrOptionKey"),
    (r"^object Level", "-", "qvrOperator"),
    (r"^object Level", "2.0", "qvrFloat"),
    (r"^object Level", "trailing", "qvrComment"),
    (r"^#\{ block", "block", "qvrBlockComment"),
    (r"^object NotCode", "object", "qvrBlockComment"),
    (r"^morphism f", "let", "qvrRoleValue"),
    (r"^morphism f", "dagger", "qvrBuiltin"),
    (r"^morphism f", "@", "qvrOperator"),
    (r"^morphism f", "identity", "qvrBuiltin"),
    (r"^deduction", "D", "qvrDeductionName"),
    (r"^deduction", "Viterbi", "qvrOptionValue"),
    (r"atoms A", "atoms", "qvrDeductionKeyword"),
    (r"rule r", "rule", "qvrDeductionKeyword"),
    (r"rule r", "r", "qvrFunctionName"),
    (r"rule r", "|-", "qvrOperator"),
    (r"rule r", "learnable", "qvrPragmaKey"),
    (r"rule r", "bounded", "qvrPragmaKey"),
    (r"^    lexicon", "lexicon", "qvrDeductionKeyword"),
    (r'"x # not', "not", "qvrString"),
    (r"^program p", "centre", ""),
    (r"^program p", "Real", "qvrBuiltinType"),
    (r"marginalize z", "marginalize", "qvrStep"),
    (r"marginalize z", "z", "qvrLocalName"),
    (r"marginalize z", "Bernoulli", "qvrFamily"),
    (r"marginalize z", "logsumexp", "qvrOptionValue"),
    (r"let rule", "rule", "qvrLocalName"),
    (r"let rule", "factor", "qvrKeyword"),
    (r"let rule", "in", "qvrKeyword"),
    (r"let rule", "exp", "qvrBuiltin"),
    (r"score s", "goal_weight", "qvrBuiltin"),
    (r"^object After", "object", "qvrDeclaration"),
    (r"^object After", "After", "qvrTypeName"),
]


@pytest.fixture(scope="module")
def tricky_report(tmp_path_factory) -> dict:
    project = tmp_path_factory.mktemp("nvim-tricky")
    (project / "tricky.qvr").write_text(TRICKY)
    return nvim("highlight", [project / "tricky.qvr"], project)


@pytest.mark.parametrize("pattern,token,group", TRICKY_GROUPS, ids=[f"{p[1]}@{p[0]}" for p in TRICKY_GROUPS])
def test_highlight_groups_on_tricky_lines(tricky_report, pattern, token, group):
    line, col = find(TRICKY, pattern, token)
    groups = tricky_report["buffers"][0]["lines"][line]["groups"]
    assert {groups[c][0] for c in range(col, col + len(token))} == {group}


def test_family_keywords_are_the_checkers_families():
    syntax = (PLUGIN / "syntax" / "qvr.vim").read_text()
    block = re.search(r"^syn keyword qvrFamily (.*?)(?=^\S)", syntax, re.M | re.S).group(1)
    assert set(re.findall(r"\b[A-Z]\w*\b", block)) == set(FAMILIES) | set(OUTSIDE_CORE_FAMILIES)


E9 = """\
object Means : PositiveOrdered 2
object Household : FinSet 20
object Coef : FinSet 3
program regression : Household -> Household
    data X : Household * Coef
    sample beta : Coef <- Flat
    sample sigma <- StudentT(3.0, 0.0, 1.0) [lower=0.0, upper=5.0]
    let mu = X @ beta
    record total = sum(beta, Coef) + log_density(Normal(0.0, 1.0), mu)
    let path = scan(Household, 0.0, (s, t) -> s + mu[t])
    let data = cholesky(eye(Coef))
    observe cum : Household = fold(Household, 0.0, (a, i) -> a + i) <- Normal(0.0, 1.0)
    score lik : Household = log_density(Normal(0.0, 1.0), mu)
    return total
let cell = scan(f)
program typed : (Household) -> Household
"""

# the statistics extension (docs/extensions.md E9)
E9_GROUPS = [
    (r"^object Means", "PositiveOrdered", "qvrBuiltinType"),
    (r"^    data X", "data", "qvrStep"),
    (r"^    data X", "X", "qvrLocalName"),
    (r"^    data X", "Household", ""),
    (r"^    data X", "*", "qvrOperator"),
    (r"sample beta", "Flat", "qvrFamily"),
    (r"sample sigma", "lower", "qvrOptionKey"),
    (r"sample sigma", "upper", "qvrOptionKey"),
    (r"let mu", "@", "qvrOperator"),
    (r"record total", "record", "qvrStep"),
    (r"record total", "total", "qvrLocalName"),
    (r"record total", "sum", "qvrBuiltin"),
    (r"record total", "log_density", "qvrBuiltin"),
    (r"record total", "Normal", "qvrFamily"),
    (r"let path", "scan", "qvrBuiltin"),
    (r"let path", "s", "qvrLambdaParam"),
    (r"let path", "t", "qvrLambdaParam"),
    (r"let path", "->", "qvrOperator"),
    (r"let data", "data", "qvrLocalName"),
    (r"let data", "cholesky", "qvrBuiltin"),
    (r"let data", "eye", "qvrBuiltin"),
    (r"observe cum", "observe", "qvrStep"),  # E9.7: an observed value computed from data
    (r"observe cum", "cum", "qvrLocalName"),
    (r"observe cum", "fold", "qvrBuiltin"),
    (r"observe cum", "a", "qvrLambdaParam"),
    (r"observe cum", "Normal", "qvrFamily"),
    (r"score lik", "lik", "qvrLocalName"),
    (r"score lik", "log_density", "qvrBuiltin"),
    (r"^let cell", "scan", "qvrCombinator"),
    (r"^program typed", "Household", ""),  # `(A) ->` in a signature is not a lambda
    (r"^program typed", "->", "qvrOperator"),
]


@pytest.fixture(scope="module")
def e9_report(tmp_path_factory) -> dict:
    project = tmp_path_factory.mktemp("nvim-e9")
    (project / "e9.qvr").write_text(E9)
    return nvim("highlight", [project / "e9.qvr"], project)


@pytest.mark.parametrize("pattern,token,group", E9_GROUPS, ids=[f"{p[1]}@{p[0]}" for p in E9_GROUPS])
def test_highlight_groups_of_the_statistics_extension(e9_report, pattern, token, group):
    line, col = find(E9, pattern, token)
    groups = e9_report["buffers"][0]["lines"][line]["groups"]
    assert {groups[c][0] for c in range(col, col + len(token))} == {group}


def test_builtins_and_spaces_are_the_checkers():
    """The generated lists (editors/word_lists.py): every let-expression builtin, every
    constrained space."""
    syntax = (PLUGIN / "syntax" / "qvr.vim").read_text()

    def alternatives(group: str, tail: str) -> set[str]:
        found = set()
        for m in re.finditer(rf'^syn match {group} ".*?\\<\\%\((\w+(?:\\\|\w+)*)\\\){re.escape(tail)}"$',
                             syntax, re.M):
            found |= set(m.group(1).split("\\|"))
        return found

    builtins = alternatives("qvrBuiltin", "\\ze\\s*(")
    from qvr.sema.steering_scores import TEXT_FUNCTIONS  # E10: steering score steps
    assert builtins - {"identity", "from_data", "residual", "layer_norm", "rms_norm"} == \
        set(BUILTINS) | set(TEXT_FUNCTIONS)
    assert {"sum", "log_density", "fold", "scan", "eye"} <= builtins
    assert alternatives("qvrBuiltinType", "\\ze\\s\\+\\d") == set(SPACES) | set(OUTSIDE_CORE_SPACES)


@pytest.fixture(scope="module")
def examples_report(tmp_path_factory) -> dict:
    return nvim("highlight", EXAMPLES, tmp_path_factory.mktemp("nvim-examples"))


def test_indentation_agrees_with_every_example(examples_report):
    """GetQvrIndent() on each line of each example, given the lines above it.

    It must give exactly the author's indent after a block header (`program`,
    `deduction`, `marginalize`, `lexicon`) or an open bracket, after `return`, and for
    top-level declarations; elsewhere it keeps the previous indent, so the only
    disagreement allowed is a line the author dedented by hand (the end of a block).
    """
    problems, exact = [], 0
    header = re.compile(r"^(?:program|deduction)\b|^\s+(?:marginalize\b|lexicon\s*$)|[\[({]\s*$")
    assert len(examples_report["buffers"]) == len(EXAMPLES)
    for buffer in examples_report["buffers"]:
        code = [(n, line) for n, line in enumerate(buffer["lines"])
                if line["text"].strip() and line["computed"] != -1]  # -1: inside a block comment
        for (_, before), (n, line) in zip(code, code[1:]):
            where = f"{Path(buffer['name']).name}:{n + 1}: {line['text']!r}"
            if line["computed"] == line["indent"]:
                exact += 1
            forced = (header.search(before["text"]) or re.match(r"\s+return\b", before["text"])
                      or re.match(r"(?:object|morphism|program|deduction|composition|export)\b", line["text"]))
            if forced and line["computed"] != line["indent"]:
                problems.append(f"{where}: computed {line['computed']}, written {line['indent']}")
            elif line["computed"] < line["indent"]:
                problems.append(f"{where}: computed {line['computed']} < written {line['indent']}")
    assert not problems, "\n".join(problems)
    assert exact > 400


def test_typing_a_program_indents_it(tmp_path):
    report = nvim("typing", [tmp_path / "new.qvr"], tmp_path)
    assert report["lines"] == [
        "## A model.",
        "## More documentation.",
        "program p : A -> B",
        "    sample x <- Normal(0.0, 1.0)",
        "    marginalize z <- Bernoulli(0.5)",
        "        observe y <- Normal(x, 1.0)",
        "    return x",
        "morphism probe : A -> B [",
        "    role=embed,",
        "]",
        "object Next : FinSet 2",
    ]


def test_server_lookup(tmp_path):
    """`.venv/bin/qvr-lsp` of the project root first, then PATH, else one clear warning."""
    def executable(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    with_venv = tmp_path / "with_venv"
    venv_server = executable(with_venv / ".venv" / "bin" / "qvr-lsp")
    (with_venv / "src" / "deep").mkdir(parents=True)
    with_pyproject = tmp_path / "with_pyproject"
    (with_pyproject / "models").mkdir(parents=True)
    (with_pyproject / "pyproject.toml").write_text("")
    (with_pyproject / "models" / "m.qvr").write_text("object A : FinSet 2\n")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "m.qvr").write_text("object A : FinSet 2\n")
    path_dir = tmp_path / "bin"
    path_server = executable(path_dir / "qvr-lsp")
    empty = tmp_path / "empty"
    empty.mkdir()

    cases = {
        "with_venv": {"file": str(with_venv / "src" / "deep" / "m.qvr"), "path": str(path_dir)},
        "with_pyproject": {"file": str(with_pyproject / "models" / "m.qvr"), "path": f"{empty}:{path_dir}"},
        "bare": {"file": str(bare / "m.qvr"), "path": str(empty)},
    }
    report = nvim("lookup", [bare / "m.qvr"], tmp_path, env={"QVR_CASES": json.dumps(cases)})
    got = report["cases"]
    assert got["with_venv"] == {"root": str(with_venv), "server": str(venv_server)}
    assert got["with_pyproject"] == {"root": str(with_pyproject), "server": str(path_server)}
    assert got["bare"] == {"root": str(bare)}  # no server
    # starting the server for the bare project warns once, saying where it looked and what to do
    [warning] = report["notes"]
    for hint in ("qvr-lsp", f"{bare}/.venv/bin", "PATH", 'pip install "qvr[lsp]"', "setup()"):
        assert hint in warning, warning
    assert report.get("started") is None  # start() returned nil


# ---------------------------------------------------------------------- with qvr-lsp

SERVER = _server()


@pytest.mark.skipif(SERVER is None, reason="qvr-lsp is not installed: `pip install -e '.[lsp]'` "
                    "(bash scripts/setup.sh) installs it into .venv/bin")
def test_diagnostic_hover_and_definition_from_qvr_lsp(tmp_path):
    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "qvr-lsp").symlink_to(SERVER)
    model = plant_error(project)
    text = model.read_text()

    use = find(text, r"sample h <- backbone", "backbone")
    declaration = find(text, r"^let backbone", "backbone")
    requests = [
        {"method": "textDocument/hover", "line": use[0], "character": use[1] + 2},
        {"method": "textDocument/definition", "line": use[0], "character": use[1]},
    ]
    report = nvim("lsp", [model], project, env={"QVR_REQUESTS": json.dumps(requests)})

    # found through the project's .venv, not PATH
    assert [c["cmd"] for c in report["clients"]] == [[str(project / ".venv" / "bin" / "qvr-lsp")]]
    assert report["notes"] == []

    errors = [d for d in report["diagnostics"] if d["severity"] == 1]
    export = find(text, r"^export", "transformer_lmm")
    assert [(d["lnum"], d["col"], d["code"]) for d in errors] == [(export[0], export[1], "QVR102")]
    assert "transformer_lmm" in errors[0]["message"]

    hover, definition = report["answers"]
    contents = hover["contents"]
    value = contents["value"] if isinstance(contents, dict) else json.dumps(contents)
    assert "backbone : Token -> Latent" in value

    locations = definition if isinstance(definition, list) else [definition]
    [location] = locations
    target = location.get("targetSelectionRange") or location["range"]
    assert (location.get("targetUri") or location["uri"]).endswith("/model.qvr")
    assert (target["start"]["line"], target["start"]["character"]) == declaration


# ------------------------------------------------------------------------- :QvrDash


def test_qvr_dash_opens_the_dashboard_in_a_terminal_split(tmp_path):
    """`:QvrDash [method]` runs `qvr dash FILE [--start METHOD]` from the project's
    .venv in a terminal split. The project's path has spaces; `qvr` is a fake that
    writes its working folder and arguments."""
    project = tmp_path / "my project"
    fake = project / ".venv" / "bin" / "qvr"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\n{ pwd; for a in "$@"; do printf \'%s\\n\' "$a"; done; } > "$QVR_ARGS_OUT.tmp"\n'
                    'mv "$QVR_ARGS_OUT.tmp" "$QVR_ARGS_OUT"\n')
    fake.chmod(0o755)
    model = project / "models" / "gaussian mix.qvr"
    model.parent.mkdir()
    model.write_text(SEED.read_text())
    out = tmp_path / "args.txt"
    report = nvim("dash", [model], tmp_path, env={"QVR_ARGS_OUT": str(out)})

    assert report["command"] == {"exists": 2, "all": ["svi", "hmc", "nuts", "smc"], "n": ["nuts"],
                                 "s": ["svi", "smc"]}
    builder = report["builder"]
    assert builder["nuts"] == ["/path/qvr", "dash", "/path/file.qvr", "--start", "nuts"]
    for method in ("svi", "hmc", "nuts", "smc"):
        assert builder[method] == ["/path/qvr", "dash", "/path/file.qvr", "--start", method]
    assert builder["none"] == builder["empty"] == ["/path/qvr", "dash", "/path/file.qvr"]
    assert builder["list"] == ["python3", "-m", "qvr", "dash", "/a b/c d.qvr", "--start", "smc"]
    # what the real `qvr dash` parser makes of them
    import argparse

    from qvr.commands import dash
    parser = argparse.ArgumentParser(prog="qvr", exit_on_error=False)
    dash.register(parser.add_subparsers(dest="command", required=True))
    for method in ("svi", "hmc", "nuts", "smc"):
        parsed = parser.parse_args(builder[method][1:])
        assert (parsed.command, parsed.file, parsed.start) == ("dash", "/path/file.qvr", method)
    assert builder["unknown"] == {"cmd": None, "message": "qvr: unknown method `mcmc` for :QvrDash; use one of svi, hmc, nuts, smc"}

    # for real: the fake ran in the project root with the file as one argument
    started = report["started"]
    assert report["file"] == str(model)
    assert started["lines"] == [str(project), "dash", str(model), "--start", "nuts"]
    assert started["windows"] == 2 and started["buftype"] == "terminal"
    # the unsaved edit was written first: the dashboard reads the file
    assert started["model_modified"] is False and started["model_last_line"] == "# an unsaved edit"
    # the one note is setup() saying that this project has no qvr-lsp
    assert [n for n in started["notes"] if "language server qvr-lsp" not in n] == []

    assert report["captured"] == [{"cmd": [str(fake), "dash", str(model)], "cwd": str(project)}]

    unknown, no_file, not_qvr, no_qvr = report["errors"]
    assert unknown == "qvr: unknown method `mcmc` for :QvrDash; use one of svi, hmc, nuts, smc"
    assert no_file == "qvr: this buffer has no file; :write it to a .qvr file first"
    assert not_qvr == "qvr: notes.txt is not a .qvr file"
    for hint in ("cannot find the qvr command", f"{project}/.venv/bin", "PATH", 'pip install "qvr[tui,runtime]"',
                 "setup()"):
        assert hint in no_qvr, no_qvr
    assert report["calls_after_errors"] == 1 and report["windows_after_errors"] == 1
