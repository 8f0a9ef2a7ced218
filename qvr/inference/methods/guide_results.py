"""What a fitted guide leaves in its run: its parameters (`guide_params`) and draws with
their summary (`guide_summary`; `draws_summary` of given draws, e.g. resampled ones),
shared by SVI (`methods/svi.py`, every `--guide` family) and the mode-based guides
(`methods/laplace.py`: map, laplace)."""
from __future__ import annotations

import torch

#: draws of a fitted guide summarised in the run (independent draws)
SUMMARY_DRAWS = 1000


def guide_params(model, guide) -> dict:
    """The record's parameters: the guide's own (``loc_<site>``, ``mode_<site>``,
    ``joint_*``...), a joint guide's per-site marginals (``loc_<s>``, ``log_scale_<s>``:
    `qvr.inference.vi.joint_guides`, read by the dashboard's tables, HMC starts and
    ``--from``) and the model's under ``model.NAME``."""
    out = {}
    if guide is not None:
        out.update({name: p.detach().cpu().numpy() for name, p in guide.named_parameters()})
        marginals = getattr(guide, "marginal_params", None)
        if marginals is not None:
            out.update({k: v for k, v in marginals().items() if k not in out})
    for name, p in model.named_parameters():
        out[f"model.{name}"] = p.detach().cpu().numpy()
    return out


def guide_summary(guide, x, observations, n: int = SUMMARY_DRAWS, report=None):
    """`n` independent draws of the fitted guide (``{site: (1, n, *shape)}``) and their
    summary; the program's recorded quantities (``record v = e``,
    `qvr.inference.criticism.recorded`) are computed from the same draws, under
    ``recorded.v``.  A point estimate (``guide.point_estimate``: MAP) gives its one point,
    the mode: its mean is the mode, its sd NaN, no quantiles."""
    from qvr.inference.criticism.diagnostics import summary
    point = bool(getattr(guide, "point_estimate", False))
    if not guide.latent_names:
        return {}, summary({}, columns=_columns(point))
    with torch.no_grad():
        draws = guide.rsample(x, observations, sample_shape=(1 if point else n,))
    return draws_summary(guide, x, observations, draws, report)


def draws_summary(guide, x, observations, draws: dict, report=None):
    """``(samples, summary)`` of given draws ``{site: (n, *shape)}`` of the latent sites
    of `guide`'s program (the guide's own, or ``--resample psis``'s resampled ones,
    `qvr.inference.methods.guide_resample`): the samples ``{site: (1, n, *shape)}`` numpy,
    the recorded quantities computed from the same draws under ``recorded.v``."""
    from qvr.inference.criticism.diagnostics import summary
    from qvr.inference.criticism.recorded import for_guide, key
    point = bool(getattr(guide, "point_estimate", False))
    samples = {k: v.detach().cpu().numpy()[None] for k, v in draws.items()}
    recorder = for_guide(guide.model[0], guide, x, observations, report)
    if recorder:
        with torch.no_grad():
            for name, v in recorder.from_values(draws).items():
                samples[key(name)] = v.cpu().numpy()[None]
    # independent draws: no ESS or R-hat; every coordinate (qvr show's table)
    return samples, summary(samples, columns=_columns(point))


def _columns(point: bool) -> tuple:
    return ("mean", "sd") if point else ("mean", "sd", "q5", "q50", "q95")
