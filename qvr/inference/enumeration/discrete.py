"""Posterior of the finite latents: marginals and samples (like Pyro's `infer_discrete`).

Enumeration (`qvr.inference.enumeration.enumerate`) sums the finite latent sites out of the density that
SVI and MCMC use; afterwards their posterior given the continuous values is recovered here:

    post = infer_discrete(model, x, observations, latents={"mu": ...}, sample=True)
    post.marginals["regime"]   # (B, K): p(regime_n = k | continuous values, data)
    post.samples["regime"]     # (B,) one joint posterior draw (values of the site)

Marginals are the gradient of the log partition function with respect to a zero indicator
factor per site (for a chain of states this *is* forward-backward, at the cost of one
forward and one backward pass).  A joint sample is drawn site by site in program order, each
from its marginal given the sites already drawn (clamped through the indicators).  A global
finite site (one value for all rows) has marginals of shape `(K,)`.  Values are the site's
own (`lower + class`), marginals are indexed by class.

`infer_discrete_draws(model, x, observations, samples)` does this for every draw of an
`MCMCResult.samples`-like dict (`(chains, draws, ...)`), stacking the results in front.

The coordinate of a `marginalize` block (with `reduction=logsumexp`) is reported too, under
its name: its posterior `softmax_k [log pi(k) + l_k]` per row (`marginalize z : I`, or a
prior with a row axis: `(N, K)`), per group (`over=G`: `(|G|, K)`) or for the whole block
(`(K,)`), the responsibilities of a mixture; a sample draws each row (group) from it.  A
block whose terms read an enumerated finite site has no marginals here (they would be
conditional on one value of that site); its sample is drawn given the joint sample of the
enumerated sites, so that the sample is still one joint posterior draw.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from qvr.inference.enumeration.enumerate import _model_of, log_partition, prepare


@dataclass
class DiscretePosterior:
    """Marginals `{site: (B, K) or (K,)}` and, if asked, one joint sample `{site: values}`."""

    marginals: dict
    samples: dict = field(default_factory=dict)


def _indicators(st, device, dtype):
    out = {}
    for s in st.sites.values():
        shape = (st.B, s.K) if s.kind == "local" else (s.K,)
        out[s.name] = torch.zeros(shape, device=device, dtype=dtype, requires_grad=True)
    return out


def _marginals(model, x, values, st, clamp: dict, dtype):
    device = x.device if isinstance(x, torch.Tensor) else None
    ind = _indicators(st, device, dtype)
    factors = {}
    for name, t in ind.items():
        c = clamp.get(name)
        factors[name] = t if c is None else t + c
    with torch.enable_grad():
        logz = log_partition(model, x, values, st, factors)
        grads = torch.autograd.grad(logz.sum(), list(ind.values()), allow_unused=True)
    out = {}
    for (name, t), g in zip(ind.items(), grads):
        g = torch.zeros_like(t) if g is None else g.detach()
        out[name] = g
    return out


def infer_discrete(model, x, observations: dict, latents: Optional[dict] = None,
                   sample: bool = False, generator: Optional[torch.Generator] = None
                   ) -> DiscretePosterior:
    """Posterior marginals (and a joint sample when `sample`) of every finite latent site
    of `model` given the data `observations` and the continuous latent values `latents`.

    Args:
      model: a program (or a `Program` whose first export is one).
      x: the program input.
      observations: observed values and host data.
      latents: values of the continuous latent sites (one draw), e.g. posterior means.
      sample: also draw one joint sample of the finite sites.
      generator: the random source of the sample (default: torch's global one).

    Raises `EnumerationError` (a `ValueError`) where enumeration would be exponential.
    """
    from qvr.runtime.values import ensure_batch
    model = _model_of(model)
    x = ensure_batch(x)
    values = {**dict(observations or {}), **dict(latents or {})}
    st = prepare(model, x, values)
    if st is None:
        post = DiscretePosterior(_block_posteriors(model, x, values, set()))
        if sample:
            post.samples = _block_samples(post.marginals, generator)
        return post
    coupled = _coupled_blocks(model, st)
    dtype = model.float_dtype()
    marg = _marginals(model, x, values, st, {}, dtype)
    post = DiscretePosterior({k: v.clamp_min(0) for k, v in marg.items()})
    blocks = _block_posteriors(model, x, values, coupled)
    post.marginals.update(blocks)
    if not sample:
        return post
    clamp = {}
    order = sorted(st.sites.values(), key=lambda s: (s.kind != "global", s.index))
    current = marg
    for i, s in enumerate(order):
        p = current[s.name].clamp_min(0)
        p = p / p.sum(-1, keepdim=True)
        k = torch.multinomial(p.reshape(-1, s.K), 1, generator=generator).reshape(p.shape[:-1])
        post.samples[s.name] = (k + s.lower).reshape(s.shape if s.kind == "local" else ())
        mask = torch.full_like(p, -float("inf"))
        mask.scatter_(-1, k.unsqueeze(-1), 0.0)
        clamp[s.name] = mask
        if i + 1 < len(order):
            current = _marginals(model, x, values, st, clamp, dtype)
    if coupled:  # blocks reading enumerated sites: given their draw (one more run)
        blocks = _block_posteriors(model, x, {**values, **post.samples}, set())
    post.samples.update(_block_samples(blocks, generator))
    return post


def _block_names(model) -> set:
    from qvr.runtime.steps import MarginalizeStep
    return {s.name for s in model.steps if isinstance(s, MarginalizeStep)}


def _coupled_blocks(model, st) -> set:
    """The coordinates of the blocks whose contribution reads an enumerated site."""
    from qvr.runtime.steps import MarginalizeStep
    keys = {f.key for f in st.factors}
    return {s.name for s in model.steps
            if isinstance(s, MarginalizeStep) and s.site_name in keys}


def _block_posteriors(model, x, values: dict, skip: set) -> dict:
    """`{coordinate: posterior}` of the model's `marginalize` blocks at `values` (one run of
    the program), leaving out the coordinates in `skip`."""
    if not _block_names(model):
        return {}
    from qvr.runtime.marginal import collect_posteriors
    with torch.no_grad(), collect_posteriors() as out:
        model.execute(x, values, score=True, record=False)
    return {k: v for k, v in out.items() if k not in skip}


def _block_samples(marginals: dict, generator) -> dict:
    """One class per row (group) of each block from its posterior (independent given the
    values the posteriors were computed at)."""
    out = {}
    for k, p in marginals.items():
        flat = p.reshape(-1, p.shape[-1])
        draw = torch.multinomial(flat, 1, generator=generator).reshape(p.shape[:-1])
        out[k] = draw
    return out


def infer_discrete_draws(model, x, observations: dict, samples: dict, sample: bool = False,
                         generator: Optional[torch.Generator] = None,
                         lead_dims: int = 2) -> DiscretePosterior:
    """`infer_discrete` for every draw of `samples` (`{site: (*lead, *value shape)}` whose
    first `lead_dims` axes index draws, e.g. `MCMCResult.samples` with `(chains, draws)`);
    the results get those leading axes in front."""
    names = list(samples)
    if not names:
        return infer_discrete(model, x, observations, {}, sample, generator)
    lead = tuple(samples[names[0]].shape[:lead_dims])
    flat = {n: samples[n].reshape(-1, *samples[n].shape[lead_dims:]) for n in names}
    count = flat[names[0]].shape[0]
    margs, draws = {}, {}
    for i in range(count):
        post = infer_discrete(model, x, observations, {n: flat[n][i] for n in names},
                              sample, generator)
        for k, v in post.marginals.items():
            margs.setdefault(k, []).append(v)
        for k, v in post.samples.items():
            draws.setdefault(k, []).append(v)

    def stack(vs):
        return torch.stack(vs).reshape(*lead, *vs[0].shape)
    return DiscretePosterior({k: stack(v) for k, v in margs.items()},
                             {k: stack(v) for k, v in draws.items()})
