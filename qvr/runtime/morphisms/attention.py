"""`role=attention`: multi-head dot-product self-attention over the position axis (design E2).

`morphism attn : A -> B [role=attention, heads=H, head_dim=k, causal, scale=s] ~ Family`
compiles to `Attention` (`causal=True`; `causal=strict` to `causal="strict"`).  Parameters (no biases):

* `w_q`, `w_k`, `w_v` — `(H, k, width(A))`: per head, `q = x W_Q[h]^T` (and k, v alike);
* `w_o` — `(width(B), H*k)`: the heads' outputs concatenated head-major, then mapped;
* `log_scale` — `(width(B),)`, only with a family, initialised to `log(s)`.

Per head, `s_ij = q_i . k_j / sqrt(k)`; with `causal` position `i` sees only `j <= i`,
with `causal=strict` only `j < i`; `o_i = sum_j softmax_j(s_ij) v_j`; `m_i = W_O concat_h o_i`.  Without a family the
morphism is deterministic (`y = m`); with one, `y_i ~ Family(m_i, exp(log_scale))` per
coordinate (Normal, Laplace or Cauchy).

Position axis (design E1): a feature tensor `(..., T, dA)` of rank >= 3 holds sequences
along axis -2; any further leading axes (batch, Monte-Carlo draws) are carried through.
A rank-2 input `(B, dA)` is B sequences of length 1 (every row only sees itself, so the
map is then the row-wise linear map `W_O concat_h W_V[h] x`).  `log_prob(x, y)` reads the
number of batch axes from `y` instead (`y (B, dB)` against draws `x (n, B, dA)` is n x B
sequences of length 1), since only `y` is free of Monte-Carlo axes there.

Decisions:
* initialisation: every weight uniform in `(-1/sqrt(fan_in), 1/sqrt(fan_in))`, the
  default of `nn.Linear` (fan_in = width(A) for W_Q/W_K/W_V, H*k for W_O);
* `mean` (the whole deterministic map, used by `rsample`/`log_prob`) goes through
  `torch.nn.functional.scaled_dot_product_attention`: the same numbers as `attend` within
  float tolerance (max difference ~2e-7 in float32), and faster because it never returns
  the pattern (measured on CPU, one thread, forward + backward, minimum of 45 runs: equal
  at T = 16; 11.2 -> 7.8 ms at B=64, T=64, d=64, 4 heads; 11.1 -> 6.1 ms at B=8, T=128,
  d=64, 8 heads; at head_dim 8, the decoder example's 4 heads x 8, torch 2.13, one
  thread, 65536 positions, explicit -> SDPA forward 50 -> 32 ms at T=8, 25 -> 17 at
  T=16, 147 -> 29 at T=64, 300 -> 39 at T=128, forward + backward 206 -> 101, 121 -> 70,
  287 -> 92, 646 -> 121 ms: never slower); under `vmap` the explicit form (SDPA has no
  batching rule there and falls back to a loop).  SDPA gets 4-D inputs `(N, H, T, k)`:
  torch's fused CPU kernel takes nothing else and a 5-D input (the `n` joint
  Monte-Carlo draws of a sequence estimator: `(n, B, H, T, k)`) silently runs the
  unfused math path instead; the leading axes are merged (a view).  Measured at
  n=8, B=64, T=128, 4 heads x 8, one thread: 273 -> 39 ms forward, 471 -> 122 ms
  forward + backward; the decoder example's log-density (`--draws 8`, 64 x 128, one
  thread) 656 -> 222 ms, forward + backward (an SVI step) 1291 -> 580 ms.
  `attend`/`pattern` compute the weights explicitly because their callers want them
  (circuits, KV caches);
* strict causality (`causal=strict`, seed 003's "z_q does not attend to itself"): query i
  sees keys `j < offset + i`.  Decision — a query with no visible key (position 0, and
  every position of a rank-2 input, sequences of length 1) attends to nothing: its heads'
  outputs `o_i` are 0, so `m_i = W_O 0 = 0` (no bias), never NaN.  A softmax over an
  empty set is undefined (all `-inf`: NaN in the values and, through the softmax's
  backward, in every gradient), so such a row's mask is 0 (a finite softmax over all
  keys) and its weights (`attend`) or its output (`_mean_seq`, SDPA) are multiplied by
  a 0/1 `(Tq, 1)` keep-vector: the value is exactly 0 and the row's gradient exactly 0.
  SDPA's `is_causal` only expresses `j <= i`; strict goes through `attn_mask` (the
  additive mask); the bare `causal` keeps `is_causal`, so its numbers are bit-identical
  to what they were;
* causal masks are additive (0 / -inf) tensors cached per `(Tq, Tk, offset, strict,
  device, dtype)`; `attend` scales q before the product and adds the mask (instead of scaling
  the scores and `masked_fill`): measured under `vmap` (the ELBO's particles), one
  thread, head_dim 8, forward + backward, 10-30% faster (294 -> 200 ms at K=4, B=64,
  T=128; 28 -> 24 ms at K=4, B=256, T=16), the same numbers within 2e-7 (float32).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Cauchy, Laplace, Normal, constraints

from qvr.runtime.errors import DeterministicError
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.values import as_features

#: location-scale families an attention may draw from
FAMILIES = {"Normal": Normal, "Laplace": Laplace, "Cauchy": Cauchy}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SCALE_FLOOR = 1e-6
_is_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor",
                      lambda t: False)


def _sdpa(q, k, v, **kw):
    """`scaled_dot_product_attention` of `(..., H, T, k)` inputs with any leading axes
    (Monte-Carlo draws, batch) merged into one: the fused CPU kernel takes 4-D inputs
    only, anything else runs the unfused math path (module docstring); the merge is a
    view of the projection's output."""
    if q.dim() <= 4:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    lead = q.shape[:-3]
    o = F.scaled_dot_product_attention(q.flatten(0, -4), k.flatten(0, -4), v.flatten(0, -4),
                                       **kw)
    return o.unflatten(0, lead)


