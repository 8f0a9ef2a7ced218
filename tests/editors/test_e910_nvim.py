"""The Neovim syntax file on E9.10 (docs/extensions.md): comparisons are operators, `and`,
`or`, `not` keywords, `where`, `step`, `int_step` builtins, also inside family arguments."""
from __future__ import annotations

import pytest

from .test_nvim import NVIM, find, nvim

pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed")

SRC = """\
object Person : FinSet 20
program earnings : Person -> Person
    data age : Person
    sample sigma <- HalfNormal(1.0)
    let c = not age >= 2 and age != 1 or age < 3
    observe earn : Person <- Normal(where(age > 0, age, 0) * (age == 2) + step(age), sigma)
    return earn
"""

GROUPS = [
    (r"let c", "not", "qvrKeyword"), (r"let c", ">=", "qvrOperator"), (r"let c", "and", "qvrKeyword"),
    (r"let c", "!=", "qvrOperator"), (r"let c", "or", "qvrKeyword"), (r"let c", "<", "qvrOperator"),
    (r"observe earn", "where", "qvrBuiltin"), (r"observe earn", ">", "qvrOperator"),
    (r"observe earn", "==", "qvrOperator"), (r"observe earn", "step", "qvrBuiltin"),
    (r"observe earn", "<-", "qvrOperator"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    project = tmp_path_factory.mktemp("nvim-e910")
    (project / "e910.qvr").write_text(SRC)
    return nvim("highlight", [project / "e910.qvr"], project)


@pytest.mark.parametrize("pattern,token,group", GROUPS, ids=[f"{g[1]}@{g[0]}" for g in GROUPS])
def test_highlight_groups_of_comparisons_and_boolean_operators(report, pattern, token, group):
    line, col = find(SRC, pattern, token)
    groups = report["buffers"][0]["lines"][line]["groups"]
    assert {groups[c][0] for c in range(col, col + len(token))} == {group}
