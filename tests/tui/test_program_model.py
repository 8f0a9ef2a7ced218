"""ProgramModel: highlighting spans, diagnostics, hover, outline, exports and hashes from
qvr.analysis + qvr.ide, as plain data; the model and the pane import no torch."""
import hashlib
import subprocess
import sys
import textwrap

from qvr_tui.program_model import ProgramModel, source_sha256

from conftest import EXAMPLES, ROOT

SNIPPET = textwrap.dedent("""\
    ## Symbols of the toy language.
    object Sym : FinSet 4
    morphism emit : Sym -> Sym [role=kernel] ~ Categorical
    program walk : Sym -> Sym
        sample s <- emit
        return s
    export walk
    """)

BROKEN = SNIPPET.replace("sample s <- emit", "sample s <- emitt")


def kinds(model, line):
    text = model.lines[line]
    return [(text[s.start:s.end], s.kind, s.style) for s in model.spans[line]]


def test_spans_have_the_token_kinds_of_qvr_ide():
    m = ProgramModel.from_text(SNIPPET, "toy.qvr")
    assert kinds(m, 0) == [("## Symbols of the toy language.", "comment", "doc-comment")]
    assert kinds(m, 1) == [("object", "keyword", "keyword"), ("Sym", "type", "type"),
                           ("FinSet", "keyword", "keyword"), ("4", "number", "number")]
    assert kinds(m, 2) == [("morphism", "keyword", "keyword"), ("emit", "function", "function"),
                           ("Sym", "type", "type"), ("->", "operator", "operator"), ("Sym", "type", "type"),
                           ("role", "property", "property"), ("=", "operator", "operator"),
                           ("kernel", "enumMember", "constant"), ("~", "operator", "operator"),
                           ("Categorical", "class", "family")]
    assert kinds(m, 4)[:2] == [("sample", "keyword", "keyword"), ("s", "variable", "variable")]
    first = m.spans[2][1]
    assert (first.start, first.end, first.modifiers) == (9, 13, ("declaration",))


def test_diagnostics_with_lines_and_has_errors():
    m = ProgramModel.from_text(BROKEN, "toy.qvr")
    assert m.has_errors
    assert [(d.line, d.col, d.severity, d.code) for d in m.diagnostics] == [
        (3, 10, "warning", "QVR714"), (5, 17, "error", "QVR108")]
    d = m.diagnostics[1]
    assert d.label("toy.qvr") == ("toy.qvr:5:17: error[QVR108]: unknown morphism or distribution family "
                                  "`emitt`; did you mean `emit`?")
    assert [e.code for e in m.errors] == ["QVR108"]
    assert BROKEN[d.start:d.end] == "emitt"
    assert not ProgramModel.from_text(SNIPPET).has_errors


def test_hover_gives_type_facts_and_doc_comment():
    m = ProgramModel.from_text(SNIPPET, "toy.qvr")
    h = m.hover_at(SNIPPET.index("Sym :"))
    assert (h.signature, h.facts, h.doc) == ("Sym : FinSet 4", "object", "Symbols of the toy language.")
    h = m.hover_at(SNIPPET.index("emit\n"))
    assert (h.signature, h.facts, h.doc) == ("emit : Sym -> Sym", "morphism · role kernel ~ Categorical", "")
    assert SNIPPET[h.start:h.end] == "emit"
    assert m.hover_at(SNIPPET.index("Symbols")) is None  # inside a comment


def test_outline_and_exports():
    m = ProgramModel.load(EXAMPLES / "transformer_lm.qvr")
    top = [(e.name, e.kind, e.type_text, e.line) for e in m.outline if e.depth == 0]
    assert top[:2] == [("Token", "object", "FinSet 32", 7), ("Latent", "object", "Real 16", 8)]
    assert ("backbone", "let", "Token -> Latent", 22) in top
    assert top[-1] == ("transformer_lm", "program", "Token -> Token", 24)
    steps = [(e.name, e.type_text) for e in m.outline if e.depth == 1 and e.kind == "local"]
    assert steps == [("h", "Latent"), ("next_token", "[Token] Token")]
    assert [(x.name, x.kind, x.type_text, x.line) for x in m.exports] == [
        ("transformer_lm", "program", "Token -> Token", 30)]


def test_sha256_of_the_exact_text_and_staleness():
    crlf = SNIPPET.replace("\n", "\r\n")
    m = ProgramModel.from_text(crlf, "toy.qvr")
    assert m.sha256 == hashlib.sha256(crlf.encode("utf-8")).hexdigest() == source_sha256(crlf)
    assert m.lines[1] == "object Sym : FinSet 4"  # positions as an editor sees them
    assert not m.is_stale(m.sha256)
    assert m.is_stale(source_sha256(SNIPPET))


def test_reload_reads_the_file_again(tmp_path):
    f = tmp_path / "toy.qvr"
    f.write_text(SNIPPET, encoding="utf-8")
    m = ProgramModel.load(f)
    f.write_text(BROKEN, encoding="utf-8")
    m2 = m.reload()
    assert (m.has_errors, m2.has_errors) == (False, True)
    assert m2.cache is m.cache


def test_model_and_pane_import_no_torch():
    code = ("import sys; from qvr_tui.program_model import ProgramModel; "
            "m = ProgramModel.load('examples/transformer_lm.qvr'); m.hover_at(400); "
            "import qvr_tui.screens.program, qvr_tui.widgets.heatmap; "
            "print('HEAVY=' + ','.join(x for x in ('torch', 'qvr.runtime', 'pygls') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tui'}", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "HEAVY="
