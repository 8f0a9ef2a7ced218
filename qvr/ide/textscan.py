"""Lexical context of unfinished text: which brackets are open, and whether a position is
inside a comment or a string.

Completion and signature help work on the text before the cursor, which rarely parses;
these scanners only need QVR's lexical rules (strings, `#` comments, `#{ }#` block
comments, the `#[` pragma opener).  Nothing here parses or checks.
"""
from __future__ import annotations


def bracket_stack(text: str):
    """Bracket stack over `text` (strings and comments skipped): [(char, offset)]."""
    stack = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#":
            if text.startswith("#[", i):
                stack.append(("#[", i))
                i += 2
                continue
            if text.startswith("#{", i):
                k = text.find("}#", i + 2)
                i = n if k < 0 else k + 2
                continue
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if c in "([{":
            stack.append((c, i))
        elif c in ")]}" and stack:
            stack.pop()
        i += 1
    return stack


def in_comment_or_string(line: str) -> bool:
    """Whether the end of `line` (the text before the cursor on its line) is inside a line
    comment, an unclosed block comment or an unterminated string."""
    quote = False
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == '"':
                quote = False
        elif c == '"':
            quote = True
        elif c == "#" and line.startswith("#{", i):
            k = line.find("}#", i + 2)
            if k < 0:
                return True  # inside a block comment that is still open
            i = k + 1
        elif c == "#" and not line.startswith(("#[", "#!["), i):
            return True
        i += 1
    return quote


def _is_word_char(ch: str) -> bool:
    return ch == "_" or (ch.isascii() and ch.isalnum())


def word_before(text: str) -> str:
    """The name (`[A-Za-z_][A-Za-z0-9_]*`) that ends exactly at the end of `text`, or "".

    What `re.search(r"[A-Za-z_][A-Za-z0-9_]*$", text)` finds, in linear time: that search
    is quadratic in the length of a run of name characters (a 1 MB name would take hours)."""
    i = len(text)
    while i > 0 and _is_word_char(text[i - 1]):
        i -= 1
    while i < len(text) and text[i].isdigit():
        i += 1
    return text[i:]
