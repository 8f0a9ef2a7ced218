"""Editor features for sizes read from the data (`object Child : FinSet N`, issue 36):
hover on the object and on the size name, completion after `object X :`, the formatter,
semantic tokens, and the checker's diagnostics as the editor shows them."""
from ide_fixture import at

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.syntax.format import format_text

SRC = """object Child : FinSet N
object Coef : FinSet 3
object Feat : Real K [low=0.0]

program reg : Child -> Child
    data design : Child * Coef
    sample beta : Coef <- Normal(0.0, 1.0)
    sample sigma <- HalfNormal(1.0)
    let mu = design @ beta
    observe y : Child <- Normal(mu, sigma)
    return y
"""


def _hover(word: str, nth: int = 0) -> str:
    doc = Document(SRC)
    off = -1
    for _ in range(nth + 1):
        off = SRC.index(word, off + 1)
    h = hover(doc, off)
    return h.text if h else None


def test_the_program_checks_clean():
    assert [d.code for d in Document(SRC).diagnostics() if d.is_error] == []


def test_hover_shows_the_size_name():
    assert _hover("Child") == "```qvr\nChild : FinSet N\n```\nobject · size `N` read from the data"
    assert _hover("Child", 2) == _hover("Child")  # a use in a type
    assert _hover("Feat") == ("```qvr\nFeat : Real K [low=0.0]\n```\n"
                              "object · size `K` read from the data")
    assert _hover("N\n") == ("```qvr\nN : size\n```\nread from the data when it is bound\n\n"
                             "the data's `N` entry, else the leading size of the values typed by "
                             "the objects of size `N`")


def test_completion_after_an_object_colon_offers_sizes_from_the_data():
    doc, off = at("object A : $0\n")
    items = {i.label: i for i in complete(doc, off).items}
    assert items["FinSet N"].insert == "FinSet ${1:N}" and items["FinSet N"].snippet
    assert items["Real N"].insert == "Real ${1:N}"
    doc, off = at("object A : FinSet 2\nprogram p : A -> A\n    sample x : $0\n")
    assert "FinSet N" not in {i.label for i in complete(doc, off).items}


def test_the_formatter_prints_a_size_name_canonically_and_idempotently():
    src = "object  Child :FinSet    N\nobject V : Real  K[low=0.0]\n"
    out = format_text(src).text
    assert out == "object Child : FinSet N\nobject V : Real K [low=0.0]\n"
    assert format_text(out).text == out


def test_semantic_tokens_of_a_size_name():
    doc = Document(SRC)
    toks = [(SRC[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)
            if t.start < SRC.index("\n")]
    assert toks[-1] == ("N", "variable", ("readonly",))


def test_diagnostics_of_misplaced_and_clashing_size_names():
    doc = Document("object M : FinSet 2\nobject R : FinSet M\nobject S : FinSet N * M\n")
    got = [(d.code, d.message) for d in doc.diagnostics() if d.is_error]
    assert got == [
        ("QVR114", "`M` is an object (declared on line 1); a size read from the data needs a "
                   "name that is not an object's (e.g. `N_M`)"),
        ("QVR113", "`FinSet N` (a size read from the data) can only be an object's right-hand "
                   "side: declare `object Row : FinSet N` and use `Row` here")]
