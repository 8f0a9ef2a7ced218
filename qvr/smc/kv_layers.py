"""The layers of an incremental SMC plan (`qvr.smc.kv_cache.KVPlan`): one small class per
link kind that extends a particle's state by one position (`step`) or recomputes every
position from the stored noise (`full`): `EmbedLayer`, `KernelLayer`, `AttentionLayer`
(keys and values cached per slot), `ResidualLayer`, `DeterministicLayer`, `OpaqueLayer`,
grouped by `Chain`; and the token `Head`.  See `kv_cache`'s docstring for what a particle
is and the two ways to hold its state."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from qvr.runtime.combinators import common_random_numbers

from .kv_noise import Draws, Layout, Noise, Rng

__all__ = ["Layer", "Chain", "EmbedLayer", "KernelLayer", "AttentionLayer", "ResidualLayer",
           "DeterministicLayer", "OpaqueLayer", "Head", "LOC_SCALE", "EPS"]

EPS = 1e-7  # the scale floor of the runtime's Normal kernels and embeddings


class Layer:
    """One link of the chain, run position by position.

    * ``step(x, t, cache, noise)``: `x` the link's input at position `t` (``(S, w)``
      features, or ``(S,)`` tokens for the first link, in *slot* order: see `KVPlan`),
      `noise` the new position's draws; returns ``(y, cache)``, the output at `t` and
      the cache extended by it.
    * ``full(x, noise)``: `x` the input at every position ``0..T-1`` (``(M, T, w)``),
      `noise` every position's draws (``(M, T, W)`` blocks); returns the output at every
      position (the recomputation).
    * ``init(S, like)``: the empty cache; ``prepare()``: read the parameters a run uses.
    """

    def prepare(self) -> None:
        pass

    def init(self, S: int, like: torch.Tensor):
        return None

    def step(self, x, t: int, cache, noise: Noise):  # pragma: no cover - abstract
        raise NotImplementedError

    def full(self, x, noise: Noise):  # pragma: no cover - abstract
        raise NotImplementedError

    def buffers(self, cache) -> list:
        """The per-slot tensors of `cache` (copied when a particle is duplicated)."""
        return []


class Chain(Layer):
    """Layers applied in order; the cache is a list, one entry per layer."""

    def __init__(self, layers: list):
        self.layers = layers

    def prepare(self):
        for layer in self.layers:
            layer.prepare()

    def init(self, S, like):
        return [layer.init(S, like) for layer in self.layers]

    def step(self, x, t, cache, noise):
        out = []
        for layer, c in zip(self.layers, cache):
            x, c = layer.step(x, t, c, noise)
            out.append(c)
        return x, out

    def full(self, x, noise):
        for layer in self.layers:
            x = layer.full(x, noise)
        return x

    def buffers(self, cache):
        return [b for layer, c in zip(self.layers, cache) for b in layer.buffers(c)]


class EmbedLayer(Layer):
    """``role=embed``: ``centers[x_t] + pos[t] + sigma[x_t] * eps`` (``pos`` only with
    ``positions=N``; a position at or beyond `N` is a `PositionLimitError`)."""

    def __init__(self, link, layout: Layout):
        self.link = link
        self.limit = getattr(link, "positions", None)
        self.draws = Draws(layout, "Normal", link.codomain.width)

    def prepare(self):
        link = self.link
        self.sigma = torch.exp(link.log_sigma).clamp(min=EPS)
        self.pos = getattr(link, "pos", None) if self.limit is not None else None

    def _check(self, length: int):
        if self.limit is not None and length > self.limit:
            from qvr.runtime.errors import PositionLimitError
            raise PositionLimitError(morphism=self.link.label, limit=int(self.limit),
                                     length=length)

    def step(self, x, t, cache, noise):
        mu = F.embedding(x, self.link.centers)
        if self.pos is not None:
            self._check(t + 1)
            mu += self.pos[t]
        return mu.addcmul_(F.embedding(x, self.sigma), self.draws(noise)), None

    def full(self, x, noise):
        mu = self.link.centers[x]  # (M, T, d)
        if self.pos is not None:
            self._check(x.shape[1])
            mu = mu + self.pos[:x.shape[1]]
        return torch.addcmul(mu, self.sigma[x], self.draws(noise))


#: kernel families drawn here as ``transform(loc + scale * standard draw)``
LOC_SCALE = ("Normal", "LogitNormal", "Laplace", "Cauchy", "Gumbel")


class KernelLayer(Layer):
    """``role=kernel ~ F``, F a location-scale family (`LOC_SCALE`): the parameters of the
    input row (an MLP evaluated functionally on the layer's weights, or the table row),
    then ``loc + scale * eps`` (its sigmoid for LogitNormal).  The recomputation uses the
    kernel's own ``params``."""

    def __init__(self, link, layout: Layout):
        from qvr.runtime.morphisms.kernels import MLPSource
        self.link, self.family = link, link.family_name
        self.mlp = isinstance(link.param_source, MLPSource)
        self.draws = Draws(layout, self.family, link.codomain.width)

    def prepare(self):
        self.weights = self.link.param_source.weights() if self.mlp else None

    def _value(self, params, eps):
        loc, scale = params
        y = torch.addcmul(loc, scale, eps)
        return torch.sigmoid(y) if self.family == "LogitNormal" else y

    def step(self, x, t, cache, noise):
        if not self.mlp:
            return self._value(self.link.params(x), self.draws(noise)), None
        w0, b0, w2, b2, w4, b4 = self.weights
        raw = F.linear(F.linear(F.linear(x, w0, b0).tanh_(), w2, b2).tanh_(), w4, b4)
        if self.family == "Normal":  # fam.params and _value, in place on fresh tensors
            loc, log_scale = raw.chunk(2, -1)
            return torch.addcmul(loc, log_scale.exp_().clamp_(min=EPS), self.draws(noise)), None
        return self._value(self.link.fam.params(raw), self.draws(noise)), None

    def full(self, x, noise):
        return self._value(self.link.params(x), self.draws(noise))


class AttentionLayer(Layer):
    """``role=attention, causal``: per slot, the keys and values of every earlier
    position in buffers ``(S, H, capacity, k)`` (capacity doubled when full).  A new
    position is one query per head against the ``t + 1`` cached keys — exactly the
    positions ``<= t`` the causal mask lets it see, so no mask is applied — then the head
    mix and the family noise ``m + scale * eps``: `Attention.project`, `attend` and `mix`
    on one position, with the projection weights concatenated once per run.  The
    recomputation is the layer's own ``mean`` over the whole prefix.

    ``causal=strict`` (`Attention.strict`): the new position's key and value are cached
    for later positions but its query sees only the ``t`` earlier keys; at ``t = 0``
    there are none and the heads' output is 0 (the rule of `Attention`: a query with no
    visible key attends to nothing), so ``m = 0`` before the noise."""

    START = 32

    def __init__(self, link, layout: Layout):
        self.link = link
        self.strict = bool(getattr(link, "strict", False))
        self.draws = None if link.family_name is None else \
            Draws(layout, link.family_name, link.codomain.width)

    def prepare(self):
        link = self.link
        # the queries' weights carry the 1/sqrt(k) of the scores (one multiplication less)
        inv = 1.0 / math.sqrt(link.head_dim)
        self.w_qkv = torch.cat([link.w_q * inv, link.w_k, link.w_v]).reshape(-1, link.d_in)
        self.w_o = link.w_o
        self.scale = link.scale()

    def init(self, S, like):
        link = self.link
        shape = (S, link.heads, self.START, link.head_dim)
        return like.new_zeros(shape), like.new_zeros(shape)

    def step(self, x, t, cache, noise):
        link = self.link
        S, H, k = x.shape[0], link.heads, link.head_dim
        kb, vb = cache
        if t >= kb.shape[2]:
            kb = torch.cat([kb, torch.zeros_like(kb)], 2)
            vb = torch.cat([vb, torch.zeros_like(vb)], 2)
        q, kb[:, :, t], vb[:, :, t] = F.linear(x, self.w_qkv).view(S, 3, H, k).unbind(1)
        n = t if self.strict else t + 1  # the keys the new position sees
        if n == 0:  # strict, first position: no key, the heads' output is 0
            o = q.new_zeros((S, H, 1, k))
        else:
            keys, values = kb[:, :, :n], vb[:, :, :n]  # (S, H, n, k)
            scores = torch.matmul(keys, q.unsqueeze(-1)).squeeze(-1)  # (S, H, n), scaled
            o = torch.matmul(torch.softmax(scores, -1).unsqueeze(-2), values)  # (S, H, 1, k)
        m = F.linear(o.reshape(S, H * k), self.w_o)
        if self.draws is None:
            return m, (kb, vb)
        return m.addcmul_(self.scale, self.draws(noise)), (kb, vb)

    def full(self, x, noise):
        m = self.link.mean(x)  # (M, T, dB), causal
        if self.draws is None:
            return m
        return torch.addcmul(m, self.scale, self.draws(noise))

    def buffers(self, cache):
        return list(cache)


class ResidualLayer(Layer):
    """``residual(f)``: ``x + y``, `y` from the inner chain (its caches and noise)."""

    def __init__(self, inner: Chain):
        self.inner = inner

    def prepare(self):
        self.inner.prepare()

    def init(self, S, like):
        return self.inner.init(S, like)

    def step(self, x, t, cache, noise):
        y, cache = self.inner.step(x, t, cache, noise)
        return x + y, cache

    def full(self, x, noise):
        return x + self.inner.full(x, noise)

    def buffers(self, cache):
        return self.inner.buffers(cache)


class DeterministicLayer(Layer):
    """A deterministic row-wise link (``layer_norm``, ``rms_norm``, ...): its map (the
    norms' ``normalise`` directly)."""

    def __init__(self, link):
        self.link = link
        fn = getattr(link, "normalise", None)
        self.fn = fn if callable(fn) else link.rsample

    def step(self, x, t, cache, noise):
        return self.fn(x), None

    def full(self, x, noise):
        return self.fn(x)


class OpaqueLayer(Layer):
    """Any other row-wise link (a kernel of another family, a fan, a finite morphism, a
    user morphism): drawn by its own ``rsample`` on the new position, with the global RNG
    seeded from the run's stream (one seed per position).  Its noise is the drawn value
    itself (a function of its input row and its randomness), stored per position, so a
    recomputation reuses the values of earlier positions instead of redrawing them.

    The draw runs on the particles' rows in particle order (not in slot order), so that
    both variants consume the seeded stream alike."""

    def __init__(self, link, layout: Layout):
        self.link = link
        self.index = layout.opaque
        layout.opaque += 1
        self.slots = None  # set by KVPlan.extend for a cached step: particle -> slot

    def _draw(self, x, noise, device):
        with common_random_numbers(noise.seeds[self.index], device):
            return self.link.rsample(x)

    def step(self, x, t, cache, noise):
        slots = self.slots
        if slots is None:
            return self._draw(x, noise, x.device), None
        y = self._draw(x.index_select(0, slots), noise, x.device)
        out = y.new_zeros((x.shape[0],) + tuple(y.shape[1:]))
        return out.index_copy_(0, slots, y), None

    def full(self, x, noise):
        y = self._draw(x[:, -1], noise, x.device).unsqueeze(1)
        stored = noise.values[self.index]
        y = y if stored is None else torch.cat([stored, y], dim=1)
        noise.values[self.index] = y
        return y


class Head:
    """The last link, which turns the final hidden value into tokens: `n` iid draws per
    particle.  A Categorical kernel computes its logits once per particle and draws with
    ``torch.multinomial`` (inverse CDF: a quarter of the cost of Gumbel-max on `n` copies
    of the logits, measured); any other head draws through its ``rsample`` on `n` copies
    (seeded)."""

    def __init__(self, link):
        from qvr.runtime.morphisms.kernels import FamilyKernel
        self.link = link
        self.categorical = type(link) is FamilyKernel and link.family_name == "Categorical"

    def draw(self, h: torch.Tensor, n: int, rng: Rng) -> torch.Tensor:
        if self.categorical:
            probs = torch.softmax(self.link.params(h)[0], dim=-1)  # (M, V)
            return torch.multinomial(probs, n, replacement=True, generator=rng.gen)
        with common_random_numbers(rng.seeds(1)[0], h.device):
            out = self.link.rsample(h.repeat_interleave(n, 0))
        return torch.as_tensor(out).long().reshape(h.shape[0], n)
