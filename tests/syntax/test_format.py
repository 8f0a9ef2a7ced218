"""The canonical formatter (`qvr.syntax.format`) and `qvr fmt`."""
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvr.analysis import Document
from qvr.diagnostics import TextEdit
from qvr.syntax.chunks import comments, split
from qvr.syntax import format as F
from qvr.syntax import format_print
from qvr.syntax.format import FormatResult, format_range, format_text
from qvr.syntax.format_writer import code_tokens
from qvr.syntax.parser import parse_chunk

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.qvr"))
CASES = sorted((ROOT / "tests" / "sema" / "cases").glob("*.qvr"))


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def comment_texts(text: str) -> Counter:
    """Comment texts as the formatter promises to keep them (line comments lose trailing
    whitespace, block comments are verbatim)."""
    text = text.replace("\r\n", "\n")
    return Counter(t if kind == "block" else t.rstrip() for _, t, kind in comments(text))


def analysis(text: str):
    doc = Document(text)
    # messages may quote line numbers, which blank-line collapsing is allowed to change
    diags = [(d.code, re.sub(r"line \d+", "line N", d.message)) for d in doc.diagnostics()]
    symbols = {key: doc.symbol(*key) for key in sorted(doc.state.bound)}
    return diags, symbols


def apply(text: str, edits) -> str:
    for e in sorted(edits, key=lambda e: e.span.start, reverse=True):
        text = text[:e.span.start] + e.new_text + text[e.span.end:]
    return text


def fmt(text: str) -> str:
    return format_text(text).text


# ---------------------------------------------------------------- examples

@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_idempotent(path):
    first = format_text(read(path))
    assert first.skipped == ()
    second = format_text(first.text)
    assert second.text == first.text
    assert not second.changed


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_keep_every_comment(path):
    text = read(path)
    assert comment_texts(fmt(text)) == comment_texts(text)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_same_analysis(path):
    text = read(path)
    out = fmt(text)
    assert Document(out, str(path)).diagnostics() == []  # steer.qvr's model="tiny_lm" beside it
    assert analysis(out) == analysis(text)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_diagnostic_corpus_same_analysis_and_comments(path):
    """Files with errors of every kind: formatting keeps diagnostics, symbols, comments."""
    text = read(path)
    result = format_text(text)
    assert comment_texts(result.text) == comment_texts(text)
    assert analysis(result.text) == analysis(text)
    assert fmt(result.text) == result.text
    for span in result.skipped:  # a skipped statement is in the output verbatim
        assert text[span.start:span.end] in result.text
    # only statements that do not parse are skipped (the printer's safety net never fired)
    broken = [c for _, c in split(text)[0] if c.kind != "trivia" and parse_chunk(c).decl is None]
    assert len(result.skipped) == len(broken)


def test_result_type():
    r = format_text("object A:FinSet 3\n")
    assert isinstance(r, FormatResult)
    assert r == FormatResult("object A : FinSet 3\n", True, ())
    with pytest.raises(Exception):
        r.text = "x"  # frozen


# ---------------------------------------------------------------- golden outputs

