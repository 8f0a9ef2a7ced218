"""Hostile files: nesting 1,000 and 10,000 deep, 1 MB lines, NULs and control characters,
invalid UTF-8.  `qvr check`, `qvr fmt`, `Document` and every editor query answer with
diagnostics (QVR010 "nested too deeply" for deep statements) and no traceback, and every
other declaration of the file, and every other file of the call, is still checked.

Also: a statement just inside the nesting limit works everywhere under Python's default
recursion limit, even when the caller already uses part of the stack."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qvr.analysis import Document
from qvr.ide import (code_actions, completion, folding, goto, hover, inlay, rename, selection,
                     semantic_tokens, signature, symbols)
from qvr.syntax.depth import MAX_DEPTH
from qvr.syntax.format import format_text
from qvr.text import Span

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20

HEAD = "object A : Real 3\nmorphism f : A -> A [role=kernel] ~ Normal\n"
TAIL = "let after = f >> polsh\n"  # checked as usual: QVR102 on `polsh`


def nested(n: int, kind: str = "fan") -> str:
    if kind == "fan":
        return "fan(" * n + "f" + ")" * n
    if kind == "compose":
        return "f" + " >> f" * n
    raise ValueError(kind)


HOSTILE = {
    # name: (text, codes in order)
    "fan_1000": (HEAD + f"let deep = {nested(1000)}\n" + TAIL, ["QVR010", "QVR102"]),
    "fan_10000": (HEAD + f"let deep = {nested(10000)}\n" + TAIL, ["QVR010", "QVR102"]),
    "compose_1000": (HEAD + f"let deep = {nested(1000, 'compose')}\n" + TAIL, ["QVR010", "QVR102"]),
    "parens_1mb_line": (HEAD + "let deep = " + "(" * (MB // 2) + "f" + ")" * (MB // 2) + "\n" + TAIL,
                        ["QVR010", "QVR102"]),
    "unclosed_1mb_line": (HEAD + "let deep = " + "(" * MB + "\n" + TAIL, ["QVR010", "QVR102"]),
    "comment_1mb_line": (HEAD + "# " + "x" * MB + "\n" + TAIL, ["QVR102"]),
    "name_1mb_line": (HEAD + "let " + "a" * MB + " = f\n" + TAIL, ["QVR102"]),
    "nuls": (HEAD + "let z = f\x00\x00 >> f\n\x00\x01\x02\x7f\n" + TAIL, ["QVR002", "QVR002", "QVR102"]),
    "nuls_1mb": ("\x00" * MB + "\n" + HEAD + TAIL, ["QVR002", "QVR102"]),
}


def codes(doc: Document) -> list[str]:
    return [d.code for d in doc.diagnostics()]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "qvr.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    for name, (text, _) in HOSTILE.items():
        (d / f"{name}.qvr").write_bytes(text.encode("utf-8"))
    (d / "good.qvr").write_text(HEAD + "let g = f >> f\n")
    (d / "bad.qvr").write_text(HEAD + "let g = f >> polish\n")
    return d


def test_check_reports_every_file_with_exact_codes_and_no_traceback(hostile_dir):
    out = run_cli("check", "--format", "json", str(hostile_dir))
    assert "Traceback" not in out.stderr and "Error" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1
    got = {Path(f["path"]).stem: [d["code"] for d in f["diagnostics"]]
           for f in json.loads(out.stdout)["files"]}
    want = {name: c for name, (_, c) in HOSTILE.items()}
    assert got == {**want, "good": [], "bad": ["QVR102"]}


def test_check_text_output_names_the_line_of_the_deep_statement(hostile_dir):
    f = hostile_dir / "fan_10000.qvr"
    out = run_cli("check", str(f))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    first = out.stdout.splitlines()[0]
    # at the 201st open bracket, 1-based: `let deep = ` + 200 `fan(` + `fan`
    col = len("let deep = ") + MAX_DEPTH * len("fan(") + len("fan") + 1
    assert first == (f"{f}:3:{col}: error[QVR010]: this statement is nested too deeply (more than "
                     f"{MAX_DEPTH} levels of brackets, calls, blocks and chained operators); "
                     "name parts of it with `let`")
    assert "checked 1 file: 2 errors, 0 warnings" in out.stderr


def test_invalid_utf8_is_one_message_exit_two_and_the_other_files_are_checked(tmp_path):
    bad = tmp_path / "binary.qvr"
    bad.write_bytes(HEAD.encode() + b"let z = f\xff\xfe\x00 >> f\n")
    good = tmp_path / "deep.qvr"
    good.write_text(HEAD + f"let deep = {nested(1000)}\n")
    out = run_cli("check", "--format", "json", str(bad), str(good))
    assert out.returncode == 2
    assert out.stderr == (f"qvr check: {bad}: cannot read file: not UTF-8 text "
                          f"(invalid start byte at byte {len(HEAD) + len('let z = f')})\n")
    files = json.loads(out.stdout)["files"]
    assert [(Path(f["path"]).name, [d["code"] for d in f["diagnostics"]]) for f in files] == \
        [("deep.qvr", ["QVR010"])]


def test_fmt_leaves_deep_statements_as_written_and_formats_the_rest(tmp_path):
    f = tmp_path / "deep.qvr"
    deep_line = f"let deep = {nested(10000)}\n"
    f.write_text("object A:Real 3\nmorphism f : A -> A [role=kernel] ~ Normal\n" + deep_line + TAIL)
    bad = tmp_path / "binary.qvr"
    bad.write_bytes(b"\xff\x00")
    out = run_cli("fmt", str(f), str(bad))
    assert "Traceback" not in out.stderr
    assert out.returncode == 2  # the unreadable file
    assert f"{f}:3: warning: statement left as written" in out.stderr
    assert f"{bad}: cannot read file: not UTF-8 text" in out.stderr
    assert f.read_text() == HEAD + deep_line + TAIL


def _every_query(doc: Document, offsets) -> None:
    """Run every editor feature; they must not raise (their answers are checked elsewhere)."""
    n = len(doc.text)
    for off in offsets:
        hover.hover(doc, off)
        goto.definition(doc, off)
        goto.references(doc, off)
        goto.highlights(doc, off)
        completion.complete(doc, off)
        signature.signature_help(doc, off)
        selection.selection_ranges(doc, off)
        rename.prepare_rename(doc, off)
    inlay.inlay_hints(doc, Span(0, n))
    semantic_tokens.semantic_tokens(doc)
    folding.folding_ranges(doc)
    symbols.document_symbols(doc)
    for d in doc.diagnostics():
        code_actions.fixes_for(doc, d)
    code_actions.code_actions(doc, Span(0, n))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_document_gives_diagnostics_and_keeps_answering(name):
    text, want = HOSTILE[name]
    doc = Document(text)
    assert codes(doc) == want
    after = text.index("let after")
    offsets = list(range(0, len(HEAD) + 1, 7)) + list(range(after, len(text) + 1, 3))
    offsets += [after - 2, len(text) // 2]
    _every_query(doc, offsets)
    # the rest of the file is understood: `f` in the last statement is the morphism
    use = text.index("f >> polsh")
    assert goto.definition(doc, use) == [Span(text.index("f : A"), text.index("f : A") + 1)]
    h = hover.hover(doc, use)
    assert h is not None and h.text.startswith("```qvr\nf : A -> A\n```")
    # editing the deep statement away leaves a clean document but for `polsh`
    start = text.index("let deep") if "let deep" in text else None
    if start is not None:
        doc.set_text(text[:start] + TAIL)
        assert codes(doc) == ["QVR102"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_format_text_keeps_hostile_statements(name):
    text, _ = HOSTILE[name]
    result = format_text(text)
    assert result.text.count("\n") == text.count("\n")
    assert format_text(result.text).text == result.text


# ---------------------------------------------------------------- just inside the limit

def _inside(kind: str, n: int) -> str:
    return {
        "fan": HEAD + f"let d = {nested(n)}\n",
        "compose": HEAD + f"let d = {nested(n, 'compose')}\n",
        "call": HEAD + "program p : A -> A\n    sample x <- Normal(0.0, 1.0)\n    let y = "
                + "exp(" * n + "x" + ")" * n + "\n    return y\n",
        "pattern": "object T : FinSet 4\ndeduction D : T -> T [semiring=Viterbi, start=S]\n"
                   "    atoms S, F\n    lexicon\n        \"a\" : S = " + "F(" * n + "S" + ")" * n + "\n",
        "blocks": HEAD + "program p : A -> A\n" + "".join(
            "    " * (i + 1) + f"marginalize z{i} <- Categorical(A)\n" for i in range(n))
                  + "    " * (n + 1) + "return z0\n",
    }[kind]


# the deepest of each shape below the limit (level 1 is the statement)
DEEPEST = {"fan": MAX_DEPTH - 3, "compose": MAX_DEPTH - 3, "call": MAX_DEPTH - 4,
           "pattern": MAX_DEPTH - 5, "blocks": MAX_DEPTH - 3}


@pytest.mark.parametrize("kind", sorted(DEEPEST))
def test_the_deepest_allowed_statement_is_not_reported(kind):
    n = DEEPEST[kind]
    assert "QVR010" not in codes(Document(_inside(kind, n)))
    assert "QVR010" in codes(Document(_inside(kind, n + 1)))


def _with_stack_used(frames: int, fn):
    """Call `fn` with `frames` frames of this test's own already on the stack."""
    if frames == 0:
        return fn()
    return _with_stack_used(frames - 1, fn)


@pytest.mark.parametrize("kind", sorted(DEEPEST))
def test_the_deepest_allowed_statement_works_under_the_default_recursion_limit(kind):
    text = _inside(kind, DEEPEST[kind])
    before = Document(text)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default, whatever the test runner set
    try:
        def everything():
            from qvr.syntax import parser
            parser._parse_cached.cache_clear()  # parse and check afresh, at this depth
            doc = Document(text)
            _every_query(doc, range(0, len(text) + 1, max(1, len(text) // 200)))
            return doc.diagnostics(), format_text(text).text
        diags, formatted = _with_stack_used(250, everything)
    finally:
        sys.setrecursionlimit(old)
    assert [d.code for d in diags] == codes(before)
    assert "QVR010" not in [d.code for d in diags]
    assert formatted == format_text(text).text
