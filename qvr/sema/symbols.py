"""Symbols: what a top-level declaration binds, as the checker of later declarations sees it.

Symbols are frozen and compare by meaning only (never by position), so that a declaration
moved by an edit does not invalidate the checks of the declarations that use it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from qvr.sema.types import MorType, Ty


@dataclass(frozen=True, slots=True)
class ObjectSym:
    name: str
    type: Ty  # the definition (not the alias)
    kind: str = "object"


@dataclass(frozen=True, slots=True)
class MorphismSym:
    name: str
    type: MorType
    role: Optional[str]
    family: Optional[str] = None
    stratum: Optional[str] = None  # relational | stochastic | None (unknown)
    rule: Optional[str] = None
    lookup_table: bool = False
    init_text: Optional[str] = None
    scale: Optional[float] = None
    bins: Optional[int] = None
    replica: Optional[tuple[int, int, str]] = None  # (index, count, group)
    axis_names: tuple[str, ...] = ()
    # Extension (docs/extensions.md E2-E4).  `deterministic`: the morphism has no density
    # (an attention without a family); an observe step cannot end in it (QVR316).
    # `heads`/`head_dim` are resolved (defaults applied) on every attention symbol, None on
    # other roles; `positions` is the learned position table of an embed, None without it.
    deterministic: bool = False
    heads: Optional[int] = None
    head_dim: Optional[int] = None
    causal: bool = False
    # `causal=strict` (E2): position i sees keys j < i only; `causal` is True as well, so a
    # reader that asks "does position i see only the past?" (SMC's next-token check) needs
    # nothing new; position 0 then sees no key and its attended value is 0
    causal_strict: bool = False
    positions: Optional[int] = None
    # the morphism mixes positions (docs/extensions.md E1): an attention, or a `role=let`
    # morphism whose expression holds one (only the `scan` cell check reads it)
    mixes: bool = False
    # `role=pretrained` (E10): (model as written, resolved folder, model_type, layers,
    # tokenizer vocabulary, dtype, Hugging Face cache name or None); None elsewhere or
    # when the model could not be read
    pretrained: Optional[tuple] = None
    kind: str = "morphism"


@dataclass(frozen=True, slots=True)
class GroupSym:
    name: str
    members: tuple[str, ...]
    type: MorType
    kind: str = "group"
    deterministic: bool = False  # its members have no density (an attention without family)
    mixes: bool = False  # its members are attentions (E1)


@dataclass(frozen=True, slots=True)
class LetSym:
    name: str
    type: MorType
    stratum: Optional[str]
    rule: Optional[str]
    expr_text: str = ""
    deterministic: bool = False  # the expression's last link has no density (E4)
    mixes: bool = False  # the expression holds an attention (E1)
    kind: str = "let"


@dataclass(frozen=True, slots=True)
class ProgramSym:
    name: str
    type: MorType
    param_style: str  # none | data | typed
    params: tuple[tuple[str, Optional[str]], ...] = ()
    effects: tuple[str, ...] = ()
    kind: str = "program"

    @property
    def parametric(self) -> bool:
        return self.param_style == "typed"


@dataclass(frozen=True, slots=True)
class DeductionSym:
    name: str
    type: MorType
    semiring: str = "LogProb"
    start: Optional[str] = None
    atoms: tuple[str, ...] = ()
    binders: tuple[str, ...] = ()
    n_rules: int = 0
    n_lexicon: int = 0
    kind: str = "deduction"


@dataclass(frozen=True, slots=True)
class UnknownSym:
    """A name whose declaration had errors: uses of it draw no further diagnostics."""

    name: str
    namespace: str = "value"
    kind: str = "unknown"


def is_morphism_value(sym) -> bool:
    return isinstance(sym, (MorphismSym, LetSym)) or (
        isinstance(sym, ProgramSym) and not sym.parametric)


def stratum_of(sym) -> Optional[str]:
    if isinstance(sym, (MorphismSym, LetSym)):
        return sym.stratum
    if isinstance(sym, ProgramSym):
        return "stochastic"
    return None


def rule_of(sym) -> Optional[str]:
    if isinstance(sym, (MorphismSym, LetSym)):
        return sym.rule
    return None
