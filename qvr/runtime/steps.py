"""Compiled program steps: plain records the executor (`qvr.runtime.monadic`) interprets.

A compiled program is a list of these records plus, for every `sample`/`observe` step, a
submodule `_step_<name>` (the named morphism, or a parameter-free `FamilyStep` for an
inline family).  Records hold names (environment keys), literals and let-expression
closures, never modules, so deep copies of a program stay independent.

Site kinds (runtime spec 5.3): `global` (a family target whose arguments are all global),
`plate` (a family target with an index annotation `: I`), `local` (everything else,
including every `observe`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from qvr.runtime.families import inline_distribution
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.objects import Unit

GLOBAL, PLATE, ROW = 0, 1, 2  # levels of values (spec 5.3)


@dataclass(frozen=True)
class Arg:
    """A family argument: a literal, a local (env key), or a gather `base[index]`."""

    kind: str  # lit | local | gather
    value: Any  # float for lit, env key otherwise
    index: Optional[str] = None  # env key of the index of a gather

    def text(self) -> str:
        if self.kind == "lit":
            return repr(self.value)
        return f"{self.value}[{self.index}]" if self.kind == "gather" else str(self.value)


@dataclass
class SiteStep:
    """`sample`/`observe` of a morphism target or an inline family."""

    name: str  # environment key (unique in the program)
    observe: bool
    family: Optional[str] = None  # inline family name, or None for a morphism target
    args: Optional[tuple] = None  # family: tuple[Arg]; morphism: tuple of env keys or None
    arg_discrete: tuple = ()  # morphism args: whether each domain factor is finite
    plate: Optional[int] = None  # |I| of an index annotation `: I`
    plate_name: Optional[str] = None
    event_size: Optional[int] = None  # vector families: `over=` size or default
    # E9.9: the sizes of a product plate `: A * B` (the value has axes (A, B), not |A·B|)
    plate_shape: Optional[tuple] = None
    site_kind: str = "local"
    all_global: bool = False
    via: Optional[tuple] = None  # ("local", key) | ("host", name) inside grouped blocks
    text: str = ""  # the step as written, for messages
    python_global: bool = False  # Python-built site on the one-point domain (spec 5.11)
    computed: Optional[str] = None  # E9.7 `observe v = e <- F`: env key of e's hidden let

    @property
    def module_name(self) -> str:
        return f"_step_{self.name}"


@dataclass
class LetStep:
    """`let v = e` (score=False) or `score v = e` (score=True)."""

    name: str
    fn: Callable  # fn(frame, binders) -> value, or fn(env) for Python-built programs
    score: bool = False
    python: bool = False
    text: str = ""
    recorded: bool = False  # `record v = e` (E9.6): its value is recorded per draw
    reads: Optional[tuple] = None  # env keys of the locals e reads (None: not known)
    per: Optional[tuple] = None  # E9.7 `score v : T = e`: T's sizes (one term per element)
    per_name: Optional[str] = None  # ... and T as written


@dataclass
class AliasStep:
    """Binds `name` to the value of another local (the result of an inlined template)."""

    name: str
    source: str
    text: str = ""


@dataclass
class MarginalizeStep:
    """`marginalize c [: K] <- Categorical|Bernoulli|ContinuousBernoulli(p) [over=G]`."""

    name: str
    family: str
    args: tuple  # tuple[Arg]
    body: list = field(default_factory=list)
    classes: Optional[int] = None  # |K| of a grouped block's annotation
    group_size: Optional[int] = None  # |G| of `over=G` (None: plain block)
    reduction: str = "logsumexp"
    text: str = ""
    #: a plain block's annotation `: I` (its plate): one latent per element of I, each
    #: summed out against the terms of its own row (None: one latent for the whole block,
    #: unless the prior has a row axis)
    plate: Optional[int] = None
    plate_name: Optional[str] = None

    @property
    def site_name(self) -> str:
        return f"_marg_{self.name}"


class FamilyStep(ContinuousMorphism):
    """The parameter-free `_step_<name>` module of an inline family step."""

    def __init__(self, family: str, event_size: Optional[int] = None,
                 default_event_size: Optional[int] = None, label: str = None):
        super().__init__(Unit, Unit, label or family)
        self.family = family
        self.event_size = event_size
        self.default_event_size = default_event_size

    def distribution(self, args):
        return inline_distribution(self.family, args, self.event_size, self.default_event_size)

    def rsample(self, x, sample_shape=torch.Size()):
        raise TypeError(f"`{self.label}` is an inline family; draw from .distribution(args)")

    def log_prob(self, x, y):
        raise TypeError(f"`{self.label}` is an inline family; score with .distribution(args)")

    def extra_repr(self) -> str:
        return f"{self.family}"
