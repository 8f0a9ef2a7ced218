"""A shared-prompt key/value cache for SMC over a ``transformers`` causal LM: the
"CachedTransformer" of Lew et al. 2023 (arXiv:2306.03081, §3) — particles share their
prompt's keys and values, a child extends its parent's cache without copying the prefix,
the `K` expansions of a particle come from one forward (its logits row).

Layout (per layer; ``H`` key/value heads, ``D`` head size, ``P`` prompt positions with
the start token, ``N`` particles, ``cap`` suffix positions):

* ``prompt_keys`` / ``prompt_values``: ``(1, H, P, D)``, the prompt's, computed once by a
  batch-1 forward and stored ONCE for the whole run, never expanded per particle;
* ``keys`` / ``values``: the particles' own suffixes, ``(N, H, cap, D)`` views of one
  buffer ``(2·layers, N, H, cap, D)`` allocated once (``cap``: the SMC ``max_len`` when
  known, else doubled when full); the new token's keys and values are written in place
  at position ``t``.  Bytes: ``layers·2·H·D·itemsize·(P + N·cap)``.
* particles live in slots (``slot_of``: particle -> buffer row); the forward's batch is
  the buffer rows ``[0, n)`` in slot order (`to_slots` / `from_slots` permute the
  tokens in and the logits out).

What is copied when:

* advancing (all particles one token): nothing of the prefix — the new position's
  ``(N, H, 1, D)`` is written into the buffer, attention reads views;
* resampling (`SharedPrefixCache.reorder`): the one copy — each parent's first survivor
  keeps its parent's slot, so only the further copies of a parent are written: the
  parent's ``t`` filled positions into a free slot, in place (the buffer is never
  reallocated and the prompt never touched); nothing when every parent survives once,
  whatever the order;
* growing (only when ``cap`` was not known): the filled ``[:t]`` into a buffer twice as
  long.

Attention (`shared_prefix_attention`, registered with ``transformers.AttentionInterface``
as ``"qvr_shared_prefix"``): the query of row ``n`` attends over the shared prompt and its
own suffix without concatenating them — scores against the prompt as one matmul per
key/value head with every particle's queries stacked (the one prompt row is never
broadcast into copies), scores against the suffix view, one softmax over the joined
(tiny, ``(N, Hq, 1, P + t + 1)``) scores, output ``wp @ vp + ws @ vs``.  Grouped-query
heads (Llama, Qwen) are grouped, not repeated; rotary models are right since the cache
reports ``get_seq_length() = P + t`` (their positions) and keys arrive rotated.  No mask
function is registered for it, so ``transformers`` passes no mask (a new token sees its
prompt and its whole suffix).

`Switch.serving` selects that attention implementation on the model only around one of
our forwards (the configs' ``_attn_implementation``, as ``set_attn_implementation``
sets it) and puts the model's own back after, also on an error, so the model behaves as
before for every other caller.  A model whose attention does not go through the
interface, or needs what this function does not do (a mask of its own, sliding windows,
soft-capping, attention sinks), is refused by `supported` (the class) or `probe` (one
batch-1, one-token forward: every layer served here, logits matching the model's own
attention); `qvr.smc.hf_lm.HFCausalLM` then keeps the ``DynamicCache`` and names the
reason in ``cache_kind``.

Measured (``bench/smc.py --lm examples/tiny_lm --cache-only``: a 2-layer GPT-2, d = 64,
4 heads, prompt 20 tokens with the start token, N = 64, K = 3, one CPU thread; tokens/s,
median of 5 rounds, and the median within-round ratio to the ``DynamicCache``):
length 32: 34,648 tokens/s, ``DynamicCache`` 34,749 (1.00x), recomputing 3,766;
length 128: 31,079, 26,815 (1.16x), 1,471; length 256 (2 rounds): 25,486, 17,493
(1.46x), 761.  The same draws in the three.  Keys and values per particle at the end:
32.3 KiB against the ``DynamicCache``'s 51.0 (length 32), 128.3 against 147.0 (128),
256.3 against 275.0 (256) — the buffer holds ``cap`` positions from the start, the
``DynamicCache`` each row's copy of the prompt.  At short suffixes the attention's small
batched matmuls cost about what ``sdpa`` plus the two concatenations cost (one call,
N = 64, H = 4, D = 16: 172 against 144 us at t = 16, 192 against 242 at 64, 282 against
396 at 128); the ``DynamicCache``'s concatenation grows with the prefix, this cache's
writes do not.
"""
from __future__ import annotations

