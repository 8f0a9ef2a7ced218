"""`marginalize` blocks: exact summation of a finite latent (runtime spec 5.6).

`run_marginalize(program, step, frame)` evaluates the block's body once per class of the
coordinate (body lets re-evaluated, every body observe supplied), then combines the
per-class log-likelihoods: grouped blocks (`over=G`) scatter each row into its group's
`(|G|, K)` table; a plain block annotated by its plate (`marginalize c : I <- …`, issue 36)
has one latent per element of I, summed out against the terms of its own row
(`sum_n reduce_k [log pi(n, k) + l_k(n)]`; the checker refuses the blocks where a row's
terms would read other rows' latents, QVR319-QVR321); an unannotated plain block has one
latent per row when the prior has a leading row axis and one shared latent otherwise; the
`reduction` (logsumexp, sum, mean) combines the classes.  The result is recorded as the
deterministic entry `_marg_<c>` (per row or per group where it has rows) and added to the
log joint.  Under `collect_posteriors()` each block also leaves its coordinate's posterior
(`qvr.inference.enumeration.discrete`).

Forward sampling (a body observe not supplied, as in `trace(model, x)`): the coordinate is
drawn from its prior — one class per group (grouped), per row (a plate annotation or a
prior with a row axis) or one for the whole body — and the body runs once with it, drawing every unsupplied observe
(the generative semantics).  The drawn values are recorded as `observe` entries (so that
synthetic data holds them) and, when the frame scores, the block's contribution is the exact
marginal at those values.  A grouped block's host group index (`via=idx`) that was not
supplied is drawn uniformly per row and recorded as a deterministic `host` entry.  Under
`require_all` (`log_joint`) missing values stay an error.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

from qvr.runtime.combinators import observed_log_prob
from qvr.runtime.errors import MissingValueError, ObservationShapeError
from qvr.runtime.families import is_discrete_dist
from qvr.runtime.frame import SiteRecord
from qvr.runtime.steps import LetStep, MarginalizeStep, SiteStep
from qvr.runtime.values import (as_index, coerce_family_value, eval_value, mask_missing,
                                observed_family_value)

_MARGINAL_REDUCTIONS = {
    "logsumexp": lambda t, dim: torch.logsumexp(t, dim=dim),
    "sum": lambda t, dim: t.sum(dim=dim),
    "mean": lambda t, dim: t.mean(dim=dim),
}


_POSTERIORS: contextvars.ContextVar = contextvars.ContextVar("qvr_marginal_posteriors",
                                                              default=None)


@contextlib.contextmanager
def collect_posteriors():
    """Within the block, every scored `marginalize` block (with `reduction=logsumexp`, the
    mixture) leaves the posterior of its coordinate in the yielded dict, under the
    coordinate's environment key: `(N, K)` for one latent per row, `(|G|, K)` per group,
    `(K,)` for one shared latent (`qvr.inference.enumeration.discrete.infer_discrete` reads them)."""
    out: dict = {}
    token = _POSTERIORS.set(out)
    try:
        yield out
    finally:
        _POSTERIORS.reset(token)


def _posterior(step: MarginalizeStep, joint: torch.Tensor) -> None:
    """`joint[..., k] = log pi(k) + l_k`: normalised over k, into the active collection."""
    out = _POSTERIORS.get()
    if out is not None and step.reduction == "logsumexp":
        out[step.name] = torch.softmax(joint.detach(), -1)


def _log_prior(program, step: MarginalizeStep, frame) -> torch.Tensor:
    """`log pi`: `(K,)`, `(N, K)` or `(|G|, K)` (spec 5.6)."""
    args = program._arg_values(step.args, frame)
    p = args[0]
    if step.family == "Categorical":
        probs = p / p.sum(-1, keepdim=True)
        log_pi = torch.log(probs.clamp_min(1e-38))
    else:
        p = p.to(frame.dtype)
        log_pi = torch.log(torch.stack([1 - p, p], dim=-1).clamp_min(1e-38))
    K = log_pi.shape[-1]
    if step.classes is not None and step.classes != K:
        raise ObservationShapeError(
            "the class set of a grouped marginalize must match its probabilities",
            site=step.name, expected=f"{step.classes} classes (the annotation)",
            actual=f"{K} entries on the last axis of the prior probabilities")
    return log_pi


def _missing_body_sites(step: MarginalizeStep, values) -> list:
    return [s.name for s in step.body if isinstance(s, SiteStep) and s.name not in values]


def run_marginalize(program, step: MarginalizeStep, frame):
    values = frame.values
    if not frame.require_all and _missing_body_sites(step, values):
        drawn = forward_marginalize(program, step, frame)
        values = {**values, **drawn}
    if not frame.score:
        return  # nothing it binds is visible after the block (spec 5.6)
    log_pi = _log_prior(program, step, frame)
    K = log_pi.shape[-1]
    per_class = []  # per class: list of (contribution, via index or None)
    for k in range(K):
        sub = _SubFrame(frame, values)
        sub.env[step.name] = torch.tensor(k, device=frame.device)
        for s in step.body:
            _run_body_step(program, s, sub)
        per_class.append(sub.contributions)
    reduce = _MARGINAL_REDUCTIONS[step.reduction]
    if step.group_size is not None:
        G = step.group_size
        S = log_pi.expand(G, K).clone() if log_pi.dim() == 1 else log_pi.clone()
        cols = []
        for k in range(K):
            col = torch.zeros(G, dtype=S.dtype, device=frame.device)
            for c, via in per_class[k]:
                rows = c.reshape(c.shape[0], -1).sum(-1) if c.dim() >= 1 else c.reshape(1)
                idx = as_index(via, G, who=f"via of `{step.name}`", what="group index")
                col = col.index_add(0, idx.reshape(-1), rows.to(S.dtype))
            cols.append(col)
        S = S + torch.stack(cols, dim=-1)
        _posterior(step, S)
        per_group = reduce(S, -1)
        contribution = per_group.sum()
    else:
        ell = []
        for k in range(K):
            total = None
            for c, _ in per_class[k]:
                r = c.reshape(c.shape[0], -1).sum(-1) if c.dim() >= 1 else c
                total = r if total is None else total + r
            ell.append(total if total is not None else torch.zeros((), device=frame.device))
        n_rows = max((e.shape[0] for e in ell if e.dim() >= 1), default=None)
        if step.plate is not None:
            # `marginalize z : I <- …`: one latent per element of I, each summed out
            # against the terms of its own row
            table = _row_table(step, log_pi, ell, per_class, frame)
            joint = log_pi.expand_as(table) + table
            _posterior(step, joint)
            contribution = reduce(joint, -1)
        elif n_rows is not None and log_pi.dim() == 2 and log_pi.shape[0] == n_rows:
            # one latent per row (identity grouping)
            table = torch.stack([e.expand(n_rows) if e.dim() == 0 else e for e in ell], -1)
            _posterior(step, log_pi + table)
            contribution = reduce(log_pi + table, -1)
        else:
            # one latent shared by the whole body
            if log_pi.dim() != 1:
                raise ObservationShapeError(
                    "the prior of a plain marginalize is one distribution, or one per row",
                    site=step.name, expected=f"prior shape ({K},) or ({n_rows}, {K})",
                    actual=f"prior shape {tuple(log_pi.shape)}")
            totals = torch.stack([e.sum() for e in ell])
            _posterior(step, log_pi + totals)
            contribution = reduce(log_pi + totals, -1)
    lp = frame.add(contribution)
    # the value is the block's terms before they are summed (one per group of a grouped
    # block: `qvr.inference.criticism.pointwise` reads them as the block's pointwise terms)
    value = per_group if step.group_size is not None else contribution
    program._record(frame, SiteRecord(step.site_name, "marginalize", value, lp,
                                   contribution, is_deterministic=True))

def _row_table(step: MarginalizeStep, log_pi, ell: list, per_class: list, frame):
    """`(N, K)`: the body's log-density of row n given class k, for a block annotated by
    its plate (every body term holds one entry per row; the checker refuses the others,
    QVR319/QVR320)."""
    K = log_pi.shape[-1]
    rows = {int(e.shape[0]) for e in ell if e.dim() >= 1}
    if log_pi.dim() == 2:
        rows.add(int(log_pi.shape[0]))
    if any(e.dim() == 0 and per_class[k] for k, e in enumerate(ell)) or len(rows) > 1 \
            or log_pi.dim() > 2:
        raise ObservationShapeError(
            f"`marginalize {step.name} : {step.plate_name}` sums out one latent per row: "
            "every term of its block and its prior need one row per element of "
            f"`{step.plate_name}`", site=step.name,
            expected=f"terms of shape (N,) and a prior of shape ({K},) or (N, {K})",
            actual="term rows " + ", ".join(
                str(tuple(e.shape)) for e in ell) + f"; prior shape {tuple(log_pi.shape)}")
    N = rows.pop() if rows else frame.B
    cols = [e.expand(N) if e.dim() == 0 else e for e in ell]
    return torch.stack(cols, -1).to(log_pi.dtype)


def forward_marginalize(program, step: MarginalizeStep, frame) -> dict:
    """Draw the coordinate from its prior, then run the body once with it, drawing every
    body observe that is not supplied; returns the drawn values (and records them)."""
    from qvr.runtime.families import draw
    with torch.no_grad():
        log_pi = _log_prior(program, step, frame).detach()
    K = log_pi.shape[-1]
    prior = torch.distributions.Categorical(logits=log_pi)
    if step.group_size is not None and log_pi.dim() == 1:
        c = prior.sample(torch.Size([step.group_size]))  # one class per group
    elif step.plate is not None and log_pi.dim() == 1:
        c = prior.sample(torch.Size([frame.B]))  # one class per row of the plate
    else:
        c = prior.sample()  # (|G|,), (N,) for a per-row prior, () for a shared one
    sub = _SubFrame(frame, frame.values)
    drawn = {}

    def bind_class(via_step):
        if step.group_size is None:
            sub.env[step.name] = c
            return
        if via_step is None or via_step.via is None:
            raise ObservationShapeError(
                "a grouped marginalize needs `via=` on its body observes to draw them",
                site=step.name, expected="`via=idx` mapping rows to groups",
                actual="no via")
        kind, ref = via_step.via
        if kind == "local":
            idx = sub.env[ref]
        elif ref in getattr(frame, "_host", {ref: None}):
            idx = sub.host(ref)
        else:
            # synthetic data: a group index that was not supplied is drawn, uniformly over
            # the groups for every row, bound as host data and recorded (`host` entry)
            idx = torch.randint(0, step.group_size, (frame.B,), device=frame.device)
            frame._host[ref] = idx
            program._record(frame, SiteRecord(ref, "host", idx, is_deterministic=True))
        idx = as_index(idx, step.group_size, who=f"via of `{step.name}`", what="group index")
        sub.env[step.name] = c[idx]

    first_site = next((s for s in step.body if isinstance(s, SiteStep)), None)
    for s in step.body:
        if isinstance(s, LetStep):
            bind_class(first_site)
            sub.env[s.name] = s.fn(sub, {})
            continue
        if not isinstance(s, SiteStep):
            raise NotImplementedError(f"step {type(s).__name__} inside a marginalize block")
        bind_class(s)
        module = getattr(program, s.module_name)
        given = s.name in sub.values
        if s.family is None:
            inp = program._morph_input(s, sub)
            value = sub.values[s.name] if given else module.rsample(inp)
            dist, support = None, getattr(module, "support", None)
        else:
            dist = module.distribution(program._arg_values(s.args, sub))
            support = dist.support
            if given:
                value = coerce_family_value(dist, sub.values[s.name], s, sub)
            else:
                # one value per row: a shape made of global arguments gets `B` rows
                value = draw(dist, torch.Size([frame.B]) if dist.batch_shape == torch.Size()
                             else torch.Size())
        sub.env[s.name] = value
        frame.env[s.name] = value
        if not given:
            drawn[s.name] = value
            program._record(frame, SiteRecord(s.name, "observe", value, None, None,
                                              s.site_kind, module, dist, support, False,
                                              False))
    return drawn


def _run_body_step(program, s, sub):
    if isinstance(s, LetStep):
        v = s.fn(sub, {})
        sub.env[s.name] = v
        if s.score:
            sub.contributions.append((torch.as_tensor(v), None))
        return
    if isinstance(s, SiteStep):
        if s.name not in sub.values:
            raise MissingValueError(
                f"no value supplied for `{s.name}`", site=s.name,
                expected="a value for every sample and observe site: " +
                ", ".join(f"`{n}`" for n in program.site_names), actual="missing",
                name=s.name)
        module = getattr(program, s.module_name)
        value = sub.values[s.name]
        if s.family is None:
            inp = program._morph_input(s, sub)
            c = observed_log_prob(module, inp, value) if s.observe else \
                module.log_prob(inp, value)
        else:
            dist = module.distribution(program._arg_values(s.args, sub))
            if s.observe:  # missing entries (design E5): their rows contribute 0
                value, scored, observed = observed_family_value(dist, value, s, sub,
                                                                is_discrete_dist(dist))
                c = mask_missing(dist.log_prob(eval_value(dist, scored, sub)), observed)
            else:
                value = coerce_family_value(dist, value, s, sub)
                c = dist.log_prob(eval_value(dist, value, sub))
        sub.env[s.name] = value
        via = None
        if s.via is not None:
            kind, ref = s.via
            via = sub.env[ref] if kind == "local" else sub.host(ref)
        sub.contributions.append((c, via))
        return
    raise NotImplementedError(f"step {type(s).__name__} inside a marginalize block")


class _SubFrame:
    """A frame for one class of a marginalize block: own env layer, shared inputs."""

    def __init__(self, parent, values=None):
        self.parent = parent
        env = parent.env
        # a dependency-tracking environment (qvr.inference.enumeration.enumerate) stays tracking
        self.env = env.child() if hasattr(env, "child") else dict(env)
        self.values = parent.values if values is None else values
        self.x = parent.x
        self.B = parent.B
        self.device = parent.device
        self.dtype = parent.dtype
        self.contributions: list = []

    def literal(self, v):
        return self.parent.literal(v)

    def host(self, name):
        return self.parent.host(name)

    def deduction(self, name):
        return self.parent.deduction(name)
