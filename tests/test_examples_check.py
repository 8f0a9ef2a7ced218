"""Every program in examples/ checks clean, and the seed's program is typed as in Appendix B."""
from pathlib import Path

import pytest

from qvr.analysis import Document
from qvr.sema.types import spell_mor, structure_mor

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.qvr"))


def test_there_are_enough_examples():
    assert len(EXAMPLES) >= 12


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_checks_clean(path):
    doc = Document(path.read_text(encoding="utf-8"), str(path))
    assert [(d.code, d.message) for d in doc.diagnostics()] == []


SEED_TYPES = {
    "tok_embed": "Token -> Latent",
    "head_0": "Latent -> HeadOut",
    "head_3": "Latent -> HeadOut",
    "attn_proj": "Latent -> Latent",
    "ff_up": "Latent -> FFHidden",
    "ff_down": "FFHidden -> Latent",
    "lm_head": "Latent -> Token",
    "layer": "Latent -> Latent",
    "backbone": "Token -> Latent",
    "transformer_lm": "Token -> Token",
}


def seed():
    path = Path(__file__).resolve().parent.parent / "examples" / "transformer_lm.qvr"
    return Document(path.read_text(encoding="utf-8"))


def test_seed_names_have_appendix_b_types():
    doc = seed()
    for name, typ in SEED_TYPES.items():
        assert spell_mor(doc.symbol("value", name).type) == typ, name
    assert doc.symbol("value", "head").members == ("head_0", "head_1", "head_2", "head_3")
    assert doc.symbol("value", "transformer_lm").effects == ("Sample", "Score")


@pytest.mark.parametrize("expr,spelled,structure", [
    ("fan(head)", "Latent -> HeadOut * HeadOut * HeadOut * HeadOut", "Real 16 -> Real 16"),
    ("stack(layer, 2)", "Latent -> Latent", "Real 16 -> Real 16"),
    ("tok_embed >> stack(layer, 2)", "Token -> Latent", "FinSet 32 -> Real 16"),
])
def test_seed_subexpression_types(expr, spelled, structure):
    doc = seed()
    at = doc.text.index(expr)
    span, mt, text = doc.type_at(at + (len(expr) - 1 if ">>" in expr else 0))
    if ">>" in expr:  # hover on the last operand's end is the operand; ask the operator
        span, mt, text = doc.type_at(doc.text.index(">>", at))
    assert text == expr
    assert spell_mor(mt) == spelled
    assert structure_mor(mt) == structure


def test_locals_and_definitions():
    doc = seed()
    use = doc.text.index("lm_head(h)") + len("lm_head(")
    defn = doc.definition_at(use)
    assert doc.text[defn.start:defn.end] == "h"
    assert doc.text.rfind("sample h") + len("sample ") == defn.start
    target = doc.definition_at(doc.text.index("backbone\n\n"))
    assert doc.text[target.start:target.end] == "backbone"
    assert doc.text[:target.start].endswith("let ")
    facts = [f for _, f in doc.facts_at(defn.start) if f.kind == "local"]
    assert facts[0].data.type_text == "Latent"
    nt = doc.text.index("observe next_token") + len("observe ")
    info = [f for _, f in doc.facts_at(nt) if f.kind == "local"][0].data
    assert info.type_text == "[Token] Token"
