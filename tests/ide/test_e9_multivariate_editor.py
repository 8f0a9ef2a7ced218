"""Editor features for the multivariate families of E9.9 (docs/extensions.md): hover on a
`CorrCholesky` object, on an `LKJCholesky` draw and a `MultivariateNormal` step, completion
of the families the runtime builds (and not the ones it refuses with QVR950), the
`CorrCholesky` constructor after `object X :`, semantic tokens and diagnostics."""
from ide_fixture import at

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens

SRC = """object Group : FinSet 20
object Coef : FinSet 2
object L : CorrCholesky 2
program hier : Group -> Group
    sample l <- LKJCholesky(2.0) [over=L]
    sample tau : Coef <- HalfNormal(1.0)
    let scale = diag(tau) @ l
    sample b : Group <- MultivariateNormal(0.0, scale) [over=Coef]
    return b
"""


def hover_text(needle: str) -> str:
    doc, off = at(SRC.replace(needle.replace("$0", ""), needle, 1))
    return hover(doc, off).text


def h(sig, facts="", doc=""):
    return f"```qvr\n{sig}\n```" + (f"\n{facts}" if facts else "") + (f"\n\n{doc}" if doc else "")


def test_the_program_checks_clean():
    assert Document(SRC).diagnostics() == []


def test_hover_on_a_corr_cholesky_object_and_its_draw():
    want = h("L : CorrCholesky 2", "object · Cholesky factors of 2×2 correlation matrices")
    assert hover_text("object $0L") == want
    assert hover_text("[over=$0L") == want
    assert hover_text("sample $0l") == h("l : L", "sample step · line 5")


def test_hover_on_a_multivariate_normal_step():
    assert hover_text("sample $0b") == h("b : [Group] Vector", "sample step · plate over Group · line 8")
    assert hover_text("Multivariate$0Normal") == h(
        "MultivariateNormal(loc, scale_tril)",
        "family · support Vector · continuous · not supported by this runtime as a kernel",
        "real vectors; event rank 1; loc: real, scale_tril: mat")
    # the scale matrix: diag(tau) @ l has the axes (Coef, the factor's columns)
    assert hover_text("let $0scale") == h("scale : Coef * FinSet 2", "let step · line 7")


def test_hover_on_lkj_cholesky_says_where_it_runs():
    assert hover_text("LKJ$0Cholesky") == h(
        "LKJCholesky(concentration)",
        "family · support CorrCholesky · continuous · not supported by this runtime as a kernel"
        " · a sample step with `over=` a `CorrCholesky K` object",
        "Cholesky factors of correlation matrices; event rank 2; concentration: pos")


def labels(src):
    doc, off = at(src)
    return [i.label for i in complete(doc, off).items]


def test_completion_offers_the_families_the_runtime_builds():
    got = labels(SRC.replace("MultivariateNormal(0.0, scale)", "Multi$0", 1))
    assert "MultivariateNormal" in got and "MultivariateNormalCov" in got
    got = labels(SRC.replace("MultivariateNormal(0.0, scale)", "$0", 1))
    assert {"MultivariateNormal", "MultivariateNormalCov", "LowRankMVN", "LKJCholesky",
            "StudentT"} <= set(got)
    assert not {"Wishart", "InverseWishart", "GP", "Horseshoe", "MatrixNormal"} & set(got)
    doc, off = at(SRC.replace("MultivariateNormal(0.0, scale)", "$0", 1))
    item = {i.label: i for i in complete(doc, off).items}["MultivariateNormalCov"]
    assert item.insert == "MultivariateNormalCov(${1:loc}, ${2:covariance_matrix})"


def test_completion_offers_the_corr_cholesky_constructor():
    doc, off = at("object Coef : FinSet 2\nobject L : $0")
    got = {i.label: i for i in complete(doc, off).items}
    assert got["CorrCholesky"].insert == "CorrCholesky ${1:3}"
    assert got["CorrCholesky"].doc == "Cholesky factors of n×n correlation matrices"


def test_semantic_token_of_the_constructor():
    doc = Document(SRC)
    start = SRC.index("CorrCholesky")
    toks = [t for t in semantic_tokens(doc) if t.start == start]
    assert [t.type for t in toks] == ["keyword"]


def test_diagnostics_of_a_refused_family_in_the_editor():
    src = SRC.replace("MultivariateNormal(0.0, scale)", "Wishart(3.0, scale)").replace(
        "[over=Coef]", "[over=[Coef, Coef]]")
    diags = Document(src).diagnostics()
    assert [(d.code, d.message) for d in diags] == [
        ("QVR950", "family `Wishart` is not supported by this runtime")]
    assert src[diags[0].span.start:diags[0].span.end] == "Wishart"
