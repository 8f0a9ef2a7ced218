"""`Program`: the loaded module as a `torch.nn.Module` (runtime spec 2.2).

A `Program` holds every compiled value of a module and exposes:

* `.morphism` — the first export (registered as the submodule `morphism`, so
  `parameters()`/`named_parameters()` are those reachable from it), or None when nothing
  is exported or the first export is a parametric program;
* `.exports` — `{name or expression text: value}` for every export, in order;
* `.morphisms` / `prog[name]` — every named value of the module (morphisms, replica
  members, lets, programs; a replica group is a list of its members);
* `.templates` and `.<template>(...)` — instantiate a parametric program into a new
  `Program`;
* `.deductions` — `{name: DeductionSystem}` (their parameters are not the program's);
* `__call__(n_steps=None)` for a finite `.morphism`; `rsample`, `sample`, `log_prob`,
  `log_joint` delegating to a continuous one.

`.to(device)` / `.double()` move every compiled value, not only `.morphism`.  Loading is
`qvr.runtime.load`'s job.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from qvr.runtime.compile import Group
from qvr.runtime.templates import Template
from qvr.runtime.morphisms.finite import FiniteMorphism, set_n_steps


class TemplateInvoker:
    """`prog.<name>(*args | **kwargs)` for a parametric program: a new `Program`."""

    def __init__(self, template: Template, path: str):
        self.template = template
        self.path = path
        self.__name__ = template.name

    @property
    def params(self) -> tuple:
        return self.template.params

    def __call__(self, *args, **kwargs) -> "Program":
        params = self.template.params
        if args and kwargs:
            raise TypeError(f"{self.template.name}() takes positional or keyword arguments, "
                            "not both")
        if args:
            if len(args) != len(params):
                raise TypeError(f"{self.template.name}() takes {len(params)} arguments "
                                f"({', '.join(params)}), got {len(args)}")
            bound = dict(zip(params, args))
        else:
            missing = [p for p in params if p not in kwargs]
            extra = [k for k in kwargs if k not in params]
            if missing or extra:
                raise TypeError(f"{self.template.name}(): "
                                + (f"missing {', '.join(missing)}" if missing else "")
                                + ("; " if missing and extra else "")
                                + (f"unexpected {', '.join(extra)}" if extra else ""))
            bound = dict(kwargs)
        morphism = self.template.instantiate({k: float(v) for k, v in bound.items()})
        return Program([(self.template.name, morphism)], {self.template.name: morphism},
                       {}, self.path)

    def __repr__(self) -> str:
        return f"<template {self.template.name}({', '.join(self.template.params)})>"


class Program(nn.Module):
    def __init__(self, exports: list, values: dict, deductions: dict, path: str = "<string>",
                 source: Optional[str] = None):
        super().__init__()
        self.path = path
        self.source = source  # the exact text compiled (run records keep its sha256)
        wrapped = []
        templates = {}
        for key, value in exports:
            if isinstance(value, Template):
                inv = templates.setdefault(value.name, TemplateInvoker(value, path))
                wrapped.append((key, inv))
            else:
                wrapped.append((key, value))
        self.exports = dict(wrapped)
        self.templates = templates
        self.deductions = dict(deductions)
        self.morphisms = {}
        for name, v in values.items():
            if isinstance(v, Template):
                self.morphisms[name] = templates.get(name) or TemplateInvoker(v, path)
            elif isinstance(v, Group):
                self.morphisms[name] = list(v.members)
            else:
                self.morphisms[name] = v
        first = wrapped[0][1] if wrapped else None
        if isinstance(first, nn.Module):
            self.morphism = first
        else:
            self.morphism = None

    # ------------------------------------------------------------ access
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            templates = self.__dict__.get("templates") or {}
            if name in templates:
                return templates[name]
            raise

    def __getitem__(self, name):
        return self.morphisms[name]

    def _primary(self):
        m = self.__dict__.get("_modules", {}).get("morphism")
        if m is None:
            raise AttributeError("this program has no primary morphism (it exports nothing, "
                                 "or its first export is a parametric program)")
        return m

    @property
    def domain(self):
        return self._primary().domain

    @property
    def codomain(self):
        return self._primary().codomain

    # ------------------------------------------------------------ running
    def forward(self, n_steps=None):
        m = self._primary()
        if not isinstance(m, FiniteMorphism):
            raise TypeError(f"`{m.label}` is a continuous morphism; use rsample/log_prob")
        if n_steps is not None:
            set_n_steps(m, int(n_steps))
        return m.tensor

    def _continuous(self, what):
        m = self._primary()
        if isinstance(m, FiniteMorphism):
            raise TypeError(f"`{m.label}` is a finite morphism; call the program (or use "
                            f".tensor) instead of {what}")
        return m

    def rsample(self, x, sample_shape=torch.Size(), **kw):
        return self._continuous("rsample").rsample(x, sample_shape, **kw)

    def sample(self, x, sample_shape=torch.Size(), **kw):
        return self._continuous("sample").sample(x, sample_shape, **kw)

    def log_prob(self, x, y):
        return self._continuous("log_prob").log_prob(x, y)

    def log_joint(self, x, values):
        return self._continuous("log_joint").log_joint(x, values)

    # ------------------------------------------------------------ devices and dtypes
    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        seen = {id(m) for m in self.modules()}
        extra = list(self.morphisms.values()) + list(self.exports.values()) + \
            list(self.deductions.values())
        for v in extra:
            mods = v if isinstance(v, list) else [v]
            for m in mods:
                if isinstance(m, nn.Module) and id(m) not in seen:
                    m._apply(fn)
                    seen.update(id(x) for x in m.modules())
        return self

    def extra_repr(self) -> str:
        return f"path={self.path!r}, exports={list(self.exports)}"
