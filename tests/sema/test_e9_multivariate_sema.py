"""E9.9 in the checker: the axes of multivariate steps and of `diag_pre_multiply`, and its
diagnostics (QVR421, QVR422) with exact messages and anchors."""
from qvr.analysis import Document

HEAD = """object Group : FinSet 8
object Coef : FinSet 2
object Other : FinSet 3
object L : CorrCholesky 2
program hier : Group -> Group
    sample l <- LKJCholesky(2.0) [over=L]
    sample tau : Coef <- HalfNormal(1.0)
    sample t3 : Other <- HalfNormal(1.0)
    sample z : Group * Coef <- Normal(0.0, 1.0)
"""


def diags(body: str):
    src = HEAD + body + "    return l\n"
    doc = Document(src)
    return [(d.code, src[d.span.start:d.span.end], d.message) for d in doc.diagnostics()
            if d.code != "QVR713"]


def test_non_centred_forms_check_clean():
    assert diags("    let s = diag_pre_multiply(tau, l)\n    let e = z @ transpose(s)\n"
                 "    let s2 = diag(tau) @ l\n    let e2 = z @ transpose(s2)\n"
                 "    sample b : Group <- MultivariateNormal(0.0, s) [over=Coef]\n") == []


def test_diag_pre_multiply_axes_must_agree():
    assert diags("    let bad = diag_pre_multiply(t3, l)\n") == [
        ("QVR421", "diag_pre_multiply",
         "`diag_pre_multiply(t3, l)` contracts `Other` (size 3) of `t3` with an axis of size 2 "
         "of `l`")]
    assert diags("    let bad = diag_pre_multiply(l, tau)\n") == [
        ("QVR422", "tau", "`diag_pre_multiply` needs a matrix, but `tau` has axes `Coef`")]


def test_the_axes_of_a_factor_over_a_space():
    src = HEAD + "    let s = diag_pre_multiply(tau, l)\n    return l\n"
    doc = Document(src)
    at = src.index("let s") + 4
    from qvr.ide.hover import hover
    assert hover(doc, at).text.splitlines()[1] == "s : Coef * FinSet 2"
