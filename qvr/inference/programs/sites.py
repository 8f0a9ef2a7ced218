"""The latent-site registry: which sites a guide or MCMC samples, and how (runtime spec 6.1).

For a model (a `MonadicProgram`, lifted or Python-built), an input `x` and the observed
names, the *latent sites* are, in program order, every `sample`/`observe` variable that is
not observed and not finite (finite latents are summed out exactly by
`qvr.inference.enumeration.enumerate`; an infinite discrete latent is an error).  `build_registry` finds them with one forward **shape pass** (the program run
once under `torch.no_grad()` with the observations clamped) and describes each one as a
`LatentSite`: kind, value shape, support, bijector and sizes.  A `Registry` then converts
between the flat unconstrained vector `z` that MCMC moves and the dict of constrained site
values the model's `log_joint` consumes (`unpack`), including the log-Jacobian.

What this module does not do: evaluate densities (that is `potential.py` and the guide),
or know about chains beyond letting every function work on one point (`vmap` batches it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.distributions import biject_to, constraints

#: Families whose support bounds come from their arguments: a latent site needs them fixed.
_BOUNDED_BY_ARGS = {"Uniform": (0, 1), "TruncatedNormal": (2, 3)}


@dataclass(frozen=True)
class LatentSite:
    """One latent site.

    Attributes:
      name: the program variable.
      kind: ``"global"``, ``"plate"`` or ``"local"`` (runtime spec 5.3).
      shape: the constrained value shape the model expects (``()`` for a scalar global).
      event_shape: the shape of one constrained draw of the family (``()`` or ``(d,)``).
      support: the torch constraint of the values.
      transform: ``biject_to(support)``, unconstrained -> constrained, acting on events.
      d: constrained event size; u: unconstrained event size (``d - 1`` on a simplex).
      num_events: how many events the value holds (``prod(shape) / d``).
      plate: ``|I|`` of a plate site, else None.
      dependent: the bounds of the support are run-time values (docs/extensions.md E9.2:
        `Uniform(0.0, ub)`, a truncation bound that is a local): `transform` is only the
        shape pass's; the registry maps the site through the bijector of the bounds of
        each evaluation (`Registry.unpack`).
    """

    name: str
    kind: str
    shape: tuple
    event_shape: tuple
    support: Any
    transform: Any
    d: int
    u: int
    num_events: int
    plate: Optional[int] = None
    dependent: bool = False

    @property
    def batch_shape(self) -> tuple:
        """The value shape without the event axes (rows, positions or plate elements)."""
        return self.shape[:len(self.shape) - len(self.event_shape)]

    @property
    def unconstrained_shape(self) -> tuple:
        """Shape of the unconstrained value: ``batch_shape + (u,)`` (``(u,)`` for a global)."""
        return (*self.batch_shape, self.u)

    @property
    def size(self) -> int:
        """Length of this site's block in the flat vector."""
        return self.num_events * self.u


def _event_shape_of(record, value: torch.Tensor) -> tuple:
    dist = record.distribution
    if dist is not None:
        return tuple(dist.event_shape)
    m = record.morphism
    rank = getattr(m, "output_event_rank", 1 if value.dim() else 0)
    return tuple(value.shape[value.dim() - rank:]) if rank else ()


def _is_dependent(program, name: str) -> bool:
    """E9.2: the site's step module builds its support from run-time bounds."""
    from qvr.runtime.steps import SiteStep
    walk = getattr(program, "_walk", None)
    for step, _ in (walk() if walk is not None else ()):
        if isinstance(step, SiteStep) and step.name == name:
            return bool(getattr(getattr(program, step.module_name, None), "dependent", False))
    return False


def _check_bounds(program, name: str) -> None:
    """Spec 5.3a: a latent Uniform/TruncatedNormal needs literal bounds, unless its step
    maps it through the bounds of each evaluation (E9.2, `_is_dependent`)."""
    from qvr.runtime.steps import SiteStep
    if _is_dependent(program, name):
        return
    for step, _ in program._walk():
        if isinstance(step, SiteStep) and step.name == name and step.family in _BOUNDED_BY_ARGS:
            idx = _BOUNDED_BY_ARGS[step.family]
            if any(i < len(step.args) and step.args[i].kind != "lit" for i in idx):
                raise ValueError(
                    f"latent site `{name}`: a {step.family} latent needs literal bounds for its "
                    f"bijector (got `{step.text or step.name}`); observe it, or give numbers")


