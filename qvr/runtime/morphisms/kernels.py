"""Stochastic kernels compiled from `morphism` declarations (runtime spec 3.2, 3.3, 3.7).

* `Embed` (`role=embed`, `FinSet n -> Real d`): a Normal per element, parameters
  `centers (n, d)` and `log_sigma (n, d)`; with `positions=N` also `pos (N, d)`, a
  learned vector per position index added to the centre (design E3).
* `FamilyKernel` (`role=kernel ~ Family`): a family whose parameters are a learned
  function of the input — a lookup table `param_source.table (n, P)` for a finite domain,
  an MLP `param_source.net` (Linear-tanh-Linear-tanh-Linear) for a continuous one.  The
  raw-to-parameter transforms live in `qvr.runtime.families.KernelFamily`.
* `Discretize` (`role=discretize`): soft assignment of a bounded real line to bins.

A finite domain that is a product of finite sets takes one index column per atom (spec
1.1), flattened row-major to a table row (`qvr.runtime.values.finite_index`).
Inputs are validated (`qvr.runtime.values`) and errors name the morphism.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import constraints

from qvr.runtime.errors import PositionLimitError
from qvr.runtime.families import EPS, KernelFamily, _categorical_sample, gather_rows
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.values import as_features, as_index, finite_index

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class TableSource(nn.Module):
    """Raw parameters looked up per element of a finite domain: `table (n, P)`."""

    def __init__(self, domain, n_raw: int, who: str):
        super().__init__()
        self.domain = domain
        self.who = who
        self.table = nn.Parameter(0.1 * torch.randn(domain.size, n_raw))

    def forward(self, x):
        return self.table[finite_index(self.domain, x, who=self.who)]


class MLPSource(nn.Module):
    """Raw parameters from a continuous input: Linear(W,h)-tanh-Linear(h,h)-tanh-Linear(h,P)."""

    def __init__(self, width: int, hidden: int, n_raw: int, who: str):
        super().__init__()
        self.width = width
        self.who = who
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                 nn.Tanh(), nn.Linear(hidden, n_raw))

    def forward(self, x):
        w0, b0, w2, b2, w4, b4 = self.weights()
        x = as_features(x, self.width, who=self.who, dtype=w0.dtype)
        if x.dtype != w0.dtype:
            x = x.to(w0.dtype)
        if x.dim() > 2 and x.is_contiguous():
            # what `F.linear` does to a contiguous input of rank > 2 (a view to 2-D,
            # `addmm`, a view back), done once for the three layers instead of per layer
            lead = x.shape[:-1]
            x = x.view(-1, x.shape[-1])
        else:
            lead = None
        h = torch.tanh(F.linear(x, w0, b0))
        h = torch.tanh(F.linear(h, w2, b2))
        out = F.linear(h, w4, b4)
        return out if lead is None else out.view(*lead, out.shape[-1])

    def linears(self):
        """The three `nn.Linear` layers of `net` (positions 0, 2, 4)."""
        m = self._modules["net"]._modules
        return m["0"], m["2"], m["4"]

    def weights(self) -> tuple:
        """`(w0, b0, w2, b2, w4, b4)`: the current weights and biases of the three layers.

        The network is evaluated functionally with them (the same operations as `net(x)`,
        without the per-module call and attribute machinery: a large share of the cost of
        a small batch); forward hooks registered on `net` or its layers are therefore not
        called."""
        l0, l2, l4 = self.linears()
        try:  # the parameters themselves, read from the layers' parameter tables
            p0, p2, p4 = l0._parameters, l2._parameters, l4._parameters
            return p0["weight"], p0["bias"], p2["weight"], p2["bias"], p4["weight"], p4["bias"]
        except KeyError:  # e.g. a parametrized layer: the attributes compute the weights
            return l0.weight, l0.bias, l2.weight, l2.bias, l4.weight, l4.bias


class FamilyKernel(ContinuousMorphism):
    """`f : A -> B [role=kernel] ~ Family`."""

    def __init__(self, domain, codomain, family: str, *, scale=None, hidden_dim: int = 64,
                 label: str = None):
        super().__init__(domain, codomain, label)
        self.family_name = family
        width = codomain.size if family == "Categorical" else (
            2 if family == "Bernoulli" else codomain.width)
        self.fam = KernelFamily(family, width)
        if domain.is_discrete:
            self.param_source = TableSource(domain, self.fam.n_raw, self.label)
        else:
            self.param_source = MLPSource(domain.width, hidden_dim, self.fam.n_raw, self.label)
        if scale is not None:
            self._init_scale(float(scale))

    def _init_scale(self, s: float) -> None:
        block = self.fam.scale_block(s)
        if block is None:
            return  # families without a scale parameter: no effect (spec 3.1)
        start, stop, value = block
        with torch.no_grad():
            if isinstance(self.param_source, TableSource):
                self.param_source.table[:, start:stop] = value
            else:
                last = self.param_source.net[4]
                last.weight[start:stop] = 0.0
                last.bias[start:stop] = value

    @property
    def output_discrete(self) -> bool:
        return self.fam.discrete_output and self.family_name in ("Categorical", "Bernoulli")

    @property
    def output_width(self) -> int:
        return 1 if self.output_discrete else self.codomain.width

    @property
    def support(self):
        return self.fam.support()

    @property
    def has_rsample(self) -> bool:
        return self.fam.reparameterised

    def params(self, x):
        """The family's parameters for input `x` (each `(*batch, d)`)."""
        return self.fam.params(self.param_source(x))

    def distribution(self, x):
        return self.fam.distribution(self.params(x))

    def rsample(self, x, sample_shape=torch.Size()):
        return self.fam.sample(self.params(x), sample_shape)

    def log_prob(self, x, y):
        return self.log_prob_from_params(self.params(x), y)

    def log_prob_from_params(self, params, y, rows=None):
        """`log_prob(x, y)` given `params = self.params(x)`.

        With `rows` (int64, `y`'s batch shape) the parameters were computed once per
        distinct input, with leading axes `(n, U)`: batch position `r` of `y` is scored
        under `params[:, rows[r]]` and the result is `(n, *rows.shape)`.  Monte-Carlo
        composites use this to run the last link's network on `n x distinct` prefix
        draws only (`qvr.runtime.combinators.chain_log_prob`).
        """
        if self.output_discrete:  # class indices: integers in [0, k)
            y = as_index(y, self.fam.d, who=self.label, what="class")
        return self.fam.log_prob(params, y, rows)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()} ~ {self.family_name}"


