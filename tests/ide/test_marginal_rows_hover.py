"""Hover on the coordinate of a per-row `marginalize` (issue 36.8, docs/extensions.md E9.12)."""
from pathlib import Path

from qvr.analysis import Document
from qvr.ide.hover import hover

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mixture_marginalize.qvr"


def test_the_coordinate_of_a_per_row_block_says_one_per_element():
    text = EXAMPLE.read_text()
    doc = Document(text)
    h = hover(doc, text.index("marginalize comp") + len("marginalize c"))
    assert h.text.startswith("```qvr\ncomp : [Point] Index\n```\n"
                             "marginalize coordinate · one per element of Point · line ")
    unannotated = text.replace("marginalize comp : Point <-", "marginalize comp <-")
    doc = Document(unannotated)
    h = hover(doc, unannotated.index("marginalize comp") + len("marginalize c"))
    assert "one per element" not in h.text and "marginalize coordinate" in h.text
