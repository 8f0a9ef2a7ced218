"""Coercion and validation of tensors handed to compiled morphisms (runtime spec 1.2).

Every check raises a `qvr.runtime.errors` exception that names what was expected and what
was given; the program executor adds the program and step to it.  The helpers here never
compute anything beyond dtype casts and reshapes.
"""
from __future__ import annotations

import torch

import math

from qvr.runtime.errors import (IndexRangeError, InputDtypeError, InputShapeError,
                                ObservationShapeError)


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} tensor of shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"


def as_tensor(x, *, who: str = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    try:
        return torch.as_tensor(x)
    except Exception as e:  # pragma: no cover - message only
        raise InputDtypeError("the value is not a tensor", morphism=who,
                              expected="a tensor", actual=describe(x)) from e


def as_index(x, n: int, *, who: str = None, what: str = "index") -> torch.Tensor:
    """An int64 index tensor with values in `[0, n)`.

    Floats holding integral values are accepted and converted with `.long()` (spec 1.2);
    floats with a fractional part, and values outside the range, are errors.
    """
    x = as_tensor(x, who=who)
    if x.dtype == torch.int64:
        pass
    elif x.is_floating_point():
        if x.numel() and not bool((x == torch.floor(x)).all()):
            raise InputDtypeError(f"{what} values must be integers", morphism=who,
                                  expected=f"int64 values in [0, {n})",
                                  actual=f"{x.dtype} tensor of shape {tuple(x.shape)} "
                                         f"with fractional values")
        x = x.long()
    elif x.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8, torch.bool):
        x = x.long()
    else:
        raise InputDtypeError(f"{what} values must be integers", morphism=who,
                              expected=f"int64 values in [0, {n})", actual=describe(x))
    if x.numel():
        lo, hi = (int(v) for v in torch.aminmax(x))
        if lo < 0 or hi >= n:
            raise IndexRangeError(f"{what} values out of range", morphism=who,
                                  expected=f"values in [0, {n})",
                                  actual=f"values in [{lo}, {hi}]", low=lo, high=hi, size=n)
    return x


def as_features(x, width: int, *, who: str = None, dtype=None) -> torch.Tensor:
    """A float tensor `(*batch, width)`; a 1-D tensor `(B,)` is read as `(B, 1)`."""
    if type(x) is torch.Tensor and x.dim() >= 2 and x.shape[-1] == width \
            and x.is_floating_point():
        return x  # the common case, without further checks
    x = as_tensor(x, who=who)
    orig = tuple(x.shape)
    if x.dim() == 0:
        raise InputShapeError("a continuous input needs a batch axis and a feature axis",
                              morphism=who, expected=f"a float tensor of shape (..., {width})",
                              actual=describe(x))
    if x.dim() == 1:
        x = x.unsqueeze(-1)
    if x.shape[-1] != width:
        raise InputShapeError("the last axis of a continuous input must hold the object's "
                              "coordinates", morphism=who,
                              expected=f"shape (..., {width})", actual=f"shape {orig}")
    if not x.is_floating_point():
        x = x.to(dtype or torch.get_default_dtype())
    return x


def ensure_batch(x, *, who: str = None) -> torch.Tensor:
    x = as_tensor(x, who=who)
    if x.dim() == 0:
        raise InputShapeError("the program input needs a leading batch axis", morphism=who,
                              expected="a tensor of rank >= 1 (B = x.shape[0])",
                              actual=describe(x))
    return x


def finite_index(obj, x, *, who: str = None, what: str = "index") -> torch.Tensor:
    """Flat int64 index of a value of the finite object `obj`.

    A single finite set takes an index tensor of the batch shape; a product of finite sets
    takes one index column per atom (`(*batch, k)`), flattened row-major here.
    """
    atoms = obj.atoms()
    if len(atoms) == 1:
        return as_index(x, atoms[0].cardinality, who=who, what=what)
    x = as_tensor(x, who=who)
    if x.dim() == 0 or x.shape[-1] != len(atoms):
        raise InputShapeError(f"a value of the product `{obj.name}` is one index column per "
                              "factor", morphism=who, expected=f"shape (..., {len(atoms)})",
                              actual=f"shape {tuple(x.shape)}")
    flat = None
    for i, a in enumerate(atoms):
        col = as_index(x[..., i], a.cardinality, who=who, what=what)
        flat = col if flat is None else flat * a.cardinality + col
    return flat


def unravel(obj, flat: torch.Tensor) -> torch.Tensor:
    """Inverse of `finite_index`: index columns `(*batch, k)` for a product, else as is."""
    atoms = obj.atoms()
    if len(atoms) == 1:
        return flat
    cols = []
    for a in reversed(atoms):
        cols.append(flat % a.cardinality)
        flat = torch.div(flat, a.cardinality, rounding_mode="floor")
    return torch.stack(cols[::-1], dim=-1)


# ---------------------------------------------------------------- supplied site values (spec 5.7)

def eval_value(dist, value, frame):
    """Integer-valued data for continuous families is scored as floats (spec 5.7)."""
    from qvr.runtime.families import is_discrete_dist
    if is_discrete_dist(dist):
        if isinstance(dist, torch.distributions.Categorical):
            return value
        return value.to(frame.dtype) if not value.is_floating_point() else value
    if not value.is_floating_point():
        return value.to(frame.dtype)
    return value


def coerce_family_value(dist, value, step: SiteStep, frame):
    value = torch.as_tensor(value, device=frame.device)
    if value.device != frame.device:
        value = value.to(frame.device)
    event = tuple(dist.event_shape)
    n_event = math.prod(event)
    if step.site_kind == "global":
        if value.numel() != n_event:
            raise ObservationShapeError(
                "a global site's value must hold exactly one draw", site=step.name,
                expected=f"{n_event} value(s), shape {event}",
                actual=f"shape {tuple(value.shape)}")
        value = value.reshape(event)
    elif step.site_kind == "plate":
        want = (step.plate, *event)
        if value.numel() != math.prod(want):
            raise ObservationShapeError(
                f"a plate site's value must hold one draw per element of `{step.plate_name}`",
                site=step.name, expected=f"shape {want}", actual=f"shape {tuple(value.shape)}")
        value = value.reshape(want)
    if isinstance(dist, torch.distributions.Categorical):
        k = dist.probs.shape[-1]
        value = as_index(value, k, who=f"`{step.name}`", what="class")
    return value


def coerce_morph_value(module, value, step: SiteStep, frame):
    value = torch.as_tensor(value, device=frame.device)
    if value.device != frame.device:
        value = value.to(frame.device)
    if not module.output_discrete and module.output_event_rank == 1:
        w = module.output_width
        if value.dim() == 0 or value.shape[-1] != w:
            raise ObservationShapeError(
                f"the value of `{step.name}` must end with the codomain's {w} coordinates",
                site=step.name, expected=f"shape (..., {w})",
                actual=f"shape {tuple(value.shape)}")
    return value