class Embed(ContinuousMorphism):
    """`role=embed`: `y ~ Normal(centers[x], exp(log_sigma[x]))` per coordinate.

    With `positions=N` (design E3) a learned vector per position index, `pos (N, d)`
    (init `0.02 * randn`), is added to the centre: `y_t ~ Normal(centers[x_t] + pos[t],
    sigma[x_t])`, t the index along the position axis (the last batch axis of the index
    tensor; with one batch axis every row is position 0).  A longer sequence is a
    `PositionLimitError`.  Such an embed still acts row by row given the position
    (`mixes_positions` False), but its draws are not a function of the token alone:
    prefix draws must not be shared between rows with equal tokens (`positions` is not
    None; `qvr.runtime.combinators._rowwise`)."""

    def __init__(self, domain, codomain, label: str = None, positions: int = None):
        super().__init__(domain, codomain, label)
        n, d = domain.size, codomain.width
        lo, hi = getattr(codomain, "low", None), getattr(codomain, "high", None)
        if lo is not None and hi is not None:
            if d == 1:
                centers = torch.linspace(lo, hi, n).unsqueeze(-1)
            else:
                centers = lo + (hi - lo) * torch.rand(n, d)
        else:
            centers = 0.5 * torch.randn(n, d)
        self.centers = nn.Parameter(centers)
        self.log_sigma = nn.Parameter(torch.zeros(n, d))
        self.positions = None if positions is None else int(positions)
        if self.positions is not None:
            self.pos = nn.Parameter(0.02 * torch.randn(self.positions, d))

    def position_vectors(self, idx):
        """`pos[t]` broadcastable against `centers[idx]` `(*batch, d)`: `(T, d)` for an
        index tensor of rank >= 2 (positions along its last axis), `pos[0]` for rank <= 1."""
        if idx.dim() < 2:
            return self.pos[0]
        length = idx.shape[-1]
        if length > self.positions:
            raise PositionLimitError(morphism=self.label, limit=self.positions, length=length)
        return self.pos[:length]

    def params(self, x):
        idx = finite_index(self.domain, x, who=self.label)
        mu = self.centers[idx]
        if self.positions is not None:
            mu = mu + self.position_vectors(idx)
        return mu, torch.exp(self.log_sigma[idx]).clamp(min=EPS)

    def rsample(self, x, sample_shape=torch.Size()):
        mu, sigma = self.params(x)
        eps = torch.randn(tuple(sample_shape) + tuple(mu.shape), dtype=mu.dtype, device=mu.device)
        return mu + sigma * eps

    def log_prob(self, x, y):
        return self.log_prob_from_params(self.params(x), y)

    def log_prob_from_params(self, params, y, rows=None):
        """`log_prob(x, y)` given `params = self.params(x)`; `rows` as for
        `FamilyKernel.log_prob_from_params`."""
        mu, sigma = params
        if rows is not None:
            mu, sigma = gather_rows(mu, rows), gather_rows(sigma, rows)
        z = (y - mu) / sigma
        return (-0.5 * z * z - torch.log(sigma) - _LOG_SQRT_2PI).sum(-1)


class Discretize(ContinuousMorphism):
    """`role=discretize`: bins centred on `linspace(lo, hi, bins)`, soft assignment
    `softmax(-(x - c)^2 / 0.1)`; draws a bin, scores `log(p[y].clamp(EPS))`."""

    def __init__(self, domain, codomain, bins: int, label: str = None):
        super().__init__(domain, codomain, label)
        lo, hi = domain.low, domain.high
        self.bins = bins
        self.register_buffer("centers", torch.linspace(float(lo), float(hi), bins))

    @property
    def output_discrete(self) -> bool:
        return True

    def logits(self, x):
        x = as_features(x, 1, who=self.label, dtype=self.centers.dtype)
        return -(x - self.centers) ** 2 / 0.1  # (*batch, 1) against (bins,)

    def probs(self, x):
        return torch.softmax(self.logits(x), dim=-1)

    def rsample(self, x, sample_shape=torch.Size()):
        return _categorical_sample(torch.log_softmax(self.logits(x), dim=-1), sample_shape)

    def log_prob(self, x, y):
        p = self.probs(x)
        y = as_index(y, self.bins, who=self.label, what="bin")
        shape = torch.broadcast_shapes(y.shape, p.shape[:-1])
        p = p.expand(*shape, self.bins)
        return torch.log(p.gather(-1, y.expand(shape).unsqueeze(-1)).squeeze(-1).clamp(min=EPS))

    @property
    def support(self):
        return constraints.integer_interval(0, self.bins - 1)
