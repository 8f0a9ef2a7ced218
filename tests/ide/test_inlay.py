"""Inlay hints: inferred types of top-level lets, program lets and unannotated samples."""
from ide_fixture import example

from qvr.analysis import Document
from qvr.ide.inlay import inlay_hints
from qvr.text import Span


def rendered(doc, span=None):
    span = span or Span(0, len(doc.text))
    text = doc.text
    for h in sorted(inlay_hints(doc, span), key=lambda h: -h.offset):
        text = text[:h.offset] + "⟨" + h.label + "⟩" + text[h.offset:]
    return text


def test_seed_hints():
    out = rendered(Document(example("transformer_lm")))
    assert "let layer⟨: Latent -> Latent⟩ = fan(head)" in out
    assert "let backbone⟨: Token -> Latent⟩ = tok_embed" in out
    assert "    sample h⟨: Latent⟩ <- backbone" in out
    assert out.count("⟨") == 3  # the annotated observe gets none


def test_program_hints_for_draws_templates_and_lets():
    out = rendered(Document(example("crop_yields")))
    lines = [l for l in out.splitlines() if "⟨" in l]
    assert lines == [
        "    sample shift⟨: Real⟩ <- Normal(centre, 1.0)",
        "    sample base⟨: Real⟩ <- Normal(3.0, 1.0)",
        "    sample spread_scale⟨: Positive⟩ <- HalfNormal(0.5)",
        "    sample site_mult⟨: value⟩ <- site_effects(0.0, spread_scale)",
        "    sample noise⟨: Positive⟩ <- HalfNormal(0.3)",
        "    let expected⟨: numeric⟩ = base + log(site_mult[site_of])",
    ]


def test_hints_are_limited_to_the_requested_range():
    doc = Document(example("transformer_lm"))
    start = doc.text.index("let backbone")
    hints = inlay_hints(doc, Span(start, start + 20))
    assert [h.label for h in hints] == [": Token -> Latent"]
