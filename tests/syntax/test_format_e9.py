"""`qvr fmt` on the statistics extension (docs/extensions.md E9): a module that uses every
new construct — `data` and `record` steps, `@`, list literals, lambdas of `fold`/`scan`/
`ode`, the new builtins, `Flat`/`HalfFlat`, `[lower=…, upper=…]`, constrained spaces —
is printed canonically, keeps every comment, and formats to itself."""
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from qvr.analysis import Document
from qvr.syntax.chunks import comments
from qvr.syntax.format import _shape, format_range, format_text
from qvr.syntax.parser import parse_module

ROOT = Path(__file__).resolve().parents[2]

MESSY = """\
# a module using every construct of E9
## The rows.
object Household : FinSet 20   # twenty
object Coef:FinSet 3
object Time : FinSet 50
object Means :  PositiveOrdered 2
object Row : Simplex  3
object Corr : CholeskyFactor 3
object Mu : Ordered 2

program regression : Household -> Household
    data X:Household*Coef   # the design matrix
    sample beta : Coef <- Flat
    sample scale<-HalfFlat
    sample means <- HalfFlat [ over=Means ]
    sample theta <- Flat [over = Row]
    sample sigma <- StudentT( 3.0, 0.0, 1.0 ) [lower=0.0,upper=scale]
    let mu = X@beta   # contraction
    #{ a block
       comment }#
    record total = sum( beta ,Coef ) + log_density( Normal(0.0, 1.0), mu )
    let path = scan(Household, 0.0, (s,t)->s + mu[t])
    let last = fold(Time, [0.0, 0.0], ( a , t ) -> logsumexp(a + 1.0))
    let sol = ode((y, t) -> -y, 1.0, [0.0, 1.0], 1e-6, 1e-6)
    let chol = cholesky(eye(Coef) + 0.1 * diag(beta)) @ beta
    let part = slice(mu, 1, 5)
    score extra = max(mu, 0.0) + min(mu, Household)
    observe y : Household <- Normal(mu, sigma) [ lower = 0.0 ]
    return y

export regression
"""

CANONICAL = """\
# a module using every construct of E9
## The rows.
object Household : FinSet 20  # twenty
object Coef : FinSet 3
object Time : FinSet 50
object Means : PositiveOrdered 2
object Row : Simplex 3
object Corr : CholeskyFactor 3
object Mu : Ordered 2

program regression : Household -> Household
    data X : Household * Coef  # the design matrix
    sample beta : Coef <- Flat
    sample scale <- HalfFlat
    sample means <- HalfFlat [over=Means]
    sample theta <- Flat [over=Row]
    sample sigma <- StudentT(3.0, 0.0, 1.0) [lower=0.0, upper=scale]
    let mu = X @ beta  # contraction
    #{ a block
       comment }#
    record total = sum(beta, Coef) + log_density(Normal(0.0, 1.0), mu)
    let path = scan(Household, 0.0, (s, t) -> s + mu[t])
    let last = fold(Time, [0.0, 0.0], (a, t) -> logsumexp(a + 1.0))
    let sol = ode((y, t) -> -y, 1.0, [0.0, 1.0], 1e-6, 1e-6)
    let chol = cholesky(eye(Coef) + 0.1 * diag(beta)) @ beta
    let part = slice(mu, 1, 5)
    score extra = max(mu, 0.0) + min(mu, Household)
    observe y : Household <- Normal(mu, sigma) [lower=0.0]
    return y

export regression
"""

# multi-line let-expressions with comments inside their brackets
MULTILINE = """\
object Time : FinSet 50
program forward : Time -> Time
    data y : Time
    let alpha = fold(Time, 0.0, (a, t) ->   # the forward pass
        logsumexp([a, y[t]]))  # end
    record r = [[1.0, 2.0],
                [3.0, 4.0]]  @ [alpha, alpha]
    return r
"""

