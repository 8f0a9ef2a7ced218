"""The random numbers of an incremental SMC run (`qvr.smc.kv_cache`): `Rng` draws them
from one generator, `Noise` holds a position's standard draws (or every position's, when
the state is recomputed), `Layout` places each stochastic layer's slice in the blocks and
`Draws` turns its slice into standard draws of its family (`from_uniform` for the
location-scale families drawn from uniforms)."""
from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["Rng", "from_uniform", "Noise", "Layout", "Draws"]


class Rng:
    """The random numbers of one model call, from `generator` (the global RNG when None)
    on `device`.  A CPU generator driving a program on another device seeds one generator
    of that device per call from it (one draw of the CPU stream), so a run is still a
    function of the generator."""

    def __init__(self, generator: Optional[torch.Generator], device: torch.device, dtype):
        self.device, self.dtype = device, dtype
        if generator is not None and generator.device.type != device.type:
            seed = int(torch.randint(0, 2 ** 62, (), generator=generator))
            generator = torch.Generator(device=device).manual_seed(seed)
        self.gen = generator

    def normal(self, shape) -> torch.Tensor:
        if 0 in shape:
            return torch.empty(shape, device=self.device, dtype=self.dtype)
        return torch.randn(shape, generator=self.gen, device=self.device, dtype=self.dtype)

    def uniform(self, shape) -> torch.Tensor:
        if 0 in shape:  # nothing to draw (no layer of such a family): no call
            return torch.empty(shape, device=self.device, dtype=self.dtype)
        return torch.rand(shape, generator=self.gen, device=self.device, dtype=self.dtype)

    def seeds(self, n: int) -> list[int]:
        if not n:
            return []
        return torch.randint(0, 2 ** 62, (n,), generator=self.gen, device=self.device).tolist()


def from_uniform(family: str, u: torch.Tensor) -> torch.Tensor:
    """Standard draws (loc 0, scale 1) of a location-scale family from uniforms on [0, 1)."""
    finfo = torch.finfo(u.dtype)
    if family == "Laplace":  # inverse CDF, as torch's Laplace.rsample
        u = (2 * u - 1).clamp(-1 + finfo.eps, 1)
        return -torch.sign(u) * torch.log1p(-u.abs())
    if family == "Cauchy":
        return torch.tan(math.pi * (u - 0.5))
    if family == "Gumbel":
        return -torch.log((-torch.log(u.clamp(min=finfo.tiny))).clamp(min=finfo.tiny))
    raise ValueError(f"no standard draw for {family}")  # pragma: no cover


class Noise:
    """The standard draws of every stochastic layer at one position (blocks ``(rows,
    W)``) or at every position so far (``(rows, T, W)``): a block of standard Normal
    draws and one of uniforms (for the other families), laid out by `Layout`; `seeds`
    (one per `OpaqueLayer`, newest position only) and `values` (the opaque layers'
    stored draws, recomputation only)."""

    __slots__ = ("normal", "uniform", "seeds", "values")

    def __init__(self, normal, uniform, seeds=(), values=None):
        self.normal, self.uniform, self.seeds, self.values = normal, uniform, seeds, values


class Layout:
    """Where each stochastic layer's noise sits in the per-position blocks."""

    def __init__(self):
        self.normal = self.uniform = self.opaque = 0

    def take(self, family: str, width: int) -> tuple[str, int]:
        if family in ("Normal", "LogitNormal"):
            self.normal += width
            return "normal", self.normal - width
        self.uniform += width
        return "uniform", self.uniform - width


class Draws:
    """A layer's slice of the noise blocks, turned into standard draws of its family."""

    def __init__(self, layout: Layout, family: str, width: int):
        self.family, self.width = family, width
        self.block, self.offset = layout.take(family, width)

    def __call__(self, noise: Noise) -> torch.Tensor:
        block = getattr(noise, self.block)
        eps = block[..., self.offset:self.offset + self.width]
        return eps if self.block == "normal" else from_uniform(self.family, eps)
