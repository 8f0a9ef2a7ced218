"""Combinators over runtime morphisms (runtime spec section 4).

* `compose(f, g)` — `f >> g`: a `FiniteCompose` of two finite morphisms, otherwise a
  continuous `Compose` that samples through (submodules `left`, `right`) and whose
  `log_prob` marginalises the last intermediate exactly (finite) or by Monte-Carlo with
  common random numbers (spec 4.1, 9.3);
* `tensor(f, g)` — `f @ g`: `FiniteTensor` or the continuous `Tensor`;
* `Fan` — shared input, parallel heads, outputs concatenated (spec 4.3);
* `stack(f, n)` — `n` independent deep copies chained; `repeat(f, n)` — the same object
  chained `n` times (weight tying);
* `Scan` — a recurrence over the sequence axis (spec 4.7).

`RepeatRuntime` (`repeat(f)` without a count) lives with the finite morphisms.  Types are
checked here only for morphisms combined from Python (the front end checked QVR modules).
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

from qvr.runtime.errors import IncompatibleMorphismsError, InputShapeError
from qvr.runtime.morphisms.base import ContinuousMorphism, Morphism
from qvr.runtime.morphisms.finite import FiniteCompose, FiniteMorphism, FiniteTensor
from qvr.runtime.objects import QvrObject, product
from qvr.runtime.values import as_features, as_tensor

EPS = 1e-7
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def compatible(a: QvrObject, b: QvrObject) -> bool:
    """`A ≅ B` of qvr-language.md 3.3 on runtime objects."""
    if a.is_discrete and b.is_discrete:
        return [x.cardinality for x in a.atoms()] == [x.cardinality for x in b.atoms()]
    if a.is_continuous and b.is_continuous:
        return a.width == b.width
    aa, bb = a.atoms(), b.atoms()
    return len(aa) == len(bb) and all(type(x) is type(y) and x.width == y.width and
                                      getattr(x, "cardinality", None) == getattr(y, "cardinality", None)
                                      for x, y in zip(aa, bb))


def _check_compose(f, g) -> None:
    if not compatible(f.codomain, g.domain):
        raise IncompatibleMorphismsError(
            "the codomain of the left operand does not match the domain of the right one",
            morphism=f"{f.label} >> {g.label}", expected=f"a domain compatible with "
            f"`{f.codomain.name}`", actual=f"`{g.domain.name}`")


def compose(f: Morphism, g: Morphism, *, check: bool = True, label: str = None) -> Morphism:
    if check:
        _check_compose(f, g)
    if isinstance(f, FiniteMorphism) and isinstance(g, FiniteMorphism):
        return FiniteCompose(f, g, label=label)
    return Compose(f, g, label=label)


def tensor(f: Morphism, g: Morphism, *, label: str = None) -> Morphism:
    if isinstance(f, FiniteMorphism) and isinstance(g, FiniteMorphism):
        return FiniteTensor(f, g, label=label)
    return Tensor(f, g, label=label)


def chain(parts, *, label: str = None) -> Morphism:
    """`parts[0] >> parts[1] >> ...`, left-associated."""
    out = parts[0]
    for p in parts[1:]:
        out = compose(out, p, check=False)
    if label is not None and len(parts) > 1:
        out.label = label
    return out


def stack(f: Morphism, n: int, *, label: str = None) -> Morphism:
    """`n` deep copies of `f` (fresh parameters, initially equal values), chained."""
    copies = [copy.deepcopy(f) for _ in range(n)]
    return chain(copies, label=label or f"stack({f.label}, {n})")


def repeat(f: Morphism, n: int, *, label: str = None) -> Morphism:
    """`f >> f >> ... >> f` with the same object (shared parameters)."""
    return chain([f] * n, label=label or f"repeat({f.label}, {n})")


def _cat_outputs(parts, outs):
    cols = [o.unsqueeze(-1) if p.output_event_rank == 0 else o for p, o in zip(parts, outs)]
    if any(c.is_floating_point() for c in cols):
        dtype = next(c.dtype for c in cols if c.is_floating_point())
        cols = [c if c.dtype == dtype else c.to(dtype) for c in cols]
    if len({c.shape[:-1] for c in cols}) > 1:
        shape = torch.broadcast_shapes(*[c.shape[:-1] for c in cols])
        cols = [c.expand(*shape, c.shape[-1]) for c in cols]
    return torch.cat(cols, dim=-1)


def _split_values(parts, y):
    """Split the last axis of `y` by the parts' output widths (scalar-discrete squeezed)."""
    out, start = [], 0
    for p in parts:
        w = p.output_width
        piece = y[..., start:start + w]
        if p.output_event_rank == 0:
            piece = piece.squeeze(-1)
        if p.output_discrete and piece.is_floating_point():
            piece = piece.long()
        out.append(piece)
        start += w
    return out


