"""`ProgramLM`: a compiled QVR ``Token -> Token`` program as the next-token model of SMC
steering (qvr-runtime.md §8.4).

For a prefix `s` the program is fed ``[bos] + s`` and its prediction at the last position
is the next token.  Two program shapes exist (runtime spec §4.7, last paragraph):

* **position-wise** (embed, kernels, fans, stacks, e.g. the seed's ``transformer_lm``):
  ``rsample`` maps ``(B, L)`` tokens to ``(B, L)`` next tokens, and every kernel acts on
  each position independently (runtime spec §1.2), so the prediction at the last
  position depends on the last token only.  With ``cache=True`` a particle's state is its
  last token and a draw feeds ``(B·n, 1)`` tokens: the same law as feeding the whole
  prefix, at a cost independent of the prefix length.
* **scan** (``embed >> scan(cell) >> ...``): ``rsample`` maps ``(B, L)`` tokens to ``(B,)``.
  With ``cache=True`` each particle carries the recurrent state `h` of the scan: a token
  is consumed by one cell step ``h ← cell(concat(pre(token), h))`` (spec §4.7), and a
  draw runs the rest of the program from `h` through the public
  ``rsample(x, observations={site: value})`` (the scan's site supplied; the `K` copies
  of a particle share `h`, so the parameters of the first kernel after the scan are
  computed once per particle).  The state is copied on resampling.  When the cell is
  stochastic, a carried state is *one* sampled hidden trajectory that the particle keeps
  extending (the program read as a running state-space model), whereas recomputing
  (``cache=False``, spec §8.4 literally) draws a fresh trajectory for every call; the two
  next-token laws coincide for a deterministic recurrence and differ otherwise (see the
  class docstring).

* **attention** (a chain whose value mixes positions: causal ``role=attention`` layers,
  design 17): a particle is its token prefix *plus its hidden draws* at every earlier
  position, fixed once drawn.  ``cache=True`` keeps each attention layer's keys and
  values per particle, so extending a particle by one token costs `O(t)`, not `O(t²)`;
  ``cache=False`` keeps the tokens and the stored noise of every stochastic link and
  recomputes the whole prefix from them at every step — the same law and, under one
  generator, the same draws.  The machinery lives in `kv_cache.py`; non-causal
  attention is refused (`kv_cache.NotCausalError`).

For the other kinds, ``cache=False`` always feeds the whole ``[bos] + s`` (batched over
all copies of all live prefixes of equal length), recomputing every prefix from scratch.
The stateless ``sample`` always does that, for every kind: it is the spec's per-call law.

Draws use the global torch RNG; when a ``generator`` is passed, each program call runs
with the global generator's state saved, seeded from `generator`, and restored after
(``torch.random.fork_rng`` on CUDA), so a run is a function of the generator and the
global RNG is left untouched (runtime spec §9.3).  Attention programs draw their noise
from `generator` itself (`kv_cache.Rng`), with the same two properties.

This module reads the compiled program's structure (its steps, ``_step_<name>``
submodules, ``links()`` and the scan's ``cell``) but never modifies the program, and it
does not run SMC.
"""
from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch

from . import kv_cache
from .model import PrefixBatch, take_rows

__all__ = ["ProgramLM"]

Prefix = tuple[int, ...]


def _scan_type():
    try:
        from qvr.runtime.combinators import Scan
    except ImportError:  # pragma: no cover - the runtime is part of the package
        return None
    return Scan


def _family_kernel_type():
    try:
        from qvr.runtime.morphisms.kernels import FamilyKernel
    except ImportError:  # pragma: no cover - the runtime is part of the package
        return None
    return FamilyKernel


def _rowwise_family(link) -> bool:
    """`link` draws ``fam.sample(params(x))`` with `params` a function of each row of `x`
    (a family kernel whose ``rsample`` is not overridden)."""
    kernel = _family_kernel_type()
    return kernel is not None and isinstance(link, kernel) \
        and type(link).rsample is kernel.rsample


