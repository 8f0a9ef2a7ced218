"""Extension E9.7: scores per element and observed values computed from data.

* `score v : T = e` — a `LetStep` with `per` (T's sizes): its value is one term per
  element of T (trailing axes T, leading batch axes allowed), added to the density as a
  scalar `score` is (`Frame.add`: row attribution); `check_per_element` refuses a value of
  another shape at run time (the checker refuses the shapes it can see).  The pointwise
  phase (`qvr.inference.criticism.pointwise`) records its terms as the log-likelihood `v`.
* `observe v [: T] = e <- F(...)` — a `SiteStep` with `computed`: the env key of a hidden
  `let` (run before the site) holding e.  Its observed value is e unless a value is
  supplied; under `replicating()` (the generative predictive replicates, predictions for
  new data) the site is drawn from F, whether or not a value is supplied.  `computed_observations(model, x, values)` gives
  the values of every such site from the data (the fit adds them to the observations,
  `qvr.inference.data.fit_data.split_data`, so a computed observe is an observed site everywhere:
  latent registry, pointwise terms, replicates, checks).
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

_REPLICATING: contextvars.ContextVar = contextvars.ContextVar("qvr_replicating", default=False)


@contextlib.contextmanager
def replicating():
    """Within the block an `observe v = e <- F` is drawn from F (a predictive replicate),
    neither computed from e nor read from the supplied values."""
    token = _REPLICATING.set(True)
    try:
        yield
    finally:
        _REPLICATING.reset(token)


def is_replicating() -> bool:
    return _REPLICATING.get()


def computed_sites(model) -> dict:
    """`{site: hidden let key}` of the computed observes of a compiled program (top level
    and inlined templates; none inside marginalize blocks: the checker refuses them)."""
    from qvr.runtime.steps import SiteStep
    model = getattr(model, "morphism", model)
    return {s.name: s.computed for s in getattr(model, "steps", ())
            if isinstance(s, SiteStep) and s.computed is not None}


def computed_observations(model, x, values: dict) -> dict:
    """`{site: value}` of every computed observe at input `x`, from the data `values`
    (host data and observed values; nothing drawn)."""
    sites = computed_sites(model)
    if not sites:
        return {}
    model = getattr(model, "morphism", model)
    got = model.recorded_values(x, values, names=list(sites.values()))
    return {site: got[key] for site, key in sites.items()}


def check_per_element(step, v) -> torch.Tensor:
    """The value of `score v : T = e` as a tensor whose trailing axes are T's sizes;
    `InputShapeError` naming the step otherwise."""
    t = torch.as_tensor(v)
    per = tuple(step.per)
    if tuple(t.shape[t.dim() - len(per):]) != per or t.dim() < len(per):
        from qvr.runtime.errors import InputShapeError
        raise InputShapeError(
            f"`score {step.name} : {step.per_name}` needs one term per element of "
            f"`{step.per_name}`", step=step.name,
            expected=f"trailing shape {per} (`{step.per_name}`)",
            actual=f"shape {tuple(t.shape)}")
    return t
