"""E9.6 `record v = e` in the checker: a recorded value is a number (QVR429 for a chart or a
deduction), never inside a marginalize block (QVR429), never "unused" (no QVR713); hover on
its name says it is recorded per draw."""
from __future__ import annotations

import textwrap

from qvr.analysis import Document
from qvr.ide.hover import hover


def diags(text: str):
    doc = Document(textwrap.dedent(text), "record.qvr")
    return doc, [(d.code, doc.text[d.span.start:d.span.end], d.message)
                 for d in doc.diagnostics()]


SCHOOLS = """\
    object School : FinSet 8

    program schools : School -> School
        sample mu <- Normal(0.0, 5.0)
        sample tau <- HalfCauchy(5.0)
        sample theta_raw : School <- Normal(0.0, 1.0)
        let s = 1.0 * sigma
        record theta = mu + tau * theta_raw
        record tau_squared = tau * tau
        observe y : School <- Normal(theta, s)
        return theta

    export schools
    """


def test_a_recorded_number_checks_and_is_never_unused():
    _, found = diags(SCHOOLS)
    assert found == []  # `tau_squared` is read by nothing: recorded, so not QVR713


def test_an_unused_let_still_warns_where_a_record_does_not():
    _, found = diags(SCHOOLS.replace("record tau_squared", "let tau_squared"))
    assert found == [("QVR713", "tau_squared", "`tau_squared` is bound but never used")]


CHART = """\
    object Word : FinSet 10

    deduction Tiny : Word -> Word [start=N]
        atoms N, dog
        lexicon
            "dog" : N = dog

    program p : Word -> Word
        let chart = parse(Tiny, tokens)
        record kept = chart
        record grammar = (Tiny)
        sample w <- Normal(0.0, 1.0)
        return w
    """


def test_a_chart_or_a_deduction_is_not_recorded():
    _, found = diags(CHART)
    assert found == [
        ("QVR429", "chart", "`record kept` needs a numeric value, got a chart: only numbers "
                            "are recorded per draw (bind it with `let`)"),
        ("QVR429", "(Tiny)", "`record grammar` needs a numeric value, got a deduction: only "
                             "numbers are recorded per draw (bind it with `let`)"),
    ]


MARGINAL = """\
    object Obs : Real 1

    program mix : Obs -> Obs
        sample p <- Beta(2.0, 2.0)
        marginalize z <- Bernoulli(p)
            record shift = 3.0 * z
            observe y <- Normal(shift, 1.0)
        record odds = p / (1.0 - p)
        return p
    """


def test_a_record_inside_a_marginalize_block_is_an_error_after_it_is_fine():
    _, found = diags(MARGINAL)
    assert found == [
        ("QVR429", "record", "`shift` cannot be recorded inside the marginalize block of `z`: "
                             "its value depends on the summed-out coordinate `z`; record it "
                             "after the block"),
    ]


def test_hover_on_a_recorded_name():
    doc, _ = diags(SCHOOLS)
    text = doc.text
    at_binding = hover(doc, text.index("theta = mu") + 2)
    at_use = hover(doc, text.index("theta, s)") + 1)
    for h in (at_binding, at_use):
        assert h is not None
        lines = h.text.splitlines()
        assert lines[1].startswith("record theta : ")
        assert lines[-1] == "recorded per draw · line 8"
    plain = hover(doc, text.index("s = 1.0") )
    assert plain.text.splitlines()[1].startswith("s : ")
    assert plain.text.splitlines()[-1] == "let step · line 7"
