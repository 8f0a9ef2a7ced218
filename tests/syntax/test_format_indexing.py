"""`qvr fmt` on ranges in indices, `append_row`/`append_col`, `let v : T = e` and `ode` from t0
(docs/extensions.md E9.11): one canonical spelling (`X[:, 1]`, `X[2, :]`, `y[a:b]`, no
spaces around a range's colon), comments kept, output formatted to itself."""
from qvr.syntax.format import _shape, format_text
from qvr.syntax.parser import parse_module

MESSY = """\
object Row : FinSet 4
object Coef : FinSet 3
object Comp : FinSet 2

program p : Row -> Row
    data X : Row * Coef
    data times : Row
    sample a <- Normal(0.0, 1.0)
    let c = X[ : , 1]   # a column
    let r = X[2,:]
    let b = X[1 : 3, 0]
    let d = X[: 2, 1 :]
    let e = X[n - 1 : n + 2, -1]
    let f = X[:,]
    let g = X[
        1:,   # rows from 1
        :,
    ]
    let h = append_row( X,X[0:1,:] )
    let k = logsumexp( [c, c], Comp )
    let lps:Comp=[c, c]
    record w : Comp*Row = softmax(lps, Comp)
    let y = ode((u,t)->-a*u, 2.0, 0.0, times)
    return a
"""

CANONICAL = """\
object Row : FinSet 4
object Coef : FinSet 3
object Comp : FinSet 2

program p : Row -> Row
    data X : Row * Coef
    data times : Row
    sample a <- Normal(0.0, 1.0)
    let c = X[:, 1]  # a column
    let r = X[2, :]
    let b = X[1:3, 0]
    let d = X[:2, 1:]
    let e = X[n - 1:n + 2, -1]
    let f = X[:]
    let g = X[
        1:,  # rows from 1
        :,
    ]
    let h = append_row(X, X[0:1, :])
    let k = logsumexp([c, c], Comp)
    let lps : Comp = [c, c]
    record w : Comp * Row = softmax(lps, Comp)
    let y = ode((u, t) -> -a * u, 2.0, 0.0, times)
    return a
"""


def test_canonical_output_and_idempotence():
    out = format_text(MESSY).text
    assert out == CANONICAL
    assert format_text(CANONICAL).text == CANONICAL
    assert not format_text(CANONICAL).changed


def test_meaning_is_kept():
    a, b = parse_module(MESSY), parse_module(CANONICAL)
    assert not a.diagnostics and not b.diagnostics
    assert [_shape(d) for d in a.decls] == [_shape(d) for d in b.decls]