GOLDEN = [
    # spacing, option blocks, trailing commas, blank-line runs, trailing whitespace
    ("\n\n# header   \nobject   A:FinSet 3   # trailing\nobject B : Real 6[low = -1.0 ,high=1.0,]\n\n\n\n"
     "## doc\nmorphism f : A->B [ role = kernel , scale=1e-5 ] ~Normal   \nexport   f",
     "# header\nobject A : FinSet 3  # trailing\nobject B : Real 6 [low=-1.0, high=1.0]\n\n"
     "## doc\nmorphism f : A -> B [role=kernel, scale=1e-5] ~ Normal\nexport f\n"),
    # morphism expressions
    ("let g = f>>f@f . dagger >> fan( f,f ) >> stack(f,3)>>repeat( f )>>scan(f)\n"
     "let c = identity( A )@from_data( \"K\" )\n",
     "let g = f >> f @ f.dagger >> fan(f, f) >> stack(f, 3) >> repeat(f) >> scan(f)\n"
     "let c = identity(A) @ from_data(\"K\")\n"),
    # a bracket split over lines stays multi-line: one entry per line, trailing comma
    ("morphism probe : A -> B [\n  role=embed,   # the role\n      # own line\n\n  scale=2\n  ]\n"
     "let h = (\n   f >> g )\nlet k = fan(a,\n  b)\n",
     "morphism probe : A -> B [\n    role=embed,  # the role\n    # own line\n\n    scale=2,\n]\n"
     "let h = (\n    f >> g\n)\nlet k = fan(\n    a,\n    b\n)\n"),
    # programs: 4-space blocks, comments in nested blocks, let-expressions, factor
    ("program p ( x:Real,y ) : A*B -> B\n  sample  z:A <- Normal( 0.0 , 1.0 ) [over=A,]\n"
     "  # before\n\n\n  marginalize k <- Categorical(w)\n     let q = -x+ 2*y/( 1-y )\n"
     "     # end of the inner block\n  # outer again\n"
     "  score s = factor a : A, b:A in {0->a, 1 -> b,}\n  observe o <- f( x, y[k], -1 )\n"
     "  let t = xs[ i , j ]+m.goal( )\n  return z\n",
     "program p(x : Real, y) : A * B -> B\n    sample z : A <- Normal(0.0, 1.0) [over=A]\n"
     "    # before\n\n    marginalize k <- Categorical(w)\n        let q = -x + 2 * y / (1 - y)\n"
     "        # end of the inner block\n    # outer again\n"
     "    score s = factor a : A, b : A in { 0 -> a, 1 -> b }\n    observe o <- f(x, y[k], -1)\n"
     "    let t = xs[i, j] + m.goal()\n    return z\n"),
    # deductions: the turnstile is kept as written, pragmas
    ("deduction D : A -> A [semiring=LogProb]\n atoms N,V\n"
     " rule r : span(I,K,N),span(K,J,V)|-span(I,J,N) #[ learnable , w=2]\n rule r2 : a ⊢ b\n"
     " lexicon\n   \"dog\" : N = dog#[learnable]\n",
     "deduction D : A -> A [semiring=LogProb]\n    atoms N, V\n"
     "    rule r : span(I, K, N), span(K, J, V) |- span(I, J, N) #[learnable, w=2]\n"
     "    rule r2 : a ⊢ b\n    lexicon\n        \"dog\" : N = dog #[learnable]\n"),
    # block comments: inline, trailing, spanning lines (text kept verbatim)
    ("object A : #{ inline }# FinSet 3\nobject B : FinSet 3 #{ trailing }#\n"
     "#{ spanning   \n   lines }#\nlet y = g(#{c}# x,y #{d}#)\n",
     "object A : #{ inline }# FinSet 3\nobject B : FinSet 3  #{ trailing }#\n"
     "#{ spanning   \n   lines }#\nlet y = g(#{c}# x, y #{d}#)\n"),
    # trailing comments of consecutive lines are aligned
    ("let a = f   # one\nlet longer = f >> g # two\n\nlet c = h     # alone\n",
     "let a = f            # one\nlet longer = f >> g  # two\n\nlet c = h  # alone\n"),
    # comments after a program's last step: indented ones stay in the block, doc comments
    # for the next declaration go to column 1
    ("program p : A -> B\n  return x\n  # still in p\n# outside\n   ## doc of C\nobject C : FinSet 2\n",
     "program p : A -> B\n    return x\n    # still in p\n# outside\n## doc of C\nobject C : FinSet 2\n"),
    # outside-core shapes that parse are formatted too
    ("let x = a >> b where\n  let a = f\nprogram q(n : Foo[A*B, C]) : A -> B\n\tsample [a, b,] <- m\n"
     "\tlet l = map(xs, x -> x + 1)\n\treturn (a : A, b)\n",
     "let x = a >> b where\n    let a = f\nprogram q(n : Foo[A * B, C]) : A -> B\n    sample [a, b] <- m\n"
     "    let l = map(xs, x -> x + 1)\n    return (a : A, b)\n"),
    # empty and comment-only modules
    ("", ""),
    ("\n\n  \n", ""),
    ("# only a comment   \n\n\n", "# only a comment\n"),
]


@pytest.mark.parametrize("messy,canonical", GOLDEN)
def test_golden(messy, canonical):
    result = format_text(messy)
    assert result.text == canonical
    assert result.changed == (messy != canonical)
    assert result.skipped == ()
    assert fmt(canonical) == canonical


def test_numbers_strings_and_names_as_written():
    text = 'object B : Real 1 [low=-0.5e-3, high=1E+2, tag="a \\" # b", n=007]\n'
    assert fmt(text) == text


# ---------------------------------------------------------------- syntax errors

def test_statements_with_syntax_errors_are_untouched():
    bad1 = "object Bad : : FinSet  "
    bad2 = "let m = f [oops"
    text = f"object A:FinSet 3\n{bad1}\n   # after bad\nlet k = f>>g\n{bad2}\nobject D:FinSet 1\n"
    result = format_text(text)
    assert result.text == (f"object A : FinSet 3\n{bad1}\n   # after bad\nlet k = f >> g\n{bad2}\n"
                           "object D : FinSet 1\n")
    assert [text[s.start:s.end] for s in result.skipped] == [bad1, bad2]
    assert fmt(result.text) == result.text


