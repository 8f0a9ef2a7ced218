"""The "did you mean" rule of qvr-language.md 12.2, used by every diagnostic that suggests."""
from __future__ import annotations

import difflib
from typing import Iterable, Optional


def suggest(name: str, candidates: Iterable[str], cutoff: float = 0.75) -> Optional[str]:
    pool = sorted(set(candidates) - {name})
    low = name.lower()
    for c in pool:
        if c.lower() == low:
            return c
    got = difflib.get_close_matches(name, pool, n=1, cutoff=cutoff)
    return got[0] if got else None


def did_you_mean(s: Optional[str]) -> str:
    return f"; did you mean `{s}`?" if s else ""
