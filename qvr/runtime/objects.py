"""Runtime objects: finite sets, Euclidean spaces and their products (runtime spec 1.1).

An object knows how one of its values is encoded in a tensor:

* `FinSet` (a *discrete* object): one `int64` index; width 1; `shape == (n,)` is the
  tensor axis it contributes to a finite morphism.
* `Euclidean` (a *continuous* object, optionally bounded): a float vector; width `dim`.
* `ProductObject`: the components side by side.  As the domain or codomain of a finite
  morphism a product of finite sets contributes one tensor axis per atom (`shape`); in a
  continuous pipeline its value is a flat row of the component encodings (`width`), a
  finite atom contributing one column that holds its index.

`from_type` converts a resolved front-end type (`qvr.sema.types`) into these objects.  This
module holds no tensors and imports no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.sema import types as T


class QvrObject:
    """Common interface: `name`, `width`, `is_discrete`, `atoms()`."""

    name: str

    @property
    def width(self) -> int:
        raise NotImplementedError

    @property
    def is_discrete(self) -> bool:
        return all(isinstance(a, FinSet) for a in self.atoms())

    @property
    def is_continuous(self) -> bool:
        return all(isinstance(a, Euclidean) for a in self.atoms())

    def atoms(self) -> list:
        return [self]

    @property
    def size(self) -> int:
        """Number of elements of a discrete object (product of the atom sizes)."""
        n = 1
        for a in self.atoms():
            if not isinstance(a, FinSet):
                raise TypeError(f"`{self.name}` is not a finite set")
            n *= a.cardinality
        return n

    @property
    def shape(self) -> tuple:
        """The tensor axes of a discrete object (one per atom); `(dim,)` for Euclidean."""
        out = []
        for a in self.atoms():
            out.extend(a.shape)
        return tuple(out)

    @property
    def components(self) -> tuple:
        return (self,)


@dataclass(frozen=True)
class FinSet(QvrObject):
    """The finite set `{0, ..., cardinality-1}`."""

    name: str
    cardinality: int

    @property
    def width(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return self.cardinality

    @property
    def shape(self) -> tuple:
        return (self.cardinality,)

    def __repr__(self) -> str:
        return f"FinSet({self.name!r}, {self.cardinality})"


@dataclass(frozen=True)
class Euclidean(QvrObject):
    """R^dim, bounded per coordinate when `low` and/or `high` are given."""

    name: str
    dim: int
    low: Optional[float] = None
    high: Optional[float] = None

    @property
    def width(self) -> int:
        return self.dim

    @property
    def shape(self) -> tuple:
        return (self.dim,)

    @property
    def is_bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def __repr__(self) -> str:
        b = ""
        if self.low is not None:
            b += f", low={self.low}"
        if self.high is not None:
            b += f", high={self.high}"
        return f"Euclidean({self.name!r}, {self.dim}{b})"


@dataclass(frozen=True)
class ProductObject(QvrObject):
    """`A * B * ...`: components in declaration order (nested products kept)."""

    name: str
    parts: tuple

    @property
    def components(self) -> tuple:
        return self.parts

    def atoms(self) -> list:
        out = []
        for p in self.parts:
            out.extend(p.atoms())
        return out

    @property
    def width(self) -> int:
        return sum(p.width for p in self.parts)

    def __repr__(self) -> str:
        return f"ProductObject({self.name!r}, {self.parts!r})"


#: The one-point object: domain of lifted programs and of Python-built global sites.
Unit = FinSet("1", 1)


def from_type(ty, name: Optional[str] = None) -> QvrObject:
    """The runtime object of a resolved front-end type (names are kept for messages)."""
    if isinstance(ty, T.Named):
        return from_type(ty.target, name or ty.name)
    if isinstance(ty, T.FinSet):
        return FinSet(name or f"FinSet {ty.n}", ty.n)
    if isinstance(ty, T.Real):
        return Euclidean(name or f"Real {ty.n}", ty.n, ty.low, ty.high)
    if isinstance(ty, T.Prod):
        parts = tuple(from_type(f) for f in ty.factors)
        return ProductObject(name or " * ".join(p.name for p in parts), parts)
    raise TypeError(f"cannot compile the unresolved type {ty!r}")


def product(parts, name: Optional[str] = None) -> QvrObject:
    """The product of runtime objects (a single part is returned as is)."""
    parts = tuple(parts)
    if len(parts) == 1:
        return parts[0]
    return ProductObject(name or " * ".join(p.name for p in parts), parts)
