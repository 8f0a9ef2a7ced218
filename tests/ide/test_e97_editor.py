"""Extension E9.7 in the editors: hover shows a per-element score's object and says an
observe's value is computed from data; completion offers let-expression candidates in
`observe v = |` and objects in `score v : |`; semantic tokens mark the names."""
from ide_fixture import at

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover

SRC = """\
object Person : FinSet 4
program weights : Person -> Person
    data weight : Person
    sample mu <- Normal(0.0, 1.0)
    observe log_weight : Person = log(weight) <- Normal(mu, 1.0)
    score lik : Person = log_density(Normal(mu, 1.0), weight)
    return mu
"""


def _hover(word, nth=0):
    doc = Document(SRC)
    off = -1
    for _ in range(nth + 1):
        off = SRC.index(word, off + 1)
    return hover(doc, off).text


def test_hover():
    assert Document(SRC).diagnostics() == []
    assert _hover("lik") == ("```qvr\nlik : [Person] numeric\n```\n"
                             "score step · one term per element of Person · line 6")
    assert _hover("log_weight") == (
        "```qvr\nlog_weight : [Person] Real\n```\n"
        "observe step · plate over Person · its value computed from data · line 5")
    # a name read in the computed value is the data step's
    assert _hover("weight)") == "```qvr\nweight : Person\n```\ndata step · line 3"


def labels(line):
    doc, off = at(SRC.replace("    return mu", line + "\n    return mu"))
    return [i.label for i in complete(doc, off).items]


def test_completion():
    assert "log_density" in labels("    observe z = log_d$0")
    assert {"weight", "mu"} <= set(labels("    observe z : Person = $0"))
    assert "weight" in labels("    observe z : Person = log(we$0")
    assert labels("    score s : Pe$0") == ["Person"]
    assert "Normal" in labels("    observe z = log(weight) <- Nor$0")
