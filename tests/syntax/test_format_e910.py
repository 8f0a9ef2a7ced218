"""`qvr fmt` on E9.10 (docs/extensions.md): expression arguments of family targets,
comparisons, `and`/`or`/`not`, `where`, `step`: printed canonically (one space around
every binary operator, `-1.5` kept glued), comments kept, idempotent, and the printed
module parses to the same tree."""
from qvr.analysis import Document
from qvr.syntax import ast as A
from qvr.syntax.format import format_text
from qvr.syntax.parser import parse_module

MESSY = """\
object Person : FinSet 20
object Coef : FinSet 2

program earnings : Person -> Person
    data height : Person
    data age : Person
    sample beta : Coef <- Normal(0.0,1.0)
    sample sigma <- HalfNormal( 1.0 )
    let c = not height>0 and age<=2 or age!=1   # a 0/1 value
    let w = where(height>=0,height,0)+step(height)*int_step(age)
    observe earn : Person <- Normal(beta[0]+beta[1]*height*(age==2),sigma*(age<3) + 0.5)
    observe t : Person <- StudentT(3.0,where( age>1, height, - 1.5 ),- 2.5 + sigma)
    return earn
"""

CANONICAL = """\
object Person : FinSet 20
object Coef : FinSet 2

program earnings : Person -> Person
    data height : Person
    data age : Person
    sample beta : Coef <- Normal(0.0, 1.0)
    sample sigma <- HalfNormal(1.0)
    let c = not height > 0 and age <= 2 or age != 1  # a 0/1 value
    let w = where(height >= 0, height, 0) + step(height) * int_step(age)
    observe earn : Person <- Normal(beta[0] + beta[1] * height * (age == 2), sigma * (age < 3) + 0.5)
    observe t : Person <- StudentT(3.0, where(age > 1, height, -1.5), -2.5 + sigma)
    return earn
"""


def _strip_spans(x):
    """A tree without source positions (spans), for comparing two parses."""
    import dataclasses
    if isinstance(x, (tuple, list)):
        return tuple(_strip_spans(i) for i in x)
    if dataclasses.is_dataclass(x):
        return (type(x).__name__,) + tuple(
            (f.name, _strip_spans(getattr(x, f.name))) for f in dataclasses.fields(x)
            if f.name not in ("span", "op_span", "kw", "op", "header", "kw_span", "size_span")
            or (f.name == "op" and isinstance(getattr(x, f.name), str)))
    return x


def test_expression_arguments_and_comparisons_format_canonically():
    assert format_text(MESSY).text == CANONICAL
    assert format_text(CANONICAL).text == CANONICAL


def test_the_formatted_module_means_the_same():
    before, after = parse_module(MESSY), parse_module(CANONICAL)
    assert not before.diagnostics and not after.diagnostics
    assert _strip_spans(before.decls) == _strip_spans(after.decls)
    prog = after.decls[-1]
    loc = prog.body[6].target.args[0]
    assert isinstance(loc, A.EBinOp) and loc.op == "+"
    assert prog.body[7].target.args[2].op == "+"  # `- 2.5 + sigma` is (-2.5) + sigma
    assert [d.code for d in Document(CANONICAL).diagnostics()] == ["QVR713", "QVR713"]  # c, w unused
