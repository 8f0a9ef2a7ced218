"""Incremental SMC state for programs whose value mixes positions (causal attention): one
small class per layer kind (`kv_layers`) that knows how to extend a particle's state by one
position (design 17, issue 17; the "CachedTransformer" of Algorithm 3 in design document
001).

A program such as ::

    tok_embed [role=embed, positions=N]
      >> stack(residual(layer_norm(Latent) >> attn) >> residual(layer_norm(Latent) >> ff_up >> ff_down), 2)
      >> layer_norm(Latent)      then   lm_head ~ Categorical

maps ``(B, T)`` tokens to ``(B, T)`` next tokens, and its hidden value at position `i`
depends on positions ``j <= i`` (attention with ``causal``).  `plan_for` reads it as a flat
chain of *layers* (`Layer` subclasses: `EmbedLayer`, `KernelLayer`, `AttentionLayer`,
`ResidualLayer`, `DeterministicLayer`, `OpaqueLayer`, grouped by `Chain`; `kv_layers.py`) ending
in a token *head* (`Head`), and `KVPlan` runs that chain one position at a time.

Decision — what a particle is.  A particle is a token prefix **plus its hidden draws**: the
values drawn by every stochastic link (embedding noise, kernel noise, attention noise) at
every earlier position are latent values of the particle, fixed once drawn.  SMC then
steers the program read as a sequential latent-variable model: at position `t` the hidden
values are drawn given the tokens ``<= t`` and the hidden values at positions ``< t``, and
the next token is drawn from the head at position `t`.  The token sequence has a proper
joint law under this reading and `Ẑ` is an unbiased estimate of its normaliser
``E[Π_t G_t]``.  It coincides with the per-call law of the program (``sample``: the whole
``[bos] + s`` fed afresh, every hidden value redrawn) when the program is deterministic
before its head, and at the first position always; with stochastic hidden links it is a
different (equally valid, and cheaper) model — as for the ``scan-state`` mode of
`ProgramLM`.  The hidden values at a new position are drawn once per particle when its
token is appended (`KVPlan.extend`, after resampling: they do not affect the weights), and
the `K` children of a particle are `K` iid draws from the head given them (`KVPlan.draw`).

Two ways to hold that state, with the same law and the same random numbers:

* **cached** (``cached=True``, `ProgramLM(cache=True)`): per particle, each attention
  layer's keys and values at every earlier position (`AttentionLayer`: buffers
  ``(S, H, capacity, k)`` indexed by *slot*, see `KVPlan`) and the final hidden value at
  the last position.  Extending by one token runs every layer on the new position only,
  so step `t` costs `O(t)` (one query against `t + 1` cached keys per head) instead of
  `O(t²)`.  Decision: the cached keys and values are a sufficient statistic of the
  particle's hidden draws for everything that follows, so the draws themselves are not
  kept in this mode (keeping them would cost a copy per step and serve nothing).
* **recomputed** (``cached=False``): per particle, the tokens and every stochastic layer's
  *noise* at every earlier position (`Noise`: standard Normal draws and uniforms for the
  Laplace / Cauchy / Gumbel draws, laid out by `Layout`; the drawn value itself for a
  row-wise link whose noise cannot be separated, `OpaqueLayer`).  Extending by one token
  draws the new position's noise and recomputes the whole prefix through every layer from
  the stored noise, with the links' own whole-sequence maps (``Attention.mean``, the
  kernels' ``params``).  This is the baseline of ``bench/smc.py``: the same law as the
  cached state, the state recomputed from the stored noise rather than redrawn.

The noise of a new position is drawn as one block per kind in particle order in both
variants (`Rng`, `Noise`: `kv_noise.py`), and the head draws `K` tokens per particle with
``torch.multinomial`` from the same stream, so a cached run and a recomputed run with one
generator make the same draws (up to float rounding of the hidden values, far below what
changes a token).  Resampling copies a particle's keys and values by index
(`KVPlan.select`; ``take_rows`` for the recomputed state), never recomputing them.

Non-causal attention is refused (`NotCausalError`): a particle's earlier positions would
change when a token is appended, which no next-token model allows.

This module runs no SMC (see `steering.py`) and never modifies the program.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from qvr.runtime.errors import NamedInMessage, QvrRuntimeError
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.morphisms.norms import Residual

from .kv_layers import (LOC_SCALE, AttentionLayer, Chain, DeterministicLayer, EmbedLayer,
                        Head, KernelLayer, OpaqueLayer, ResidualLayer)
from .kv_noise import Layout, Noise, Rng
from .model import take_rows

__all__ = ["KVPlan", "NotCausalError", "NotIncrementalError", "StaleStateError", "plan_for",
           "mixes_positions"]


class NotCausalError(NamedInMessage, QvrRuntimeError, ValueError):
    """An attention without ``causal`` in a program used as a next-token model."""

    def __init__(self, *, morphism: str, program: Optional[str] = None):
        super().__init__(
            f"`{morphism}` is not causal: SMC steering needs a causal next-token model "
            f"(the value at a position may depend only on that position and earlier ones, "
            f"so that appending a token never changes a particle's past); declare the "
            f"attention with `causal`", morphism=morphism, program=program)


class StaleStateError(RuntimeError):
    """A cached state advanced a second time (its buffers were updated in place)."""


class NotIncrementalError(QvrRuntimeError, TypeError):
    """A program that mixes positions but is not a chain this module can run position by
    position."""


def mixes_positions(morphism) -> bool:
    """Whether any part of `morphism` mixes positions (design E1: ``mixes_positions``)."""
    modules = morphism.modules() if callable(getattr(morphism, "modules", None)) else [morphism]
    return any(bool(getattr(m, "mixes_positions", False)) for m in modules)



# ---------------------------------------------------------------------------- the plan
def _flatten(links) -> list:
    out = []
    for link in links:
        parts = link.links() if callable(getattr(link, "links", None)) else [link]
        if len(parts) == 1 and parts[0] is link:
            out.append(link)
        else:
            out.extend(_flatten(parts))
    return out


def _layers(links, layout: Layout, who: str, opaque: list) -> Chain:
    from qvr.runtime.morphisms.kernels import Embed, FamilyKernel
    layers = []
    for link in _flatten(links):
        if isinstance(link, Attention):
            layers.append(AttentionLayer(link, layout))
        elif isinstance(link, Residual):
            layers.append(ResidualLayer(_layers([link.inner], layout, who, opaque)))
        elif type(link) is Embed:
            layers.append(EmbedLayer(link, layout))
        elif type(link) is FamilyKernel and link.family_name in LOC_SCALE:
            layers.append(KernelLayer(link, layout))
        elif getattr(link, "mixes_positions", False):
            raise NotIncrementalError(
                "this link mixes positions but is not an attention or a residual of one: "
                "SMC cannot extend it one position at a time", morphism=link.label,
                program=who)
        elif getattr(link, "deterministic", False):
            layers.append(DeterministicLayer(link))
        else:
            layers.append(OpaqueLayer(link, layout))
            opaque.append(layers[-1])
    return Chain(layers)


def _chain_links(morphism) -> Optional[list]:
    """The program's links from its input to its returned value when its steps are a chain
    of morphism sites (each reading the previous one, the first the program input), else
    None.  A plain morphism is its own chain."""
    steps = getattr(morphism, "steps", None)
    if steps is None:
        return morphism.links() if callable(getattr(morphism, "links", None)) else [morphism]
    from qvr.runtime.steps import SiteStep
    inputs = [name for name, _ in getattr(morphism, "input_parts", None) or []]
    if not steps or len(inputs) > 1 or not all(isinstance(s, SiteStep) and s.family is None
                                               for s in steps):
        return None
    links, prev = [], None
    for s in steps:
        args = None if s.args is None else tuple(s.args)
        if prev is None:
            if not (args is None or (inputs and args == (inputs[0],))):
                return None
        elif args != (prev,):
            return None
        module = getattr(morphism, s.module_name, None)
        if module is None:
            return None
        links.extend(module.links() if callable(getattr(module, "links", None)) else [module])
        prev = s.name
    if tuple(getattr(morphism, "return_vars", ())) != (prev,):
        return None
    return links


def plan_for(morphism) -> Optional["KVPlan"]:
    """The incremental plan of a program that mixes positions, None for one that does not.

    Raises `NotCausalError` for an attention without ``causal`` and `NotIncrementalError`
    for a program this module cannot extend one position at a time (its sites are not a
    chain, or a position-mixing link is not an attention)."""
    if not mixes_positions(morphism):
        return None
    who = getattr(morphism, "label", None)
    for m in morphism.modules():
        if isinstance(m, Attention) and not m.causal:
            raise NotCausalError(morphism=m.label, program=who)
    links = _chain_links(morphism)
    if links is None or len(links) < 2:
        raise NotIncrementalError(
            "a program that mixes positions runs under SMC as a chain of morphism sites "
            "(each `sample`/`observe` reading the previous one, the first the input, "
            "the last returned)", program=who)
    head = links[-1]
    if not head.output_discrete or getattr(head, "mixes_positions", False):
        raise NotIncrementalError("the last link must draw tokens row by row",
                                  morphism=head.label, program=who)
    layout, opaque = Layout(), []
    body = _layers(links[:-1], layout, who, opaque)
    return KVPlan(body, Head(head), layout, opaque, morphism)


class _Store:
    """The version of a run's slot buffers: only the latest state made from them may be
    advanced (`StaleStateError` otherwise)."""

    __slots__ = ("version",)

    def __init__(self):
        self.version = 0


class KVPlan:
    """Runs a layer chain and its head position by position (see the module docstring).

    Cached state (a dict): ``t`` positions consumed; ``slots`` (numpy int64 ``(M,)``) the
    buffer slot of each particle; ``cache`` per layer (attention: key and value buffers
    ``(S, H, capacity, k)``, `S` the number of particles the run started with); ``h``
    ``(S, w)`` the final hidden value at the last position per slot; ``store`` and
    ``version`` (see `_Store`).

    Decision — slots instead of gathered rows.  Resampling keeps each surviving parent's
    slot for its first copy and copies the filled part of the buffers only into free slots
    for further copies, and a step runs every layer on all `S` slots (the buffers are
    never gathered per particle): the copying per step is proportional to the duplicated
    particles, not to all of them (copying every particle's buffers was a fifth of the run
    at length 128).  The price: the buffers are updated in place and shared with the
    state they came from, so a cached state can be advanced once (`SMCSteering` does
    exactly that); advancing it again raises `StaleStateError` instead of reading
    overwritten keys (draws from it stay valid).  The noise of a step is drawn in
    particle order and scattered to the slots, so both variants draw alike.

    Recomputed state: ``t``, ``tokens`` ``(M, t)``, ``normal`` and ``uniform`` (the noise
    blocks ``(M, t, W)``), ``values`` (the opaque layers' draws) and ``h`` ``(M, w)``.
    """

    def __init__(self, body: Chain, head: Head, layout: Layout, opaque: list, morphism):
        self.body, self.head, self.layout, self.opaque = body, head, layout, opaque
        param = next(iter(morphism.parameters()), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.dtype = next((p.dtype for p in morphism.parameters() if p.is_floating_point()),
                          torch.get_default_dtype())

    def rng(self, generator) -> Rng:
        return Rng(generator, self.device, self.dtype)

    # -- states
    def start(self, num: int, bos: int, generator, cached: bool) -> dict:
        """The state of `num` particles holding the empty prefix (`bos` at position 0).
        The parameters are read here: a run uses the values they have when it starts."""
        self.body.prepare()
        like = torch.empty(0, dtype=self.dtype, device=self.device)
        if cached:
            state = {"t": 0, "S": num, "slots": np.arange(num),
                     "cache": self.body.init(num, like), "h": None, "store": _Store(),
                     "version": 0}
        else:
            state = {"t": 0, "tokens": torch.empty(num, 0, dtype=torch.long, device=self.device),
                     "normal": None, "uniform": None, "values": [None] * len(self.opaque),
                     "h": None}
        return self.extend(state, torch.full((num,), bos, dtype=torch.long), generator)

    def select(self, state: dict, rows: torch.Tensor) -> dict:
        """Particles ``rows`` of a state (a resampling step's survivors, possibly repeated):
        the buffers are copied by index, never recomputed."""
        if "slots" not in state:
            return {k: v if k == "t" else take_rows(v, rows) for k, v in state.items()}
        self._check_latest(state)
        parent = state["slots"][np.asarray(rows, dtype=np.int64)]
        if parent.size > state["S"]:  # more particles than slots (not in SMC): gather
            idx = torch.from_numpy(parent).to(self.device)
            return {**state, "S": parent.size, "slots": np.arange(parent.size),
                    "cache": _map_buffers(state["cache"], lambda b: b.index_select(0, idx)),
                    "h": state["h"].index_select(0, idx), "store": _Store(), "version": 0}
        slots = parent.copy()
        _, first = np.unique(parent, return_index=True)
        if first.size < parent.size:  # further copies of a parent get free slots
            again = np.ones(parent.size, dtype=bool)
            again[first] = False
            used = np.zeros(state["S"], dtype=bool)
            used[parent] = True
            free = np.flatnonzero(~used)[:parent.size - first.size]
            slots[again] = free
            t, dev = state["t"], self.device
            src = torch.from_numpy(parent[again]).to(dev)
            dst = torch.from_numpy(free).to(dev)
            for buf in self.body.buffers(state["cache"]):
                filled = buf[:, :, :t]
                filled.index_copy_(0, dst, filled.index_select(0, src))
            state = {**state, "h": state["h"].index_copy(0, dst, state["h"].index_select(0, src))}
        store = state["store"]
        store.version += 1
        return {**state, "slots": slots, "version": store.version}

    @staticmethod
    def _check_latest(state: dict) -> None:
        if state["version"] != state["store"].version:
            raise StaleStateError(
                "this key/value cache state was already advanced: its buffers are updated "
                "in place, so a state can be advanced once (draws from it stay valid); "
                "use ProgramLM(cache=False) to branch from one state several times")

    def extend(self, state: dict, tokens: torch.Tensor, generator) -> dict:
        """Append one token per particle at position ``state["t"]``."""
        rng = self.rng(generator)
        tokens = tokens.to(self.device).long()
        t, M, lay = state["t"], tokens.shape[0], self.layout
        noise = Noise(rng.normal((M, lay.normal)), rng.uniform((M, lay.uniform)),
                      rng.seeds(lay.opaque))
        with torch.no_grad():
            if "slots" not in state:
                noise.normal = _append(state["normal"], noise.normal)
                noise.uniform = _append(state["uniform"], noise.uniform)
                noise.values = list(state["values"])
                seq = torch.cat([state["tokens"], tokens.unsqueeze(1)], dim=1)
                y = self.body.full(seq, noise)
                return {"t": t + 1, "tokens": seq, "normal": noise.normal,
                        "uniform": noise.uniform, "values": noise.values, "h": y[:, -1]}
            self._check_latest(state)
            slots, S = state["slots"], state["S"]
            where = None
            if not _identity(slots, S):
                where = torch.from_numpy(slots).to(self.device)
                tokens = tokens.new_zeros(S).index_copy_(0, where, tokens)
                noise.normal = _scatter(noise.normal, where, S)
                noise.uniform = _scatter(noise.uniform, where, S)
            for layer in self.opaque:
                layer.slots = where
            h, cache = self.body.step(tokens, t, state["cache"], noise)
            store = state["store"]
            store.version += 1
            return {**state, "t": t + 1, "cache": cache, "h": h, "version": store.version}

    def draw(self, state: dict, n: int, generator) -> torch.Tensor:
        """`n` iid next tokens per particle, int64 ``(M, n)`` on the CPU."""
        h = state["h"]
        if "slots" in state:
            slots = state["slots"]
            if not _identity(slots, state["S"]):
                h = h.index_select(0, torch.from_numpy(slots).to(self.device))
        with torch.no_grad():
            return self.head.draw(h, n, self.rng(generator)).cpu()


def _identity(slots: np.ndarray, S: int) -> bool:
    """Every slot holds the particle of the same index."""
    return slots.size == S and bool((slots == np.arange(S)).all())


def _append(stored: Optional[torch.Tensor], new: torch.Tensor) -> torch.Tensor:
    """Per-position noise ``(M, T-1, W)`` extended by one position's ``(M, W)``."""
    new = new.unsqueeze(1)
    return new if stored is None else torch.cat([stored, new], dim=1)


def _scatter(block: torch.Tensor, where: torch.Tensor, S: int) -> torch.Tensor:
    """Rows of a particle-order block placed at their slots (zeros elsewhere)."""
    if block.shape[-1] == 0:
        return block.new_zeros(S, 0)
    return block.new_zeros(S, block.shape[-1]).index_copy_(0, where, block)


def _map_buffers(cache, fn):
    """`cache` with `fn` applied to every buffer (attention caches are tuples)."""
    if isinstance(cache, list):
        return [_map_buffers(c, fn) for c in cache]
    if isinstance(cache, tuple):
        return tuple(fn(b) for b in cache)
    return cache
