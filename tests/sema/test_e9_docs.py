"""Every QVR example of docs/extensions.md E9 checks clean (no diagnostics at all)."""
import re
from pathlib import Path

import pytest

from qvr.analysis import Document

TEXT = (Path(__file__).resolve().parents[2] / "docs" / "extensions.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```qvr\n(.*?)```",
                    TEXT[TEXT.index("\n## E9."):].split("\n## E10.")[0], re.S)


def test_the_statistics_extension_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("block", BLOCKS, ids=[b.splitlines()[0][:30] for b in BLOCKS])
def test_each_e9_example_checks_clean(block):
    assert [(d.code, d.message) for d in Document(block).diagnostics()] == []