def _split_inputs(parts, x, who):
    """Split an input row by the parts' domain widths (finite single columns squeezed)."""
    x = as_tensor(x)
    total = sum(p.domain.width for p in parts)
    if x.dim() == 0 or x.shape[-1] != total:
        raise InputShapeError("the input row of a tensor product holds the components side "
                              "by side", morphism=who, expected=f"shape (..., {total})",
                              actual=f"shape {tuple(x.shape)}")
    out, start = [], 0
    for p in parts:
        w = p.domain.width
        piece = x[..., start:start + w]
        if p.domain.is_discrete:
            if w == 1:
                piece = piece.squeeze(-1)
            if piece.is_floating_point():
                from qvr.runtime.values import as_index
                piece = as_index(piece, p.domain.size if w == 1 else 1 << 62, who=who)
        elif not piece.is_floating_point():
            piece = piece.to(torch.get_default_dtype())
        out.append(piece)
        start += w
    return out


class Compose(ContinuousMorphism):
    """`f >> g` with at least one continuous side (spec 4.1)."""

    def __init__(self, left: Morphism, right: Morphism, label: str = None):
        super().__init__(left.domain, right.codomain, label or f"{left.label} >> {right.label}")
        self.left = left
        self.right = right
        self.n_intermediate = 100
        self.mc_seed = 0
        self._links = left.links() + right.links()

    def links(self) -> list:
        return list(self._links)

    @property
    def output_discrete(self) -> bool:
        return self.right.output_discrete

    @property
    def output_width(self) -> int:
        return self.right.output_width

    @property
    def output_event_rank(self) -> int:
        return self.right.output_event_rank

    @property
    def support(self):
        return self.right.support

    def rsample(self, x, sample_shape=torch.Size()):
        return chain_rsample(self._links, x, sample_shape)

    def log_prob(self, x, z):
        return chain_log_prob(self._links, x, z, self.n_intermediate, self.mc_seed)


def chain_rsample(links, x, sample_shape=torch.Size()):
    y = links[0].rsample(x, sample_shape)
    for link in links[1:]:
        y = link.rsample(y)
    return y


def chain_log_prob(links, x, z, n: int = 100, seed: int = 0):
    """`log p(z | x)` of the chain `links[0] >> ... >> links[-1]` (spec 4.1)."""
    if len(links) == 1:
        return links[0].log_prob(x, z)
    prefix, last = links[:-1], links[-1]
    mid = prefix[-1]
    z = as_tensor(z)
    if mid.output_discrete and mid.codomain.is_discrete and mid.output_event_rank == 0:
        # exact: logsumexp over every value of the finite intermediate
        # every value y of the k-element intermediate, with the batch of z; the input is
        # repeated along a leading class axis so that nested Monte-Carlo prefixes broadcast
        k = mid.codomain.size
        batch = z.shape[:z.dim() - last.output_event_rank]
        ys = torch.arange(k, device=z.device).reshape(k, *([1] * len(batch))).expand(k, *batch)
        x = as_tensor(x)
        xs = x.unsqueeze(0).expand(k, *x.shape)
        lp = chain_log_prob(prefix, xs, ys, n, seed) + last.log_prob(ys, z)
        return torch.logsumexp(lp, dim=0)
    device = z.device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        ys = chain_rsample(prefix, x, torch.Size([n]))
    lp = last.log_prob(ys, z)
    return torch.logsumexp(lp, dim=0) - math.log(n)


