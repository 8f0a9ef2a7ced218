"""Cursor-marker fixtures for the editor-feature tests.

A fixture is QVR source with `$0` marking the cursor.  Expected ranges are written back
into the source as `⟦…⟧` (non-ASCII brackets, which QVR code never contains), so a test
compares one rendered string with another.
"""
from __future__ import annotations

from qvr.analysis import Document

CURSOR = "$0"


def at(src: str) -> tuple[Document, int]:
    """The document without the marker, and the marker's offset."""
    offset = src.index(CURSOR)
    return Document(src.replace(CURSOR, "", 1)), offset


def mark(text: str, spans) -> str:
    """`text` with every span wrapped in ⟦…⟧ (spans may not overlap)."""
    out, last = [], 0
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        out += [text[last:s.start], "⟦", text[s.start:s.end], "⟧"]
        last = s.end
    out.append(text[last:])
    return "".join(out)


def apply(text: str, edits) -> str:
    """Apply non-overlapping TextEdits (document offsets) to `text`."""
    for e in sorted(edits, key=lambda e: e.span.start, reverse=True):
        text = text[:e.span.start] + e.new_text + text[e.span.end:]
    return text


def example(name: str) -> str:
    from pathlib import Path
    return (Path(__file__).resolve().parents[2] / "examples" / f"{name}.qvr").read_text(encoding="utf-8")


def cursor(text: str, needle: str, nth: int = 0) -> tuple[Document, int]:
    """Place the cursor inside the `nth` occurrence of `needle` (which contains `$0`)."""
    plain = needle.replace(CURSOR, "")
    at_ = -1
    for _ in range(nth + 1):
        at_ = text.index(plain, at_ + 1)
    return Document(text), at_ + needle.index(CURSOR)