class Attention(ContinuousMorphism):
    """Multi-head self-attention `A -> B` (design E2); see the module docstring."""

    mixes_positions = True

    def __init__(self, domain, codomain, *, heads: int = 1, head_dim: int = None,
                 causal=False, family: str = None, scale: float = 0.1,
                 label: str = None):
        """`causal`: False, True (keys j <= i) or "strict" (keys j < i)."""
        super().__init__(domain, codomain, label)
        if causal not in (False, True, "strict"):
            raise ValueError(f"`{label}`: causal is False, True or \"strict\", got {causal!r}")
        d_a, d_b = domain.width, codomain.width
        heads = int(heads)
        if head_dim is None:
            if d_a % heads:
                raise ValueError(f"`{self.label}`: {heads} heads do not divide the width "
                                 f"{d_a} of `{domain.name}`; give head_dim")
            head_dim = d_a // heads
        head_dim = int(head_dim)
        if family is not None and family not in FAMILIES:
            raise ValueError(f"`{self.label}`: attention draws from a location-scale family "
                             f"(Normal, Laplace or Cauchy), not {family}")
        # `causal` stays a bool (True for both kinds: every position sees only the past, what
        # SMC's next-token check asks); `strict` says the diagonal is excluded too
        self.heads, self.head_dim, self.causal = heads, head_dim, bool(causal)
        self.strict = causal == "strict"
        self.family_name = family
        self.d_in, self.d_out = d_a, d_b
        bound_in, bound_out = 1 / math.sqrt(d_a), 1 / math.sqrt(heads * head_dim)

        def uniform(shape, bound):
            return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))

        self.w_q = uniform((heads, head_dim, d_a), bound_in)
        self.w_k = uniform((heads, head_dim, d_a), bound_in)
        self.w_v = uniform((heads, head_dim, d_a), bound_in)
        self.w_o = uniform((d_b, heads * head_dim), bound_out)
        if family is not None:
            self.log_scale = nn.Parameter(torch.full((d_b,), math.log(float(scale))))
        else:
            self.log_scale = None
        self._masks: dict = {}

    # ------------------------------------------------------------ properties
    @property
    def deterministic(self) -> bool:
        """True without a family: `y = mean(x)`, no density."""
        return self.family_name is None

    @property
    def causal_mode(self):
        """What `attend` takes: False, True or "strict"."""
        return "strict" if self.strict else self.causal

    @property
    def support(self):
        return constraints.real

    # ------------------------------------------------------------ the map, piece by piece
    def _features(self, x):
        return as_features(x, self.d_in, who=self.label, dtype=self.w_q.dtype)

    def project(self, x):
        """`(q, k, v)`, each `(..., H, T, k)`, from features `(..., T, dA)` (one matmul)."""
        x = self._features(x)
        if x.dtype != self.w_q.dtype:
            x = x.to(self.w_q.dtype)
        H, k = self.heads, self.head_dim
        w = torch.cat([self.w_q, self.w_k, self.w_v]).reshape(3 * H * k, self.d_in)
        qkv = F.linear(x, w)  # (..., T, 3*H*k)
        qkv = qkv.unflatten(-1, (3, H, k)).movedim(-4, -2)  # (..., 3, H, T, k)
        return qkv.unbind(-4)

    def _mask(self, tq: int, tk: int, offset: int, device, dtype, strict: bool = False):
        """Additive causal mask `(tq, tk)`: 0 where query i sees key j (`j <= offset + i`;
        strict: `j < offset + i`), `-inf` where it may not.  A strict row with no visible
        key (`offset + i == 0`) is all 0 instead, a finite softmax that `_keep` zeroes."""
        key = (tq, tk, offset, strict, device, dtype)
        m = self._masks.get(key)
        if m is None:
            m = torch.full((tq, tk), -math.inf, dtype=dtype, device=device)
            m = m.triu(offset) if strict else m.triu(offset + 1)
            if strict and offset == 0 and tq:
                m[0] = 0.0
            if len(self._masks) >= 64:
                self._masks.clear()
            self._masks[key] = m
        return m

    def _keep(self, tq: int, offset: int, device, dtype):
        """Strict causality: `(tq, 1)`, 0 for a query that sees no key (`offset + i == 0`)
        and 1 elsewhere; None when every query sees one (module docstring)."""
        if offset > 0 or tq == 0:
            return None
        key = ("keep", tq, device, dtype)
        m = self._masks.get(key)
        if m is None:
            m = torch.ones((tq, 1), dtype=dtype, device=device)
            m[0] = 0.0
            if len(self._masks) >= 64:
                self._masks.clear()
            self._masks[key] = m
        return m

    def attend(self, q, k, v, *, causal, offset: int = 0):
        """`(o, weights)`: `o (..., H, Tq, k)`, `weights (..., H, Tq, Tk)`.

        `offset` is the absolute position of the first query (KV caches: `k`, `v` hold the
        keys of positions `0 .. Tk-1`, the queries are positions `offset .. offset+Tq-1`);
        with `causal` (True), query i sees keys `j <= offset + i`; with `causal="strict"`,
        keys `j < offset + i`, and a query that sees none has weights 0 and `o` 0."""
        # the scale on q (Tq x k numbers, not Tq x Tk) and the causal mask added: one pass
        # over the scores fewer than scaling them and `masked_fill` (module docstring)
        scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-1, -2))
        strict = causal == "strict"
        if causal:
            scores = scores + self._mask(q.shape[-2], k.shape[-2], int(offset),
                                         scores.device, scores.dtype, strict)
        weights = torch.softmax(scores, dim=-1)
        if strict:
            keep = self._keep(q.shape[-2], int(offset), weights.device, weights.dtype)
            if keep is not None:
                weights = weights * keep
        return torch.matmul(weights, v), weights

    def mix(self, o):
        """`m (..., Tq, dB)` from the heads' outputs `o (..., H, Tq, k)` (head-major concat)."""
        o = o.movedim(-3, -2).flatten(-2)  # (..., Tq, H*k)
        return F.linear(o, self.w_o)

    def _sequences(self, x, seq: bool = None):
        """Features with an explicit position axis, and whether one was added."""
        x = self._features(x)
        if seq is None:
            seq = x.dim() >= 3
        return (x, False) if seq else (x.unsqueeze(-2), True)

    def _mean_seq(self, x):
        q, k, v = self.project(x)
        if _is_wrapped(q):
            # under `vmap` (the ELBO maps log_joint over particles) SDPA has no batching
            # rule and falls back to a loop: the explicit form is batched instead
            o, _ = self.attend(q, k, v, causal=self.causal_mode)
        elif self.strict:
            # SDPA's `is_causal` is `j <= i`: the strict mask is passed as `attn_mask`, and a
            # query with no visible key gets o = 0 through the keep-vector (module docstring)
            tq = q.shape[-2]
            o = _sdpa(q, k, v, attn_mask=self._mask(tq, k.shape[-2], 0, q.device, q.dtype,
                                                    True))
            keep = self._keep(tq, 0, q.device, q.dtype)
            if keep is not None:  # None for an empty sequence: nothing to zero
                o = o * keep
        else:
            o = _sdpa(q, k, v, is_causal=self.causal and q.shape[-2] > 1)
        return self.mix(o)

    def mean(self, x, *, _seq: bool = None):
        """The deterministic map `m (..., T, dB)` of features `(..., T, dA)` (`(B, dB)` for
        a rank-2 input: sequences of length 1)."""
        x, added = self._sequences(x, _seq)
        m = self._mean_seq(x)
        return m.squeeze(-2) if added else m

    def pattern(self, x):
        """Attention weights `(..., H, T, T)` of features `(..., T, dA)` (rows sum to 1;
        zero above the diagonal when causal; strictly causal: zero on the diagonal too, and
        the first row, which sees no key, all zero)."""
        x, _ = self._sequences(x)
        q, k, v = self.project(x)
        return self.attend(q, k, v, causal=self.causal_mode)[1]

    # ------------------------------------------------------------ circuits (design E7)
    def qk_circuits(self):
        """`(H, dA, dA)`: `W_Q[h]^T W_K[h]`, the bilinear form of head h's scores
        (`s_ij = x_i^T QK[h] x_j / sqrt(k)`)."""
        return torch.einsum("hkd,hke->hde", self.w_q, self.w_k)

    def ov_circuits(self):
        """`(H, dB, dA)`: `W_O[:, h*k:(h+1)*k] W_V[h]`, what head h writes for what it reads."""
        w_o = self.w_o.reshape(self.d_out, self.heads, self.head_dim)
        return torch.einsum("bhk,hkd->hbd", w_o, self.w_v)

    # ------------------------------------------------------------ the kernel
    def scale(self):
        """The family's scale `(dB,)` (None when deterministic)."""
        if self.log_scale is None:
            return None
        return torch.exp(self.log_scale).clamp(min=_SCALE_FLOOR)

    def rsample(self, x, sample_shape=torch.Size()):
        m = self.mean(x)
        shape = tuple(sample_shape) + tuple(m.shape)
        if self.family_name is None:
            return m.expand(shape)
        s = self.scale()
        if self.family_name == "Normal":
            return m + s * torch.randn(shape, dtype=m.dtype, device=m.device)
        return FAMILIES[self.family_name](m, s.expand_as(m)).rsample(tuple(sample_shape))

    def log_prob(self, x, y):
        """Log-density of `y (*batch, dB)` per position (shape `batch`); the number of batch
        axes is read from `y`, so `x` may carry leading Monte-Carlo axes."""
        if self.family_name is None:
            raise DeterministicError(morphism=self.label)
        y = as_features(y, self.d_out, who=self.label, dtype=self.w_q.dtype)
        x = self._features(x)
        m = self.mean(x, _seq=y.dim() >= 3 and x.dim() >= 3)
        s = self.scale()
        if self.family_name == "Normal":
            z = (y - m) / s
            return (-0.5 * z * z - torch.log(s) - _LOG_SQRT_2PI).sum(-1)
        return FAMILIES[self.family_name](m, s).log_prob(y).sum(-1)

    def extra_repr(self) -> str:
        fam = f" ~ {self.family_name}" if self.family_name else ""
        return (f"{super().extra_repr()}, {self.heads} heads x {self.head_dim}"
                f"{', strictly causal' if self.strict else ', causal' if self.causal else ''}{fam}")


