"""`AutoNormalGuide`: a mean-field Normal guide in unconstrained space (runtime spec 6.3).

Each latent site `s` gets `loc_<s>` (zeros) and `log_scale_<s>` (`log(init_scale)`), of
shape `(u,)` for global and local sites and `(|I|, u)` for plate sites, where `u` is the
site's unconstrained event size.  A draw is `T(loc + scale * eps)` with `T` the site's
bijector; local sites share one `(u,)` pair across all rows and positions, and draw one
independent `eps` per row/position (row shape from the cached shape pass).

Parameters exist right after construction: the sites are described from the compiled
steps (`sites.static_sites`), without an input.  This module does not evaluate the model.

The unconstrained draw per site (`_draw_z`, `_draw_site`) and the density of the global
and plate sites' unconstrained values (`_static_log_q`) are hooks: the joint families of
`qvr.inference.vi.joint_guides` (fullrank, lowrank, flow) override them and keep the
rest (transforms, Jacobians, E9.2 dependent sites, minibatch row scaling).

References:
  Kucukelbir et al. (2017), Automatic Differentiation Variational Inference, JMLR 18.

Example:
  >>> guide = AutoNormalGuide(model, observed_names={"y"})      # doctest: +SKIP
  >>> values = guide.rsample(x, {"y": y})                         # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torch.distributions.transforms import ComposeTransform, identity_transform

from qvr.inference.programs.sites import SiteSpec, build_registry, static_sites
from qvr.runtime.frame import current_row_scale

_MIN_SCALE = 1e-6  # spec 9.4: guide scales >= 1e-6


def _is_identity(transform) -> bool:
    """True for the bijector of a real support (`biject_to(real)`, the empty composition)."""
    return transform is identity_transform or (
        type(transform) is ComposeTransform and not transform.parts)


def _model_of(model):
    """Accept a `Program` whose first export is a program, as well as the program."""
    if hasattr(model, "execute"):
        return model
    inner = getattr(model, "morphism", None)
    if inner is not None and hasattr(inner, "execute"):
        return inner
    raise TypeError(f"expected a program (MonadicProgram or Program); got {type(model).__name__}")


class AutoNormalGuide(nn.Module):
    """Mean-field Normal guide over every latent site of `model`.

    Args:
      model: a compiled, lifted or Python-built program.
      observed_names: the names excluded from the guide (observed sites; host-data
        names are harmless).
      init_scale: the initial standard deviation in unconstrained space.
    """

    def __init__(self, model, observed_names=(), init_scale: float = 0.1):
        super().__init__()
        if not init_scale > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale}")
        self.model = [_model_of(model)]  # a list: not registered as a submodule
        self.observed_names = set(observed_names or ())
        self.init_scale = float(init_scale)
        self.specs: list[SiteSpec] = static_sites(self.model[0], self.observed_names)
        for s in self.specs:
            if not self._per_site(s):
                continue
            shape = (s.plate, s.u) if s.kind == "plate" else (s.u,)
            self.register_parameter(f"loc_{s.name}", nn.Parameter(torch.zeros(shape)))
            self.register_parameter(f"log_scale_{s.name}", nn.Parameter(
                torch.full(shape, math.log(self.init_scale))))

    def _per_site(self, s: SiteSpec) -> bool:
        """Whether site `s` has its own ``loc_``/``log_scale_`` pair (here: every site;
        the joint families keep them for local sites only)."""
        return True

    @property
    def latent_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def loc(self, name: str) -> torch.Tensor:
        return getattr(self, f"loc_{name}")

    def scale(self, name: str) -> torch.Tensor:
        return torch.exp(getattr(self, f"log_scale_{name}")).clamp(min=_MIN_SCALE)

    def _batch_shapes(self, x, observations) -> dict:
        """Row shape of every site for this input (global: (), plate: (|I|,))."""
        if not self.specs:
            return {}
        model = self.model[0]
        obs = {k: v for k, v in (observations or {}).items()}
        reg = build_registry(model, x, obs, observed_names=self.observed_names | set(obs))
        out = {}
        for s in self.specs:
            site = reg.by_name.get(s.name)
            if site is None:  # supplied in `observations` although latent for the guide
                out[s.name] = None
                continue
            if site.u != s.u:
                raise ValueError(f"site `{s.name}`: the shape pass found {site.u} unconstrained "
                                 f"coordinates per event, the guide was built for {s.u}")
            out[s.name] = site.batch_shape
        return out

    def rsample(self, x, observations: Optional[dict] = None,
                sample_shape=torch.Size()) -> dict:
        """Draw every latent site: `{name: value}` in the site's value shape.

        With a non-empty `sample_shape` every value gets those leading axes (independent
        draws), which the vectorised ELBO uses.
        """
        sample_shape = torch.Size(sample_shape)
        shapes = self._batch_shapes(x, observations)
        self._last_observations = (x, dict(observations or {}))  # for log_prob (E9.2)
        zs = self._draw_z(shapes, sample_shape)
        out = {}
        pins = {}  # E9.2: dependent sites, mapped once the others are drawn
        for s in self.specs:
            batch = shapes.get(s.name)
            if batch is None:
                continue
            z = zs[s.name]
            if s.dependent:
                pins[s.name] = z.reshape((*sample_shape, *batch))
                continue
            v = z if _is_identity(s.transform) else s.transform(z)
            event = s.event_shape
            out[s.name] = v.reshape((*sample_shape, *batch, *event))
        if pins:
            out.update(self._registry(x, observations).dependent_values(
                out, pins, batch_ndims=len(sample_shape)))
        self._drawn(out)
        return out

    # ---- the hooks a guide family overrides (`qvr.inference.vi.joint_guides`)

    def _draw_z(self, shapes: dict, sample_shape: torch.Size) -> dict:
        """Unconstrained draws ``{name: z}`` of the sites with a row shape in `shapes`:
        ``(*sample_shape, |I|, u)`` for a plate site, ``(*sample_shape, *rows, u)`` else."""
        out = {}
        for s in self.specs:
            batch = shapes.get(s.name)
            if batch is not None:
                out[s.name] = self._draw_site(s, batch, sample_shape)
        return out

    def _draw_site(self, s: SiteSpec, batch, sample_shape: torch.Size) -> torch.Tensor:
        """One site's mean-field draw `loc + scale * eps` (a local site: one eps per row)."""
        loc, scale = self.loc(s.name), self.scale(s.name)
        if s.kind == "plate":
            eps_shape = (*sample_shape, *loc.shape)
        else:
            eps_shape = (*sample_shape, *batch, s.u)
        eps = torch.randn(eps_shape, dtype=loc.dtype, device=loc.device)
        return loc + scale * eps

    def _drawn(self, values: dict) -> None:
        """Called with every `rsample`'s values (a family may remember their density)."""

    def _site_log_q(self, s: SiteSpec, z: torch.Tensor, lead: tuple,
                    detach: bool) -> torch.Tensor:
        """`sum log N(z; loc, scale)` of one site's unconstrained values, shape `lead`."""
        loc, log_scale = self.loc(s.name), getattr(self, f"log_scale_{s.name}")
        if detach:
            loc, log_scale = loc.detach(), log_scale.detach()
        scale = torch.exp(log_scale).clamp(min=_MIN_SCALE)
        lq = -0.5 * ((z - loc) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)
        return lq.reshape((*lead, -1)).sum(-1)

    def _static_log_q(self, zs: dict, values: dict, lead: tuple,
                      detach: bool) -> Optional[torch.Tensor]:
        """The log density of the global and plate sites' unconstrained values `zs`
        (``{name: z}``, those present; `values`: the constrained values given)."""
        total = None
        for s in self.specs:
            if s.name in zs:
                lq = self._site_log_q(s, zs[s.name], lead, detach)
                total = lq if total is None else total + lq
        return total

    # ----

    def _registry(self, x, observations):
        obs = dict(observations or {})
        return build_registry(self.model[0], x, obs, observed_names=self.observed_names | set(obs))

    def sample(self, x, observations: Optional[dict] = None, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(x, observations, sample_shape)

    def log_prob(self, x, values: dict, batch_ndims: int = 0, *,
                 detach_params: bool = False) -> torch.Tensor:
        """`sum_sites sum_elements [log N(z; loc, scale) - log|det J_T(z)|]`, `z = T^-1(v)`.

        Sites absent from `values` are skipped.  `batch_ndims` leading axes of the values
        are kept (one log-density per particle); `detach_params` evaluates the density with
        gradient-free parameters (the sticking-the-landing estimator).  Under
        `qvr.runtime.frame.rows_scaled(s)` (a minibatch) local sites' terms are multiplied
        by `s`, as the model's row terms are.
        """
        row_scale = current_row_scale()
        total = None
        dependent = None
        if any(s.dependent and s.name in values for s in self.specs):  # E9.2
            latent = {s.name: values[s.name] for s in self.specs if s.name in values}
            last_x, obs = getattr(self, "_last_observations", (None, {}))
            obs = {**(obs if last_x is x else {}),
                   **{k: v for k, v in values.items() if k not in latent}}
            dependent = self._registry(x, obs).dependent_inverse(latent, batch_ndims=batch_ndims)
        static, static_ladj, lead = {}, None, None
        for s in self.specs:
            if s.name not in values:
                continue
            v = values[s.name]
            lead = tuple(v.shape[:batch_ndims])
            if dependent is not None and s.name in dependent:
                z, logdet = dependent[s.name]
                z = z.unsqueeze(-1)
                ladj = logdet
            else:
                z, ladj = self._unconstrain(s, v, lead)
            if s.kind != "local":
                static[s.name] = z
                if ladj is not None:
                    static_ladj = ladj if static_ladj is None else static_ladj + ladj
                continue
            lq = self._site_log_q(s, z, lead, detach_params)
            if ladj is not None:
                lq = lq - ladj
            if row_scale != 1.0:  # a minibatch's rows (`rows_scaled`)
                lq = lq * row_scale
            total = lq if total is None else total + lq
        if static:
            lq = self._static_log_q(static, values, lead, detach_params)
            if static_ladj is not None:
                lq = lq - static_ladj
            total = lq if total is None else total + lq
        if total is None:
            p = next(iter(self.parameters()), None)
            return torch.zeros((), device=p.device if p is not None else None)
        return total

    def _unconstrain(self, s: SiteSpec, v: torch.Tensor, lead: tuple):
        """``(z, log|det J_T(z)|)`` of a site's value `v`: `z` of shape
        ``(*lead, *rows, u)``, the log-Jacobian summed to `lead` (None: the identity)."""
        if s.kind == "plate" and s.plate is not None:  # E9.9: a product plate's axes
            v = v.reshape(*lead, s.plate, *s.event_shape)
        if len(s.event_shape) > 1:  # E9.2: a matrix event (`CholeskyFactor K`)
            pass
        elif s.event_shape:
            v = v.reshape(*v.shape[:v.dim() - len(s.event_shape)], s.d)
        else:
            v = v.unsqueeze(-1)
        if _is_identity(s.transform):  # the identity's log-Jacobian is zero
            return v, None
        z = s.transform.inv(v)
        return z, s.transform.log_abs_det_jacobian(z, v).reshape((*lead, -1)).sum(-1)

    def median(self) -> dict:
        """The constrained image of `loc` per site (global and plate sites)."""
        out = {}
        with torch.no_grad():
            for s in self.specs:
                if s.kind in ("global", "plate"):
                    v = s.transform(self.loc(s.name))
                    out[s.name] = v.reshape((*((s.plate,) if s.kind == "plate" else ()),
                                             *s.event_shape))
        return out

    def extra_repr(self) -> str:
        return f"sites={self.latent_names}, init_scale={self.init_scale}"
