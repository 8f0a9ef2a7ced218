"""Resolved QVR types (qvr-language.md 3.2-3.3) and their spellings.

A resolved type is an atom (`FinSet n`, `Real n` with optional bounds), a product, a
`Named` alias of an object (transparent for checking, kept for spelling), or `UNKNOWN`
(the result of an earlier error; compatible with everything).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(frozen=True, slots=True)
class FinSet:
    n: Union[int, str]  # a str: a size named in the program, read from the data (`FinSet N`)


@dataclass(frozen=True, slots=True)
class Real:
    n: Union[int, str]  # a str: `Real N`, a dimension read from the data
    low: Optional[float] = None
    high: Optional[float] = None


@dataclass(frozen=True, slots=True)
class Prod:
    factors: tuple["Ty", ...]


@dataclass(frozen=True, slots=True)
class Named:
    name: str
    target: "Ty"


@dataclass(frozen=True, slots=True)
class Unknown:
    pass


UNKNOWN = Unknown()
Ty = Union[FinSet, Real, Prod, Named, Unknown]


@dataclass(frozen=True, slots=True)
class MorType:
    dom: Ty
    cod: Ty

    @property
    def known(self) -> bool:
        return not (is_unknown(self.dom) or is_unknown(self.cod))


def strip(t: Ty) -> Ty:
    while isinstance(t, Named):
        t = t.target
    return t


def is_unknown(t: Ty) -> bool:
    t = strip(t)
    if isinstance(t, Unknown):
        return True
    if isinstance(t, Prod):
        return any(is_unknown(f) for f in t.factors)
    return False


def atoms(t: Ty) -> list:
    t = strip(t)
    if isinstance(t, Prod):
        out = []
        for f in t.factors:
            out.extend(atoms(f))
        return out
    return [t]


def factors(t: Ty) -> list:
    s = strip(t)
    if isinstance(s, Prod):
        return list(s.factors)
    return [t]


def is_discrete(t: Ty) -> bool:
    return not is_unknown(t) and all(isinstance(a, FinSet) for a in atoms(t))


def is_continuous(t: Ty) -> bool:
    return not is_unknown(t) and all(isinstance(a, Real) for a in atoms(t))


def is_sized(t: Ty) -> bool:
    """Whether an atom of `t` has a size read from the data (`FinSet N`, `Real N`)."""
    return not is_unknown(t) and any(isinstance(a.n, str) for a in atoms(t))


def size_names(t: Ty) -> list:
    """The size names of `t`'s atoms, in order (`FinSet N * Coef` -> ["N"])."""
    return [] if is_unknown(t) else [a.n for a in atoms(t) if isinstance(a.n, str)]


def size(t: Ty) -> Optional[int]:
    """The number of elements; None when a size is read from the data."""
    if is_sized(t):
        return None
    n = 1
    for a in atoms(t):
        n *= a.n
    return n


def dim(t: Ty) -> Optional[int]:
    """The dimension; None when a size is read from the data."""
    if is_sized(t):
        return None
    return sum(a.n for a in atoms(t))


def compatible(a: Ty, b: Ty) -> bool:
    """A ≅ B (section 3.3)."""
    if is_unknown(a) or is_unknown(b):
        return True
    if is_discrete(a) and is_discrete(b):
        return [x.n for x in atoms(a)] == [x.n for x in atoms(b)]
    if is_continuous(a) and is_continuous(b) and not (is_sized(a) or is_sized(b)):
        return dim(a) == dim(b)
    aa, bb = atoms(a), atoms(b)
    return len(aa) == len(bb) and all(type(x) is type(y) and x.n == y.n for x, y in zip(aa, bb))


def _fmt_num(x: float) -> str:
    return repr(float(x))


def spell(t: Ty) -> str:
    """The type as the user wrote it (object names stay names)."""
    if isinstance(t, Named):
        return t.name
    if isinstance(t, FinSet):
        return f"FinSet {t.n}"
    if isinstance(t, Real):
        return f"Real {t.n}"
    if isinstance(t, Prod):
        return " * ".join(f"({spell(f)})" if isinstance(f, Prod) else spell(f) for f in t.factors)
    return "?"


def structure(t: Ty) -> str:
    """`FinSet n`, `Real d`, a product of FinSets, or the atom list for mixed types."""
    if is_unknown(t):
        return "?"
    if is_continuous(t) and not is_sized(t):
        return f"Real {dim(t)}"
    if is_continuous(t) and len(atoms(t)) == 1:
        return spell(atoms(t)[0])
    return " * ".join(spell(a) for a in atoms(t))


def is_structural(t: Ty) -> bool:
    return spell(t) == structure(t)


def describe(t: Ty) -> str:
    """`Topic` (FinSet 6): the spelling in backticks plus the structure when it differs."""
    s = spell(t)
    if is_unknown(t) or s == structure(t):
        return f"`{s}`"
    return f"`{s}` ({structure(t)})"


def spell_mor(m: MorType) -> str:
    return f"{spell(m.dom)} -> {spell(m.cod)}"


def structure_mor(m: MorType) -> str:
    return f"{structure(m.dom)} -> {structure(m.cod)}"


def describe_mor(m: MorType) -> str:
    s = spell_mor(m)
    st = structure_mor(m)
    return f"`{s}`" if s == st else f"`{s}` ({st})"


def bounds_text(t: Ty) -> str:
    s = strip(t)
    if isinstance(s, Real) and (s.low is not None or s.high is not None):
        parts = []
        if s.low is not None:
            parts.append(f"low={_fmt_num(s.low)}")
        if s.high is not None:
            parts.append(f"high={_fmt_num(s.high)}")
        return " [" + ", ".join(parts) + "]"
    return ""
