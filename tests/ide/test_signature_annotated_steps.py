"""Signature help inside the let-expressions of annotated and computed steps: `let v : T = …`
(E9.11), `score v : T = …` and the value of `observe v = … <- F` (E9.7), as in `let v = …`."""
import pytest

from qvr.analysis import Document
from qvr.ide.signature import signature_help

HEAD = """object Person : FinSet 20
program p : Person -> Person
    data height : Person
"""


@pytest.mark.parametrize("line", [
    "    let w = where(height > 1, 1.0, ",
    "    let w : Person = where(height > 1, 1.0, ",
    "    record w : Person = where(height > 1, 1.0, ",
    "    score s : Person = where(height > 1, 1.0, ",
    "    observe y = where(height > 1, 1.0, ",
    "    observe y : Person = where(height > 1, 1.0, ",
])
def test_a_builtin_in_the_value_of_an_annotated_or_computed_step_has_its_signature(line):
    src = HEAD + line
    got = signature_help(Document(src), len(src))
    assert got is not None and got.label == "where(c, a, b)"
    assert got.active == 2