MULTILINE_CANONICAL = """\
object Time : FinSet 50
program forward : Time -> Time
    data y : Time
    let alpha = fold(
        Time,
        0.0,
        (a, t) ->  # the forward pass
        logsumexp([a, y[t]]),
    )  # end
    record r = [
        [1.0, 2.0],
        [3.0, 4.0],
    ] @ [alpha, alpha]
    return r
"""


def comment_texts(text: str) -> Counter:
    return Counter(t if kind == "block" else t.rstrip() for _, t, kind in comments(text))


def shapes(text: str) -> list:
    """Every statement's AST without spans (what formatting must not change)."""
    module = parse_module(text)
    assert not [d for d in module.diagnostics if d.is_error], module.diagnostics
    return [_shape(parsed.decl) for _, _, parsed in module.chunks if parsed.decl is not None]


def test_every_new_construct_parses():
    kinds = {type(n).__name__ for n in _walk(parse_module(MESSY))}
    assert {"DataStep", "ELambda", "EList"} <= kinds
    assert "record total" in MESSY and " @ " in CANONICAL


def _walk(module):
    import dataclasses
    stack = [parsed.decl for _, _, parsed in module.chunks if parsed.decl is not None]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            stack.extend(node)
        elif dataclasses.is_dataclass(node):
            yield node
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node))


def test_canonical_output():
    result = format_text(MESSY)
    assert result.skipped == ()
    assert result.text == CANONICAL


def test_idempotent_and_canonical_text_unchanged():
    once = format_text(MESSY).text
    twice = format_text(once)
    assert twice.text == once and not twice.changed
    assert not format_text(CANONICAL).changed


def test_comments_are_kept():
    assert comment_texts(format_text(MESSY).text) == comment_texts(MESSY)
    assert comment_texts(format_text(MULTILINE).text) == comment_texts(MULTILINE)
    assert sum(comment_texts(MESSY).values()) == 6


def test_meaning_is_kept():
    assert shapes(format_text(MESSY).text) == shapes(MESSY)
    assert shapes(format_text(MULTILINE).text) == shapes(MULTILINE)
    # the same diagnostics (codes and messages) before and after, whatever the checker says today
    before = [(d.code, d.message) for d in Document(MESSY).diagnostics()]
    after = [(d.code, d.message) for d in Document(CANONICAL).diagnostics()]
    assert before == after


def test_multiline_let_expressions():
    out = format_text(MULTILINE)
    assert out.skipped == ()
    assert out.text == MULTILINE_CANONICAL
    assert format_text(out.text).text == out.text


def test_whitespace_variants_format_the_same():
    variants = [
        MESSY.replace(" <- ", "<-").replace(", ", ","),
        MESSY.replace("(s,t)->", "( s , t )  ->  ").replace("X@beta", "X  @  beta"),
        MESSY.replace("[lower=0.0,upper=scale]", "[ lower=0.0 , upper=scale , ]"),
    ]
    for text in variants:
        assert text != MESSY
        assert format_text(text).text == CANONICAL


def test_format_range_formats_one_step():
    start = MESSY.index("    let mu = X@beta")
    edits = format_range(MESSY, start, start + 10)
    assert len(edits) == 1
    out = MESSY[:edits[0].span.start] + edits[0].new_text + MESSY[edits[0].span.end:]
    # a range formats its whole statement: the program, not the objects before it
    assert out.startswith(MESSY[:MESSY.index("program")])
    assert "    let mu = X @ beta  # contraction\n" in out and "object Coef:FinSet 3" in out


def test_qvr_fmt_command(tmp_path):
    path = tmp_path / "e9.qvr"
    path.write_text(MESSY)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "qvr.cli", "fmt", *args], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)

    check = run("--check", str(path))
    assert check.returncode == 1 and f"would reformat {path}" in check.stdout
    done = run(str(path))
    assert done.returncode == 0, done.stderr
    assert path.read_text() == CANONICAL
    assert run("--check", str(path)).returncode == 0