def test_broken_program_keeps_its_lines_byte_for_byte():
    broken = "program p : A -> B\n  sample x <- f(\n      return   x  \n"
    text = "object A : FinSet 3\n" + broken + "object  C : FinSet 2\n"
    result = format_text(text)
    assert broken.rstrip("\n") in result.text
    assert result.text.endswith("object C : FinSet 2\n")
    assert len(result.skipped) == 1


def test_outside_core_statements_are_untouched():
    text = "category  C\nobject A:FinSet 3\n#[pragma here]\n"
    result = format_text(text)
    assert result.text == "category  C\nobject A : FinSet 3\n#[pragma here]\n"
    assert len(result.skipped) == 2


def test_safety_net_keeps_statement_when_printing_fails(monkeypatch):
    text = "object A:FinSet 3\nlet g = f>>h\n"

    def broken(self, e):
        raise RuntimeError("printer defect")

    monkeypatch.setattr(format_print.Printer, "mexpr", broken)
    result = format_text(text)
    assert result.text == "object A : FinSet 3\nlet g = f>>h\n"
    assert [text[s.start:s.end] for s in result.skipped] == ["let g = f>>h"]


def test_safety_net_keeps_statement_when_reparse_differs(monkeypatch):
    monkeypatch.setattr(F, "_same_statement", lambda out, decl, expected: "object" in out)
    result = format_text("object A:FinSet 3\nlet g = f>>h\n")
    assert result.text == "object A : FinSet 3\nlet g = f>>h\n"
    assert len(result.skipped) == 1


def test_comments_inside_multiline_brackets():
    text = ("morphism m : A -> B [  # opts\n  role=kernel, #{ k }#\n\n\n  # scale next\n"
            "  scale= # odd place\n   0.1   # small\n  # last\n\n  ] ~ Normal  # init\n")
    assert fmt(text) == ("morphism m : A -> B [  # opts\n    role=kernel,       #{ k }#\n\n"
                         "    # scale next\n    scale=  # odd place\n    0.1,    # small\n"
                         "    # last\n] ~ Normal  # init\n")


def test_never_raises_on_garbage():
    for text in ["#{", '"', "object", "program p : A -> B\n", ")))", "\x00\r\r\n\t", "⊢ ⊢",
                 "object A : FinSet 3 #{ x\n y }# object B"]:
        result = format_text(text)
        assert fmt(result.text) == result.text


# ---------------------------------------------------------------- line ends

def test_crlf_input_is_normalised_to_lf():
    text = "\r\n\r\nobject A:FinSet 3\r\n\r\n\r\nobject B : : \r\nobject C : FinSet 2\r\n"
    result = format_text(text)
    assert result.text == "object A : FinSet 3\n\nobject B : : \nobject C : FinSet 2\n"
    assert result.changed
    (span,) = result.skipped  # offsets are those of the CRLF input
    assert text[span.start:span.end] == "object B : : "


def test_crlf_canonical_text_still_changes():
    assert format_text("object A : FinSet 3\r\n").changed


# ---------------------------------------------------------------- format_range

RANGE_TEXT = "object A:FinSet 3\n\n# about B\nobject B:FinSet 2\nobject C:FinSet 1\n"


def test_format_range_touches_only_the_overlapping_statement():
    start = RANGE_TEXT.index("object B")
    edits = format_range(RANGE_TEXT, start + 3, start + 5)
    assert len(edits) == 1 and isinstance(edits[0], TextEdit)
    assert apply(RANGE_TEXT, edits) == ("object A:FinSet 3\n\n# about B\nobject B : FinSet 2\n"
                                        "object C:FinSet 1\n")


def test_format_range_empty_range_and_whole_text():
    at = RANGE_TEXT.index("object C")
    assert apply(RANGE_TEXT, format_range(RANGE_TEXT, at, at)) == RANGE_TEXT.replace(
        "object C:FinSet 1", "object C : FinSet 1")
    assert apply(RANGE_TEXT, format_range(RANGE_TEXT, 0, len(RANGE_TEXT))) == fmt(RANGE_TEXT)


def test_format_range_canonical_statement_gives_no_edit():
    text = "object A : FinSet 3\nobject B:FinSet 2\n"
    assert format_range(text, 0, 5) == []


def test_format_range_crlf_offsets():
    text = RANGE_TEXT.replace("\n", "\r\n")
    start = text.index("object C")
    edits = format_range(text, start, start + 1)
    assert apply(text, edits) == text.replace("object C:FinSet 1", "object C : FinSet 1")


# ---------------------------------------------------------------- whitespace perturbations

