"""Combinators over runtime morphisms (runtime spec section 4).

* `compose(f, g)` — `f >> g`: a `FiniteCompose` of two finite morphisms, otherwise a
  continuous `Compose` that samples through (submodules `left`, `right`) and whose
  `log_prob` marginalises the last intermediate exactly (finite) or by Monte-Carlo with
  common random numbers (spec 4.1, 9.3), drawing the prefix once per distinct finite
  input (`chain_log_prob` records that decision);
* `tensor(f, g)` — `f @ g`: `FiniteTensor` or the continuous `Tensor`; both operators are
  set on `Morphism` here (`morphisms/base.py` is below the composites and imports none);
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
import weakref

import torch
from torch import nn

from qvr.runtime.errors import IncompatibleMorphismsError, InputShapeError
from qvr.runtime.morphisms.base import ContinuousMorphism, Morphism
from qvr.runtime.morphisms.finite import FiniteCompose, FiniteMorphism, FiniteTensor
from qvr.runtime.objects import QvrObject, product
from qvr.runtime.values import as_features, as_tensor, mask_missing, split_missing

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


def _rshift(self, other):
    return compose(self, other)


def _matmul(self, other):
    return tensor(self, other)


# `f >> g` and `f @ g` of every morphism: defined here, where the composites are, and set on
# the base class, which sits below them (`qvr.runtime.__init__` imports this module).
Morphism.__rshift__ = _rshift
Morphism.__matmul__ = _matmul


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
        self.dedup_inputs = True  # prefix draws per distinct finite input (chain_log_prob)
        self._links = left.links() + right.links()

    def links(self) -> list:
        return list(self._links)

    @property
    def mixes_positions(self) -> bool:
        """True when any link mixes positions (design E1)."""
        return _mixes(self._links)

    @property
    def deterministic(self) -> bool:
        """True when every link is deterministic: the chain is then a function of its input.

        Decision: *every* link, not only the last.  A chain whose last link alone is
        deterministic (`kernel >> layer_norm`) has no density either (its `log_prob` raises
        the last link's `DeterministicError`), but its output is random; calling it
        deterministic would let a composite holding it (`residual(kernel >> ln)`, a fan)
        claim to be a function of its input, and `chain_log_prob` would then draw it once.
        """
        return _all_deterministic(self._links)

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
        return chain_log_prob(self._links, x, z, self.n_intermediate, self.mc_seed,
                              self.dedup_inputs)


def composites(*modules) -> list:
    """Every `Compose` inside `modules` (each once): the owners of a Monte-Carlo density's
    draws (`n_intermediate`) and common random numbers (`mc_seed`)."""
    found = {}
    for owner in modules:
        if isinstance(owner, nn.Module):
            for m in owner.modules():
                if isinstance(m, Compose):
                    found[id(m)] = m
    return list(found.values())


def chain_rsample(links, x, sample_shape=torch.Size()):
    """Ancestral draw through `links`: `links[0].rsample(x, sample_shape)`, then every
    further link on the previous draw.

    When every link after the first is a row-wise Normal-type kernel on continuous
    features (`_flat_link`), the draws between links are kept as 2-D `(rows, width)`
    tensors and the leading axes restored at the end: the same values (the kernels act
    row by row, and their noise is drawn in the same order), without a reshape per layer.
    """
    if len(sample_shape) and len(links) > 1 and _mixes(links[1:]) \
            and _one_batch_axis(links[0].domain, x):
        # sequences of length 1 (design E1): a later link that mixes positions must not
        # read the sample axes of the first link's draws as a position axis
        y = chain_rsample(links, _with_position_axis(links[0].domain, x), sample_shape)
        return y.squeeze(y.dim() - 1 - links[-1].output_event_rank)
    y = links[0].rsample(x, sample_shape)
    rest = links[1:]
    if rest and y.dim() > 2 and y.is_floating_point() and y.is_contiguous() \
            and _chain_facts(links)[1]:
        lead = y.shape[:-1]
        y = y.view(-1, y.shape[-1])
        for link in rest:
            y = link.rsample(y)
        return y.view(*lead, y.shape[-1])
    for link in rest:
        y = link.rsample(y)
    return y


def _flat_link(link) -> bool:
    """A link that maps `(rows, w)` features to `(rows, w')` draws row by row, drawing its
    noise in row-major order whatever the leading shape: a Normal or LogitNormal kernel
    with an MLP parameter source, or a fan of those evaluated together.  Never a link
    that mixes positions (design E1): flattening would merge its sequences."""
    from qvr.runtime.morphisms.kernels import FamilyKernel, MLPSource
    if getattr(link, "mixes_positions", False):
        return False
    if type(link) is Fan:
        return link.batched
    return type(link) is FamilyKernel and link.family_name in ("Normal", "LogitNormal") \
        and isinstance(link.param_source, MLPSource)


_FACTS: dict = {}


def _chain_facts(links) -> tuple:
    """`(every link row-wise, every link after the first a _flat_link)` for a chain,
    memoised by the identity of its links (the facts depend only on their types and
    construction-time structure).  The memo holds its links weakly: it never keeps a
    model alive, and an id reused by a new object is not mistaken for the old one."""
    key = tuple(map(id, links))
    hit = _FACTS.get(key)
    if hit is not None and all(ref() is link for ref, link in zip(hit[0], links)):
        return hit[1]
    facts = (all(_rowwise(link) for link in links), all(_flat_link(link) for link in links[1:]))
    if len(_FACTS) >= 256:
        _FACTS.clear()
    _FACTS[key] = (tuple(weakref.ref(link) for link in links), facts)
    return facts


def chain_log_prob(links, x, z, n: int = 100, seed: int = 0, dedup: bool = True,
                   observed=None):
    """`log p(z | x)` of the chain `links[0] >> ... >> links[-1]` (spec 4.1).

    A finite last intermediate is summed out exactly.  Otherwise the estimate is
    `logsumexp_i last.log_prob(y_i, z) - log n` over `n` ancestral draws `y_i` of the
    prefix (`_log_mean_exp`), made with common random numbers (spec 9.3,
    `common_random_numbers`): a deterministic, differentiable function of parameters and
    inputs that leaves the global RNG state unchanged.

    Decision — prefix draws per distinct input (`dedup=True`, the default; a deliberate
    departure from the letter of spec 9.3, where the `n` draws are made per row).  When
    the first link's domain is one finite set (every entry of the index tensor `x` is a
    row) and every link of the prefix acts row by row (kernels, embeds, discretize,
    finite morphisms, and fans, tensor products and chains of those; spec 1.2), the
    prefix is drawn `n` times per *distinct* value of `x` (`torch.unique`) and rows with
    equal inputs share those draws.  Why: each row's estimator keeps exactly the same law
    (`n` iid ancestral draws given its input, the same `logsumexp - log n`), while the
    cost of the prefix scales with the number of distinct inputs instead of the number of
    rows (a 256 x 16 token batch over a 32-symbol vocabulary: 32 prefix rows instead of
    4096 per draw).  The price: the Monte-Carlo errors of rows with equal inputs are
    correlated (rows with equal inputs and equal `z` get equal estimates), and since the
    draws are indexed by input value rather than by row position, values differ from the
    per-row layout by Monte-Carlo error.  A last link with `params(x)` and
    `log_prob_from_params(params, z, rows=...)` (`FamilyKernel`, `Embed`) also runs its
    parameter network on the `n x distinct` draws only; its parameters are then gathered
    to the rows.  Dedup is used only where it saves work (fewer distinct values than
    rows) and never for vmapped inputs; `dedup=False` (`Compose.dedup_inputs = False`)
    keeps the per-row layout of the spec.

    Chains that mix positions (design E1, E6): when any link mixes positions (attention,
    or a composite holding one), the prefix is drawn jointly per sequence (`n` draws of
    the whole `(B, T, ...)` input, never per distinct input, never flattened) and the
    per-position terms telescope to the per-sequence estimator (`_telescoped`).  Decision
    — the *last* link counts too: a last link that mixes positions scores position t
    under the draws of every position, so the positions' terms are no longer independent
    given the input and the per-row product would not estimate the joint.

    Missing entries (design E5): an observe step passes `z` with its missing entries
    filled and `observed`, the rows that are observed (`observed_log_prob`); the rows
    that are not contribute exactly 0 (masked before the Monte-Carlo average and after
    it).  Without `observed` nothing is masked: a NaN in a latent value stays a NaN.

    A prefix of deterministic links only (norms, attention without a family) is drawn
    once (`n = 1`): every draw would be the same value.
    """
    last = links[-1]
    z = as_tensor(z)
    if len(links) == 1:
        return mask_missing(last.log_prob(x, z), observed)
    prefix = links[:-1]
    if _all_deterministic(prefix):
        n = 1
    if _mixes(links):
        return _sequence_log_prob(prefix, last, x, z, observed, n, seed)
    mid = prefix[-1]
    if mid.output_discrete and mid.codomain.is_discrete and mid.output_event_rank == 0:
        if _has_positions(prefix) and _one_batch_axis(prefix[0].domain, x):
            # the class axis put in front of the input below must not be read as a
            # position axis by an embed with `positions` (design E1): sequences of length 1
            ev = last.output_event_rank
            obs = None if observed is None else observed.unsqueeze(-1)
            return chain_log_prob(links, _with_position_axis(prefix[0].domain, x),
                                  z.unsqueeze(z.dim() - ev), n, seed, dedup, obs).squeeze(-1)
        # exact: logsumexp over every value of the finite intermediate
        # every value y of the k-element intermediate, with the batch of z; the input is
        # repeated along a leading class axis so that nested Monte-Carlo prefixes broadcast
        k = mid.codomain.size
        batch = z.shape[:z.dim() - last.output_event_rank]
        ys = torch.arange(k, device=z.device).reshape(k, *([1] * len(batch))).expand(k, *batch)
        x = as_tensor(x)
        xs = x.unsqueeze(0).expand(k, *x.shape)
        lp = chain_log_prob(prefix, xs, ys, n, seed, dedup) + last.log_prob(ys, z)
        return mask_missing(torch.logsumexp(lp, dim=0), observed)
    groups = _distinct_inputs(prefix, x) if dedup else None
    with common_random_numbers(seed, z.device):
        ys = chain_rsample(prefix, x if groups is None else groups[0], torch.Size([n]))
    if groups is None:
        lp = last.log_prob(ys, z)
    else:
        lp = _shared_last_log_prob(last, ys, groups[1], groups[2], z)
    if observed is not None:
        return mask_missing(_log_mean_exp(mask_missing(lp, observed)), observed)
    return _log_mean_exp(lp)


def observed_log_prob(module, x, z):
    """`module.log_prob(x, z)` for an observed value that may have missing entries (design
    E5): the rows with one contribute exactly 0.  `split_missing` runs once here (observe
    steps only: latent values are never masked); a Monte-Carlo chain (`Compose`) masks the
    rows itself before its average (`chain_log_prob`), any other morphism scores `z` with
    its missing entries filled and the rows are masked after."""
    last = module._links[-1] if isinstance(module, Compose) else module
    z, observed = split_missing(as_tensor(z), last.output_discrete, last.output_event_rank)
    if observed is None:
        return module.log_prob(x, z)
    if isinstance(module, Compose):
        return chain_log_prob(module._links, x, z, module.n_intermediate, module.mc_seed,
                              module.dedup_inputs, observed=observed)
    return mask_missing(module.log_prob(x, z), observed)


def _mixes(links) -> bool:
    return any(getattr(link, "mixes_positions", False) for link in links)


def _has_positions(links) -> bool:
    """Any link that reads the position axis: an embed with `positions`, or a link that
    mixes positions (design E1, E3)."""
    return any(getattr(link, "positions", None) is not None
               or getattr(link, "mixes_positions", False) for link in links)


def _all_deterministic(links) -> bool:
    return all(getattr(link, "deterministic", False) for link in links)


def _sequence_log_prob(prefix, last, x, z, observed, n: int, seed: int):
    """`chain_log_prob` of a chain that mixes positions (design E6): `(*batch)` terms whose
    sum over the position axis is the per-sequence estimator.

    `z`'s batch axes are `batch = z.shape[:z.dim() - last.output_event_rank]`; the
    position axis is the last of them.  With one batch axis every row is a sequence of
    length 1: a position axis of length 1 is inserted into `x` and `z` (and removed from
    the result), so that a link that mixes positions never reads the Monte-Carlo axis of
    the draws as a position axis.  The prefix is drawn `n` times jointly (`chain_rsample`
    of the whole input with sample shape `(n,)`, common random numbers); a finite last
    intermediate is summed out exactly under each draw of the links before it.  With
    `lp (n, *batch)` the (masked) log-density of the last link under each draw, the terms
    are `_telescoped(lp)`.
    """
    ev = last.output_event_rank
    if ev and z.dim() == 1 and last.output_width == 1 and not last.output_discrete:
        z = z.unsqueeze(-1)  # `(B,)` values of a width-1 real object: `(B, 1)` rows
    if z.dim() - ev < 2:
        x = _with_position_axis(prefix[0].domain, x)
        z = z.unsqueeze(z.dim() - ev)
        obs = None if observed is None else observed.unsqueeze(-1)
        return _sequence_log_prob(prefix, last, x, z, obs, n, seed).squeeze(-1)
    mid = prefix[-1]
    exact = (len(prefix) > 1 and mid.output_discrete and mid.codomain.is_discrete
             and mid.output_event_rank == 0)
    drawn = prefix[:-1] if exact else prefix
    with common_random_numbers(seed, z.device):
        hs = chain_rsample(drawn, x, torch.Size([n]))
    if exact:
        # every value y of the k-element intermediate under each draw h_s of the links
        # before it: logsumexp_y mid(y | h_s) last(z | y), position by position
        k = mid.codomain.size
        batch = z.shape[:z.dim() - ev]
        ys = torch.arange(k, device=z.device).reshape(k, *([1] * (1 + len(batch))))
        ys = ys.expand(k, n, *batch)
        hk = hs.unsqueeze(0).expand(k, *hs.shape)
        lp = torch.logsumexp(mid.log_prob(hk, ys) + last.log_prob(ys, z), dim=0)
    else:
        lp = last.log_prob(hs, z)
    if observed is not None:
        lp = mask_missing(lp, observed)
    if n == 1:
        return mask_missing(lp[0], observed)
    return mask_missing(_telescoped(lp), observed)


def _one_batch_axis(domain, x) -> bool:
    """True when the input `x` of `domain` has one batch axis (`(B,)` indices, `(B, w)`
    features or index columns, `(B,)` features of a width-1 object)."""
    if not isinstance(x, torch.Tensor):
        x = as_tensor(x)
    if domain.is_discrete and len(domain.atoms()) == 1:
        return x.dim() == 1
    return x.dim() == 2 or (x.dim() == 1 and domain.width == 1)


def _with_position_axis(domain, x):
    """`x` of one batch axis with a position axis of length 1 after it (before the
    event axis of a continuous value or of the index columns of a product of finite
    sets; last for an index tensor of one finite set)."""
    x = as_tensor(x)
    if domain.is_discrete and len(domain.atoms()) == 1:
        return x.unsqueeze(-1)
    if x.dim() == 1 and domain.width == 1:
        x = x.unsqueeze(-1)
    return x.unsqueeze(-2)


def _telescoped(lp):
    """Per-position terms of the per-sequence estimator from `lp (n, ..., T)` (design E6).

    With `c[s, ..., t] = sum_{t' <= t} lp[s, ..., t']` and `L_t = LME_s c[s, ..., t]`
    (log-mean-exp over the `n` joint draws, `_log_mean_exp`), term t is `L_t - L_{t-1}`
    (`L_{-1} = 0`): the estimated log-conditional of position t given the earlier ones
    under the draws' weights, and `sum_t term_t = L_{T-1} = log (1/n) sum_s prod_t
    p(z_t | h_s)`, the sequence's likelihood estimator.  A position after an impossible
    prefix (`L_{t-1} = -inf`) gets 0, so the sum stays `-inf` without NaN."""
    c = lp.cumsum(-1)
    L = _log_mean_exp(c)
    prev = torch.cat([torch.zeros_like(L[..., :1]), L[..., :-1]], dim=-1)
    return torch.where(prev == -math.inf, torch.zeros((), dtype=L.dtype, device=L.device),
                       L - prev)


#: exp(x) for x below this is a subnormal float32 (or 0): slow on CPUs (about 30x) and far
#: below the resolution of a sum whose largest term is 1
_EXP_FLOOR = -87.0


def _log_mean_exp(lp):
    """`logsumexp(lp, 0) - log n`, with the shifted log-weights floored at -87: terms
    below `exp(-87) ~ 1.6e-38` of the largest cannot change the float32 (or, at `n` of
    any practical size, the float64) sum, and computing them as subnormals makes `exp`
    and its gradient about 30 times slower on CPUs.  Rows whose terms are all `-inf` give
    `-inf`, as `torch.logsumexp` does."""
    # the shift: the detached maximum, with non-finite values (nan, +-inf) replaced by 0
    m = torch.nan_to_num(lp.detach().amax(dim=0), nan=0.0, posinf=0.0, neginf=0.0)
    w = torch.exp((lp - m).clamp(min=_EXP_FLOOR))
    w = torch.where(lp == -math.inf, 0.0, w)
    return torch.log(w.sum(dim=0)) + (m - math.log(lp.shape[0]))


class common_random_numbers:
    """Context: the CPU generator (and `device`'s CUDA generator) seeded with `seed`,
    their states restored on exit (spec 9.3).

    The same streams as `fork_rng` + `torch.manual_seed(seed)`, without their general
    machinery: `torch.manual_seed` also queues a lazy seeding of every uninitialised
    backend, building a Python stack trace each time (about 1.5 ms per call, three
    `traceback.format_stack` calls per SVI step on the seed)."""

    __slots__ = ("seed", "device", "gens", "saved")

    def __init__(self, seed: int, device=None):
        self.seed = int(seed)
        self.device = device

    def __enter__(self):
        gens = [torch.default_generator]
        dev = self.device
        if dev is not None and dev.type == "cuda":
            gens.append(torch.cuda.default_generators[
                dev.index if dev.index is not None else torch.cuda.current_device()])
        self.gens = gens
        self.saved = [g.get_state() for g in gens]
        for g in gens:
            g.manual_seed(self.seed)
        return self

    def __exit__(self, *exc):
        for g, state in zip(self.gens, self.saved):
            g.set_state(state)
        return False


def _rowwise(link) -> bool:
    """True for links known to act independently on every batch position, with a law that
    depends on the row's input alone (spec 1.2): what prefix-draw dedup by distinct input
    needs.  False for a link that mixes positions (design E1) and for an embed with
    learned positions (its draw depends on the position too, design E3); the norms act row
    by row, and a residual is row-wise when its inner morphism is."""
    from qvr.runtime.morphisms.kernels import Discretize, Embed, FamilyKernel
    if getattr(link, "mixes_positions", False):
        return False
    if isinstance(link, Embed):
        return getattr(link, "positions", None) is None
    if isinstance(link, (FamilyKernel, Discretize, FiniteMorphism)):
        return True
    from qvr.runtime.morphisms.norms import LayerNorm, Residual, RMSNorm
    if isinstance(link, (LayerNorm, RMSNorm)):
        return True
    if isinstance(link, Residual):
        return _rowwise(link.inner)
    if isinstance(link, Fan):
        return all(_rowwise(p) for p in link.parts)
    if isinstance(link, Tensor):
        return _rowwise(link.left) and _rowwise(link.right)
    if isinstance(link, Compose):
        return all(_rowwise(p) for p in link.links())
    return False


_is_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor",
                      lambda t: False)


def _distinct_inputs(prefix, x):
    """`(distinct values, inverse index, batch shape)` of the index tensor `x` when the
    prefix may be drawn per distinct input and that saves work, else None."""
    dom = prefix[0].domain
    if not (dom.is_discrete and len(dom.atoms()) == 1) or not isinstance(x, torch.Tensor):
        return None
    if x.dim() == 0 or x.numel() < 2 or x.is_floating_point() or x.is_complex():
        return None
    if _is_wrapped(x):  # an input under vmap/grad transforms: keep the per-row layout
        return None
    if not _chain_facts(prefix)[0]:
        return None
    uniq, inv = torch.unique(x.reshape(-1), return_inverse=True)
    if uniq.numel() == x.numel():
        return None
    return uniq, inv, x.shape


def _shared_last_log_prob(last, ys, inv, batch, z):
    """`last.log_prob(y, z)` for every row, from prefix draws `ys (n, U, ...)` made per
    distinct input: when the last link has `params(x)` and `log_prob_from_params(params,
    z, rows=...)` its parameters are computed on the `n x U` draws and gathered to the
    rows by the link; otherwise the draws are gathered and `last.log_prob` runs per row."""
    n, U = ys.shape[0], ys.shape[1]
    params_fn = getattr(last, "params", None)
    from_params = getattr(last, "log_prob_from_params", None)
    if callable(params_fn) and callable(from_params):
        params = params_fn(ys)
        if all(isinstance(p, torch.Tensor) and p.dim() >= 2 and tuple(p.shape[:2]) == (n, U)
               for p in params):
            return from_params(params, z, rows=inv.reshape(batch))
    ys = ys.index_select(1, inv).reshape(n, *batch, *ys.shape[2:])
    return last.log_prob(ys, z)


class Tensor(ContinuousMorphism):
    """`f @ g` with a continuous side: inputs split by width, outputs side by side."""

    def __init__(self, left: Morphism, right: Morphism, label: str = None):
        super().__init__(product((left.domain, right.domain)),
                         product((left.codomain, right.codomain)),
                         label or f"{left.label} @ {right.label}")
        self.left = left
        self.right = right

    @property
    def mixes_positions(self) -> bool:
        return _mixes((self.left, self.right))

    @property
    def deterministic(self) -> bool:
        return _all_deterministic((self.left, self.right))

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
    def mixes_positions(self) -> bool:
        return _mixes(self.parts)

    @property
    def deterministic(self) -> bool:
        return _all_deterministic(self.parts)

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
        parts = list(self._modules["parts"]._modules.values())
        src = parts[0]._modules["param_source"]
        ws = [p._modules["param_source"].weights() for p in parts]  # (w0, b0, ..., b4) each
        x = as_features(x, src.width, who=parts[0].label, dtype=ws[0][0].dtype)
        lead = x.shape[:-1]
        k = len(ws)
        w0 = torch.cat([w[0] for w in ws])
        b0 = torch.cat([w[1] for w in ws])
        h = torch.tanh(torch.nn.functional.linear(x, w0, b0))  # (*lead, k*h)
        h = h.reshape(-1, k, h.shape[-1] // k).transpose(0, 1)  # (k, N, h)
        w2 = torch.stack([w[2] for w in ws])
        b2 = torch.stack([w[3] for w in ws]).unsqueeze(1)
        h = torch.tanh(torch.baddbmm(b2, h, w2.transpose(1, 2)))
        w4 = torch.stack([w[4] for w in ws])
        b4 = torch.stack([w[5] for w in ws]).unsqueeze(1)
        raw = torch.baddbmm(b4, h, w4.transpose(1, 2)).transpose(0, 1)  # (N, k, P)
        raw = raw.reshape(*lead, k, raw.shape[-1])
        loc, raw_scale = raw.chunk(2, -1)
        return loc, torch.exp(raw_scale).clamp(min=EPS)


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
