"""An exported morphism as a program to fit: `x ↦ observe y <- f(x)`.

A fit needs a program (`MonadicProgram`); an exported morphism `f : A -> B` becomes one
whose data are the input `x` (A) and the output `y` (B).  Synthetic input is drawn from A's
type and the output from `f` (`qvr.inference.data.fit_data.synthesize`).

An exported `scan(cell)` is fitted on its **states**.  Its own `log_prob` is zero (runtime
spec 4.7: the scan is deterministic given its parameters; the final state alone has no
closed-form density, the states before it being latent), so `observe y <- scan(cell)(x)`
would carry no information about the cell, and SVI had nothing to differentiate.  Its
exact density is the spec's `log_joint` over every state `h_1 .. h_L`: the wrapper
`ScanStates` draws all states (`y` of shape `(B, L, w_H)`) and scores them with it.
Decision (issue 22): a fit of an exported scan takes `x` `(B, L, w_A)` and `y` `(B, L,
w_H)`; with one step (`x` `(B, w_A)`) `y` is `(B, w_H)`, the final state, as for any
morphism.  A `y` holding only final states of longer sequences is refused with a message
(write the recurrence as a program with one `sample` step per time step to treat the
intermediate states as latents).  Synthetic data for a scan are sequences of
`SYNTHETIC_STEPS` steps.
"""
from __future__ import annotations

import torch

from qvr.runtime.combinators import Scan
from qvr.runtime.errors import ObservationShapeError
from qvr.runtime.morphisms.base import ContinuousMorphism

#: sequence length of the synthetic inputs of an exported scan (`--synthetic N`: N
#: sequences of this many steps)
SYNTHETIC_STEPS = 10


class ScanStates(ContinuousMorphism):
    """`scan(cell)` seen through all its states: `rsample(x)` is `(B, L, w_H)` (h_1..h_L),
    `log_prob(x, y)` the spec's `log_joint` (`Σ_t cell.log_prob(x_t ⧺ h_{t-1}, h_t)`)."""

    def __init__(self, scan: Scan):
        super().__init__(scan.domain, scan.codomain, scan.label)
        self.scan = scan

    @property
    def output_event_rank(self) -> int:  # a sequence of states: (L, w_H)
        return 2

    def rsample(self, x, sample_shape=torch.Size()):
        s = self.scan
        x = s._sequence(x)
        if len(sample_shape):
            x = x.expand(*sample_shape, *x.shape)
        h = s._initial(x.shape[:-2], x)
        states = []
        for t in range(x.shape[-2]):
            h = s.cell.rsample(torch.cat([x[..., t, :], h.to(x.dtype)], dim=-1))
            states.append(h)
        return torch.stack(states, dim=-2)

    def log_prob(self, x, y):
        s = self.scan
        seq = s._sequence(x)
        y = torch.as_tensor(y)
        steps, width = seq.shape[-2], s.w_state
        if y.dim() == seq.dim() - 1 and steps == 1:
            y = y.unsqueeze(-2)  # one step: its final state is its only state
        if y.dim() != seq.dim() or y.shape[-2] != steps or y.shape[-1] != width:
            raise ObservationShapeError(
                f"an exported scan is fitted on every state of its sequences (its final "
                f"state alone has no density: the states before it are latent); give `y` "
                f"with one state per step of `x`, or write the recurrence as a program "
                f"with one `sample` step per time step",
                morphism=s.label, expected=f"shape {(*seq.shape[:-1], width)}",
                actual=f"shape {tuple(y.shape)}")
        return s.log_joint(seq, y)

    def synthetic_input(self, n: int) -> torch.Tensor:
        return torch.randn(n, SYNTHETIC_STEPS, self.scan.w_in)


def morphism_program(morphism):
    """`x ↦ observe y <- f(x)` around a morphism `f : A -> B` (see the module docstring;
    a scan is observed through `ScanStates`)."""
    from qvr.runtime.monadic import MonadicProgram
    observed = ScanStates(morphism) if isinstance(morphism, Scan) else morphism
    prog = MonadicProgram(morphism.domain, morphism.codomain,
                          [(("y",), observed, None, True)], ("y",))
    prog.wrapped_morphism = morphism
    if hasattr(observed, "synthetic_input"):
        prog.synthetic_input = observed.synthetic_input
    return prog
