"""E9.10 in the checker: any let-expression as a family argument (checked exactly as
`let tmp = <expr>` then `F(tmp, …)`: names, kinds, axes, diagnostics at the argument),
`a[z]` as the grouped block's bracketed argument or an ordinary index, comparisons,
`and`/`or`/`not`, `where`, `step`, `int_step` (types, axes, arity) and the new codes
QVR431 (an expression given to a morphism or program target) and QVR432 (chained
comparisons), with exact messages."""
import pytest

from qvr.analysis import Document
from qvr.sema.families import BUILTINS
from qvr.syntax import ast as A

HEAD = """object Person : FinSet 40
object Coef : FinSet 3
object Region : FinSet 4
"""


def program(body: str) -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return HEAD + f"\nprogram p : Person -> Person\n{lines}\n"


def diags(body: str):
    doc = Document(program(body))
    return [(d.code, d.message) for d in doc.diagnostics() if d.code != "QVR713"]


def local_types(body: str) -> dict:
    doc = Document(program(body))
    out = {}
    for slot in doc.state.slots:
        for f in (slot.result.facts if slot.result else ()):
            if f.kind == "local":
                out[f.data.name] = f.data.type_text
    return out


PRELUDE = """
data X : Person * Coef
data height : Person
data age : Person
sample beta : Coef <- Normal(0.0, 1.0)
sample sigma <- HalfNormal(1.0)
"""


@pytest.mark.parametrize("arg", [
    "beta[0] + beta[1] * height",
    "X @ beta",
    "exp(X @ beta) / (1.0 + sum(beta))",
    "where(height > 0, height, 0)",
    "beta[0] * (age == 2) + step(height - 1.0)",
    "not age > 2 and height <= 1 or int_step(age)",
])
def test_an_expression_argument_types_the_site_as_its_let_does(arg):
    """The value of `observe y <- Normal(<arg>, sigma)` has the type and axes of the one
    written `let m = <arg>` then `Normal(m, sigma)`; no diagnostics either way."""
    inline = PRELUDE + f"observe y : Person <- Normal({arg}, sigma)\nreturn y"
    via_let = PRELUDE + f"let m = {arg}\nobserve y : Person <- Normal(m, sigma)\nreturn y"
    assert diags(inline) == [] and diags(via_let) == []
    assert local_types(inline)["y"] == local_types(via_let)["y"] == "[Person] Real"
    probe = "\nlet t = w + 0.0\nreturn t"  # the axes of w (a let's hover text)
    unplated = PRELUDE + f"sample w <- Normal({arg}, sigma)" + probe
    unplated_let = PRELUDE + f"let m = {arg}\nsample w <- Normal(m, sigma)" + probe
    assert diags(unplated) == [] and diags(unplated_let) == []
    assert local_types(unplated)["t"] == local_types(unplated_let)["t"]


def test_axes_of_expression_arguments_reach_the_site():
    types = local_types(PRELUDE + """
sample w <- Normal(X @ beta, sigma)
sample v <- Normal(beta * 2.0, 1.0)
sample c <- Normal(where(height > 0, height, 0), 1.0)
let tw = w + 0.0
let tv = v + 0.0
let tc = c + 0.0
return w""")
    assert (types["tw"], types["tv"], types["tc"]) == ("Person", "Coef", "Person")


def test_the_parser_keeps_numbers_names_and_brackets_and_gives_expressions():
    doc = Document(program(PRELUDE + "observe y : Person <- Normal(beta[0] + 1, -2.5)\n"
                                     "sample z <- Normal(beta[k], sigma)\nreturn y"))
    steps = doc.state.slots[-1].parsed.decl.body
    loc, scale = steps[5].target.args
    assert isinstance(loc, A.EBinOp) and loc.op == "+" and isinstance(loc.left, A.EIndex)
    assert isinstance(scale, A.Number) and scale.value == -2.5 and scale.text == "-2.5"
    idx, name = steps[6].target.args
    assert isinstance(idx, A.DAIndex) and (idx.base.text, idx.index.text) == ("beta", "k")
    assert isinstance(idx.expr, A.EIndex) and isinstance(name, A.Name)


def test_bad_arguments_get_the_diagnostics_of_a_let_at_the_argument():
    assert diags(PRELUDE + "observe y : Person <- Normal(bta[0] + height, sigma)\nreturn y") == [
        ("QVR714", "`beta` is never used, but `bta` is read from host data; is one of them misspelled?"),
        ("QVR701", "`bta` is not bound in this program and will be read from host data; "
                   "did you mean `beta`?")]
    assert diags(PRELUDE + "observe y : Person <- Normal(foo(height), sigma)\nreturn y") == [
        ("QVR109", "unknown function `foo`; did you mean `floor`?")]
    got = diags(PRELUDE + "data Z : Region * Region\nobserve y : Person <- Normal(X @ Z, sigma)\nreturn y")
    assert got == [("QVR421", "`X @ Z` contracts `Coef` (size 3) of `X` with `Region` (size 4) of `Z`")]


def test_a_deduction_is_not_a_family_argument():
    src = ("object S : FinSet 2\ndeduction D : S -> S\n    atoms A\n    rule r : A |- A\n\n"
           "program p : S -> S\n    sample x <- Normal(D + 1.0, 1.0)\n    return x\n")
    got = [(d.code, d.message) for d in Document(src).diagnostics()]
    assert ("QVR420", "arithmetic needs numeric operands, got a deduction") in got


