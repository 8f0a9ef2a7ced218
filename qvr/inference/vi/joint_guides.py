"""Joint guides: one distribution over the concatenated unconstrained coordinates of all
global and plate sites (`--guide fullrank`, `lowrank:K`, `flow`).

Local (per-row) sites keep the mean-field pairs of `AutoNormalGuide` (one ``(u,)``
``loc_<s>``/``log_scale_<s>`` pair shared by all rows, one draw per row), so a program
whose latents are all local (the seed transformer) fits as with the mean-field guide.  The
joint vector's layout is static (`sites.static_sites`): site after site in program order,
``|I|·u`` coordinates for a plate site, ``u`` for a global one; D is their sum.

* `FullRankGuide`: ``N(loc, L Lᵀ)``, ``L = diag(s)·U`` with ``s = softplus(raw) > 0`` and
  ``U`` unit lower-triangular (Pyro's AutoMultivariateNormal); initially ``s = 0.1``,
  ``U = I``.  Parameters ``joint_loc (D,)``, ``joint_scale_raw (D,)``, ``joint_tril (D, D)``
  (its strictly lower part is used).  At most `FULLRANK_MAX_D` coordinates.
* `LowRankGuide`: ``N(loc, diag(s)(W Wᵀ + I)diag(s))`` (Pyro's
  AutoLowRankMultivariateNormal): ``joint_loc``, ``joint_scale_raw`` (``s`` initially
  ``0.1/√2``), ``joint_cov_factor (D, K)`` (``W`` initially ``N(0, 1/K)``).  Draws and
  densities cost O(D·K) and O(D·K²).  Default rank ``min(round(√D), 32)`` (the cap keeps
  memory at O(32·D) for a million latents), at most D.
* `FlowGuide`: a learned elementwise affine (``z = loc + exp(log_scale)·y``,
  ``joint_loc``/``joint_log_scale``) on a zuko masked autoregressive flow ``y``
  (``joint_flow``: 3 affine autoregressive transforms, alternating orders, hidden widths
  sized by D), inverted so that a draw is one
  parallel pass and its density comes with it (the density of a draw is remembered for
  the `log_prob` that follows it: ELBO, k-hat, PSIS-LOO).  The density at other points
  takes D sequential passes.  At most `FLOW_MAX_D` coordinates.

Every joint guide also reports per-site marginals (`marginal_params`: ``loc_<s>`` and
``log_scale_<s>`` of the joint sites' unconstrained coordinates), which the run saves next
to its parameters so that tables, `--from` into another family and older readers see a
mean-field description of it.

References:
  Kucukelbir et al. (2017), ADVI, JMLR 18 (full-rank Gaussian).
  Rezende & Mohamed (2015), Variational inference with normalizing flows.
  Papamakarios et al. (2017), Masked autoregressive flow.  Rozet et al., zuko.

Decision: MAF rather than NSF.  Splines act on [-5, 5] and map it onto itself, so after
the standardising affine they cannot shift one coordinate by a function of another that
leaves that box (a banana ``b ~ N(a², 1)``: at ``a = 3`` the shift is 9 standard
units); an affine autoregressive layer represents that shift exactly, and is about three
times cheaper per step.  Measured on the banana of the tests (1500 steps, 16 particles):
MAF k-hat 0.32 and importance-weighted moments within 3% of the exact ones.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from qvr.inference.vi.guides import AutoNormalGuide, _MIN_SCALE

FULLRANK_MAX_D = 4000
FLOW_MAX_D = 1000
#: each MAF layer's affine scale lies in (e^-3, e^3), as NumPyro's IAF clips its log scale
#: to [-5, 3] (zuko's default bound is |log 1e-3| = 6.9 both ways: three layers could
#: stretch a coordinate 10^9-fold, and a positive site's exp overflowed within a dozen
#: steps of a fit whose mean sat 40 sds from the guide's start)
FLOW_MIN_SLOPE = math.exp(-3.0)
LOWRANK_DEFAULT_MAX = 32


class GuideError(ValueError):
    """A guide that cannot serve a program (the message is one line saying why)."""


def _softplus_inv(y: float) -> float:
    return y + math.log(-math.expm1(-y))


class JointGuide(AutoNormalGuide):
    """Base of the joint families: the layout of the joint vector and the per-site hooks
    of `AutoNormalGuide` (draw and density of the static sites' unconstrained values)."""

    family = "joint"
    _remember_density = False  # FlowGuide: a draw's density is kept for its log_prob

    def __init__(self, model, observed_names=(), init_scale: float = 0.1):
        super().__init__(model, observed_names, init_scale)
        self.layout = []  # (spec, offset, size)
        offset = 0
        for s in self.specs:
            if s.kind == "local":
                continue
            size = (s.plate if s.kind == "plate" else 1) * s.u
            self.layout.append((s, offset, size))
            offset += size
        self.D = offset
        self._by_name = {s.name: (s, o, n) for s, o, n in self.layout}
        self._memo = None

    def _per_site(self, s) -> bool:
        return s.kind == "local"

    # ---- the family: draw of the joint vector, its log density, its marginals

    def _joint_draw(self, sample_shape: torch.Size):
        """``(z, log_q or None)``: ``z`` of shape ``(*sample_shape, D)``."""
        raise NotImplementedError

    def _joint_log_q(self, z: torch.Tensor, idx: Optional[torch.Tensor],
                     detach: bool) -> torch.Tensor:
        """The log density of ``z (*lead, D)`` (or of the coordinates `idx` only)."""
        raise NotImplementedError

    def _joint_loc(self) -> torch.Tensor:
        return self.joint_loc

    def _joint_sd(self) -> torch.Tensor:
        raise NotImplementedError

    # ---- the hooks of AutoNormalGuide

    def _shape_of(self, s) -> tuple:
        return (s.plate, s.u) if s.kind == "plate" else (s.u,)

    def loc(self, name: str) -> torch.Tensor:
        if name not in self._by_name:
            return super().loc(name)
        s, o, n = self._by_name[name]
        return self._joint_loc()[o:o + n].reshape(self._shape_of(s))

    def scale(self, name: str) -> torch.Tensor:
        """The marginal standard deviation of a site's unconstrained coordinates."""
        if name not in self._by_name:
            return super().scale(name)
        s, o, n = self._by_name[name]
        return self._joint_sd()[o:o + n].reshape(self._shape_of(s))

    def _draw_z(self, shapes: dict, sample_shape: torch.Size) -> dict:
        out = {}
        self._pending = None
        if self.D and any(shapes.get(s.name) is not None for s, _, _ in self.layout):
            z, log_q = self._joint_draw(sample_shape)
            self._pending = log_q
            for s, o, n in self.layout:
                if shapes.get(s.name) is not None:
                    out[s.name] = z[..., o:o + n].reshape((*sample_shape, *self._shape_of(s)))
        for s in self.specs:
            batch = shapes.get(s.name)
            if s.kind == "local" and batch is not None:
                out[s.name] = self._draw_site(s, batch, sample_shape)
        return out

    def _drawn(self, values: dict) -> None:
        log_q, self._pending = getattr(self, "_pending", None), None
        if not self._remember_density or log_q is None:
            self._memo = None
            return
        names = [s.name for s, _, _ in self.layout]
        if any(n not in values for n in names):
            self._memo = None
            return
        self._memo = ({n: values[n] for n in names}, log_q, self._versions())

    def _versions(self) -> tuple:
        return tuple(p._version for p in self.parameters())

    def _static_log_q(self, zs: dict, values: dict, lead: tuple, detach: bool):
        memo = self._memo
        if memo is not None and not detach and len(zs) == len(self.layout) \
                and all(values.get(n) is v for n, v in memo[0].items()) \
                and memo[2] == self._versions():
            return memo[1]
        parts, idx = [], []
        for s, o, n in self.layout:
            if s.name in zs:
                parts.append(zs[s.name].reshape((*lead, n)))
                idx.append(torch.arange(o, o + n))
        z = torch.cat(parts, dim=-1)
        if len(parts) == len(self.layout):
            return self._joint_log_q(z, None, detach)
        return self._joint_log_q(z, torch.cat(idx).to(z.device), detach)

    def marginal_params(self) -> dict:
        """``{loc_<s>, log_scale_<s>}`` (numpy) of every joint site: the mean and
        standard deviation of its unconstrained coordinates under the guide."""
        out = {}
        with torch.no_grad():
            for s, _, _ in self.layout:
                out[f"loc_{s.name}"] = self.loc(s.name).detach().cpu().numpy()
                out[f"log_scale_{s.name}"] = torch.log(
                    self.scale(s.name).clamp(min=_MIN_SCALE)).detach().cpu().numpy()
        return out

    def init_sites(self, locs: dict, sds: Optional[dict] = None) -> None:
        """Start from per-site unconstrained means (and standard deviations): ``{name:
        tensor}`` shaped as the site's ``loc_``; local sites' pairs are set as they are,
        the joint sites' go into the joint family (`_init_joint`)."""
        sds = sds or {}
        with torch.no_grad():
            loc = self.joint_loc.detach().clone() if self.D else None
            sd = torch.full((self.D,), float("nan")) if self.D else None
            for name, value in locs.items():
                if name in self._by_name:
                    s, o, n = self._by_name[name]
                    loc[o:o + n] = value.reshape(-1).to(loc)
                    if name in sds:
                        sd[o:o + n] = sds[name].reshape(-1).to(sd)
                elif hasattr(self, f"loc_{name}"):
                    p = getattr(self, f"loc_{name}")
                    p.copy_(value.reshape(p.shape).to(p))
                    if name in sds:
                        q = getattr(self, f"log_scale_{name}")
                        q.copy_(torch.log(sds[name].clamp(min=_MIN_SCALE)).reshape(q.shape).to(q))
            if self.D:
                self._init_joint(loc, sd.to(loc))

    def _init_joint(self, loc: torch.Tensor, sd: torch.Tensor) -> None:
        """Set the joint location, and the marginal scales where `sd` is not NaN."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"family={self.family}, D={self.D}, sites={self.latent_names}"


class FullRankGuide(JointGuide):
    """A multivariate Normal with a Cholesky factor ``diag(s)·U`` (module docstring)."""

    family = "fullrank"

    def __init__(self, model, observed_names=(), init_scale: float = 0.1):
        super().__init__(model, observed_names, init_scale)
        D = self.D
        if D > FULLRANK_MAX_D:
            raise GuideError(f"the fullrank guide would need a {D} x {D} Cholesky factor "
                             f"(the program has D = {D} unconstrained latent coordinates in "
                             f"its global and plate sites; at most {FULLRANK_MAX_D}): use "
                             f"--guide lowrank:K")
        if not D:  # every latent is local: the mean-field pairs only
            return
        self.joint_loc = nn.Parameter(torch.zeros(D))
        self.joint_scale_raw = nn.Parameter(torch.full((D,), _softplus_inv(self.init_scale)))
        self.joint_tril = nn.Parameter(torch.zeros(D, D))

    def _scale(self, detach=False):
        raw = self.joint_scale_raw.detach() if detach else self.joint_scale_raw
        return F.softplus(raw).clamp(min=_MIN_SCALE)

    def scale_tril(self, detach: bool = False) -> torch.Tensor:
        t = self.joint_tril.detach() if detach else self.joint_tril
        eye = torch.eye(self.D, dtype=t.dtype, device=t.device)
        return self._scale(detach)[:, None] * (torch.tril(t, -1) + eye)

    def _joint_draw(self, sample_shape):
        loc = self.joint_loc
        eps = torch.randn((*sample_shape, self.D), dtype=loc.dtype, device=loc.device)
        return loc + eps @ self.scale_tril().T, None

    def _joint_log_q(self, z, idx, detach):
        loc = self.joint_loc.detach() if detach else self.joint_loc
        L = self.scale_tril(detach)
        if idx is None:
            d = torch.distributions.MultivariateNormal(loc, scale_tril=L, validate_args=False)
        else:
            Li = L[idx]
            d = torch.distributions.MultivariateNormal(loc[idx], covariance_matrix=Li @ Li.T,
                                                       validate_args=False)
        return d.log_prob(z)

    def _joint_sd(self):
        return self.scale_tril().norm(dim=-1)

    def covariance(self) -> torch.Tensor:
        L = self.scale_tril()
        return L @ L.T

    def _init_joint(self, loc, sd):
        self.joint_loc.copy_(loc)
        keep = torch.isnan(sd)
        raw = torch.log(torch.expm1(sd.clamp(min=_MIN_SCALE * 10)))
        self.joint_scale_raw.copy_(torch.where(keep, self.joint_scale_raw, raw))
        if not bool(keep.all()):
            self.joint_tril.zero_()

    def init_covariance(self, loc: torch.Tensor, cov: torch.Tensor) -> None:
        """Start at ``N(loc, cov)`` (e.g. the moments of MCMC draws)."""
        with torch.no_grad():
            L = torch.linalg.cholesky(cov.double()).to(self.joint_loc)
            s = torch.diagonal(L).clamp(min=_MIN_SCALE * 10)
            self.joint_loc.copy_(loc.to(self.joint_loc))
            self.joint_scale_raw.copy_(torch.log(torch.expm1(s)))
            self.joint_tril.copy_(L / s[:, None])


class LowRankGuide(JointGuide):
    """``N(loc, diag(s)(W Wᵀ + I)diag(s))`` of rank K (module docstring)."""

    family = "lowrank"

    def __init__(self, model, observed_names=(), init_scale: float = 0.1,
                 rank: Optional[int] = None):
        super().__init__(model, observed_names, init_scale)
        D = self.D
        if rank is None:
            rank = min(max(1, round(math.sqrt(D))), LOWRANK_DEFAULT_MAX)
        self.rank = max(1, min(int(rank), D)) if D else 0
        if not D:
            return
        self.joint_loc = nn.Parameter(torch.zeros(D))
        self.joint_scale_raw = nn.Parameter(torch.full(
            (D,), _softplus_inv(self.init_scale / math.sqrt(2))))
        self.joint_cov_factor = nn.Parameter(
            torch.randn(D, self.rank) / math.sqrt(max(self.rank, 1)))

    def _scale(self, detach=False):
        raw = self.joint_scale_raw.detach() if detach else self.joint_scale_raw
        return F.softplus(raw).clamp(min=_MIN_SCALE)

    def _joint_draw(self, sample_shape):
        loc, W = self.joint_loc, self.joint_cov_factor
        eps_w = torch.randn((*sample_shape, self.rank), dtype=loc.dtype, device=loc.device)
        eps_d = torch.randn((*sample_shape, self.D), dtype=loc.dtype, device=loc.device)
        return loc + self._scale() * (eps_w @ W.T + eps_d), None

    def _joint_log_q(self, z, idx, detach):
        loc, W = self.joint_loc, self.joint_cov_factor
        if detach:
            loc, W = loc.detach(), W.detach()
        s = self._scale(detach)
        if idx is not None:
            loc, W, s = loc[idx], W[idx], s[idx]
        d = torch.distributions.LowRankMultivariateNormal(loc, s[:, None] * W, s * s,
                                                          validate_args=False)
        return d.log_prob(z)

    def _joint_sd(self):
        return self._scale() * torch.sqrt(1 + (self.joint_cov_factor ** 2).sum(-1))

    def covariance(self) -> torch.Tensor:
        s, W = self._scale(), self.joint_cov_factor
        return s[:, None] * (W @ W.T + torch.eye(self.D, dtype=W.dtype, device=W.device)) \
            * s[None, :]

    def _init_joint(self, loc, sd):
        self.joint_loc.copy_(loc)
        keep = torch.isnan(sd)
        if bool(keep.all()):
            return
        # the marginal sd is s·sqrt(1 + |W_i|²): W kept, s chosen to give `sd`
        norm = torch.sqrt(1 + (self.joint_cov_factor ** 2).sum(-1))
        s = (sd / norm).clamp(min=_MIN_SCALE * 10)
        self.joint_scale_raw.copy_(torch.where(keep, self.joint_scale_raw,
                                               torch.log(torch.expm1(s))))

    def extra_repr(self) -> str:
        return f"family=lowrank, D={self.D}, rank={self.rank}, sites={self.latent_names}"


def flow_hidden(D: int) -> tuple:
    """The hyper-networks' hidden widths for D coordinates: (64, 64) up to 20, (128, 128)
    up to 60, (256, 256) beyond (the research note's settings for 2-100 dimensions)."""
    if D <= 20:
        return (64, 64)
    if D <= 60:
        return (128, 128)
    return (256, 256)


class _FlowDensity(nn.Module):
    """The inverted flow's log density at given points (for `functional_call` with
    detached parameters: the sticking-the-landing estimator)."""

    def __init__(self, flow):
        super().__init__()
        self.flow = flow

    def forward(self, y):
        import zuko
        return zuko.flows.Flow(self.flow.transform.inv, self.flow.base)().log_prob(y)


class FlowGuide(JointGuide):
    """A standardising affine on a zuko masked autoregressive flow (module docstring)."""

    #: SVI clips the gradients' total norm to this (Pyro's flow tutorial: ClippedAdam,
    #: clip_norm 10): unclipped, kid_scores' fit at lr 0.01 drew non-finite values at
    #: step 16 and garch's at step 427
    clip_norm = 10.0

    family = "flow"
    _remember_density = True

    def __init__(self, model, observed_names=(), init_scale: float = 0.1,
                 transforms: int = 3, hidden: Optional[tuple] = None):
        super().__init__(model, observed_names, init_scale)
        D = self.D
        if D > FLOW_MAX_D:
            raise GuideError(f"the flow guide serves at most {FLOW_MAX_D} unconstrained "
                             f"latent coordinates in global and plate sites; this program "
                             f"has D = {D}: use --guide lowrank:K")
        if not D:
            return
        self.joint_loc = nn.Parameter(torch.zeros(D))
        self.joint_log_scale = nn.Parameter(torch.full((D,), math.log(self.init_scale)))
        try:
            import zuko
        except ImportError:  # pragma: no cover - zuko is a runtime dependency
            raise GuideError("the flow guide needs the zuko package (pip install "
                             "zuko)") from None
        self.hidden = tuple(hidden or flow_hidden(D))
        from functools import partial

        from zuko.transforms import MonotonicAffineTransform
        self.joint_flow = zuko.flows.MAF(
            D, 0, transforms=transforms, hidden_features=self.hidden,
            univariate=partial(MonotonicAffineTransform, slope=FLOW_MIN_SLOPE))
        self._density = [_FlowDensity(self.joint_flow)]  # not a submodule

    def _flow_scale(self, detach=False):
        ls = self.joint_log_scale.detach() if detach else self.joint_log_scale
        return torch.exp(ls).clamp(min=_MIN_SCALE)

    def _sampler(self):
        import zuko
        return zuko.flows.Flow(self.joint_flow.transform.inv, self.joint_flow.base)()

    def _joint_draw(self, sample_shape):
        y, log_q = self._sampler().rsample_and_log_prob(sample_shape)
        scale = self._flow_scale()
        return self.joint_loc + scale * y, log_q - torch.log(scale).sum()

    def _joint_log_q(self, z, idx, detach):
        if idx is not None:
            raise ValueError("the flow guide has no density for a part of its latents "
                             "(some were given as observations)")
        loc = self.joint_loc.detach() if detach else self.joint_loc
        scale = self._flow_scale(detach)
        y = (z - loc) / scale
        if detach:
            from torch.func import functional_call
            module = self._density[0]
            state = {k: v.detach() for k, v in module.named_parameters()}
            state.update(dict(module.named_buffers()))
            lp = functional_call(module, state, (y,))
        else:
            lp = self._density[0](y)
        return lp - torch.log(scale).sum()

    def _moments(self, n: int = 2000):
        """Mean, sd and median of `n` draws of the joint vector (the global random
        state is left as it was)."""
        with torch.no_grad(), torch.random.fork_rng(
                devices=[self.joint_loc.device] if self.joint_loc.is_cuda else []):
            torch.manual_seed(0)
            z, _ = self._joint_draw(torch.Size((n,)))
        return z.mean(0), z.std(0), z.median(0).values

    def _joint_loc(self):
        return self._moments()[0]

    def _joint_sd(self):
        return self._moments()[1]

    def marginal_params(self) -> dict:
        if not self.D:
            return {}
        mean, sd, _ = self._moments()
        out = {}
        for s, o, n in self.layout:
            out[f"loc_{s.name}"] = mean[o:o + n].reshape(self._shape_of(s)).cpu().numpy()
            out[f"log_scale_{s.name}"] = torch.log(sd[o:o + n].clamp(min=_MIN_SCALE)) \
                .reshape(self._shape_of(s)).cpu().numpy()
        return out

    def median(self) -> dict:
        """The constrained image of the coordinate-wise median of 2000 draws (global and
        plate sites)."""
        out = {}
        if not self.D:
            return out
        med = self._moments()[2]
        with torch.no_grad():
            for s, o, n in self.layout:
                v = s.transform(med[o:o + n].reshape(self._shape_of(s)))
                out[s.name] = v.reshape((*((s.plate,) if s.kind == "plate" else ()),
                                         *s.event_shape))
        return out

    def _init_joint(self, loc, sd):
        """The standardising affine takes the means (and sds): the flow starts at the
        Normal of those moments as far as its own initial map is near the identity."""
        self.joint_loc.copy_(loc)
        keep = torch.isnan(sd)
        self.joint_log_scale.copy_(torch.where(keep, self.joint_log_scale,
                                               torch.log(sd.clamp(min=_MIN_SCALE * 10))))
