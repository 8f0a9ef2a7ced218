"""Source text helpers: spans and line indexes.

Positions inside qvr are Python string offsets (code points) over the document text.
`LineIndex` converts offsets to 0-based (line, character) pairs in code points and back.
This module deliberately knows nothing of UTF-16 or LSP: only `qvr_lsp.convert` does.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open range ``[start, end)`` of string offsets."""

    start: int
    end: int

    def shift(self, delta: int) -> "Span":
        return Span(self.start + delta, self.end + delta)

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end

    def __len__(self) -> int:  # pragma: no cover - convenience
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Position:
    """A 0-based line and character (in code points)."""

    line: int
    character: int


class LineIndex:
    """Maps offsets to (line, character) and back for one text (lines end at ``\\n``)."""

    __slots__ = ("starts", "length")

    def __init__(self, text: str):
        starts = [0]
        find = text.find
        i = find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = find("\n", i + 1)
        self.starts = starts
        self.length = len(text)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def position(self, offset: int) -> Position:
        offset = max(0, min(offset, self.length))
        line = bisect.bisect_right(self.starts, offset) - 1
        return Position(line, offset - self.starts[line])

    def offset(self, line: int, character: int) -> int:
        if line < 0:
            return 0
        if line >= len(self.starts):
            return self.length
        start = self.starts[line]
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else self.length
        return min(start + max(character, 0), end)

    def edited(self, start: int, end: int, new_text: str) -> "LineIndex":
        """The index of the text after replacing ``[start, end)`` by `new_text`, without
        rescanning the unchanged text (line starts after the edit are shifted)."""
        starts = self.starts
        a = bisect.bisect_right(starts, start)
        b = bisect.bisect_right(starts, end)
        mid = []
        k = new_text.find("\n")
        while k >= 0:
            mid.append(start + k + 1)
            k = new_text.find("\n", k + 1)
        delta = len(new_text) - (end - start)
        out = LineIndex.__new__(LineIndex)
        out.starts = starts[:a] + mid + [s + delta for s in starts[b:]]
        out.length = self.length + delta
        return out

    def line_start(self, line: int) -> int:
        return self.starts[min(max(line, 0), len(self.starts) - 1)]