class _ScanPlan:
    """How to run a scan program one token at a time: the program site whose morphism
    contains the scan, and that morphism's links before and after the scan."""

    def __init__(self, site: str, pre: list, scan, post: list):
        self.site, self.pre, self.scan, self.post = site, pre, scan, post

    @staticmethod
    def find(morphism) -> Optional["_ScanPlan"]:
        """The plan, or None when the program is not one this can run incrementally:
        exactly one step reads the (unnamed) program input, it is a morphism site whose
        chain of links holds exactly one scan, and nothing else reads the input."""
        scan_type = _scan_type()
        steps = getattr(morphism, "steps", None)
        if scan_type is None or not isinstance(steps, list) \
                or getattr(morphism, "input_parts", None):
            return None
        readers = [s for s in steps if getattr(s, "args", ()) is None
                   and getattr(s, "family", None) is None and hasattr(s, "module_name")]
        if len(readers) != 1 or any(type(s).__name__ == "MarginalizeStep" for s in steps):
            return None
        site = readers[0]
        module = getattr(morphism, site.module_name, None)
        if module is None or not callable(getattr(module, "links", None)):
            return None
        links = module.links()
        where = [i for i, link in enumerate(links) if isinstance(link, scan_type)]
        if len(where) != 1:
            return None
        i = where[0]
        return _ScanPlan(site.name, links[:i], links[i], links[i + 1:])

    @staticmethod
    def chain(links, x):
        for link in links:
            x = link.rsample(x)
        return x

    def post_copies(self, h: torch.Tensor, n: int) -> torch.Tensor:
        """The links after the scan applied to `n` copies of each row of `h` (rows of the
        result: row `i`'s copies consecutively).  When the first link is a family kernel,
        its parameters are computed once per row and `n` values drawn from them (the same
        law as running it on the copies; the copies share the row's state)."""
        links = self.post
        if links and _rowwise_family(links[0]):
            params = links[0].params(h)
            x = links[0].fam.sample(tuple(p.repeat_interleave(n, 0) for p in params))
            return self.chain(links[1:], x)
        return self.chain(links, h.repeat_interleave(n, 0))

    def consume(self, h: Optional[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """One scan step per row: ``h ← cell(concat(pre(token), h))`` (``h = 0`` if None)."""
        x = self.chain(self.pre, tokens.reshape(-1, 1))  # (M, 1[, w_A]) as for a length-1 sequence
        if x.dim() == 2:
            x = x.unsqueeze(-1)
        x = x[:, 0, :]
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        if h is None:
            h = torch.zeros(x.shape[0], self.scan.cell.codomain.width, dtype=x.dtype,
                            device=x.device)
        return self.scan.cell.rsample(torch.cat([x, h.to(x.dtype)], dim=-1))


class ProgramLM:
    """A compiled ``Token -> Token`` program as a next-token model (spec §8.4).

    Parameters:
      program: a `qvr.load` result (its ``.morphism`` is used) or a morphism with
        ``rsample``.
      bos: the token fed before every prefix (so the empty prefix is well defined).
      eos: the end token.
      cache: keep per-particle state (see the module docstring) instead of feeding the
        whole prefix at every step.

    Attributes: ``kind`` (``"positionwise"``, ``"scan"`` or ``"attention"``) and ``mode``
    (``"last-token"``, ``"scan-state"``, ``"kv-cache"`` or ``"recompute"``; a scan
    program that is not a single scan site reading the input falls back to
    ``"recompute"``).  ``kv`` is the `kv_cache.KVPlan` of an attention program (None
    otherwise).

    Semantics of the attention kinds (``"kv-cache"`` and its ``"recompute"``): a particle
    is a token prefix plus its hidden draws; SMC steers the program read as a sequential
    latent-variable model, whose next-token law given a prefix is the program's law given
    the particle's own hidden values at earlier positions.  Both modes have that law and
    make the same draws under one generator: the recomputed state is rebuilt from the
    stored noise, never redrawn (see `kv_cache`).  It equals the per-call law of
    ``sample`` when the links before the head are deterministic.

    Semantics of ``mode="scan-state"``: SMC then steers the pair (string, hidden state);
    a particle's token law given its prefix is the program's law *given the particle's
    own sampled trajectory*, and `Ẑ` estimates the normaliser of that model.  It equals
    the spec's per-call law (``cache=False``) when the cell is deterministic.

    There is no ``log_probs``: the next-token law is a mixture over the program's
    internal latents, and SMC only needs samples.

    References: design document 001 ("CachedTransformer" of Algorithm 3); Lew et al.
    (2023), arXiv:2306.03081.
    """

    def __init__(self, program, bos: int, eos: int, *, cache: bool = True):
        morphism = getattr(program, "morphism", None)
        self.morphism = morphism if morphism is not None else program
        if not callable(getattr(self.morphism, "rsample", None)):
            raise TypeError("ProgramLM needs a compiled program with rsample (a Token -> Token "
                            "program exported first)")
        self.bos, self.eos = int(bos), int(eos)
        dom, cod = getattr(self.morphism, "domain", None), getattr(self.morphism, "codomain", None)
        if dom is not None and cod is not None and not (
                getattr(dom, "is_discrete", True) and getattr(cod, "is_discrete", True)
                and getattr(dom, "size", None) == getattr(cod, "size", None)):
            label = getattr(self.morphism, "label", "the program")
            raise TypeError(f"`{label}` maps {getattr(dom, 'name', dom)} -> "
                            f"{getattr(cod, 'name', cod)}; SMC generation needs a Token -> "
                            f"Token program (one finite vocabulary in and out)")
        size = getattr(cod, "size", None)
        if isinstance(size, int):
            self.vocab_size = size
            for name, tok in (("bos", self.bos), ("eos", self.eos)):
                if not 0 <= tok < size:
                    raise ValueError(f"{name}={tok} is not a token of the program's codomain "
                                     f"(0..{size - 1})")
        param = next(iter(self.morphism.parameters()), None) \
            if callable(getattr(self.morphism, "parameters", None)) else None
        self.device = param.device if param is not None else torch.device("cpu")
        self._bos_columns: dict[int, torch.Tensor] = {}
        self.kv = kv_cache.plan_for(self.morphism)  # raises for non-causal attention
        if self.kv is not None:
            self.kind, self.plan = "attention", None
            self.mode = "kv-cache" if cache else "recompute"
            return
        self.kind = self._probe()
        self.plan = _ScanPlan.find(self.morphism) if cache and self.kind == "scan" else None
        if not cache:
            self.mode = "recompute"
        elif self.kind == "positionwise":
            self.mode = "last-token"
        else:
            self.mode = "scan-state" if self.plan is not None else "recompute"

    # -- running the program ------------------------------------------------------------
    def _bos_column(self, rows: int) -> torch.Tensor:
        """A ``(rows, 1)`` column of `bos` (the input a scan draw feeds; its site is
        supplied, so the values are never read), kept per size."""
        col = self._bos_columns.get(rows)
        if col is None:
            col = self._bos_columns[rows] = torch.full((rows, 1), self.bos, dtype=torch.long,
                                                       device=self.device)
        return col

    def _rng(self, generator):
        if generator is None:
            return contextlib.nullcontext()
        seed = int(torch.randint(0, 2 ** 62, (), generator=generator))
        if self.device.type != "cuda":
            return _SeededCPU(seed)
        return _Seeded(torch.random.fork_rng(devices=[self.device]), seed, self.device)

    def _rsample(self, tokens: torch.Tensor, generator=None, observations=None) -> torch.Tensor:
        tokens = tokens.to(self.device)
        with self._rng(generator), torch.no_grad():
            if observations is None:
                out = self.morphism.rsample(tokens)
            else:
                out = self.morphism.rsample(tokens, observations=observations)
        return torch.as_tensor(out).long().cpu()

    def _probe(self) -> str:
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            out = self._rsample(torch.full((1, 2), self.bos, dtype=torch.long))
        if tuple(out.shape) == (1, 2):
            return "positionwise"
        if tuple(out.shape) == (1,):
            return "scan"
        raise TypeError(f"ProgramLM needs a Token -> Token program mapping (B, L) tokens to "
                        f"(B, L) or (B,) tokens; (1, 2) tokens gave shape {tuple(out.shape)}")

    def _predict(self, inputs: torch.Tensor, generator) -> torch.Tensor:
        out = self._rsample(inputs, generator)
        return out[:, -1] if self.kind in ("positionwise", "attention") else out

    # -- the spec's stateless interface --------------------------------------------------
    def sample(self, prefixes: Sequence[Prefix], n: int,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`n` iid next tokens per prefix: ``[bos] + s`` fed `n` times, one program call per
        prefix length."""
        if isinstance(prefixes, PrefixBatch):  # equal lengths, already a matrix
            rows = prefixes.tensor((self.bos,))
            return self._predict(rows.repeat_interleave(n, 0), generator).reshape(len(rows), n)
        out = torch.empty(len(prefixes), n, dtype=torch.long)
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(prefixes):
            by_len.setdefault(len(p), []).append(i)
        for idx in by_len.values():
            rows = torch.tensor([(self.bos,) + tuple(prefixes[i]) for i in idx], dtype=torch.long)
            preds = self._predict(rows.repeat_interleave(n, 0), generator)
            out[torch.tensor(idx)] = preds.reshape(len(idx), n)
        return out

    # -- stateful interface (used by SMCSteering) -----------------------------------------
    # last-token: LongTensor (B,) | scan-state: FloatTensor (B, w_H) | recompute: prefixes
    # | attention: the dict of kv_cache.KVPlan (either mode)
    def start(self, num: int, generator: Optional[torch.Generator] = None):
        if self.kv is not None:
            return self.kv.start(num, self.bos, generator, cached=self.mode == "kv-cache")
        if self.mode == "last-token":
            return torch.full((num,), self.bos, dtype=torch.long)
        if self.mode == "scan-state":
            with self._rng(generator), torch.no_grad():
                return self.plan.consume(None, torch.full((num,), self.bos, dtype=torch.long,
                                                          device=self.device))
        return [()] * num

    def draw(self, state, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        if self.kv is not None:
            return self.kv.draw(state, n, generator)
        if self.mode == "recompute":
            return self.sample(state, n, generator)
        rows = state.shape[0]
        if self.mode == "last-token":
            preds = self._predict(state.repeat_interleave(n, 0).unsqueeze(1), generator)
            return preds.reshape(rows, n)
        with self._rng(generator), torch.no_grad():
            value = self.plan.post_copies(state, n)
            out = self.morphism.rsample(self._bos_column(rows * n),
                                        observations={self.plan.site: value})
        return torch.as_tensor(out).long().reshape(rows, n).cpu()

    def advance(self, state, rows: torch.Tensor, tokens: torch.Tensor, prefixes,
                generator: Optional[torch.Generator] = None):
        if self.kv is not None:
            return self.kv.extend(self.kv.select(state, rows), tokens, generator)
        if self.mode == "recompute":
            return prefixes if isinstance(prefixes, PrefixBatch) else list(prefixes)
        if self.mode == "last-token":
            return tokens.clone()
        with self._rng(generator), torch.no_grad():
            return self.plan.consume(take_rows(state, rows), tokens.to(self.device))


class _SeededCPU:
    """What ``_Seeded`` does for a CPU program, without ``fork_rng``'s general machinery
    (it runs twice per SMC step): save the default generator's state, seed it, restore
    the state on exit."""

    def __init__(self, seed: int):
        self.seed = seed

    def __enter__(self):
        gen = torch.default_generator
        self.saved = gen.get_state()
        gen.manual_seed(self.seed)

    def __exit__(self, *exc):
        torch.default_generator.set_state(self.saved)
        return False


class _Seeded:
    """``fork_rng`` then seed the forked generators: a private stream for one program call.

    (The default generators are seeded directly: ``torch.manual_seed`` also visits every
    lazily initialised backend, which costs milliseconds per call.)"""

    def __init__(self, fork, seed: int, device: torch.device):
        self.fork, self.seed, self.device = fork, seed, device

    def __enter__(self):
        self.fork.__enter__()
        torch.default_generator.manual_seed(self.seed)
        if self.device.type == "cuda":
            torch.cuda.default_generators[self.device.index or 0].manual_seed(self.seed)

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)