# ---------------------------------------------------------------- layers of a model (design E7)

def attention_layers(model) -> list:
    """`[(name, Attention), ...]`: every attention layer of `model`, in order of application.

    `model` is a loaded `Program` (its exports are searched, the first export first), or any
    runtime morphism / `nn.Module`.  Layers are found in module-registration order, which
    for chains (`>>`: left then right), programs (steps in order), `residual`, fans and
    `stack`/`repeat` is the order in which they are applied; a module reached twice (a
    `repeat`, shared parameters) is listed once.  Names: the morphism's label (its
    declared name) when one layer has it; when several distinct layers share a label
    (`stack` deep-copies a morphism and keeps its label) they are `label#0`, `label#1`,
    ... in order of application."""
    from torch import nn as _nn
    roots = []
    exports = getattr(model, "exports", None)
    if isinstance(exports, dict) and hasattr(model, "morphisms"):
        roots = [v for v in exports.values() if isinstance(v, _nn.Module)]
    elif isinstance(model, _nn.Module):
        roots = [model]
    found, seen = [], set()
    for root in roots:
        for m in root.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            if isinstance(m, Attention):
                found.append(m)
    counts: dict = {}
    for m in found:
        counts[m.label] = counts.get(m.label, 0) + 1
    index: dict = {}
    out = []
    for m in found:
        if counts[m.label] == 1:
            out.append((m.label, m))
        else:
            i = index.get(m.label, 0)
            index[m.label] = i + 1
            out.append((f"{m.label}#{i}", m))
    return out


def circuits(model) -> dict:
    """`{name: {"qk": (H, dA, dA), "ov": (H, dB, dA)}}` for `attention_layers(model)`:
    `qk[h] = W_Q[h]^T W_K[h]` and `ov[h] = W_O[:, h*k:(h+1)*k] W_V[h]` (design E7), as
    detached tensors on the parameters' device (a record of the current weights)."""
    with torch.no_grad():
        return {name: {"qk": a.qk_circuits().detach(), "ov": a.ov_circuits().detach()}
                for name, a in attention_layers(model)}
