"""Folding ranges and selection ranges."""
from ide_fixture import cursor, example

from qvr.analysis import Document
from qvr.ide.folding import folding_ranges
from qvr.ide.selection import selection_ranges


def test_folds_blocks_and_comment_runs():
    doc = Document(example("mixture_marginalize"))
    folds = [(doc.position(f.start).line + 1, doc.position(f.end).line + 1, f.kind) for f in folding_ranges(doc)]
    multi = [f for f in folds if f[1] > f[0]]
    assert multi == [(1, 7, "comment"), (15, 22, "region"), (19, 21, "region"), (25, 33, "region"),
                     (29, 32, "region")]


def test_folds_block_comments_and_multi_line_option_blocks():
    doc = Document("object A : Real 2\nmorphism f : A -> A [\n    role=kernel,\n]\n#{ one\n two }#\n")
    folds = [(doc.position(f.start).line, doc.position(f.end).line, f.kind) for f in folding_ranges(doc)]
    assert [f for f in folds if f[1] > f[0]] == [(1, 3, "region"), (4, 5, "comment")]


def test_selection_expands_through_the_expression_tree():
    doc, off = cursor(example("transformer_lm"), "stack(lay$0er")
    chain = [doc.text[s.start:s.end] for s in selection_ranges(doc, off)]
    assert chain[:-1] == ["layer", "stack(layer, 2)", "tok_embed >> stack(layer, 2)",
                          "let backbone = tok_embed >> stack(layer, 2)"]
    assert chain[-1] == doc.text


def test_selection_in_a_program_step():
    doc, off = cursor(example("transformer_lm"), "lm_head($0h)")
    chain = [doc.text[s.start:s.end] for s in selection_ranges(doc, off)]
    assert chain[:4] == ["h", "lm_head(h)", "observe next_token : Token <- lm_head(h)",
                         "program transformer_lm : Token -> Token\n    sample h <- backbone\n\n"
                         "    observe next_token : Token <- lm_head(h)\n    return next_token"]