class Tensor(ContinuousMorphism):
    """`f @ g` with a continuous side: inputs split by width, outputs side by side."""

    def __init__(self, left: Morphism, right: Morphism, label: str = None):
        super().__init__(product((left.domain, right.domain)),
                         product((left.codomain, right.codomain)),
                         label or f"{left.label} @ {right.label}")
        self.left = left
        self.right = right

    @property
    def output_discrete(self) -> bool:
        return self.left.output_discrete and self.right.output_discrete

    @property
    def output_width(self) -> int:
        return self.left.output_width + self.right.output_width

    @property
    def output_event_rank(self) -> int:
        return 1

    def rsample(self, x, sample_shape=torch.Size()):
        parts = (self.left, self.right)
        xs = _split_inputs(parts, x, self.label)
        outs = [p.rsample(xi, sample_shape) for p, xi in zip(parts, xs)]
        return _cat_outputs(parts, outs)

    def log_prob(self, x, y):
        parts = (self.left, self.right)
        xs = _split_inputs(parts, x, self.label)
        ys = _split_values(parts, as_tensor(y))
        return sum(p.log_prob(xi, yi) for p, xi, yi in zip(parts, xs, ys))


class Fan(ContinuousMorphism):
    """`fan(f_1, ..., f_k)`: every part on the same input; outputs concatenated (spec 4.3).

    When every part is a Normal kernel with an MLP parameter source of the same shape (the
    replicated heads of multi-head attention), the parts are evaluated together: one matmul
    for the first layer, batched matmuls for the others, and one draw of the Normal noise
    for all heads.  The result is the same law; only the order in which random numbers are
    consumed differs from part-by-part evaluation.
    """

    def __init__(self, parts, label: str = None):
        parts = list(parts)
        cod = product([p.codomain for p in parts])
        super().__init__(parts[0].domain, cod,
                         label or f"fan({', '.join(p.label for p in parts)})")
        self.parts = nn.ModuleList(parts)
        self.batched = _batchable(parts)

    @property
    def output_discrete(self) -> bool:
        return all(p.output_discrete for p in self.parts)

    @property
    def output_width(self) -> int:
        return sum(p.output_width for p in self.parts)

    @property
    def output_event_rank(self) -> int:
        if len(self.parts) == 1:
            return self.parts[0].output_event_rank
        return 1

    def rsample(self, x, sample_shape=torch.Size()):
        parts = list(self.parts)
        if len(parts) == 1:
            return parts[0].rsample(x, sample_shape)
        if self.batched:
            loc, scale = self._batched_params(x)
            eps = torch.randn(tuple(sample_shape) + tuple(loc.shape), dtype=loc.dtype,
                              device=loc.device)
            y = loc + scale * eps
            return y.reshape(*y.shape[:-2], -1)
        return _cat_outputs(parts, [p.rsample(x, sample_shape) for p in parts])

    def log_prob(self, x, y):
        parts = list(self.parts)
        if len(parts) == 1:
            return parts[0].log_prob(x, y)
        if self.batched:
            loc, scale = self._batched_params(x)
            y = as_tensor(y)
            z = (y.reshape(*y.shape[:-1], len(parts), -1) - loc) / scale
            return (-0.5 * z * z - torch.log(scale) - _LOG_SQRT_2PI).sum((-2, -1))
        ys = _split_values(parts, as_tensor(y))
        return sum(p.log_prob(x, yi) for p, yi in zip(parts, ys))

    def _batched_params(self, x):
        """Normal parameters of every part, `(*batch, k, d)` each."""
        parts = list(self.parts)
        nets = [p.param_source.net for p in parts]
        src = parts[0].param_source
        x = as_features(x, src.width, who=parts[0].label, dtype=nets[0][0].weight.dtype)
        lead = x.shape[:-1]
        k = len(nets)
        w0 = torch.cat([n[0].weight for n in nets])
        b0 = torch.cat([n[0].bias for n in nets])
        h = torch.tanh(torch.nn.functional.linear(x, w0, b0))  # (*lead, k*h)
        h = h.reshape(-1, k, h.shape[-1] // k).transpose(0, 1)  # (k, N, h)
        w2 = torch.stack([n[2].weight for n in nets])
        b2 = torch.stack([n[2].bias for n in nets]).unsqueeze(1)
        h = torch.tanh(torch.baddbmm(b2, h, w2.transpose(1, 2)))
        w4 = torch.stack([n[4].weight for n in nets])
        b4 = torch.stack([n[4].bias for n in nets]).unsqueeze(1)
        raw = torch.baddbmm(b4, h, w4.transpose(1, 2)).transpose(0, 1)  # (N, k, P)
        raw = raw.reshape(*lead, k, raw.shape[-1])
        d = raw.shape[-1] // 2
        return raw[..., :d], torch.exp(raw[..., d:]).clamp(min=EPS)


def _batchable(parts) -> bool:
    from qvr.runtime.morphisms.kernels import FamilyKernel, MLPSource
    if len(parts) < 2 or not all(type(p) is FamilyKernel and p.family_name == "Normal" and
                                 isinstance(p.param_source, MLPSource) for p in parts):
        return False
    shapes = {tuple(tuple(q.shape) for q in p.param_source.parameters()) for p in parts}
    return len(shapes) == 1


class Scan(ContinuousMorphism):
    """`scan(cell)`: thread a state through the sequence axis (-2) of the input (spec 4.7).

    `cell : A_1 * ... * A_m * H -> H'`; the scan maps `(..., L, w_A)` to the final state
    `(..., w_H)`, starting from zeros.  A 2-D input `(B, w_A)` is one step (`L = 1`).
    """

    def __init__(self, cell: Morphism, label: str = None):
        comps = cell.domain.components
        super().__init__(product(comps[:-1]), comps[-1], label or f"scan({cell.label})")
        self.cell = cell
        self.w_in = sum(c.width for c in comps[:-1])
        self.w_state = comps[-1].width

    def _sequence(self, x):
        x = as_tensor(x)
        if x.dim() == 0:
            raise InputShapeError("a scan input needs batch, sequence and feature axes",
                                  morphism=self.label, expected=f"shape (B, L, {self.w_in})",
                                  actual=f"shape {tuple(x.shape)}")
        if x.dim() == 1:
            x = x.unsqueeze(-1)
        if x.shape[-1] != self.w_in:
            raise InputShapeError("the last axis of a scan input holds one step's input",
                                  morphism=self.label, expected=f"shape (B, L, {self.w_in})",
                                  actual=f"shape {tuple(x.shape)}")
        if x.dim() == 2:
            x = x.unsqueeze(-2)
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        return x

    def _initial(self, batch_shape, like):
        return torch.zeros(*batch_shape, self.w_state, dtype=like.dtype, device=like.device)

    def rsample(self, x, sample_shape=torch.Size()):
        x = self._sequence(x)
        if len(sample_shape):
            x = x.expand(*sample_shape, *x.shape)
        h = self._initial(x.shape[:-2], x)
        for t in range(x.shape[-2]):
            h = self.cell.rsample(torch.cat([x[..., t, :], h.to(x.dtype)], dim=-1))
        return h

    def log_prob(self, x, y):
        x = self._sequence(x)
        return torch.zeros(x.shape[:-2], dtype=x.dtype, device=x.device)

    def log_joint(self, x, hidden_states, *, state_key: str = "h"):
        """`sum_t cell.log_prob(concat(x_t, h_{t-1}), h_t)` for all states `(B, L, w_H)`."""
        if isinstance(hidden_states, dict):
            hidden_states = hidden_states[state_key]
        x = self._sequence(x)
        hs = as_tensor(hidden_states)
        if hs.dim() == x.dim() - 1:
            hs = hs.unsqueeze(-2)
        h = self._initial(x.shape[:-2], x)
        total = torch.zeros(x.shape[:-2], dtype=x.dtype, device=x.device)
        for t in range(x.shape[-2]):
            h_t = hs[..., t, :]
            total = total + self.cell.log_prob(torch.cat([x[..., t, :], h], dim=-1), h_t)
            h = h_t.to(x.dtype)
        return total
