"""Semantic tokens: classification by the checker's facts, never across a line break."""
from ide_fixture import example

from qvr.analysis import Document
from qvr.ide.semantic_tokens import TOKEN_MODIFIERS, TOKEN_TYPES, semantic_tokens
from qvr.text import Span

SRC = """\
## Docs 😋
object K : FinSet 2  # note
morphism f : K -> K [role=latent]
program p : K -> K
    sample a <- Normal(0.0, 1.0)
    let b = exp(a) * host
    return b
#{ a block
   comment }#
"""


def render(doc, toks):
    return [f"{doc.text[t.start:t.end]}:{t.type}{'+' + '+'.join(t.modifiers) if t.modifiers else ''}" for t in toks]


def test_classification():
    doc = Document(SRC)
    assert render(doc, semantic_tokens(doc)) == [
        "## Docs 😋:comment+documentation",
        "object:keyword", "K:type+declaration", "FinSet:keyword", "2:number", "# note:comment",
        "morphism:keyword", "f:function+declaration", "K:type", "->:operator", "K:type", "role:property",
        "=:operator", "latent:enumMember",
        "program:keyword", "p:function+declaration", "K:type", "->:operator", "K:type",
        "sample:keyword", "a:variable+declaration", "<-:operator", "Normal:class+defaultLibrary", "0.0:number",
        "1.0:number",
        "let:keyword", "b:variable+declaration", "=:operator", "exp:function+defaultLibrary", "a:variable",
        "*:operator", "host:variable+readonly",
        "return:keyword", "b:variable",
        "#{ a block:comment", "   comment }#:comment",
    ]


def test_tokens_are_sorted_single_line_and_in_the_legend():
    doc = Document(example("pcfg_deduction"))
    toks = semantic_tokens(doc)
    assert all(a.start < b.start for a, b in zip(toks, toks[1:]))
    assert all("\n" not in doc.text[t.start:t.end] for t in toks)
    assert {t.type for t in toks} <= set(TOKEN_TYPES)
    assert {m for t in toks for m in t.modifiers} <= set(TOKEN_MODIFIERS)
    kinds = {doc.text[t.start:t.end]: t.type for t in toks}
    assert kinds["Lam"] == "macro" and kinds["span"] == "enumMember" and kinds["atoms"] == "keyword"
    assert kinds["Grammar"] == "namespace" and kinds["semiring"] == "property"


def test_range_request_returns_only_overlapping_tokens():
    doc = Document(SRC)
    line = doc.text.index("    let b")
    toks = semantic_tokens(doc, Span(line, line + len("    let b")))
    assert render(doc, toks) == ["let:keyword", "b:variable+declaration"]
