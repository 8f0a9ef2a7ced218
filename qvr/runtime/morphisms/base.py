"""The morphism base classes shared by every compiled construct (runtime spec section 3).

`Morphism` is an `nn.Module` with a `domain`, a `codomain` (runtime objects) and a `label`
used in error messages.  Two kinds exist:

* `ContinuousMorphism` — a conditional distribution: `rsample(x, sample_shape)`,
  `log_prob(x, y)`, `sample` (= `rsample` without gradients) and `.support`.  This is the
  public abstract base class (`qvr.continuous.morphisms.ContinuousMorphism`); user
  subclasses work anywhere a built-in one does.
* `FiniteMorphism` (in `finite.py`) — a tensor between finite sets.

The operators `f >> g` and `f @ g` build composites, checking types and algebras;
mismatches raise `IncompatibleMorphismsError` (a `TypeError`).  They are defined in
`qvr.runtime.combinators`, with the composites they build, and set on `Morphism` there
(this module is below the composites, which subclass its classes, and imports none of
them); `qvr.runtime` imports the combinators, so every morphism has them.
This module defines no concrete distribution.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributions import constraints

from qvr.runtime.objects import QvrObject


class Morphism(nn.Module):
    """Base of every runtime morphism."""

    is_finite = False
    #: True when an output position depends on other positions of its sequence (design E1:
    #: attention, and composites containing it); row-wise shortcuts (prefix dedup by distinct
    #: input, per-row flattening) must not be applied to such a morphism
    mixes_positions = False
    #: True when the output is a function of the input (no noise, no density: `rsample`
    #: returns the value, `log_prob` raises `DeterministicError`; design E4)
    deterministic = False

    def __init__(self, domain: QvrObject, codomain: QvrObject, label: str = None):
        super().__init__()
        self.domain = domain
        self.codomain = codomain
        self.label = label or type(self).__name__

    # -- output encoding, used by fan / tensor / programs to split and join values
    @property
    def output_discrete(self) -> bool:
        """True when one output value is an int64 index of the batch shape (no event axis)."""
        return self.codomain.is_discrete

    @property
    def output_width(self) -> int:
        """Width of one output value in a concatenated row (1 for a discrete output)."""
        return 1 if self.output_discrete else self.codomain.width

    @property
    def output_event_rank(self) -> int:
        """0 when one output value has no trailing axis (a single index), else 1."""
        return 0 if (self.output_discrete and self.output_width == 1) else 1

    @property
    def support(self):
        if self.output_discrete:
            return constraints.integer_interval(0, self.codomain.size - 1)
        return constraints.real

    def sample(self, x, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(x, sample_shape)

    def links(self) -> list:
        """This morphism as a flat chain of links (spec 4.1); a non-composite is one link."""
        return [self]

    def extra_repr(self) -> str:
        return f"{self.label}: {self.domain.name} -> {self.codomain.name}"


class ContinuousMorphism(Morphism):
    """Public abstract base of conditional distributions `domain -> codomain`.

    Subclasses implement `rsample(x, sample_shape=torch.Size())` returning
    `(*sample_shape, *batch, *event)` and `log_prob(x, y)` returning the batch-shaped
    log-density (event axes summed).
    """

    def __init__(self, domain: QvrObject, codomain: QvrObject, label: str = None):
        super().__init__(domain, codomain, label)

    def rsample(self, x, sample_shape=torch.Size()):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.rsample")

    def log_prob(self, x, y):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.log_prob")

    def forward(self, x, sample_shape=torch.Size()):
        return self.rsample(x, sample_shape)
