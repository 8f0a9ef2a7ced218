"""`HFCausalLM`: a pretrained causal language model (Hugging Face ``transformers``) as the
next-token model of SMC steering — the "CachedTransformer" of Algorithm 3 in design
document 001 (Lew et al. 2023, arXiv:2306.03081, §3) — with its tokenizer for text.

Any ``AutoModelForCausalLM`` works (GPT-2, Llama, Qwen, SmolLM, ...), loaded by
`load_lm` from a local folder or the user's Hugging Face cache (never downloaded here),
in float32 or bfloat16, on CPU or CUDA.

Particles, prompt and the KV cache (``cache=True``, mode ``"kv-cache"``):

* every particle's string is ``[bos] + prompt + s``: the start token (the tokenizer's
  ``bos``, else its ``eos``) and the prompt are encoded *once*, by one batch-1 forward;
* ``cache_kind == "shared-prefix"`` (the default, `hf_cache.SharedPrefixCache`): the
  prompt's keys and values are stored once and shared by every particle for the whole
  run; each particle's own keys and values are written in place into a buffer allocated
  for the run's length (``max_len`` from `check_length` or `start`, else doubling), so a
  child extends its parent's cache without copying the prefix; resampling copies only
  the suffixes of parents that survive more than once, into free slots (the one copy);
  attention joins prompt and suffix without concatenating them
  (`hf_cache.shared_prefix_attention`, selected on the model only around our forwards);
* ``cache_kind == "dynamic"`` (``cache="dynamic"``, and the fallback — named
  ``"dynamic (REASON)"`` — for a model whose attention the shared cache cannot serve, see
  `hf_cache.probe`): a ``transformers`` `DynamicCache` whose rows start as a stride-0 view
  of the prompt's; its concatenation copies every row's prefix at every step and
  resampling reorders whole rows (``index_select``, `DynamicCache.reorder_cache`);
* a particle's state is its rows of the cache plus its next-token logits.  The `K`
  children of a particle are `K` draws from those logits: one forward pass per particle
  and step, whatever `K`; all particles advance together, one batched forward of
  ``(N, 1)`` new tokens over the cache; nothing is recomputed.

``cache=False`` (mode ``"recompute"``) keeps only the token matrix and runs the whole
``[bos] + prompt + s`` through the model at every step.  Both modes draw from the same
logits through `model.sample_logits`, so under one generator they make the same draws
(tests/smc/test_hf_lm.py), the recomputed path being the reference of the cached one.

Text: `encode` / `decode` go through the tokenizer; tokens are ids of the model's
vocabulary, those past the tokenizer's (rows padding the output matrix) never drawn.
Word constraints on the detokenised text are in `text_potentials.py`.  In float32 the
two modes make the same draws; in bfloat16 their logits differ by rounding (the cached
forward sums in another order), so draws may part.

This module imports ``transformers`` only when a model is loaded (`load_lm`); without
it installed `load_lm` raises `LMUnavailable` with the one line to fix it.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import torch

from qvr.runtime.morphisms.pretrained import DTYPES, load_causal_lm

from .model import PrefixBatch, sample_logits

__all__ = ["HFCausalLM", "LMUnavailable", "LMLoadError", "load_lm", "DTYPES"]

Prefix = tuple[int, ...]


class LMUnavailable(ImportError):
    """``transformers`` / ``tokenizers`` are not installed."""


class LMLoadError(ValueError):
    """A model or tokenizer that cannot be loaded (the message names it and why)."""


def _transformers():
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise LMUnavailable("a pretrained language model (--lm, role=pretrained) needs "
                            "Hugging Face transformers: pip install -e \".[lm]\" "
                            "(transformers, tokenizers)") from None
    return transformers


def load_lm(name_or_path: str, *, dtype: Optional[str] = None, device="cpu",
            prompt: str = "", cache=True) -> "HFCausalLM":
    """`HFCausalLM` of a model folder (``save_pretrained``) or a name in the user's
    Hugging Face cache (``gpt2``); nothing is downloaded.  `dtype`: ``"float32"``
    (default) or ``"bfloat16"``."""
    tf = _transformers()
    if dtype is not None and dtype not in DTYPES:
        raise LMLoadError(f"--lm-dtype {dtype}: must be one of {', '.join(DTYPES)}")
    local = Path(name_or_path).is_dir()
    if not local and (name_or_path.startswith((".", "/")) or name_or_path.endswith("/")):
        raise LMLoadError(f"--lm {name_or_path}: no such folder")
    try:
        tokenizer = tf.AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
        model = load_causal_lm(name_or_path, dtype or "float32")  # (its bars kept off)
    except (OSError, ValueError, KeyError) as exc:
        where = "the folder" if local else "a model folder or a model in the Hugging Face " \
            "cache (download it first, e.g. `hf download NAME`)"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LMLoadError(f"--lm {name_or_path}: cannot load a causal language model from "
                          f"{where}: {first}") from None
    model.to(torch.device(device))
    return HFCausalLM(model, tokenizer, prompt=prompt, cache=cache, name=name_or_path)


class HFCausalLM:
    """A ``transformers`` causal LM as an SMC next-token model (see the module docstring).

    Parameters:
      model: an ``AutoModelForCausalLM`` (put on its device and dtype beforehand).
      tokenizer: its tokenizer (None: token ids only; `eos` must then be given).
      prompt: text (through the tokenizer, without special tokens) or a sequence of ids;
        every particle continues ``[bos] + prompt``.
      eos / bos: token ids (default: the tokenizer's, ``bos`` falling back to ``eos``).
      cache: the KV cache (mode ``"kv-cache"``): True (the shared-prefix cache, the
        ``DynamicCache`` where the model cannot use it) or ``"dynamic"``; False:
        recomputing prefixes (mode ``"recompute"``).
      max_len: the longest continuation expected (sizes the shared-prefix cache's buffer;
        `check_length` sets it too; without it the buffer doubles when full).

    ``cache_kind``: ``"shared-prefix"``, ``"dynamic"``, ``"dynamic (REASON)"`` (the
    fallback, decided by the first `start`) or None (recompute).

    Implements the stateful protocol of `model.py` (``start``/``draw``/``advance``) and the
    stateless ``sample`` / ``log_probs`` (whole prefixes, spec §8.4).
    """

    def __init__(self, model, tokenizer=None, *, prompt="", eos: Optional[int] = None,
                 bos: Optional[int] = None, cache=True, name: Optional[str] = None,
                 max_len: Optional[int] = None):
        if cache not in (True, False, "dynamic", "shared-prefix"):
            raise ValueError(f"cache={cache!r}: True, False, 'shared-prefix' or 'dynamic'")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(getattr(model, "config", None), "_name_or_path", None)
        if eos is None:
            eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            eos = getattr(model.config, "eos_token_id", None)
        if eos is None:
            raise LMLoadError("the language model names no end-of-sequence token: give eos")
        self.eos = int(eos)
        if bos is None:
            bos = getattr(tokenizer, "bos_token_id", None)
        self.bos = self.eos if bos is None else int(bos)
        self.prompt_ids: tuple[int, ...] = tuple(
            self.encode(prompt) if isinstance(prompt, str) else (int(t) for t in prompt))
        self.head: tuple[int, ...] = (self.bos,) + self.prompt_ids
        self.mode = "kv-cache" if cache else "recompute"
        self.max_len = max_len
        self._token_texts: Optional[list] = None
        self._probed = False
        self._switch = None  # hf_cache.Switch: the model's attention around our forwards
        self.cache_kind: Optional[str] = None
        if cache == "dynamic":
            self.cache_kind = "dynamic"
        elif cache:
            from . import hf_cache
            why = hf_cache.supported(model)
            self.cache_kind = "shared-prefix" if why is None else f"dynamic ({why})"
            self._probed = why is not None
            self._switch = hf_cache.Switch(model) if why is None else None
        param = next(iter(model.parameters()))
        self.device, self.dtype = param.device, param.dtype
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0]) \
            if model.get_output_embeddings() is not None else int(model.config.vocab_size)
        # transformers 5.x names the cache argument `cache` (`past_key_values` before)
        import inspect
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # output rows past the tokenizer's vocabulary (padding of the embedding matrix, as
        # in Qwen's) are never drawn: no text spells them
        n_text = len(tokenizer) if tokenizer is not None else self.vocab_size
        self.writable = min(n_text, self.vocab_size)
        limit = getattr(model.config, "max_position_embeddings", None) or \
            getattr(model.config, "n_positions", None)
        self.max_positions = int(limit) if limit else None

    # -- text ---------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self.tokenizer is None:
            raise ValueError("text needs a tokenizer (this model has none): give token ids")
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` (an id past the tokenizer's vocabulary shows as ``<ID>``)."""
        ids = [int(t) for t in ids]
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        n = len(self.tokenizer)
        if all(0 <= t < n for t in ids):
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        return "".join(self.tokenizer.decode([t]) if 0 <= t < n else f"<{t}>" for t in ids)

    def token_texts(self) -> list[str]:
        """The text of every token of the vocabulary (for token masks of text
        constraints); tokens past the tokenizer's vocabulary give ``""``.  Decoded once
        (a pass over the vocabulary) and kept."""
        if self._token_texts is None:
            n = len(self.tokenizer) if self.tokenizer is not None else 0
            self._token_texts = [self.tokenizer.decode([i]) if i < n else ""
                                 for i in range(self.vocab_size)]
        return self._token_texts

    # -- the model ------------------------------------------------------------------------
    def check_length(self, max_len: int) -> None:
        """A `ValueError` when prompt plus `max_len` tokens exceed the model's positions."""
        if self.max_positions is not None and len(self.head) + max_len > self.max_positions:
            raise ValueError(f"the prompt ({len(self.head)} tokens with the start token) plus "
                             f"--max-len {max_len} exceed the model's {self.max_positions} "
                             f"positions")
        self.max_len = max_len

    def _forward(self, ids: torch.Tensor, past=None, use_cache: bool = False):
        ids = ids.to(self.device)
        width = ids.shape[1] + (past.get_seq_length() if past is not None else 0)
        # (the shared-prefix attention is given no mask: its implementation has no mask
        # function, so transformers makes none; passing one keeps GPT-2's padding warning
        # away)
        kw = {"input_ids": ids, "use_cache": use_cache,
              "attention_mask": torch.ones(ids.shape[0], width, dtype=torch.long,
                                           device=self.device)}
        if past is not None:
            kw[self._cache_kw] = past
        with torch.no_grad():
            out = self.model(**kw)
        logits = out.logits[:, -1, :].float()
        if self.writable < logits.shape[-1]:
            logits[:, self.writable:] = -math.inf
        if not use_cache:
            return logits, None
        new = out.get("cache") if "cache" in out else out.get("past_key_values")
        return logits, new

    def _rows(self, prefixes: torch.Tensor) -> torch.Tensor:
        head = torch.tensor(self.head, dtype=torch.long).expand(prefixes.shape[0], -1)
        return torch.cat([head, prefixes.long()], dim=1)

    def logits(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        """float32 ``(len(prefixes), V)`` next-token logits, each prefix run whole (one
        forward per prefix length)."""
        if isinstance(prefixes, PrefixBatch):
            return self._forward(self._rows(prefixes.tensor()))[0].cpu()
        out = torch.empty(len(prefixes), self.vocab_size)
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prefixes):
            by_len.setdefault(len(p), []).append(i)
        for idx in by_len.values():
            rows = torch.tensor([tuple(prefixes[i]) for i in idx], dtype=torch.long)
            out[torch.tensor(idx)] = self._forward(self._rows(rows.reshape(len(idx), -1)))[0].cpu()
        return out

    def log_probs(self, prefixes: Sequence[Prefix]) -> torch.Tensor:
        return torch.log_softmax(self.logits(prefixes).to(torch.float64), -1)

    def sample(self, prefixes: Sequence[Prefix], n: int,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return sample_logits(self.logits(prefixes), n, generator)

    # -- stateful interface (SMCSteering) ----------------------------------------------------
    # state: (cache: SharedPrefixCache, DynamicCache or None (recompute);
    #         logits (B, V) float32 on CPU; prefixes (B, t) int64 or None)
    def start(self, num: int, generator: Optional[torch.Generator] = None,
              max_len: Optional[int] = None):
        cached = self.mode == "kv-cache"
        logits, past = self._forward(torch.tensor([self.head]), use_cache=cached)
        if cached and self.cache_kind == "shared-prefix":
            prompt = _prompt_of(past)
            if not self._probed:
                self._probe(prompt, past)
            if self.cache_kind == "shared-prefix":
                from .hf_cache import SharedPrefixCache
                past = SharedPrefixCache(prompt, num, max_len or self.max_len or 16)
            else:  # the probe extended `past` by a token: start again
                logits, past = self._forward(torch.tensor([self.head]), use_cache=True)
        if cached and self.cache_kind != "shared-prefix":
            _broadcast_rows(past, num)
        return past, logits.cpu().expand(num, -1), torch.zeros(num, 0, dtype=torch.long)

    def _probe(self, prompt, past) -> None:
        """Decide between the shared-prefix cache and the `DynamicCache` (`hf_cache.probe`:
        one batch-1 token over the prompt, served by the shared-prefix attention and
        compared with the model's own)."""
        from . import hf_cache
        self._probed = True
        if prompt is None:
            why = "the model's cache layers are not plain key/value layers"
        else:
            token = torch.tensor([[self.eos]])
            reference, _ = self._forward(token, past, use_cache=True)
            why = hf_cache.probe(self.model, prompt, self.eos, reference,
                                 lambda ids, c: self._forward(ids, c, use_cache=True)[0],
                                 self._switch)
        if why is not None:
            self.cache_kind = f"dynamic ({why})"

    def draw(self, state, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return sample_logits(state[1], n, generator)

    def advance(self, state, rows: torch.Tensor, tokens: torch.Tensor, prefixes,
                generator: Optional[torch.Generator] = None):
        tokens = tokens.long().reshape(-1, 1)
        if self.mode == "recompute":
            seqs = prefixes.tensor() if isinstance(prefixes, PrefixBatch) else \
                torch.tensor([tuple(p) for p in prefixes], dtype=torch.long).reshape(
                    tokens.shape[0], -1)
            logits, _ = self._forward(self._rows(seqs))
            return None, logits.cpu(), seqs
        past = state[0]
        rows = rows.long()
        if self.cache_kind == "shared-prefix":
            past.reorder(rows.numpy())
            past.reserve(past.length + tokens.shape[1])
            with self._switch.serving(past):
                logits, _ = self._forward(past.to_slots(tokens), past, use_cache=True)
            return past, past.from_slots(logits).cpu(), None
        if rows.numel() != _batch_size(past) or not torch.equal(
                rows, torch.arange(rows.numel())):
            past.reorder_cache(rows.to(self.device))
        logits, past = self._forward(tokens, past, use_cache=True)
        return past, logits.cpu(), None

    # -- measurement ------------------------------------------------------------------------
    @staticmethod
    def cache_bytes(state) -> int:
        """Bytes held by the keys and values of a state (0 in recompute mode); the shared
        prompt's counted once."""
        past = state[0] if state is not None else None
        if past is None:
            return 0
        from .hf_cache import SharedPrefixCache
        if isinstance(past, SharedPrefixCache):
            return past.nbytes()
        total, seen = 0, set()
        for k, v in _layer_tensors(past):
            for x in (k, v):
                if x is None:
                    continue
                key = (x.untyped_storage().data_ptr(), x.shape, x.stride())
                if key not in seen:
                    seen.add(key)
                    total += x.untyped_storage().nbytes()
        return total


def _layer_tensors(past):
    layers = getattr(past, "layers", None)
    if layers is not None:
        return [(getattr(l, "keys", None), getattr(l, "values", None)) for l in layers]
    return [(kv[0], kv[1]) for kv in past]  # the legacy tuple form


def _prompt_of(past):
    """Per layer the prompt's ``(keys, values)`` ``(1, H, P, D)`` of a `DynamicCache`
    (None when its layers are not plain `DynamicLayer`, e.g. sliding windows)."""
    from transformers.cache_utils import DynamicLayer
    layers = getattr(past, "layers", None)
    if not layers or any(type(l) is not DynamicLayer or l.keys is None for l in layers):
        return None
    return [(l.keys, l.values) for l in layers]


def _batch_size(past) -> int:
    for k, _ in _layer_tensors(past):
        if k is not None and k.dim() > 0:
            return int(k.shape[0])
    return 0


def _broadcast_rows(past, num: int) -> None:
    """Turn the one-row prompt cache into `num` rows sharing it: a stride-0 view per layer
    (no copy; the first concatenation or reordering materialises each row's copy)."""
    layers = getattr(past, "layers", None)
    if layers is not None and all(hasattr(l, "keys") and hasattr(l, "values") for l in layers):
        for l in layers:
            if l.keys is not None and l.keys.dim() > 0:
                l.keys = l.keys.expand(num, *l.keys.shape[1:])
                l.values = l.values.expand(num, *l.values.shape[1:])
        return
    past.batch_repeat_interleave(num)  # a cache type without plain layers: copies