import contextvars
from typing import Optional

import numpy as np
import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["ATTENTION", "SharedPrefixCache", "SharedPrefixLayer", "Switch",
           "UnsupportedModel", "shared_prefix_attention", "supported", "probe"]

ATTENTION = "qvr_shared_prefix"
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("qvr_shared_prefix_cache",
                                                         default=None)


class UnsupportedModel(RuntimeError):
    """The model's attention cannot be served by the shared-prefix cache (the message says
    why)."""


class SharedPrefixLayer(CacheLayerMixin):
    """One layer: the shared prompt ``(1, H, P, D)`` and the rows' suffixes
    ``self.keys`` / ``self.values`` ``(N, H, cap, D)`` (views of the cache's one buffer);
    ``rows`` rows in use, ``length`` suffix positions filled."""

    is_sliding = False

    def __init__(self, prompt_keys: torch.Tensor, prompt_values: torch.Tensor,
                 keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.prompt_keys, self.prompt_values = prompt_keys, prompt_values
        self.keys, self.values = keys, values
        self.device = prompt_keys.device
        self.rows, self.length = int(keys.shape[0]), 0
        self.is_initialized = True
        self.pending: Optional[torch.Tensor] = None  # keys from `update`, not yet served

    @property
    def prompt_length(self) -> int:
        return int(self.prompt_keys.shape[-2])

    @property
    def capacity(self) -> int:
        return int(self.keys.shape[-2])

    def lazy_initialization(self, key_states, value_states) -> None:  # allocated eagerly
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new positions in place; returns the suffix views ``[:rows, :, :t]``
        (the prompt is joined by `shared_prefix_attention`)."""
        n, _, q, _ = key_states.shape
        t = self.length
        if n != self.rows or t + q > self.capacity:
            raise ValueError(f"the shared-prefix cache holds {self.rows} rows of "
                             f"{self.capacity} positions ({t} filled): the forward brings "
                             f"{n} rows of {q} (SharedPrefixCache.reserve first)")
        self.keys[:n, :, t:t + q] = key_states
        self.values[:n, :, t:t + q] = value_states
        self.length = t + q
        k, v = self.keys[:n, :, :t + q], self.values[:n, :, :t + q]
        self.pending = k
        return k, v

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.prompt_length + self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.prompt_length + self.length

    def get_max_length(self) -> int:
        return -1  # the cache grows on `reserve`

    def reset(self) -> None:
        self.length = 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("reorder the whole SharedPrefixCache (one buffer)")


class SharedPrefixCache(Cache):
    """A ``transformers`` `Cache` whose layers are `SharedPrefixLayer`: the prompt's keys
    and values once, each particle's suffix in a preallocated buffer (module docstring).

    Parameters:
      prompt: per layer the prompt's ``(keys, values)``, each ``(1, H, P, D)`` (e.g. a
        ``DynamicCache`` of a batch-1 forward of the prompt; kept, not copied).
      rows: particles `N`.
      capacity: suffix positions to allocate (the SMC ``max_len``; `reserve` doubles it
        when a forward would not fit).

    The suffixes of all layers, keys and values, are one tensor ``(2·layers, N, H, cap,
    D)`` when every layer has the same ``H`` and ``D`` (else one per layer and kind), so
    that copying a particle's row on resampling is one copy for all layers.
    """

    def __init__(self, prompt, rows: int, capacity: int):
        prompt = [(k, v) for k, v in prompt]
        for k, v in prompt:
            if k.dim() != 4 or k.shape[0] != 1 or v.shape[:3] != k.shape[:3]:
                raise ValueError(f"prompt keys/values must be (1, H, P, D): got "
                                 f"{tuple(k.shape)} / {tuple(v.shape)}")
        self.buffers = self._allocate(prompt, rows, max(1, int(capacity)))
        self.slot_of = np.arange(rows, dtype=np.int64)  # particle -> buffer row
        self._where: Optional[torch.Tensor] = None
        self._identity = True  # slot_of is 0..n-1
        super().__init__(layers=[SharedPrefixLayer(k, v, *kv) for (k, v), kv in
                                 zip(prompt, self._views())])

    @staticmethod
    def _allocate(prompt, rows: int, capacity: int) -> list[torch.Tensor]:
        k0 = prompt[0][0]
        kw = {"dtype": k0.dtype, "device": k0.device}
        shapes = {(x.shape[1], x.shape[3]) for kv in prompt for x in kv}
        if len(shapes) == 1:
            (h, d), = shapes
            return [torch.empty(2 * len(prompt), rows, h, capacity, d, **kw)]
        return [torch.empty(rows, x.shape[1], capacity, x.shape[3], **kw)
                for kv in prompt for x in kv]

    def _views(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        flat = list(self.buffers[0]) if len(self.buffers) == 1 else self.buffers
        return list(zip(flat[0::2], flat[1::2]))

    @property
    def rows(self) -> int:
        return self.layers[0].rows

    @property
    def length(self) -> int:
        """Suffix positions filled (the same in every layer between forwards)."""
        return self.layers[0].length

    @property
    def capacity(self) -> int:
        return self.layers[0].capacity

    @property
    def batch_size(self) -> int:
        return self.rows

    def reserve(self, positions: int) -> None:
        """Room for `positions` suffix positions: when short, a buffer twice as long (or
        `positions`) takes the filled ``[:t]`` of every row."""
        if positions <= self.capacity:
            return
        t, new = self.length, max(2 * self.capacity, positions)
        old = self.buffers
        self.buffers = [b.new_empty(*b.shape[:-2], new, b.shape[-1]) for b in old]
        for a, b in zip(old, self.buffers):
            b[..., :t, :] = a[..., :t, :]
        for layer, (k, v) in zip(self.layers, self._views()):
            layer.keys, layer.values = k, v

    def reorder(self, rows) -> None:
        """Survivor ``i`` continues particle ``rows[i]`` (``len(rows) <= N``): the one copy
        of the run.  Particles live in slots (buffer rows ``[0, len(rows))``): each parent's
        first survivor keeps the parent's slot, every further copy of a parent takes a
        free slot and the parent's ``t`` filled positions are copied there, in place —
        only duplicated rows are copied, nothing when every parent survives once."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        m, t = rows.size, self.length
        if m == self.slot_of.size and np.array_equal(rows, np.arange(m)):
            return  # every particle continues in place
        if m > self.buffers[0].shape[-4]:
            raise ValueError(f"{m} rows: the cache holds {self.buffers[0].shape[-4]}")
        parent = self.slot_of[rows]
        _, first = np.unique(parent, return_index=True)
        first = first[parent[first] < m]  # each parent's first survivor keeps its slot
        slots = np.full(m, -1, dtype=np.int64)
        slots[first] = parent[first]
        need = np.flatnonzero(slots < 0)
        if need.size:
            taken = np.zeros(m, dtype=bool)
            taken[parent[first]] = True
            free = np.flatnonzero(~taken)  # as many as `need`; none is a parent's slot
            slots[need] = free
            if t:
                self._copy_rows(parent[need], free, t)
        self.slot_of = slots
        self._where = None
        self._identity = bool(np.array_equal(slots, np.arange(m)))
        for layer in self.layers:
            layer.rows = m

    def _copy_rows(self, src: np.ndarray, dst: np.ndarray, t: int) -> None:
        """Rows `dst` <- rows `src` (disjoint sets), their first `t` positions, in every
        layer: on the CPU one direct copy per row (no temporary; index_select/index_copy_
        over the strided ``[:t]`` views measured 2-4x slower on tiny models), elsewhere a
        gather and a scatter (two kernels whatever the count)."""
        dim = 1 if len(self.buffers) == 1 else 0
        if self.layers[0].device.type == "cpu":
            for buf in self.buffers:
                view = buf[..., :t, :]
                for d, r in zip(dst.tolist(), src.tolist()):
                    view.select(dim, d).copy_(view.select(dim, r))
            return
        device = self.layers[0].device
        src_t, dst_t = torch.from_numpy(src).to(device), torch.from_numpy(dst).to(device)
        for buf in self.buffers:
            view = buf[..., :t, :]
            view.index_copy_(dim, dst_t, view.index_select(dim, src_t))

    def _slots(self) -> torch.Tensor:
        if self._where is None:
            self._where = torch.from_numpy(self.slot_of).to(self.layers[0].device)
        return self._where

    def to_slots(self, ids: torch.Tensor) -> torch.Tensor:
        """Particle-ordered inputs ``(rows, ...)`` in slot order (the forward's batch)."""
        ids = ids.to(self.layers[0].device)
        if self._identity:
            return ids
        return torch.empty_like(ids).index_copy_(0, self._slots(), ids)

    def from_slots(self, out: torch.Tensor) -> torch.Tensor:
        """The forward's slot-ordered output ``(rows, ...)`` in particle order."""
        if self._identity:
            return out
        return out.index_select(0, self._slots().to(out.device))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("SharedPrefixCache.reorder keeps particles in slots: "
                                  "feed the forward through to_slots / from_slots")

    @property
    def bytes_per_position(self) -> int:
        """Bytes of one particle's keys and values at one suffix position, all layers."""
        return sum(b.numel() // (b.shape[-4] * b.shape[-2]) * b.element_size()
                   for b in self.buffers)

    def nbytes(self) -> int:
        """Bytes of keys and values held: the prompt's once plus the suffix buffers."""
        prompt = sum(x.numel() * x.element_size() for layer in self.layers
                     for x in (layer.prompt_keys, layer.prompt_values))
        return prompt + sum(b.numel() * b.element_size() for b in self.buffers)

    def _layer_of(self, module, key: torch.Tensor) -> SharedPrefixLayer:
        idx = getattr(module, "layer_idx", None)
        if isinstance(idx, int) and 0 <= idx < len(self.layers) and \
                self.layers[idx].pending is key:
            return self.layers[idx]
        for layer in self.layers:
            if layer.pending is key:
                return layer
        raise UnsupportedModel("the attention was called with keys that are not the "
                               "shared-prefix cache's")


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None,
                            dropout=0.0, **kwargs):
    """Attention of ``query (N, Hq, L, D)`` over a layer's shared prompt and the rows'
    suffixes ``key``/``value`` (``(N, H, t, D)`` views returned by
    `SharedPrefixLayer.update`), the last ``L`` suffix positions being the queries'
    (causal among themselves).  Returns ``((N, L, Hq, Dv), None)`` as
    ``transformers``' attention functions do."""
    cache = _ACTIVE.get()
    if cache is None:
        raise UnsupportedModel(f"attention {ATTENTION!r} used without a SharedPrefixCache")
    layer = cache._layer_of(module, key)
    if attention_mask is not None:
        raise UnsupportedModel("the model passes its own attention mask (e.g. ALiBi or "
                               "padding) to the attention")
    for name in ("softcap", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise UnsupportedModel(f"the model's attention uses {name}")
    if kwargs.get("sliding_window") is not None:
        raise UnsupportedModel("the model's attention has a sliding window")
    if dropout and module.training:
        raise UnsupportedModel("attention dropout in training mode")
    layer.pending = None
    n, hq, q_len, d = query.shape
    h, t = key.shape[1], key.shape[2]
    gl = hq // h * q_len  # queries per key/value head and row (head r // L, query r % L)
    kp, vp = layer.prompt_keys[0], layer.prompt_values[0]  # (H, P, D)
    p = kp.shape[1]
    scale = d ** -0.5 if scaling is None else scaling
    q = query.reshape(n, h, gl, d)
    zero = query.new_zeros(1, 1, 1)  # (`beta=0`: ignored)
    # prompt: one matmul per key/value head, every row's queries stacked: (H, N·gL, P)
    sp = torch.baddbmm(zero, q.transpose(0, 1).reshape(h, n * gl, d), kp.transpose(1, 2),
                       beta=0, alpha=scale)
    # own suffix: (N·H, gL, t)
    ss = torch.baddbmm(zero, q.reshape(n * h, gl, d),
                       key.reshape(n * h, t, d).transpose(1, 2), beta=0,
                       alpha=scale).view(n, h, gl, t)
    if q_len > 1:  # the new positions see the suffix up to themselves
        qpos = t - q_len + torch.arange(q_len, device=query.device).repeat(gl // q_len)
        ss = ss.masked_fill(torch.arange(t, device=query.device) > qpos[:, None],
                            float("-inf"))
    scores = torch.cat([sp.view(h, n, gl, p), ss.transpose(0, 1)], dim=-1)  # H, N, gL, P+t
    w = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    out = torch.bmm(w[..., :p].reshape(h, n * gl, p), vp).view(h, n, gl, -1).transpose(0, 1)
    dv = out.shape[-1]
    out = torch.baddbmm(out.reshape(n * h, gl, dv),  # + the suffix's share
                        w[..., p:].transpose(0, 1).reshape(n * h, gl, t),
                        value.reshape(n * h, t, dv))
    return out.view(n, hq, q_len, dv).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)


class Switch:
    """Selects `shared_prefix_attention` on one model around our forwards: the configs of
    the model and its sub-models are found once; `serving` sets their
    ``_attn_implementation`` (the setter ``set_attn_implementation`` ends in, without its
    walk over every module at each step) and puts the old values back on leaving."""

    def __init__(self, model):
        from transformers import PreTrainedModel
        configs = {id(model.config): model.config}
        for m in model.modules():
            if isinstance(m, PreTrainedModel):
                configs.setdefault(id(m.config), m.config)
        self.configs = list(configs.values())

    def serving(self, cache: SharedPrefixCache) -> "_Serving":
        """A context: within it the model's attention is `shared_prefix_attention` over
        `cache`.  On leaving, the model's own implementation is back (also on an error)
        and every layer the forward updated must have been served (else
        `UnsupportedModel`)."""
        return _Serving(self.configs, cache)


class _Serving:
    __slots__ = ("configs", "cache", "before", "token")

    def __init__(self, configs, cache):
        self.configs, self.cache = configs, cache

    def __enter__(self):
        self.before = [c._attn_implementation for c in self.configs]
        self.token = _ACTIVE.set(self.cache)
        try:
            for c in self.configs:
                c._attn_implementation = ATTENTION
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self.cache

    def __exit__(self, kind, exc, tb):
        for c, b in zip(self.configs, self.before):
            c._attn_implementation = b
        _ACTIVE.reset(self.token)
        layers = self.cache.layers
        missed = [i for i, layer in enumerate(layers) if layer.pending is not None]
        for i in missed:
            layers[i].pending = None
        if missed and kind is None:
            raise UnsupportedModel(f"layer {missed[0]} updated the cache but its attention "
                                   f"did not go through the attention interface")
        return False


def supported(model) -> Optional[str]:
    """Why `model` cannot use the shared-prefix cache, from its class alone (None: it may;
    `probe` decides)."""
    cls = type(model)
    if not getattr(cls, "_supports_attention_backend", False):
        return (f"{cls.__name__} does not route its attention through "
                f"transformers' AttentionInterface")
    cfg = model.config
    if getattr(cfg, "is_encoder_decoder", False) or \
            getattr(cfg, "add_cross_attention", False):
        return "the model has cross-attention"
    return None


def probe(model, prompt, token: int, reference: torch.Tensor, forward,
          switch: Optional[Switch] = None) -> Optional[str]:
    """Why the shared-prefix cache cannot serve `model` (None: it can).  `prompt`: the
    prompt's per-layer ``(keys, values)``; `forward(ids, cache) -> logits` runs the model;
    `reference`: the model's own logits for `token` after the prompt.  One batch-1,
    one-token forward: every layer must be served by `shared_prefix_attention` and the
    logits must match the reference (float32: 1e-4, half precision: 5e-2, relative to
    the largest logit)."""
    why = supported(model)
    if why is not None:
        return why
    cache = SharedPrefixCache(prompt, 1, 1)
    try:
        with (switch or Switch(model)).serving(cache):
            logits = forward(torch.tensor([[token]]), cache)
    except UnsupportedModel as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 — the model breaks on this cache: fall back
        first = (str(exc).strip().splitlines() or [""])[0]
        return (f"its forward fails on the shared-prefix cache: "
                f"{type(exc).__name__}: {first}")
    if cache.length != 1 or any(layer.length != 1 for layer in cache.layers):
        return "the forward did not update every layer of the cache once"
    ref = reference.float()
    finite = torch.isfinite(ref)
    scale = float(ref[finite].abs().max()) if finite.any() else 1.0
    tol = (1e-4 if cache.layers[0].keys.dtype == torch.float32 else 5e-2) * max(1.0, scale)
    got = logits.float()
    if not torch.equal(finite, torch.isfinite(got)) or \
            float((got[finite] - ref[finite]).abs().max()) > tol:
        return "its logits differ from the model's own attention's"
    return None
