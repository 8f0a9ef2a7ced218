"""E9.2 supports in the checker: improper priors, truncation, constrained spaces, host data
as family arguments (docs/e9/supports.md).  Every diagnostic of QVR426-QVR428 also has a
golden case in tests/sema/cases; here: exact messages by construct, programs that must
check clean, and hover."""
from __future__ import annotations

import pytest

from qvr.analysis import Document
from qvr.ide.hover import hover

HEAD = """object Row : FinSet 10
object K : FinSet 3
object Mu : Ordered 2
object Pm : PositiveOrdered 2
object S : Simplex 3
object L : CholeskyFactor 3
"""


def diags(body: str, head: str = HEAD):
    text = head + "program p : Row -> Row\n" + "".join(f"    {line}\n" for line in body.splitlines())
    doc = Document(text, "t.qvr")
    return [(d.code, doc.text[d.span.start:d.span.end], d.message) for d in doc.diagnostics()]


def test_the_supports_check_clean():
    body = """sample a <- Flat
sample b : K <- HalfFlat
sample t1 <- StudentT(3.0, 0.0, 2.5) [lower=0.0]
sample t2 <- Cauchy(0.0, 2.5) [lower=0.0]
let room = 1.0 - t2
sample t3 <- Flat [lower=0.0, upper=room]
sample t4 <- Uniform(0.0, room)
sample m1 <- Normal(0.0, 5.0) [over=Mu]
sample m2 <- HalfFlat [over=Pm]
sample m3 <- Gamma(2.0, 1.0) [over=Pm]
sample s1 <- Flat [over=S]
sample s2 <- Dirichlet(1.0) [over=S]
sample l1 <- LKJCholesky(2.0) [over=L]
sample l2 <- Flat [over=L]
sample h <- Normal(0.0, prior_scale) [lower=lo_bound]
observe y : Row <- Normal(a, t1) [lower=-3.0, upper=3.0]
return a"""
    assert diags(body) == []


@pytest.mark.parametrize("body, expected", [
    ("sample a <- Flat(1.0)\nreturn a",
     ("QVR426", "Flat", "`Flat` takes no arguments: write `sample x <- Flat`")),
    ("sample a <- Normal(0.0, 1.0)\nobserve y : Row <- HalfFlat\nreturn a",
     ("QVR426", "HalfFlat", "`HalfFlat` is an improper prior (a flat density with no "
      "normalising constant): only a `sample` step can draw from it, not an `observe` step")),
    ("sample a <- Normal(0.0, 1.0)\nmarginalize z <- Flat\n    observe y : Row <- Normal(a, 1.0)\n"
     "return a",
     ("QVR426", "Flat", "`Flat` is an improper prior (a flat density with no normalising "
      "constant): only a `sample` step can draw from it, not a `marginalize` step")),
    ("sample a <- Poisson(2.0) [lower=1.0]\nreturn a",
     ("QVR427", "lower", "truncation `[lower=…, upper=…]` needs a continuous family, but "
      "`Poisson` is discrete")),
    ("sample a <- Normal(0.0, 1.0) [lower=1.0, upper=1.0]\nreturn a",
     ("QVR427", "upper", "the truncation is empty: `lower=1.0` is not below `upper=1.0`")),
    ("sample a <- Beta(2.0, 2.0) [lower=1.5]\nreturn a",
     ("QVR427", "lower", "the truncation is empty: `Beta` draws unit interval (0, 1), none of "
      "them above `lower=1.5`")),
    ("sample a <- Uniform(0.0, 1.0) [over=Mu]\nreturn a",
     ("QVR428", "Uniform", "`Mu` is a space of ordered vectors of length 2 (Ordered 2): draw "
      "it from a family on the real line (`Flat`, `Normal`, …), got `Uniform` (interval "
      "[low, high])")),
    ("sample a <- Flat [over=Pm]\nreturn a",
     ("QVR428", "Flat", "`Pm` is a space of positive ordered vectors of length 2 "
      "(PositiveOrdered 2): draw it from a family on the positive reals (`HalfFlat`, "
      "`Gamma`, …), got `Flat` (real line (improper flat prior))")),
    ("sample a <- HalfFlat [over=S]\nreturn a",
     ("QVR428", "HalfFlat", "`S` is a space of probability vectors of length 3 (Simplex 3): "
      "draw it from `Flat` or `Dirichlet`, got `HalfFlat`")),
    ("sample a <- Normal(0.0, 1.0) [over=[K, Mu]]\nreturn a",
     ("QVR428", "Mu", "`Mu` is a constrained space: it must be the only object of `over`")),
])
def test_each_diagnostic_has_its_message(body, expected):
    assert diags(body) == [expected]