def _site_from_record(program, rec) -> LatentSite:
    value = rec.value
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"latent site `{rec.name}` has a non-tensor value "
                         f"({type(value).__name__}); guides and MCMC need tensors")
    support = rec.support if rec.support is not None else constraints.real
    if support.is_discrete or not value.is_floating_point():
        raise ValueError(
            f"latent site `{rec.name}` has a discrete support ({support}); guides and MCMC "
            f"handle only continuous latents: observe it, or marginalize it")
    _check_bounds(program, rec.name)
    event_shape = _event_shape_of(rec, value)
    shape = tuple(value.shape)
    kind = rec.site_kind or "local"
    if kind == "global" and tuple(shape) != tuple(event_shape):
        # a global site's value is one event (e.g. a Python-built site returning (1, d))
        if math.prod(shape) == math.prod(event_shape):
            shape = tuple(event_shape)
        else:
            kind = "local"
    try:
        transform = biject_to(support)
    except NotImplementedError:
        raise ValueError(f"latent site `{rec.name}`: no bijector to its support {support}; "
                         "guides and MCMC cannot handle it") from None
    d = math.prod(event_shape) if event_shape else 1
    if len(event_shape) > 1 and not _matrix_ok(transform, event_shape):
        raise ValueError(f"latent site `{rec.name}` has a matrix-valued event "
                         f"{event_shape}; guides and MCMC support scalar and vector events")
    u_shape = transform.inverse_shape(torch.Size(event_shape or (1,)))
    u = int(u_shape[-1]) if len(u_shape) else 1
    num_events = math.prod(shape) // d if d else 0
    plate = shape[0] if kind == "plate" and shape else None
    return LatentSite(rec.name, kind, shape, tuple(event_shape), support, transform, d, u,
                      num_events, plate, _is_dependent(program, rec.name))


def _matrix_ok(transform, event_shape) -> bool:
    """A matrix event whose bijector maps a vector to it (E9.2: `CholeskyFactor K`)."""
    try:
        return len(transform.inverse_shape(torch.Size(event_shape))) == 1
    except Exception:
        return False


