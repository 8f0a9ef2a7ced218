"""Issue 36, point 7 in the checker (docs/extensions.md E9.11): the axes and hover of ranges
in indices, list literals reduced over an object, `append_row`/`append_col` and the t0 form
of `ode`, and each diagnostic with its exact message and range (the golden cases
`tests/sema/cases/QVR4{15,20,22,25,35}_*` hold one each)."""
import pytest

from qvr.analysis import Document
from qvr.ide.hover import hover
from qvr.sema.axes import Axis
from qvr.sema.axes_calls import ode_arguments
from qvr.sema.axes_walk import ExprAxes
from qvr.syntax.chunks import split
from qvr.syntax.parser import parse_chunk

HEAD = """object Row : FinSet 6
object Coef : FinSet 3
object Comp : FinSet 2
"""


def program(body: str) -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return HEAD + f"\nprogram p : Row -> Row\n{lines}\n"


def diags(body: str):
    doc = Document(program(body))
    out = []
    for d in doc.diagnostics():
        if d.code != "QVR713":
            out.append((d.code, doc.text[d.span.start:d.span.end], d.message))
    return out


def local_types(body: str) -> dict:
    doc = Document(program(body))
    return {f.data.name: f.data.type_text for slot in doc.state.slots
            for f in (slot.result.facts if slot.result else ()) if f.kind == "local"}


BODY = """
data X : Row * Coef
data v : Coef
data times : Row
sample a <- Normal(0.0, 1.0)
let col = X[:, 1]
let row = X[2, :]
let block = X[1:3, 0]
let corner = X[:2, 1:]
let whole = X[:, :]
let tail = v[-2:]
let open = X[lo:, 0]
let rows = append_row(X, X[1:3, :])
let cols = append_col(X, X[:, :1])
let front = append_row(a, v)
let lik = logsumexp([v, v], Comp)
let resp = softmax(([col, col]), Comp)
let path = ode((u, t) -> -a * u, 2.0, 0.0, times)
let path2 = ode((u, t) -> -a * u, 2.0, 0.0, times, 1e-8, 1e-8)
let path3 = ode((u, t) -> -a * u, 2.0, times, 1e-8)
"""


def test_every_new_form_checks_clean():
    assert diags(BODY + "return a\n") == []


def test_the_axes_of_ranges_appends_and_named_lists():
    types = local_types(BODY + "return a\n")
    assert {k: types[k] for k in ("col", "row", "block", "corner", "whole", "tail", "rows",
                                  "cols", "front", "lik", "resp", "path", "path2", "path3")} == {
        "col": "Row", "row": "Coef", "block": "FinSet 2", "corner": "FinSet 2 * FinSet 2",
        "whole": "Row * Coef", "tail": "FinSet 2", "rows": "FinSet 8 * Coef",
        "cols": "Row * FinSet 4", "front": "FinSet 4", "lik": "Coef", "resp": "Comp * Row",
        "path": "Row", "path2": "Row", "path3": "Row"}
    assert types["open"] == "?"  # a bound read from data: the length is not known (as `slice`)


def test_hover_shows_the_axes_of_a_sliced_local():
    text = program(BODY + "return a\n")
    off = text.index("let col") + 4
    assert hover(Document(text), off).text == "```qvr\ncol : Row\n```\nlet step · line 10"


def test_the_walk_gives_integer_index_axes_first():
    # `M[i, :]` with an index vector i over Coef: its axis first, then the kept axis
    text = "program q : A -> A\n    let r = M[i, :] + M[:, 0]\n    return r\n"
    rhs = parse_chunk(split(text)[0][0][1]).decl.body[0].rhs

    class Scope:
        def name_axes(self, t):
            return {"M": (Axis("Row", 6), Axis(None, 6)), "i": (Axis("Coef", 3),)}.get(t)

        def is_local(self, t):
            return t in ("M", "i")

        def object_type(self, t):
            return None

    w = ExprAxes(Scope())
    w.expr(rhs)
    assert w.of(rhs.left) == (Axis("Coef", 3), Axis(None, 6))
    assert w.of(rhs.right) == (Axis("Row", 6),)


@pytest.mark.parametrize("n, t0", [(3, False), (4, False), (5, False), (4, True), (5, True),
                                   (6, True)])
def test_ode_arguments_pick_the_form_by_the_fourth_argument(n, t0):
    args = {3: "f, y0, times", 4: "f, y0, t0, times" if t0 else "f, y0, times, 1e-6",
            5: "f, y0, t0, times, 1e-6" if t0 else "f, y0, times, 1e-6, (1e-6)",
            6: "f, y0, t0, times, 1e-6, 1e-6"}[n]
    text = f"program q : A -> A\n    let r = ode({args})\n    return r\n"
    call = parse_chunk(split(text)[0][0][1]).decl.body[0].rhs
    got_t0, times, rtol, atol = ode_arguments(call.args)
    assert (got_t0 is not None) == t0
    assert times.name.text == "times"
    assert (rtol is not None) == (n - t0 >= 4) and (atol is not None) == (n - t0 >= 5)