def _perturb(text: str, rnd) -> str:
    """Extra spaces between tokens, trailing spaces, repeated blank lines (never inside a
    block comment, whose text is kept verbatim)."""
    inside = [(sp.start, sp.end) for sp, _, kind in comments(text) if kind == "block"]
    inserts = {}
    for start, chunk in split(text)[0]:
        if chunk.kind != "stmt":
            continue
        for pos, tok in code_tokens(chunk.clean, chunk.stmt_at, len(chunk.clean)):
            if rnd.random() < 0.3:
                inserts[start + pos + len(tok)] = " " * rnd.randint(1, 3)
    out = "".join(inserts.get(i, "") + ch for i, ch in enumerate(text)) + inserts.get(len(text), "")
    for start, end in reversed(inside):  # the comment spans moved by the insertions
        shift = sum(len(v) for k, v in inserts.items() if k <= start)
        inside[inside.index((start, end))] = (start + shift, end + shift)
    lines, pos = [], 0
    for line in out.split("\n"):
        end = pos + len(line)
        in_comment = any(a <= end < b for a, b in inside)
        pos = end + 1
        if rnd.random() < 0.2 and not in_comment:
            line += " " * rnd.randint(1, 3)
        lines.append(line)
        if not line.strip() and rnd.random() < 0.5:
            lines.extend([""] * rnd.randint(1, 2))
    return "\n" * rnd.randint(0, 2) + "\n".join(lines) + "\n" * rnd.randint(0, 3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(EXAMPLES), seed=st.integers(0, 2**32 - 1))
def test_whitespace_perturbations_format_the_same(path, seed):
    text = read(path)
    assert format_text(_perturb(text, random.Random(seed))).text == fmt(text)


# ---------------------------------------------------------------- qvr fmt

def cli(*args):
    return subprocess.run([sys.executable, "-m", "qvr.cli", "fmt", *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_cli_check_exit_codes(tmp_path):
    good = tmp_path / "good.qvr"
    good.write_text("object A : FinSet 3\n")
    messy = tmp_path / "messy.qvr"
    messy.write_text("object A:FinSet 3\n")
    out = cli("--check", str(good))
    assert out.returncode == 0, out.stderr
    out = cli("--check", str(good), str(messy))
    assert out.returncode == 1
    assert f"would reformat {messy}" in out.stdout and str(good) not in out.stdout
    assert messy.read_text() == "object A:FinSet 3\n"  # --check changes nothing


def test_cli_check_examples_are_canonical_except_known():
    out = cli("--check", "examples")
    changed = {line.split()[-1] for line in out.stdout.splitlines()}
    expected = {str(p.relative_to(ROOT)) for p in EXAMPLES if format_text(read(p)).changed}
    assert changed == expected
    assert out.returncode == (1 if expected else 0)


def test_cli_rewrites_in_place(tmp_path):
    messy = tmp_path / "m.qvr"
    messy.write_bytes(b"object A:FinSet 3\r\nlet g = A  # c   \r\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    clean = sub / "c.qvr"
    clean.write_text("object A : FinSet 3\n")
    out = cli(str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert messy.read_bytes() == b"object A : FinSet 3\nlet g = A  # c\n"
    assert clean.read_text() == "object A : FinSet 3\n"
    assert f"reformatted {messy}" in out.stdout and str(clean) not in out.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert cli("--check", str(tmp_path)).returncode == 0


def test_cli_diff_changes_nothing(tmp_path):
    messy = tmp_path / "m.qvr"
    messy.write_text("object A:FinSet 3\n")
    out = cli("--diff", str(messy))
    assert out.returncode == 1
    assert "-object A:FinSet 3" in out.stdout and "+object A : FinSet 3" in out.stdout
    assert messy.read_text() == "object A:FinSet 3\n"


def test_cli_unreadable_and_missing_files(tmp_path):
    bad = tmp_path / "bin.qvr"
    bad.write_bytes(b"\xff\xfe\x00bad")
    messy = tmp_path / "m.qvr"
    messy.write_text("object A:FinSet 3\n")
    out = cli(str(tmp_path / "missing.qvr"), str(bad), str(messy))
    assert out.returncode == 2
    assert "missing.qvr: no such file or directory" in out.stderr
    assert f"{bad}: cannot read file" in out.stderr
    assert messy.read_text() == "object A : FinSet 3\n"  # the others are still processed


def test_cli_warns_about_skipped_statements(tmp_path):
    f = tmp_path / "e.qvr"
    f.write_text("\n\n\nobject A:FinSet 3\nobject B : :\nobject C:FinSet 1\n")
    out = cli("--check", str(f))
    assert out.returncode == 1
    assert f"{f}:5: warning:" in out.stderr  # the line in the file as it is
    out = cli(str(f))
    assert out.returncode == 0
    assert f.read_text() == "object A : FinSet 3\nobject B : :\nobject C : FinSet 1\n"
    assert f"{f}:2: warning:" in out.stderr  # the line in the rewritten file
