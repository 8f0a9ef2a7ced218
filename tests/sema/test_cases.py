"""Golden tests: every invalid program in tests/sema/cases gives exactly its diagnostics.

Each case file starts with `# expect: QVRnnn, ...` (the codes in order).  The exact
(code, line:col-line:col, message) list is kept in tests/sema/golden/<case>.txt, written
when missing and refreshed with `pytest --update-goldens`.
"""
import re
from pathlib import Path

import pytest

from qvr.analysis import Document

CASES = sorted((Path(__file__).parent / "cases").glob("*.qvr"))
GOLDEN = Path(__file__).parent / "golden"
CATALOGUE = {
    "QVR001", "QVR002", "QVR003", "QVR004", "QVR005", "QVR006", "QVR007", "QVR008", "QVR009",
    "QVR010",
    "QVR101", "QVR102", "QVR103", "QVR104", "QVR105", "QVR106", "QVR107", "QVR108", "QVR109",
    "QVR110", "QVR112", "QVR201", "QVR202", "QVR203", "QVR204", "QVR205", "QVR206", "QVR207",
    "QVR301", "QVR302", "QVR303", "QVR304", "QVR305", "QVR306", "QVR307", "QVR308", "QVR309",
    "QVR311", "QVR312", "QVR313", "QVR314", "QVR315", "QVR316", "QVR317", "QVR318",
    "QVR401", "QVR402", "QVR403", "QVR404",
    "QVR405", "QVR406", "QVR407", "QVR408", "QVR409", "QVR410", "QVR411", "QVR412", "QVR414",
    "QVR415", "QVR416", "QVR417", "QVR418", "QVR420", "QVR501", "QVR502", "QVR503", "QVR504",
    "QVR505", "QVR601", "QVR602", "QVR603", "QVR701", "QVR702", "QVR703", "QVR704", "QVR705",
    "QVR706", "QVR707", "QVR708", "QVR709", "QVR710", "QVR711", "QVR712", "QVR713", "QVR714",
    "QVR715",
    "QVR429",
    "QVR421", "QVR422", "QVR423", "QVR430",
    "QVR424",
    "QVR425",
    "QVR900",
    "QVR426",  # E9.2 supports: improper priors
    "QVR427",  # E9.2 supports: truncation
    "QVR428",  # E9.2 supports: constrained spaces
    "QVR439", "QVR950",  # E9.9 multivariate families; what the runtime cannot run
    "QVR319", "QVR320", "QVR321",  # issue 36: per-row marginalize blocks
    "QVR322", "QVR323", "QVR324", "QVR325",  # E9.7 element scores, computed observes
    "QVR113", "QVR114", "QVR115", "QVR116",  # issue 36: sizes read from the data (E9.13)
    "QVR431", "QVR432",  # E9.10 expression arguments, comparisons
    "QVR435", "QVR436",  # E9.11 concatenation, `let v : T = e`
    "QVR862",  # E10 (QVR860/861 name absolute folders: exact in tests/sema/test_pretrained_check)
    "QVR863", "QVR864", "QVR865", "QVR866", "QVR867", "QVR868",  # E10 steering score steps
}


def render(doc: Document) -> str:
    lines = []
    for d in doc.diagnostics():
        s, e = doc.position(d.span.start), doc.position(d.span.end)
        lines.append(f"{d.code} {s.line + 1}:{s.character + 1}-{e.line + 1}:{e.character + 1} "
                     f"{doc.text[d.span.start:d.span.end]!r} {d.message}")
    return "\n".join(lines) + "\n"


def test_every_catalogue_code_has_a_case():
    covered = {p.name.split("_")[0] for p in CASES}
    assert CATALOGUE <= covered, sorted(CATALOGUE - covered)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path, request):
    text = path.read_text(encoding="utf-8")
    expected = re.findall(r"QVR\d+", re.match(r"#\s*expect:(.*)", text).group(1))
    doc = Document(text, str(path))
    assert [d.code for d in doc.diagnostics()] == expected
    golden = GOLDEN / (path.stem + ".txt")
    got = render(doc)
    if request.config.getoption("--update-goldens") or not golden.exists():
        golden.write_text(got, encoding="utf-8")
    assert got == golden.read_text(encoding="utf-8")