CASES = [
    ("let b = append_row(v, X)",
     ("QVR435", "X", "`append_row(v, X)` joins values with the same number of axes: `v` has axes "
                     "`Coef` but `X` has axes `Row * Coef`")),
    ("let b = append_col(X, X[1:, :])",
     ("QVR435", "X[1:, :]", "`append_col(X, X[1:, :])` joins values with the same axes apart from "
                            "the joined one: `X` has axes `Row * Coef` but `X[1:, :]` has axes "
                            "`FinSet 5 * Coef`")),
    ("let b = append_row(X, 1.0)",
     ("QVR435", "X", "`append_row(X, 1.0)`: a scalar (`1.0`) is appended only to a vector, but "
                     "this operand has axes `Row * Coef`")),
    ("let b = append_col(1.0, a)",
     ("QVR435", "append_col", "`append_col(1.0, a)` needs a vector or a matrix: both operands are "
                              "scalars")),
    ("let b = append_row(v)", ("QVR416", "append_row", "`append_row` expects 2 arguments, got 1")),
    ("let b = X[:, 0:a]",
     ("QVR420", "a", "the bounds of a range in an index must be integer literals or data (fixed "
                     "when the program runs), got `a`")),
    ("let b = X[1.5:, :]", ("QVR415", "1.5", "an index must be an integer")),
    ("let b = X[:, :, 0]", ("QVR415", "X", "`X` has 2 axes but is indexed with 3 indices")),
    ("let b = X[6, :]", ("QVR415", "6", "index 6 is out of range for an axis of size 6")),
    ("let b = X[:, -1]", ("QVR415", "-1", "index -1 is out of range for an axis of size 3")),
    ("let b = logsumexp([a, a, a], Comp)",
     ("QVR422", "Comp", "`logsumexp([a, a, a], Comp)`: `Comp` is not an axis of `[a, a, a]`: a "
                        "list literal's axis takes the name of the object it is reduced over only "
                        "when their sizes agree, but the list has 3 items and `Comp` has 2 "
                        "elements")),
    ("let b = ode((u, t) -> u, 1.0, times, times)",
     ("QVR425", "times", "the initial time of `ode(f, y0, t0, times)` must be a number, but "
                         "`times` has axes `Row` (a fourth argument that is not a number literal "
                         "makes the third the initial time)")),
    ("let b = ode((u, t) -> u, 1.0, 0.0, times, 1e-6, 1e-6, 1e-6)",
     ("QVR425", "ode", "`ode` expects 3 to 6 arguments (f, y0, t0?, times, rtol?, atol?), got 7")),
    ("let b = ode((u, t) -> u, 1.0, times, 1e-6, 1e-6, 1e-6)",
     ("QVR425", "ode", "`ode` expects 3 to 6 arguments (f, y0, t0?, times, rtol?, atol?), got 6")),
    ("let b = ode((u, t) -> u, 1.0, 0.0, times, 0.0)",
     ("QVR425", "0.0", "`rtol` of `ode` must be a positive number literal")),
    ("let b = ode((u, t) -> u, 1.0, (u, t) -> u, times)",
     ("QVR425", "(u, t) -> u", "a lambda cannot be the third argument of `ode`; only its first "
                              "argument is a lambda")),
]


@pytest.mark.parametrize("line, expected", CASES, ids=[c[0] for c in CASES])
def test_each_misuse_gives_its_diagnostic(line, expected):
    body = f"""
data X : Row * Coef
data v : Coef
data times : Row
sample a <- Normal(0.0, 1.0)
{line}
return a
"""
    assert diags(body) == [expected]


# ---------------------------------------------------------------- `let v : T = e`

ANNOTATED = """
data y : Row
sample a <- Normal(0.0, 1.0)
let lp1 = a + y
let lp2 = 2.0 * a + y
let lps : Comp = [lp1, lp2]
record w : Comp * Row = softmax(lps, Comp)
let same : Comp = lps
let lik = logsumexp(lps, Comp)
"""


def test_an_annotated_let_names_the_leading_axes_of_its_value():
    assert diags(ANNOTATED + "return a\n") == []
    types = local_types(ANNOTATED + "return a\n")
    assert (types["lps"], types["w"], types["same"], types["lik"]) == (
        "Comp * Row", "Comp * Row", "Comp * Row", "Row")


def test_hover_on_the_annotation_reaches_the_object():
    text = program(ANNOTATED + "return a\n")
    off = text.index("lps : Comp") + 7
    assert hover(Document(text), off).text == "```qvr\nComp : FinSet 2\n```\nobject"


ANNOTATION_CASES = [
    ("let b : Coef = [a, a]",
     ("QVR436", "Coef", "`let b : Coef = …` names the leading axes of its value `Coef`, but the "
                        "value has axes `FinSet 2`")),
    ("let b : Comp = a",
     ("QVR436", "Comp", "`let b : Comp = …` names the leading axes of its value `Comp`, but the "
                        "value is a scalar")),
    ("record b : Row * Comp = X",
     ("QVR436", "Row * Comp", "`record b : Row * Comp = …` names the leading axes of its value "
                              "`Row * Comp`, but the value has axes `Row * Coef`")),
    ("let b : Row = exp(host)",
     ("QVR436", "Row", "`let b : Row = …` names the leading axes of its value `Row`, but the "
                       "value has axes that are not known here")),
    ("let b : Nope = X", ("QVR101", "Nope", "undefined object `Nope`")),
]


@pytest.mark.parametrize("line, expected", ANNOTATION_CASES, ids=[c[0] for c in ANNOTATION_CASES])
def test_an_annotation_that_does_not_fit_is_qvr436(line, expected):
    body = f"""
data X : Row * Coef
sample a <- Normal(0.0, 1.0)
{line}
return a
"""
    got = [d for d in diags(body) if d[0] != "QVR702"]  # `host`: host data read by name
    assert got == [expected]