def test_bracket_argument_in_a_grouped_block_and_ordinary_indices():
    grouped = """
object Customer : FinSet 30
object Segment : FinSet 4
object Purchase : FinSet 500
program segments : Purchase -> Purchase
    sample share <- Dirichlet(2.0) [over=Segment]
    sample loc : Segment <- Normal(3.0, 1.0)
    marginalize seg : Segment <- Categorical(share) [over=Customer]
        observe amount : Purchase <- LogNormal(loc[seg], 0.5) [via=buyer_of]
        observe other : Purchase <- LogNormal(loc[0] + loc[region_of], 0.5) [via=buyer_of]
    return share
"""
    assert [d.code for d in Document(grouped).diagnostics()] == []
    # outside a grouped block `a[k]` is an index (7.5's QVR411 no longer applies)
    assert diags(PRELUDE + "sample k <- Normal(0.0, 1.0)\nobserve y : Person <- Normal(beta[k], sigma)\n"
                           "return y") == []


def test_morphism_and_program_targets_refuse_expressions():
    src = """object Vec : Real 4
object Row : FinSet 10
morphism refine : Vec -> Vec [role=kernel] ~ Normal

program shifted(centre : Real) : Row -> Row
    sample z <- Normal(centre, 1.0)
    return z

program p : Vec -> Vec
    sample h <- refine
    sample out <- refine(h * 2.0)
    sample s <- shifted(1.0 + 2.0)
    return out
"""
    got = [(d.code, d.message) for d in Document(src).diagnostics()]
    assert got == [
        ("QVR431", "an argument of morphism `refine` must be a program variable; bind the "
                   "expression with `let` first (`let v = …`, then `refine(v)`)"),
        ("QVR431", "an argument of program `shifted` must be a program variable; bind the "
                   "expression with `let` first (`let v = …`, then `shifted(v)`)")]


# ---------------------------------------------------------------- comparisons, where, step

def test_comparisons_and_boolean_operators_broadcast_like_arithmetic():
    types = local_types(PRELUDE + """
let a = age == 2
let b = not height > 0
let c = (age >= 1) and (height < 2.0) or age != 3
let d = beta * (beta > 0)
let e = where(X > 0, X, 0.0)
let f = step(height) + int_step(age)
return a""")
    assert (types["a"], types["b"], types["c"], types["d"], types["e"], types["f"]) == \
        ("Person", "Person", "Person", "Coef", "Person * Coef", "Person")


def test_chained_comparisons_are_refused_and_parentheses_allow_them():
    assert diags(PRELUDE + "let a = 0 < height < 1\nreturn a") == [
        ("QVR432", "comparisons do not chain: `0 < height < 1` compares a 0/1 value; write "
                   "`(a < b) and (b < c)`, or add parentheses to compare the 0/1 value on purpose")]
    assert diags(PRELUDE + "let a = (0 < height) < 1\nlet b = 0 < height and height < 1\nreturn a") == []


def test_where_step_int_step_arity_and_kinds():
    assert diags(PRELUDE + "let a = where(height > 0, height)\nlet b = step(height, 1)\n"
                           "let c = int_step()\nreturn a") == [
        ("QVR416", "`where` expects 3 arguments, got 2"),
        ("QVR416", "`step` expects 1 argument, got 2"),
        ("QVR416", "`int_step` expects 1 argument, got 0")]
    assert {"where", "step", "int_step"} <= set(BUILTINS)
    assert BUILTINS["where"].signature == "where(c, a, b)"


def test_precedence_comparison_below_sum_not_above_and_above_or():
    doc = Document(program(PRELUDE + "let a = not x + 1 > y and u or v\nreturn a"))
    rhs = doc.state.slots[-1].parsed.decl.body[5].rhs
    assert rhs.op == "or" and rhs.left.op == "and"
    neg = rhs.left.left
    assert isinstance(neg, A.ENot) and neg.operand.op == ">" and neg.operand.left.op == "+"


def test_an_argument_expression_in_a_per_row_block_is_checked_as_a_let():
    src = """object Component : FinSet 3
object Point : FinSet 80

program p : Point -> Point
    sample weights <- Dirichlet(1.0) [over=Component]
    sample centres : Component <- Normal(0.0, 10.0)
    marginalize comp : Point <- Categorical(weights)
        observe x : Point <- Normal(centres[comp] + sum(comp * 1.0), 1.0)
        observe y : Point <- Normal(centres[comp] * 2.0, 1.0)
    return centres
"""
    got = [(d.code, src[d.span.start:d.span.end]) for d in Document(src).diagnostics()]
    assert got == [("QVR320", "sum(comp * 1.0)")]


def test_a_deduction_compared_or_negated_is_refused_with_the_operator_named():
    src = ("object S : FinSet 2\ndeduction D : S -> S\n    atoms A\n    rule r : A |- A\n\n"
           "program p : S -> S\n    let a = D > 1.0\n    let b = not D\n    let c = D and 1.0\n"
           "    sample x <- Normal(a + b + c, 1.0)\n    return x\n")
    got = [(d.code, d.message) for d in Document(src).diagnostics()]
    assert got == [("QVR420", "a comparison needs numeric operands, got a deduction"),
                   ("QVR420", "`not` needs numeric operands, got a deduction"),
                   ("QVR420", "`and` needs numeric operands, got a deduction")]
