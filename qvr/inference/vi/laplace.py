"""MAP and the Laplace approximation (``--guide map``, ``--guide laplace``).

Both work on the flat unconstrained vector `z` of every continuous latent site, local
ones included (`qvr.inference.programs.sites.Registry`; finite latents are summed out,
`qvr.inference.enumeration.enumerate`), as Stan's ``optimize`` and ``laplace`` do:

* **MAP** (`MapGuide`): the mode of ``log p(T(z), y)`` with the Jacobian of `T` left out
  (Stan's ``optimize``, ``jacobian=false``: the mode of the constrained density, a
  penalised maximum likelihood).  A point estimate: its "draws" all equal the mode and it
  has no density;
* **Laplace** (`LaplaceGuide`): the mode `ẑ` of the Jacobian-adjusted density
  ``log p~(z) = log p(T(z), y) + log|det J_T(z)|`` (Stan's ``laplace``, ``jacobian=true``)
  and the Normal ``N(ẑ, (-H)^-1)`` with `H` the exact (autograd) Hessian of ``log p~`` at
  ``ẑ``: a draw is ``T(ẑ + L^-T ε)`` with ``-H = L Lᵀ``, and its log density is the
  Gaussian's at ``z = T^-1(v)`` minus ``log|det J_T(z)|``.  Exact for a Gaussian posterior
  in `z`.

The mode (`qvr.inference.vi.mode_search`): L-BFGS (`torch.optim.LBFGS`, strong-Wolfe
line search) from Stan's start, every coordinate uniform on (-2, 2) (seeded), a few
restarts when a start is not finite or the search fails, then up to three Newton steps
with the exact Hessian (the mode to machine precision where `-H` is positive definite).
The program's learnable parameters (``param``) are optimised jointly with `z` (MAP: the
joint mode; Laplace: the parameters are then held at their optimum and the Hessian is
over the latents only).

Parameters of a guide (saved by the run record like an SVI guide's): ``mode_<site>`` (the
site's unconstrained values, shape ``(*rows, u)``) and, for Laplace, ``scale_tril`` (the
Cholesky factor of the covariance ``(-H)^-1`` over the whole `z`, in site order).  At
other data (``qvr predict``) the layout of the row sites changes: a guide then draws its
global sites (and plates of the fit's size) only, from their marginal, and leaves the
rows to the caller (predict redraws them from the program, as for the mean-field guide).

References: Stan Reference Manual, "Laplace sampling" and "Optimization" (CmdStan 2.33+);
Pyro's `AutoLaplaceApproximation`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import torch
from torch import nn

from qvr.inference.programs.sites import build_registry
from qvr.inference.vi.guides import _model_of


# ---------------------------------------------------------------- the density

def density(model, x, observations: dict, registry, jacobian: bool) -> Callable:
    """`z (D,) -> log p(T(z), y) [+ log|det J_T(z)|]`, a scalar; finite latents summed
    out.  Call `qvr.inference.enumeration.enumerate.prepare` first (outside transforms)."""
    from qvr.inference.enumeration.enumerate import enumerated_total

    def fn(z: torch.Tensor) -> torch.Tensor:
        values, logdet = registry.unpack(z)
        total = enumerated_total(model, x, {**values, **observations})
        return total + logdet if jacobian else total
    return fn


def is_stochastic(fn: Callable, z: torch.Tensor) -> bool:
    """True when two evaluations of `fn` at `z` under different random states differ (a
    Monte-Carlo composite: its density is an estimate)."""
    out = []
    with torch.no_grad(), torch.random.fork_rng(devices=[z.device] if z.is_cuda else []):
        for seed in (1, 2):
            torch.manual_seed(seed)
            try:
                out.append(fn(z))
            except (ValueError, RuntimeError):
                return False
    return not bool(torch.equal(out[0], out[1])) and bool(torch.isfinite(out[0]))


# ---------------------------------------------------------------- the guides

class LaplaceGuide(nn.Module):
    """The Laplace approximation ``N(ẑ, (-H)^-1)`` on the unconstrained `z`, with the
    interface of `AutoNormalGuide` (`rsample`, `sample`, `log_prob`, `median`,
    `latent_names`, ``model[0]``).

    Args:
      model: the program.
      observed_names: names excluded from the guide.
      sites: the latent sites of the fit's registry (its layout of `z`).
      mode: ``ẑ`` ``(D,)``.
      scale_tril: the Cholesky factor of the covariance ``(-H)^-1`` ``(D, D)``.
    """

    kind = "laplace"
    #: a point estimate has no spread and no density (MAP)
    point_estimate = False

    def __init__(self, model, observed_names, sites: list, mode: torch.Tensor,
                 scale_tril: Optional[torch.Tensor] = None):
        super().__init__()
        self.model = [_model_of(model)]  # a list: not registered as a submodule
        self.observed_names = set(observed_names or ())
        self.sites = list(sites)
        self._offsets, start = {}, 0
        for s in self.sites:
            self._offsets[s.name] = (start, start + s.size)
            self.register_parameter(f"mode_{s.name}", nn.Parameter(
                mode[start:start + s.size].detach().clone().reshape(s.unconstrained_shape),
                requires_grad=False))
            start += s.size
        self.dim = start
        if not self.point_estimate:
            if scale_tril is None or tuple(scale_tril.shape) != (start, start):
                raise ValueError(f"the Laplace guide needs a ({start}, {start}) scale_tril")
            self.scale_tril = nn.Parameter(scale_tril.detach().clone(), requires_grad=False)

    @property
    def latent_names(self) -> list:
        return [s.name for s in self.sites]

    def flat_mode(self) -> torch.Tensor:
        parts = [getattr(self, f"mode_{s.name}").reshape(-1) for s in self.sites]
        return torch.cat(parts) if parts else torch.zeros(0)

    def covariance(self) -> torch.Tensor:
        S = self.scale_tril
        return S @ S.T

    # ---- layout at some data

    def _layout(self, x, observations) -> tuple:
        """``(registry, picked sites (the registry's), fit offsets, whole)``: at the fit's
        data every site (``whole``); elsewhere the global sites and the plate sites of
        the fit's size (a plate over rows of another count is left out, as local sites)."""
        obs = dict(observations or {})
        reg = build_registry(self.model[0], x, obs,
                             observed_names=self.observed_names | set(obs))
        mine = {s.name: s for s in self.sites}
        whole = [s.name for s in reg.sites] == [s.name for s in self.sites] and all(
            s.unconstrained_shape == mine[s.name].unconstrained_shape for s in reg.sites)
        picked = []
        for s in reg.sites:
            own = mine.get(s.name)
            if own is not None and own.unconstrained_shape == s.unconstrained_shape:
                if whole or s.kind in ("global", "plate"):
                    picked.append(s)
                continue
            if s.kind == "global" or own is None:
                what = "is not in the fitted guide" if own is None else \
                    (f"has unconstrained shape {tuple(s.unconstrained_shape)} here but "
                     f"{tuple(own.unconstrained_shape)} in the fit")
                raise ValueError(f"site `{s.name}` {what}: the {self.kind} guide cannot draw "
                                 f"it at this data")
        if not whole and any(s.dependent for s in picked):
            raise ValueError(f"the {self.kind} guide draws sites with value-dependent bounds "
                             f"only at the fit's data")
        self._last = (x, obs, reg)
        return reg, picked, [self._offsets[s.name] for s in picked], whole

    def _factor(self, offsets, whole) -> tuple:
        loc = self.flat_mode()
        if whole:
            return loc, (None if self.point_estimate else self.scale_tril)
        idx = torch.cat([torch.arange(a, b, device=loc.device) for a, b in offsets]) \
            if offsets else torch.zeros(0, dtype=torch.long, device=loc.device)
        if self.point_estimate:
            return loc[idx], None
        cov = self.covariance()[idx][:, idx]
        return loc[idx], torch.linalg.cholesky(cov)

    def rsample(self, x, observations: Optional[dict] = None,
                sample_shape=torch.Size()) -> dict:
        """Draw the latent sites: `{name: (*sample_shape, *shape)}` (at other data than the
        fit's, the global sites and plates of the fit's size only)."""
        sample_shape = torch.Size(sample_shape)
        reg, picked, offsets, whole = self._layout(x, observations)
        if not picked:
            return {}
        loc, S = self._factor(offsets, whole)
        n = loc.shape[0]
        if S is None:
            z = loc.expand(*sample_shape, n)
        else:
            eps = torch.randn((*sample_shape, n), dtype=loc.dtype, device=loc.device)
            z = loc + eps @ S.T
        if whole:
            return reg.constrain(z)
        out, at = {}, 0
        for s in picked:
            zs = z[..., at:at + s.size].reshape(*sample_shape, *s.unconstrained_shape)
            at += s.size
            out[s.name] = s.transform(zs).reshape(*sample_shape, *s.shape)
        return out

    def sample(self, x, observations: Optional[dict] = None, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(x, observations, sample_shape)

    def log_prob(self, x, values: dict, batch_ndims: int = 0, *,
                 detach_params: bool = False) -> torch.Tensor:
        """The Gaussian log density of ``z = T^-1(v)`` minus ``log|det J_T(z)|``, summed over
        the sites in `values` (the marginal of those present); `batch_ndims` leading axes
        kept.  (`detach_params` is accepted for the guides' interface: nothing here is
        trained.)"""
        if self.point_estimate:
            raise ValueError("a MAP fit is a point estimate: it has no density "
                             "(use --guide laplace)")
        picked = []
        for s in self.sites:
            v = values.get(s.name)
            if v is None:
                continue
            if tuple(v.shape[batch_ndims:]) != tuple(s.shape):
                if s.kind != "global":  # rows of other data: not the fit's row latents
                    continue
                raise ValueError(f"site `{s.name}`: a value of shape "
                                 f"{tuple(v.shape[batch_ndims:])}, the {self.kind} guide "
                                 f"has {tuple(s.shape)}")
            picked.append(s)
        if not picked:
            return self.flat_mode().new_zeros(())
        dependent = None
        if any(s.dependent for s in picked):  # E9.2: through the bounds of these values
            last = getattr(self, "_last", None)
            if last is not None and last[0] is x:
                reg = last[2]
            else:
                latent = set(self.latent_names)
                obs = {k: v for k, v in values.items() if k not in latent}
                reg = build_registry(self.model[0], x, obs,
                                     observed_names=self.observed_names | set(obs))
            latent = {s.name: values[s.name] for s in picked}
            dependent = reg.dependent_inverse(latent, batch_ndims=batch_ndims)
        zs, logdet = [], 0.0
        lead = None
        for s in picked:
            v = values[s.name]
            lead = tuple(v.shape[:batch_ndims])
            if dependent is not None and s.name in dependent:
                z, ld = dependent[s.name]
                zs.append(z.reshape(*lead, -1))
                logdet = logdet + ld
                continue
            vv = v.reshape(*lead, *s.batch_shape, *(s.event_shape or (1,)))
            z = s.transform.inv(vv)
            ld = s.transform.log_abs_det_jacobian(z, vv)
            zs.append(z.reshape(*lead, -1))
            logdet = logdet + ld.reshape(*lead, -1).sum(-1)
        z = torch.cat(zs, dim=-1)
        offsets = [self._offsets[s.name] for s in picked]
        loc, S = self._factor(offsets, len(picked) == len(self.sites))
        S = S.to(z.dtype)
        diff = (z - loc.to(z.dtype)).unsqueeze(-1)
        sol = torch.linalg.solve_triangular(S, diff.reshape(-1, *diff.shape[-2:]), upper=False)
        maha = (sol.squeeze(-1) ** 2).sum(-1).reshape(lead)
        n = z.shape[-1]
        log_q = (-0.5 * maha - torch.log(torch.diagonal(S)).sum()
                 - 0.5 * n * math.log(2 * math.pi))
        return log_q - logdet

    def marginal_params(self) -> dict:
        """``{loc_<s>, log_scale_<s>}`` (numpy, each site's unconstrained shape): the mode
        and the marginal sds ``sqrt(diag (-H)^-1)`` of its coordinates (a MAP guide: the
        mode only), saved beside ``mode_<s>`` and ``scale_tril`` so that the dashboard's
        table and ``--from`` read a Laplace run as they read a mean-field one."""
        out = {}
        with torch.no_grad():
            sd = None if self.point_estimate else torch.sqrt(  # diag(S Sᵀ), not S Sᵀ
                (self.scale_tril ** 2).sum(1).clamp(min=1e-300))
            for s in self.sites:
                a, b = self._offsets[s.name]
                mode = getattr(self, f"mode_{s.name}")
                out[f"loc_{s.name}"] = mode.detach().cpu().numpy()
                if sd is not None:
                    out[f"log_scale_{s.name}"] = torch.log(sd[a:b]).reshape(
                        mode.shape).detach().cpu().numpy()
        return out

    def median(self) -> dict:
        """The constrained image of the mode per global and plate site."""
        out = {}
        with torch.no_grad():
            for s in self.sites:
                if s.kind in ("global", "plate") and not s.dependent:
                    z = getattr(self, f"mode_{s.name}")
                    out[s.name] = s.transform(z).reshape(s.shape)
        return out

    def extra_repr(self) -> str:
        return f"sites={self.latent_names}, dim={self.dim}"


class MapGuide(LaplaceGuide):
    """The MAP point estimate: every draw is the mode (constrained); no density."""

    kind = "map"
    point_estimate = True

    def __init__(self, model, observed_names, sites: list, mode: torch.Tensor):
        super().__init__(model, observed_names, sites, mode, None)


def rebuild(kind: str, model, observed_names, params: dict, x, observations) -> LaplaceGuide:
    """The `MapGuide` (``kind="map"``) or `LaplaceGuide` of a run from its saved
    parameters (``mode_<site>``, ``scale_tril``; other entries ignored), laid out as at
    the fit (a `GuideError` when they do not fit the program); `x`/`observations` give the
    sites' descriptions (at other data than the fit's, its draws cover the global sites
    and plates of the fit's size)."""
    from qvr.inference.vi.joint_guides import GuideError
    if kind not in ("map", "laplace"):
        raise GuideError(f"rebuild: not a map or laplace guide: {kind!r}")
    model = _model_of(model)
    obs = dict(observations or {})
    reg = build_registry(model, x, obs, observed_names=set(observed_names or ()) | set(obs))
    saved = {k[len("mode_"):]: v for k, v in params.items() if k.startswith("mode_")}
    names = [s.name for s in reg.sites]
    extra = [n for n in saved if n not in names]
    missing = [n for n in names if n not in saved]
    if extra or missing:
        what = (f"has no latent site `{extra[0]}`" if extra else
                f"has a latent site `{missing[0]}` that the run's guide lacks")
        raise GuideError(f"the {kind} guide does not fit the program: the program {what} "
                         f"(it has changed since the run?)")
    sites, parts = [], []
    dtype = torch.get_default_dtype()
    for s in reg.sites:
        value = torch.as_tensor(saved[s.name], dtype=dtype)
        shape = tuple(value.shape)
        if shape != tuple(s.unconstrained_shape):
            if s.kind == "global" or shape[-1:] != (s.u,):
                raise GuideError(f"the {kind} guide does not fit the program: site "
                                 f"`{s.name}` has shape {shape} in the run but "
                                 f"{tuple(s.unconstrained_shape)} here")
            batch = shape[:-1]  # rows at other data: the fit's layout (not drawn there)
            s = dataclasses.replace(s, shape=(*batch, *s.event_shape),
                                    num_events=math.prod(batch),
                                    plate=batch[0] if s.kind == "plate" else s.plate)
        sites.append(s)
        parts.append(value.reshape(-1))
    mode = torch.cat(parts) if parts else torch.zeros(0)
    if kind == "map":
        return MapGuide(model, observed_names, sites, mode)
    S = params.get("scale_tril")
    if S is None:
        raise GuideError("the laplace guide's `scale_tril` is missing from the run's "
                         "parameters")
    return LaplaceGuide(model, observed_names, sites, mode, torch.as_tensor(S, dtype=dtype))


__all__ = ["LaplaceGuide", "MapGuide", "density", "is_stochastic",
           "rebuild"]
