"""Go to definition, references and document highlight (semantic, not textual)."""
import pytest
from ide_fixture import at, cursor, example, mark

from qvr.ide.goto import definition, highlights, references

SHADOW = """\
object Band : FinSet 4
## mu is documented here, but this comment is not a reference
program p : Band -> Band
    sample mu <- Normal(0.0, 1.0)
    let t = factor mu : Band in mu * 2.0
    let u = mu + t
    return $0u
"""


def test_definition_from_a_step_target_goes_to_the_let():
    doc, off = cursor(example("transformer_lm"), "sample h <- back$0bone")
    (d,) = definition(doc, off)
    assert doc.text[d.start - 4:d.end] == "let backbone"


def test_definition_of_a_replica_member_is_its_group_declaration():
    doc, off = cursor(example("vae"), "encoder_head_$00")
    (d,) = definition(doc, off)
    line = doc.text[doc.text.rfind("\n", 0, d.start) + 1:doc.text.find("\n", d.start)]
    assert line.startswith("morphism encoder_head : ")


def test_definition_from_a_deduction_rule_goes_to_the_atom():
    doc, off = cursor(example("pcfg_deduction"), "rule plural : sp$0an(")
    (d,) = definition(doc, off)
    assert doc.position(d.start).line == doc.position(doc.text.index("atoms N, Stem")).line
    assert doc.text[d.start:d.end] == "span"


def test_definition_of_a_pattern_variable_is_its_first_occurrence():
    doc, off = at("object I : FinSet 3\ndeduction D : I -> I\n    atoms S, span\n"
                  "    rule r : span(I, J, S) |- span(I, $0J, S)\n")
    assert mark(doc.text, definition(doc, off)).splitlines()[-1] == "    rule r : span(I, ⟦J⟧, S) |- span(I, J, S)"


def test_definition_of_a_local_used_in_a_let_expression():
    doc, off = cursor(example("crop_yields"), "let expected = ba$0se")
    (d,) = definition(doc, off)
    assert doc.text[d.start - 7:d.end] == "sample base"


def test_families_builtins_and_host_data_have_no_definition():
    for needle in ("sample base <- Norm$0al", "log$0(site", "site_mult[site$0_of]"):
        doc, off = cursor(example("crop_yields"), needle)
        assert definition(doc, off) == []


def test_references_skip_comments_and_shadowed_locals():
    doc, off = at(SHADOW.replace("sample mu", "sample $0mu").replace("return $0u", "return u"))
    assert mark(doc.text, references(doc, off)) == SHADOW.replace("return $0u", "return u").replace(
        "sample mu", "sample ⟦mu⟧").replace("let u = mu", "let u = ⟦mu⟧")


def test_references_of_a_factor_binder_are_its_uses_inside_the_factor():
    doc, off = at(SHADOW.replace("factor mu", "factor $0mu").replace("return $0u", "return u"))
    assert mark(doc.text, references(doc, off, include_declaration=False)) == SHADOW.replace(
        "return $0u", "return u").replace("in mu * 2.0", "in ⟦mu⟧ * 2.0")


def test_references_of_a_top_level_name_across_statements():
    src = example("transformer_lm")
    doc, off = cursor(src, "morphism lay$0er", 0) if "morphism layer" in src else cursor(src, "let lay$0er")
    marked = mark(doc.text, references(doc, off))
    assert "let ⟦layer⟧ = fan(head)" in marked and "stack(⟦layer⟧, 2)" in marked
    assert marked.count("⟦") == 2
    assert mark(doc.text, references(doc, off, include_declaration=False)).count("⟦") == 1


def test_references_of_an_object_include_type_positions():
    doc, off = cursor(example("transformer_lm"), "object Lat$0ent")
    marked = mark(doc.text, references(doc, off))
    assert marked.count("⟦Latent⟧") == doc.text.count("Latent") == 12
    assert "[Latent]" not in marked


def test_highlight_marks_writes_and_reads():
    doc, off = cursor(example("transformer_lm"), "lm_head($0h)")
    hs = highlights(doc, off)
    assert [(doc.position(x.span.start).line + 1, x.write) for x in hs] == [(25, True), (27, False)]


@pytest.mark.parametrize("src", ["# only a comment $0here\n", "$0\n"])
def test_nothing_at_blank_positions(src):
    doc, off = at(src)
    assert definition(doc, off) == [] and references(doc, off) == [] and highlights(doc, off) == []