class Registry:
    """The latent sites of a model for one input and one set of observed names.

    `dim` is the length of the flat unconstrained vector (the concatenation, in site
    order, of each site's unconstrained values flattened).  `unpack(z)` maps one flat
    vector to constrained values and the summed log-Jacobian; it is written for one point
    and is `vmap`-safe.
    """

    def __init__(self, sites: list[LatentSite], model=None, x=None, observations=None):
        self.sites = list(sites)
        # E9.2: a site with a dependent support is mapped by a pass of the program
        self.model, self.x, self.observations = model, x, dict(observations or {})
        self.dependent = [s for s in self.sites if s.dependent]
        self.by_name = {s.name: s for s in self.sites}
        offsets, start = [], 0
        for s in self.sites:
            offsets.append((start, start + s.size))
            start += s.size
        self.offsets = offsets
        self.dim = start

    def __iter__(self):
        return iter(self.sites)

    def __len__(self) -> int:
        return len(self.sites)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sites]

    def coordinate_names(self) -> list[str]:
        """`name` or `name[i]` (flat index within the site) for every coordinate of the
        flat unconstrained vector, in its order."""
        out = []
        for s in self.sites:
            out.extend([s.name] if s.size == 1 else [f"{s.name}[{i}]" for i in range(s.size)])
        return out

    def split(self, z: torch.Tensor) -> dict:
        """Flat `(..., D)` -> `{name: (..., *unconstrained_shape)}`."""
        lead = z.shape[:-1]
        return {s.name: z[..., a:b].reshape((*lead, *s.unconstrained_shape))
                for s, (a, b) in zip(self.sites, self.offsets)}

    def unpack(self, z: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """One flat vector `(D,)` -> (constrained values, summed log|det J|)."""
        values = {}
        logdet = z.new_zeros(())
        pins = {}
        for s, (a, b) in zip(self.sites, self.offsets):
            zs = z[a:b].reshape(s.unconstrained_shape)
            if s.dependent:  # mapped below, in program order
                pins[s.name] = zs.reshape(s.shape)
                continue
            v = s.transform(zs)
            logdet = logdet + _logdet(s, zs, v)
            values[s.name] = v.reshape(s.shape)
        if pins:
            dep, extra = self._pinned(values, pins)
            values.update(dep)
            if extra is not None:
                logdet = logdet + extra
        return values, logdet

    def _pinned(self, values: dict, pins: dict) -> tuple:
        """E9.2: the values of the dependent sites for their unconstrained `pins`: one
        forward pass of the program (no densities, nothing drawn: every other latent
        value is given) in which each such site is `T(z)`, `T` the bijector of the
        support its step computes from the values before it; and the summed log|det J|."""
        from qvr.runtime.constraints import pinned
        if self.model is None:
            raise ValueError("latent sites whose bounds depend on other values need the "
                             "registry's model (build it with build_registry)")
        with pinned(pins) as rec:
            ex = self.model.execute(self.x, {**self.observations, **values}, score=False)
        return {n: ex.sites[n].value.reshape(self.by_name[n].shape) for n in pins}, rec.logdet

    def constrain(self, z: torch.Tensor) -> dict:
        """Flat `(..., D)` -> `{name: (..., *shape)}` constrained values (no Jacobian)."""
        if self.dependent:
            return self._constrain_by_passes(z)
        lead = z.shape[:-1]
        out = {}
        for s, (a, b) in zip(self.sites, self.offsets):
            zs = z[..., a:b].reshape((*lead, *s.unconstrained_shape))
            out[s.name] = s.transform(zs).reshape((*lead, *s.shape))
        return out

    def _constrain_by_passes(self, z: torch.Tensor) -> dict:
        """`constrain` with dependent sites: `unpack` per point (vmapped when possible)."""
        lead = z.shape[:-1]
        flat = z.reshape(-1, z.shape[-1])
        names = self.names

        def one(z1):
            values, _ = self.unpack(z1)
            return tuple(values[n] for n in names)

        with torch.no_grad():
            try:
                from torch.func import vmap
                outs = vmap(one, randomness="same")(flat)
            except Exception:  # a program vmap cannot run: one point at a time
                rows = [one(flat[i]) for i in range(flat.shape[0])]
                outs = tuple(torch.stack([r[k] for r in rows]) if rows else
                             flat.new_zeros((0, *self.by_name[n].shape))
                             for k, n in enumerate(names))
        return {n: o.reshape((*lead, *self.by_name[n].shape)) for n, o in zip(names, outs)}

    def transforms_at(self, values: dict) -> dict:
        """`{site: bijector}` at the constrained `values` (one point): a dependent site's
        from the support its step computes with these values (E9.2), the others'
        fixed ones."""
        out = {s.name: s.transform for s in self.sites}
        if self.dependent:
            given = {**self.observations, **{k: torch.as_tensor(v) for k, v in values.items()}}
            with torch.no_grad():
                ex = self.model.execute(self.x, given, score=False)
            for s in self.dependent:
                out[s.name] = biject_to(ex.sites[s.name].support)
        return out

    def dependent_values(self, values: dict, z: dict, batch_ndims: int = 0) -> dict:
        """E9.2, for guides: the constrained values of the dependent sites from their
        unconstrained `z` (`{name: (*lead, *shape)}`), given the other sites' `values`
        with `batch_ndims` leading particle axes (differentiable)."""
        def one(vals, zs):
            return self._pinned(vals, zs)[0]
        return _over_lead(one, batch_ndims)(values, z)

    def dependent_inverse(self, values: dict, batch_ndims: int = 0) -> dict:
        """E9.2, for guides: `{name: (z, log|det J|)}` of the dependent sites at the
        constrained `values` (every latent site; `batch_ndims` leading particle axes),
        each through the bijector of the support its step computes from these values."""
        def one(vals):
            ex = self.model.execute(self.x, {**self.observations, **vals}, score=False)
            out = {}
            for s in self.dependent:
                v = vals[s.name]
                t = biject_to(ex.sites[s.name].support)
                z = t.inv(v)
                out[s.name] = (z, t.log_abs_det_jacobian(z, v).sum())
            return out
        return _over_lead(one, batch_ndims)(values)

    def unconstrain(self, values: dict) -> torch.Tensor:
        """Constrained values (one point) -> the flat unconstrained vector `(D,)`."""
        parts = []
        transforms = self.transforms_at(values)
        for s in self.sites:
            t = transforms[s.name]
            if s.dependent:
                v = torch.as_tensor(values[s.name]).reshape(s.shape)
                parts.append(t.inv(v).reshape(-1))
                continue
            v = torch.as_tensor(values[s.name]).reshape(*s.batch_shape, *(s.event_shape or (1,)))
            parts.append(t.inv(v).reshape(-1))
        if not parts:
            return torch.zeros(0)
        return torch.cat(parts)


def _over_lead(fn, n: int):
    """`fn` mapped over `n` leading axes of its (dict) arguments with vmap."""
    if n == 0:
        return fn
    from torch.func import vmap
    for _ in range(n):
        fn = vmap(fn, randomness="same")
    return fn


def _logdet(site: LatentSite, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Summed log|det dT/dz| of one site (`z` of shape `(*batch, u)`, `v = T(z)`)."""
    return site.transform.log_abs_det_jacobian(z, v).sum()


def _cache_key(x, observations) -> tuple:
    shape_of = (lambda v: tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__)
    return (tuple(x.shape) if isinstance(x, torch.Tensor) else None,
            tuple(sorted((k, shape_of(v)) for k, v in observations.items())))


def build_registry(model, x, observations: Optional[dict] = None,
                   observed_names=None) -> Registry:
    """The latent sites of `model` at input `x` (spec 6.1), from a cached shape pass.

    `observed_names` defaults to the keys of `observations`.  Sites whose value is
    discrete, or whose bijector is unknown, raise `ValueError` naming the site.
    """
    observations = dict(observations or {})
    observed = set(observations if observed_names is None else observed_names)
    cache = model.__dict__.setdefault("_qvr_registry_cache", {})
    key = (_cache_key(x, observations), tuple(sorted(observed)))
    if key in cache:
        reg = cache[key]
        if reg.dependent:  # E9.2: its passes read this call's input and observations
            return Registry(reg.sites, model, x, observations)
        return reg
    records = shape_pass(model, x, {k: v for k, v in observations.items()})
    from qvr.inference.enumeration.enumerate import check_discrete_latent, is_finite_support
    inside = _marginalized_names(model)
    sites = []
    for name, rec in records.items():
        if rec.step not in ("sample", "observe") or name in observed or name in inside:
            continue
        if rec.support is not None and is_finite_support(rec.support):
            continue  # a finite latent: summed out exactly (qvr.inference.enumeration.enumerate)
        check_discrete_latent(name, rec.support)
        sites.append(_site_from_record(model, rec))
    reg = Registry(sites, model, x, observations)
    cache[key] = reg
    return reg


def _marginalized_names(model) -> set:
    """Names bound inside marginalize blocks (never sites, even when drawn forward)."""
    walk = getattr(model, "_walk", None)
    return {s.name for s, inside in walk() if inside} if walk is not None else set()


def shape_pass(model, x, observations: dict) -> dict:
    """Run `model` forward once without gradients; return its step records by name."""
    execute = getattr(model, "execute", None)
    if execute is None:
        raise ValueError(f"{type(model).__name__} is not a program: guides and MCMC need a "
                         "model with execute/log_joint (a compiled, lifted or Python-built "
                         "MonadicProgram)")
    from qvr.runtime.improper import improper_init
    devices = [x.device] if isinstance(x, torch.Tensor) and x.device.type == "cuda" else []
    # leave the RNG alone; improper priors (E9.2) draw Stan's initial values
    with torch.no_grad(), torch.random.fork_rng(devices=devices), improper_init():
        ex = execute(x, observations, score=False)
    return ex.sites


# ---------------------------------------------------------------- static facts (no input)

_DUMMY = {"real": 0.0, "pos": 1.0, "unit": 0.5}


@dataclass(frozen=True)
class SiteSpec:
    """What is known of a latent site without running the program: enough to create a
    guide's parameters (spec 6.3: they exist right after construction).

    `event_shape`, `support`, `d` and `u` as in `LatentSite`; `plate` is ``|I|`` for a
    plate site; `kind` is the declared site kind.
    """

    name: str
    kind: str
    event_shape: tuple
    support: Any
    transform: Any
    d: int
    u: int
    plate: Optional[int] = None
    dependent: bool = False  # E9.2: bounds computed per evaluation (see LatentSite)


def _spec_of(name, kind, event_shape, support, plate, dependent: bool = False) -> SiteSpec:
    from qvr.inference.enumeration.enumerate import check_discrete_latent
    check_discrete_latent(name, support)
    if support.is_discrete:
        raise ValueError(
            f"latent site `{name}` has a discrete support ({support}); guides and MCMC "
            f"handle only continuous latents: observe it, or marginalize it")
    try:
        transform = biject_to(support)
    except NotImplementedError:
        raise ValueError(f"latent site `{name}`: no bijector to its support {support}; "
                         "guides and MCMC cannot handle it") from None
    d = math.prod(event_shape) if event_shape else 1
    u_shape = transform.inverse_shape(torch.Size(event_shape or (1,)))
    return SiteSpec(name, kind, tuple(event_shape), support, transform, d, int(u_shape[-1]),
                    plate, dependent)


def static_sites(model, observed_names) -> list[SiteSpec]:
    """The latent sites of `model` (not in `observed_names`), described from the compiled
    steps alone.  Inline family sites are described by a distribution built from their
    literal arguments (other arguments replaced by a valid dummy value of their kind)."""
    from qvr.runtime.steps import SiteStep
    from qvr.sema.families import FAMILIES
    from qvr.inference.enumeration.enumerate import finite_site_names
    observed = set(observed_names)
    finite = set(finite_site_names(model))  # summed out exactly, never guide sites
    out = []
    steps = [s for s, inside in model._walk() if isinstance(s, SiteStep) and not inside]
    for step in steps:
        if step.name in observed or step.name in finite:
            continue
        module = getattr(model, step.module_name)
        kind = step.site_kind
        if step.family is None:
            if getattr(module, "output_discrete", False):
                support = module.support
                event = ()
            else:
                support = getattr(module, "support", constraints.real)
                width = module.output_width
                event = (width,) if module.output_event_rank else ()
            out.append(_spec_of(step.name, kind, event, support, None))
            continue
        _check_bounds(model, step.name)
        fam = FAMILIES[step.family]
        static = getattr(module, "static_distribution", None)
        if static is not None:  # E9.2: truncation, improper priors, spaces
            dist = static(step.args, lambda kind: torch.tensor(_DUMMY.get(kind, 1.0)))
            out.append(_spec_of(step.name, kind, tuple(dist.event_shape), dist.support,
                                step.plate if kind == "plate" else None,
                                _is_dependent(model, step.name)))
            continue
        args = []
        for a, (_, pkind) in zip(step.args, fam.params):
            if a.kind == "lit":
                args.append(torch.tensor(float(a.value)))
            elif pkind in ("vec", "mat"):  # E9.9: `mat`, a K×K factor (MultivariateNormal)
                size = step.event_size or module.default_event_size
                if size is None:
                    raise ValueError(
                        f"latent site `{step.name}`: the event size of its {step.family} "
                        "prior depends on the data; give it with `over=`, or build the "
                        "guide with an input (x=...) so a shape pass can find it")
                args.append(torch.ones(size) if pkind == "vec" else torch.eye(size))
            else:
                args.append(torch.tensor(_DUMMY.get(pkind, 1.0)))
        dist = module.distribution(args)
        out.append(_spec_of(step.name, kind, tuple(dist.event_shape), dist.support,
                            step.plate if kind == "plate" else None))
    return out
