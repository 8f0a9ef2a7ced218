"""Coercion and validation of tensors handed to compiled morphisms (runtime spec 1.2).

Every check raises a `qvr.runtime.errors` exception that names what was expected and what
was given; the program executor adds the program and step to it.  The helpers here never
compute anything beyond dtype casts and reshapes.
"""
from __future__ import annotations

import math
import weakref

import torch

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


def _tracing() -> bool:
    """Whether a `make_fx` trace is recording (the MCMC density is traced once, after two
    eager evaluations at the same data: the range check below has run on those values,
    and reading a traced value's range would fail the trace)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
    return get_proxy_mode() is not None


def as_index(x, n: int, *, who: str = None, what: str = "index") -> torch.Tensor:
    """An int64 index tensor with values in `[0, n)`.

    Floats holding integral values are accepted and converted with `.long()` (spec 1.2);
    floats with a fractional part, and values outside the range, are errors.
    """
    x = as_tensor(x, who=who)
    if x.dtype == torch.int64:
        pass
    elif x.is_floating_point():
        if x.numel() and not _tracing() and not bool((x == torch.floor(x)).all()):
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
    if x.numel() and not _tracing():
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


# ---------------------------------------------------------------- missing entries (design E5)

#: memo of `missing_entries` for data tensors: id -> (weakref, version, discrete, result)
_MISSING: dict = {}


def missing_entries(z, discrete: bool):
    """`missing_entries_of(z, discrete)`, memoised for data tensors (the same observation
    tensors are handed to every step of a fit).

    Decision: for a plain tensor (or one that grad/functionalize transforms merely wrap)
    the scan runs eagerly on the tensor itself, outside any tracing mode, and its result
    is kept per tensor object and version (an in-place change of the data is seen).  Why:
    `make_fx` traces the MCMC target, and asking a traced tensor whether anything is
    missing is data-dependent control flow, which tracing refuses; observed values are
    data, so the filled value and the mask are constants of a traced graph, as the data
    itself is.  Values under `vmap` (batched) or fake tensors are scanned directly."""
    base = _data_tensor(z)
    if base is None:
        return missing_entries_of(z, discrete, branch=not _batched(z))
    key = id(base)
    hit = _MISSING.get(key)
    if hit is not None and hit[0]() is base and hit[1] == base._version and hit[2] == discrete:
        return hit[3]
    from torch.utils._python_dispatch import _disable_current_modes
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        out = missing_entries_of(base, discrete)
    if len(_MISSING) >= 256:
        _MISSING.clear()
    _MISSING[key] = (weakref.ref(base), base._version, discrete, out)
    return out


def _batched(t) -> bool:
    """True for a tensor batched by `vmap` at some level (its values cannot be asked
    whether anything is missing: data-dependent control flow)."""
    fz = getattr(torch._C, "_functorch", None)
    if fz is None or not isinstance(t, torch.Tensor):
        return False
    try:
        for _ in range(64):
            if not fz.is_functorch_wrapped_tensor(t):
                return False
            if fz.is_batchedtensor(t):
                return True
            t = fz.get_unwrapped(t)
    except (AttributeError, RuntimeError):  # pragma: no cover - other torch versions
        return False
    return False


def _data_tensor(t):
    """The plain tensor under grad/functionalize wrappers of `t`, or None (not a tensor,
    batched by vmap, a tensor subclass, or one that requires grad)."""
    if not isinstance(t, torch.Tensor):
        return None
    fz = getattr(torch._C, "_functorch", None)
    try:
        for _ in range(64):
            if torch._is_functional_tensor(t):
                t = torch._from_functional_tensor(t)
            elif fz is not None and fz.is_functorch_wrapped_tensor(t):
                if fz.is_batchedtensor(t):
                    return None
                t = fz.get_unwrapped(t)
            else:
                break
    except (AttributeError, RuntimeError):  # pragma: no cover - other torch versions
        return None
    if type(t) is not torch.Tensor or t.requires_grad:
        return None
    return t


def missing_entries_of(z, discrete: bool, branch: bool = True):
    """`(z_filled, missing)`: the entries of `z` that are missing (design E5) and `z` with
    them replaced by a valid placeholder (0).  A missing entry is NaN in a real value, -1
    or NaN in an index value (indices that arrive as floats, e.g. a JSON file with
    `null`).  `missing` is a boolean tensor of `z`'s shape, or None when nothing is
    missing (then `z_filled` is `z` itself, untouched: the complete-data path costs one
    scan of `z` and changes no value).  Anything but a non-empty tensor: `(z, None)`.
    With `branch=False` (values batched by `vmap`, where asking whether anything is
    missing is data-dependent control flow) the mask is always returned, all False when
    nothing is missing: the same values through `torch.where`, at the cost of the ops."""
    if not isinstance(z, torch.Tensor) or z.numel() == 0:
        return z, None
    if z.is_floating_point():
        bad = torch.isnan(z)
        if discrete:
            bad = bad | (z == -1)
    elif discrete and z.dtype != torch.bool and not z.is_complex():
        bad = z == -1
    else:
        return z, None
    if branch and not bool(bad.any()):
        return z, None
    return torch.where(bad, torch.zeros((), dtype=z.dtype, device=z.device), z), bad


def observed_rows(missing, event_rank: int):
    """The rows (batch positions) without a missing entry: `~missing` reduced over the
    last `event_rank` axes (None stays None)."""
    if missing is None:
        return None
    event_rank = min(int(event_rank), missing.dim())
    if event_rank:
        missing = missing.flatten(-event_rank).any(-1)
    return ~missing


def split_missing(z, discrete: bool, event_rank: int = None):
    """`(z_filled, observed)` for an observed value that may have missing entries.

    A *row* (one batch position: one position of one sequence) with any missing entry
    (`missing_entries`) among its event axes (the last `event_rank` axes; default 0 for
    an index value, 1 for a real one) is not observed.  `observed` is a boolean tensor of
    the batch shape, True where the row is observed, or None when nothing is missing.
    Missing entries are replaced by a valid placeholder so that log-densities computed on
    `z_filled` are finite everywhere: a caller masks them with `mask_missing(lp,
    observed)` (`torch.where`), which gives exact zeros and zero, never NaN, gradients
    for the unobserved rows (as NumPyro's `obs_mask`)."""
    if event_rank is None:
        event_rank = 0 if discrete else 1
    filled, missing = missing_entries(z, discrete)
    return filled, observed_rows(missing, event_rank)


def mask_missing(lp, observed):
    """`lp` with exact zeros where `observed` is False (None: `lp` unchanged)."""
    if observed is None:
        return lp
    return torch.where(observed, lp, torch.zeros((), dtype=lp.dtype, device=lp.device))


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


def observed_family_value(dist, value, step: SiteStep, frame, discrete: bool) -> tuple:
    """`(kept, scored, observed)` for the value of an inline-family observe step (design
    E5): `scored` is coerced with its missing entries filled, `kept` is what later steps
    and records see (the missing entries marked again: NaN, or -1 for integers) and
    `observed` the rows without a missing entry (None when nothing is missing).  One
    place for the sequence every executor runs (`monadic`, `marginal`)."""
    value, missing = missing_entries(torch.as_tensor(value, device=frame.device), discrete)
    value = coerce_family_value(dist, value, step, frame)
    if missing is None:
        return value, value, None
    missing = missing.reshape(value.shape)
    mark = torch.full((), math.nan if value.is_floating_point() else -1, dtype=value.dtype,
                      device=value.device)
    return torch.where(missing, mark, value), value, observed_rows(missing,
                                                                    len(dist.event_shape))


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
        want = (*(getattr(step, "plate_shape", None) or (step.plate,)), *event)  # E9.9
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
