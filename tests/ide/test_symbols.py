"""Document symbols (a hierarchical outline) and workspace symbol search."""
from ide_fixture import example

from qvr.analysis import Document
from qvr.ide.symbols import document_symbols, workspace_symbols


def outline(doc, syms, depth=0):
    out = []
    for s in syms:
        first, last = doc.position(s.span.start).line + 1, doc.position(s.span.end).line + 1
        out.append(f"{'  ' * depth}{s.kind} {s.name}: {s.detail} [{first}-{last}]")
        assert doc.text[s.selection.start:s.selection.end] == s.name.split("_")[0] or s.name.startswith(
            doc.text[s.selection.start:s.selection.end])
        out += outline(doc, s.children, depth + 1)
    return out


def test_outline_of_the_seed_program():
    doc = Document(example("transformer_lm"))
    assert outline(doc, document_symbols(doc)) == [
        "class Token: FinSet 32 [7-7]",
        "class Latent: Real 16 [8-8]",
        "class HeadOut: Real 4 [9-9]",
        "class FFHidden: Real 32 [10-10]",
        "function tok_embed: Token -> Latent [12-12]",
        "function head: Latent -> HeadOut [13-13]",
        "  function head_0: Latent -> HeadOut [13-13]",
        "  function head_1: Latent -> HeadOut [13-13]",
        "  function head_2: Latent -> HeadOut [13-13]",
        "  function head_3: Latent -> HeadOut [13-13]",
        "function attn_proj: Latent -> Latent [14-14]",
        "function ff_up: Latent -> FFHidden [15-15]",
        "function ff_down: FFHidden -> Latent [16-16]",
        "function residual_attn: Latent -> Latent [17-17]",
        "function residual_ff: Latent -> Latent [18-18]",
        "function lm_head: Latent -> Token [19-19]",
        "function layer: Latent -> Latent [21-21]",
        "function backbone: Token -> Latent [22-22]",
        "function transformer_lm: Token -> Token [24-28]",
        "  variable h: Latent [25-25]",
        "  variable next_token: [Token] Token [27-27]",
    ]


def test_steps_nest_under_marginalize_blocks():
    doc = Document(example("mixture_marginalize"))
    lines = outline(doc, document_symbols(doc))
    assert lines[2:9] == [
        "function gaussian_mixture: Point -> Point [15-22]",
        "  variable weights: Simplex [16-16]",
        "  variable centres: [Component] Real [17-17]",
        "  variable spread: Positive [18-18]",
        "  variable comp: [Point] Index [19-21]",
        "    variable centre: numeric [20-20]",
        "    variable position: [Point] Real [21-21]",
    ]


def test_deduction_rules_are_children_of_their_deduction():
    doc = Document(example("pcfg_deduction"))
    lines = outline(doc, document_symbols(doc))
    assert lines[1:4] == ["module Morphology: Word -> Word [10-17]", "  method plural: rule [12-12]",
                          "  method bare: rule [13-13]"]
    assert "  variable chart: chart of pipeline [38-38]" in lines


def test_a_statement_with_a_syntax_error_still_has_its_symbol():
    doc = Document("object A : FinSet 2\nmorphism f : A -> [role=kernel]\nlet g = f\n")
    assert [(s.kind, s.name) for s in document_symbols(doc)] == [
        ("class", "A"), ("function", "f"), ("function", "g")]


def test_workspace_symbols_match_by_subsequence_across_documents():
    docs = [(name, Document(example(name))) for name in ("transformer_lm", "vae", "hmm")]
    found = workspace_symbols(docs, "encH")
    assert [(w.name, w.container, w.key) for w in found] == [
        ("encoder_head", "", "vae"), ("encoder_head_0", "encoder_head", "vae"),
        ("encoder_head_1", "encoder_head", "vae")]
    assert {w.name for w in workspace_symbols(docs, "tok_embed")} == {"tok_embed"}
    assert len(workspace_symbols(docs, "")) == sum(len(document_symbols(d)) for _, d in docs) + 4 + 2