def test_space_in_a_program_header_is_qvr428():
    doc = Document(HEAD + "program q : Mu -> Row\n    sample a <- Flat\n    return a\n", "t.qvr")
    assert [(d.code, d.message) for d in doc.diagnostics()] == [
        ("QVR428", "`Mu` is a constrained space (Ordered 2): it names the values of a sample "
                   "step (`[over=Mu]`), not a program's domain")]


def test_other_section_15_spaces_stay_outside_the_core():
    for name in ("Sphere", "Ball", "Covariance", "Correlation", "Orthogonal", "Stiefel",
                 "LowerTriangular", "Diagonal"):
        doc = Document(f"object X : {name} 3\n", "t.qvr")
        assert [(d.code, d.message) for d in doc.diagnostics()] == [
            ("QVR900", f"the object constructor `{name}` is outside the supported core")]
    # in a morphism signature a constructor is still a syntax error mapped to QVR900
    doc = Document("object K : FinSet 2\nmorphism f : Simplex 3 -> K [role=kernel]\n", "t.qvr")
    assert [d.code for d in doc.diagnostics()] == ["QVR900"]


def test_a_space_of_size_zero_is_qvr205():
    doc = Document("object X : Simplex 0\n", "t.qvr")
    assert [(d.code, d.message) for d in doc.diagnostics()] == [
        ("QVR205", "`Simplex` size must be at least 1, got 0")]


def test_host_data_arguments_get_the_let_expression_warnings():
    body = """sample sigma <- HalfNormal(1.0)
sample a <- Normal(0.0, sigm)
sample b <- Normal(0.0, 1.0) [upper=later]
let later = 1.0
return sigma"""
    assert diags(body) == [
        ("QVR701", "sigm", "`sigm` is not bound in this program and will be read from host "
                           "data; did you mean `sigma`?"),
        # a name bound elsewhere in the program is not host data: its error stays
        ("QVR106", "later", "unbound variable `later`: it is bound later in this program "
                            "(line 11)"),
        ("QVR713", "later", "`later` is bound but never used"),
    ]
    # a name of a top-level declaration is not a value (QVR702)
    assert [c for c, _, _ in diags("sample a <- Normal(0.0, K)\nreturn a")] == ["QVR702"]


def _hover(text: str, needle: str, nth: int = 0):
    doc = Document(text, "t.qvr")
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    return hover(doc, at).text


def test_hover_on_a_space_object_shows_its_space():
    text = HEAD + "program p : Row -> Row\n    sample m <- HalfFlat [over=Pm]\n    return m\n"
    assert _hover(text, "Pm") == ("```qvr\nPm : PositiveOrdered 2\n```\n"
                                  "object · positive ordered vectors of length 2")
    assert _hover(text, "Pm]") == _hover(text, "Pm")
    assert _hover(text, "L :") == ("```qvr\nL : CholeskyFactor 3\n```\n"
                                   "object · Cholesky factors of 3×3 correlation matrices")
    assert _hover(text, "S :") == ("```qvr\nS : Simplex 3\n```\nobject · probability vectors "
                                   "of length 3")
    # the drawn local is typed by its space
    assert _hover(text, "m <-") == "```qvr\nm : Pm\n```\nsample step · line 8"


def test_hover_on_flat_and_on_host_data_arguments():
    text = HEAD + ("program p : Row -> Row\n    sample a <- Flat\n"
                   "    sample b <- Normal(0.0, prior_scale)\n    return a\n")
    assert _hover(text, "Flat") == ("```qvr\nFlat\n```\nfamily · support Real · continuous\n\n"
                                    "real line (improper flat prior); event rank 0; no "
                                    "parameters")
    assert "host data" in _hover(text, "prior_scale")
