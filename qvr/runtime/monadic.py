"""`MonadicProgram`: a compiled `program` block and its executor (runtime spec section 5).

A program is a continuous morphism whose value is computed by running its steps
(`qvr.runtime.steps`) in order over an environment.  One executor, `execute`, serves
every entry point:

* `rsample(x, sample_shape, observations)` — forward execution; supplied values clamped,
  missing ones drawn; no log-densities computed;
* `log_joint(x, values)` — every `sample`/`observe` value must be supplied; returns the
  `(B,)` row-attributed joint log-density (spec 5.5); `log_joint_total(x, values)` its
  sum, computed without attribution (what the MCMC target uses);
* `execute(x, values, score=True)` — both at once, with a per-step `SiteRecord` (value,
  contribution, distribution or morphism, support): the basis of `qvr.inference.trace`,
  guides' shape passes and MCMC registries (spec 6.1, 6.2).

`site_infos()` lists the sample/observe sites statically (name, kind, family, plate size);
`latent_sites(observed_names)` the latent ones (spec 6.1).  Marginalised coordinates are
never sites; their blocks (`qvr.runtime.marginal`) add one deterministic entry `_marg_<c>`.
The frame and records are in `qvr.runtime.frame`.  This module does not compile QVR source
(see `qvr.runtime.compile`).
"""
from __future__ import annotations

import math

import torch

from qvr.runtime.errors import MissingValueError, QvrRuntimeError, UnknownSiteError
from qvr.runtime.families import draw
from qvr.runtime.frame import (Execution, Frame, SiteInfo, SiteRecord, _Deductions,
                               _host_value, attribute)  # noqa: F401  (re-exported)
from qvr.runtime.marginal import run_marginalize
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.objects import Unit
from qvr.runtime.steps import AliasStep, FamilyStep, LetStep, MarginalizeStep, SiteStep
from qvr.runtime.data_step import DataStep, run_data_step  # E9.1
from qvr.runtime.computed import check_per_element, is_replicating  # E9.7
from qvr.runtime.combinators import observed_log_prob
from qvr.runtime.families import is_discrete_dist
from qvr.runtime.values import (as_index, coerce_family_value, coerce_morph_value,
                                ensure_batch, eval_value, mask_missing,
                                observed_family_value)


class MonadicProgram(ContinuousMorphism):
    """A program `domain -> codomain`: ordered steps and a return variable.

    Built by the compiler from a `program` block, or from Python (spec 5.11) with
    `steps` as tuples: `((name,), morphism, args[, is_observed])` for a sample/observe
    (args `None` = the program input, else a tuple of variable names),
    `((name,), None, value)` for a let (a number, a variable name, or `fn(env)`), and
    `((name,), None, fn, True)` for a score step.  A Python-built step whose morphism has
    the domain `Unit` and `args is None` is a *global* site: its morphism is called with
    a 0-d int64 zero as input (one point of `Unit`, no batch axis) and should return an
    event-shaped value.
    """

    def __init__(self, domain, codomain, steps, return_vars, params=None, return_labels=None,
                 effect_set=None, *, label: str = None, modules: dict = None,
                 host_names=(), deductions: dict = None, input_parts=None):
        super().__init__(domain, codomain, label or "program")
        python_built = bool(steps) and isinstance(steps[0], tuple)
        if python_built:
            steps, modules = _from_python(steps)
        self.python_built = python_built
        self.steps = list(steps)
        for name, m in (modules or {}).items():
            self.add_module(f"_step_{name}", m)
        self.return_vars = tuple([return_vars] if isinstance(return_vars, str) else return_vars)
        self.return_labels = return_labels
        self.params = tuple(params or ())
        self.input_parts = list(input_parts or [])
        self.host_names = frozenset(host_names)
        self._deductions = _Deductions(deductions or {})
        self.effect_set = set(effect_set) if effect_set is not None else self._infer_effects()
        self.bound_names = self._bound_names()

    # ------------------------------------------------------------ static facts
    def _walk(self, steps=None, inside=False):
        for s in (self.steps if steps is None else steps):
            yield s, inside
            if isinstance(s, MarginalizeStep):
                yield from self._walk(s.body, True)

    def _infer_effects(self) -> set:
        out = set()
        for s, _ in self._walk():
            if isinstance(s, SiteStep):
                out.add("Score" if s.observe else "Sample")
            elif isinstance(s, LetStep) and s.score:
                out.add("Score")
            elif isinstance(s, MarginalizeStep):
                out.add("Marginal")
        return out

    def _bound_names(self) -> frozenset:
        names = set(self.params) | {n for n, _ in self.input_parts}
        for s, _ in self._walk():
            if isinstance(s, DataStep):  # E9.1: host data (`Frame.host` reads it)
                continue
            names.add(s.name)
            if isinstance(s, MarginalizeStep):
                names.add(s.site_name)
        return frozenset(names)

    @property
    def observed_names(self) -> set:
        return {s.name for s, _ in self._walk() if isinstance(s, SiteStep) and s.observe}

    @property
    def site_names(self) -> list:
        return [s.name for s, _ in self._walk() if isinstance(s, SiteStep)]

    def site_infos(self) -> list:
        out = []
        for s, inside in self._walk():
            if isinstance(s, SiteStep):
                m = getattr(self, s.module_name, None)
                out.append(SiteInfo(s.name, "observe" if s.observe else "sample", s.site_kind,
                                    s.family, None if isinstance(m, FamilyStep) else m,
                                    s.plate, inside))
        return out

    def latent_sites(self, observed_names=()) -> list:
        """The latent sites for a set of observed names (spec 6.1): every sample/observe
        site, in program order, that is not observed and not inside a marginalize block."""
        observed = set(observed_names)
        return [s for s in self.site_infos() if not s.in_marginalize and s.name not in observed]

    def float_dtype(self):
        for p in self.parameters():
            if p.is_floating_point():
                return p.dtype
        for b in self.buffers():
            if b.is_floating_point():
                return b.dtype
        return torch.get_default_dtype()

    @property
    def output_discrete(self) -> bool:
        return self.codomain.is_discrete

    # ------------------------------------------------------------ entry points
    def rsample(self, x, sample_shape=torch.Size(), observations=None):
        shape = torch.Size(sample_shape)
        if len(shape) == 0:
            return self.execute(x, observations, score=False).output
        outs = [self.execute(x, observations, score=False).output
                for _ in range(math.prod(shape))]
        return torch.stack(outs).reshape(*shape, *outs[0].shape)

    def sample(self, x, sample_shape=torch.Size(), observations=None):
        with torch.no_grad():
            return self.rsample(x, sample_shape, observations)

    def log_joint(self, x, values) -> torch.Tensor:
        return self.execute(x, values, score=True, require_all=True).log_joint

    def log_joint_total(self, x, values) -> torch.Tensor:
        """`log_joint(x, values).sum()` as a scalar, computed without row attribution and
        without site records (the form the MCMC target uses; fewer operations)."""
        return self.execute(x, values, score=True, require_all=True, record=False,
                            reduce=True).log_joint

    def log_prob(self, x, y):
        raise NotImplementedError(
            f"program `{self.label}`: the marginal density over unobserved sites is "
            "intractable in general; use log_joint(x, values)")

    def execute(self, x, values=None, *, score: bool = True, require_all: bool = False,
                record: bool = True, reduce: bool = False) -> Execution:
        """Run the steps once (see the module docstring)."""
        values = dict(values or {})
        try:
            x = ensure_batch(x)
            self._check_keys(values)
            frame = Frame(self, x, values, score=score, require_all=require_all, record=record,
                          reduce=reduce)
            self._bind_inputs(frame)
            for step in self.steps:
                self._run(step, frame)
        except QvrRuntimeError as e:
            raise e.add_context(program=self.label)
        out = self._output(frame)
        return Execution(out, frame.total, frame.records, frame.B)

    # ------------------------------------------------------------ helpers
    def _check_keys(self, values):
        if self.python_built:
            return
        allowed = self.bound_names | self.host_names
        for k in values:
            if k not in allowed:
                known = self.site_names
                raise UnknownSiteError(
                    f"`{k}` is not a site of the program, nor host data it reads",
                    expected="one of the sites " + ", ".join(f"`{n}`" for n in known) +
                    (" or host data " + ", ".join(f"`{n}`" for n in sorted(self.host_names))
                     if self.host_names else ""),
                    actual=f"`{k}`", name=k, known_sites=known,
                    host_names=sorted(self.host_names))

    def _bind_inputs(self, frame):
        if self.python_built:
            for k, v in frame.values.items():
                if k not in self.bound_names:
                    frame.env[k] = _host_value(v, frame.device)
        if not self.input_parts:
            return
        x = frame.x
        total = sum(obj.width for _, obj in self.input_parts)
        from qvr.runtime.errors import InputShapeError
        if x.dim() == 1 and total == 1:
            x = x.unsqueeze(-1)
        if x.shape[-1] != total:
            raise InputShapeError("the program input holds its named inputs side by side",
                                  step="(input)", expected=f"shape (..., {total}) for "
                                  + " * ".join(f"{n}: {o.name}" for n, o in self.input_parts),
                                  actual=f"shape {tuple(frame.x.shape)}")
        start = 0
        for name, obj in self.input_parts:
            w = obj.width
            chunk = x[..., start:start + w]
            if obj.is_discrete and w == 1:
                chunk = as_index(chunk.squeeze(-1), obj.size, who=f"input `{name}`")
            elif not chunk.is_floating_point():
                chunk = chunk.to(frame.dtype)
            frame.env[name] = chunk
            start += w

    def _output(self, frame):
        if len(self.return_vars) == 1:
            return frame.env[self.return_vars[0]]
        labels = self.return_labels or self.return_vars
        return {lab: frame.env[v] for lab, v in zip(labels, self.return_vars)}

    def _record(self, frame, rec: SiteRecord):
        if frame.record:
            frame.records[rec.name] = rec

    def _run(self, step, frame):
        try:
            if isinstance(step, SiteStep):
                self._run_site(step, frame)
            elif isinstance(step, LetStep):
                self._run_let(step, frame)
            elif isinstance(step, AliasStep):
                frame.env[step.name] = frame.env[step.source]
                self._record(frame, SiteRecord(step.name, "alias", frame.env[step.name],
                                               is_deterministic=True))
            elif isinstance(step, MarginalizeStep):
                run_marginalize(self, step, frame)
            elif isinstance(step, DataStep):  # E9.1
                run_data_step(step, frame)
        except QvrRuntimeError as e:
            raise e.add_context(step=step.name)

    # -- let / score
    def _run_let(self, step: LetStep, frame):
        if step.python:
            fn = step.fn
            if callable(fn):
                v = fn(frame.env)
            elif isinstance(fn, str):
                v = frame.env[fn]
            else:
                v = frame.literal(float(fn))
        else:
            v = step.fn(frame, {})
        if step.per is not None:  # E9.7 `score v : T = e`: one term per element of T
            v = check_per_element(step, v)
        frame.env[step.name] = v
        lp = None
        if step.score and frame.score:
            lp = frame.add(v)
        self._record(frame, SiteRecord(step.name, "score" if step.score else "let", v,
                                       log_prob=lp, contribution=v if step.score else None,
                                       is_observed=step.name in frame.values,
                                       is_deterministic=True))

    # -- sample / observe
    def _arg_values(self, args, frame):
        out = []
        for a in args:
            if a.kind == "lit":
                out.append(frame.literal(a.value))
            elif a.kind == "local":
                v = frame.env[a.value]
                out.append(v if isinstance(v, torch.Tensor) else frame.literal(float(v)))
            else:
                base, idx = frame.env[a.value], frame.env[a.index]
                out.append(base[idx])
        return out

    def _morph_input(self, step: SiteStep, frame):
        if step.python_global:
            return torch.zeros((), dtype=torch.long, device=frame.device)
        if step.args is None:
            return frame.x
        vals = [frame.env[k] for k in step.args]
        if len(vals) == 1:
            v = vals[0]
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 1:
                v = v.unsqueeze(-1)
            return v
        cols = []
        for i, v in enumerate(vals):
            v = torch.as_tensor(v, device=frame.device)
            disc = step.arg_discrete[i] if i < len(step.arg_discrete) else False
            if disc or v.dim() <= 1:
                v = v.unsqueeze(-1)
            cols.append(v.to(frame.dtype) if v.dtype != frame.dtype else v)
        lead = torch.broadcast_shapes(*[c.shape[:-1] for c in cols])
        return torch.cat([c.expand(*lead, c.shape[-1]) for c in cols], dim=-1)

    def _supplied(self, step, frame):
        if step.name in frame.values:
            return True, frame.values[step.name]
        if frame.require_all:
            raise MissingValueError(
                f"no value supplied for `{step.name}`", site=step.name,
                expected="a value for every sample and observe site: " +
                ", ".join(f"`{n}`" for n in self.site_names), actual="missing", name=step.name)
        return False, None

    def _run_site(self, step: SiteStep, frame):
        """One sample/observe step.

        Missing entries (design E5): the value of an `observe` step may have missing
        entries (NaN in a real value, -1 in an index value; `qvr.runtime.values
        .split_missing`).  The rows that have one contribute exactly 0: a morphism target
        masks them itself (`observed_log_prob`: a Monte-Carlo chain before its average, so
        a chain that mixes positions telescopes over the observed positions only); an
        inline family's value is filled with a placeholder before it is coerced and scored
        and its term masked.  The environment keeps the value as given, missing entries
        included (NaN, or -1 in an index value), so that a later step reading it does not
        silently see the placeholder (`qvr.inference.data.fit_data.check_data` rejects such
        programs before a fit)."""
        module = getattr(self, step.module_name)
        if step.computed is not None and is_replicating():  # E9.7: a replicate is drawn
            given, value = False, None
        elif step.computed is not None and step.name not in frame.values:
            given, value = True, frame.env[step.computed]  # E9.7 `observe v = e <- F`
        else:
            given, value = self._supplied(step, frame)
        if step.family is None:
            inp = self._morph_input(step, frame)
            if given:
                value = coerce_morph_value(module, value, step, frame)
            else:
                value = module.rsample(inp)
            frame.env[step.name] = value
            lp = c = None
            if frame.score:
                if given and step.observe:
                    c = observed_log_prob(module, inp, value)
                else:
                    c = module.log_prob(inp, value)
                lp = frame.add(c)
            self._record(frame, SiteRecord(
                step.name, "observe" if step.observe else "sample", value, lp, c,
                step.site_kind, module, None, getattr(module, "support", None), given, False))
            return
        args = self._arg_values(step.args, frame)
        dist = module.distribution(args)
        if step.site_kind == "plate":
            _check_plate_rows(step, dist)
        observed = None
        if given:
            if step.observe:  # missing entries (design E5): their rows contribute 0
                value, scored, observed = observed_family_value(dist, value, step, frame,
                                                                is_discrete_dist(dist))
            else:
                value = coerce_family_value(dist, value, step, frame)
        else:
            value = self._draw(step, dist, frame)
        frame.env[step.name] = value
        lp = c = None
        if frame.score:
            if observed is not None:
                c = mask_missing(dist.log_prob(eval_value(dist, scored, frame)), observed)
            else:
                c = dist.log_prob(eval_value(dist, value, frame))
            if step.site_kind == "plate":
                c = c.sum()
            lp = frame.add(c)
        self._record(frame, SiteRecord(
            step.name, "observe" if step.observe else "sample", value, lp, c, step.site_kind,
            module, dist, dist.support, given, False))

    def _draw(self, step, dist, frame):
        if step.site_kind == "plate" and step.plate_shape is not None:  # E9.9: `: A * B`
            batch = tuple(dist.batch_shape)
            return draw(dist, torch.Size(step.plate_shape[:len(step.plate_shape) - len(batch)]))
        if step.site_kind == "plate":
            if dist.batch_shape == torch.Size():
                return draw(dist, torch.Size([step.plate]))
            return draw(dist)
        if step.observe and (step.all_global or dist.batch_shape == torch.Size()):
            # E9.9: also arguments without a row axis that are not all global (a factor
            # `diag(tau) @ l` over a plate `tau : Coef`): one draw per row
            return draw(dist, torch.Size([frame.B]))
        return draw(dist)

    # ------------------------------------------------------------ recorded quantities (E9.6)
    @property
    def recorded_names(self) -> list:
        """The environment keys of the `record v = e` steps, in program order (a `record`
        of an inlined template is `<call>__v`).  Their shapes depend on the data: see
        `recorded_values` (and `qvr.inference.criticism.recorded.Recorder.shapes`)."""
        return [s.name for s in self.steps if isinstance(s, LetStep) and s.recorded]

    def recorded_plan(self, names=None) -> list:
        """The top-level steps, in order, that computing the recorded values `names`
        (default all) needs: their let steps and everything those read, transitively; a
        site among them is never drawn, its value must be supplied.  Marginalize blocks are
        never needed (nothing bound inside one is visible after it)."""
        need = set(self.recorded_names if names is None else names)
        plan = []
        for s in reversed(self.steps):
            if isinstance(s, MarginalizeStep) or s.name not in need:
                continue
            plan.append(s)
            if isinstance(s, LetStep):
                if s.reads is None:  # a Python-built let: what it reads is not known
                    need.update(t.name for t in self.steps)
                need.update(s.reads or ())
            elif isinstance(s, AliasStep):
                need.add(s.source)
            elif isinstance(s, SiteStep):
                for a in s.args or ():
                    if isinstance(a, str):
                        need.add(a)
                    elif a.kind != "lit":
                        need.update(k for k in (a.value, a.index) if k is not None)
        return plan[::-1]

    def recorded_sites(self, names=None) -> list:
        """The sample/observe sites whose values the recorded values `names` read."""
        return [s.name for s in self.recorded_plan(names) if isinstance(s, SiteStep)]

    def recorded_values(self, x, values, names=None) -> dict:
        """`{name: value}` of the recorded values `names` (default all) for one point:
        `values` holds every site in `recorded_sites(names)` (and the host data); only the
        steps of `recorded_plan` run, without densities and without drawing (a missing
        site is a `MissingValueError`).  Written for one point and vmap-safe."""
        names = list(self.recorded_names if names is None else names)
        try:
            x = ensure_batch(x)
            frame = Frame(self, x, dict(values or {}), score=False, require_all=True,
                          record=False)
            self._bind_inputs(frame)
            for step in self.recorded_plan(names):
                self._run(step, frame)
        except QvrRuntimeError as e:
            raise e.add_context(program=self.label)
        return {n: frame.env[n] for n in names}


def _check_plate_rows(step, dist) -> None:
    """A plate site's arguments broadcast against its leading |I| axis (spec 5.3): a
    batch of another leading size (host data with one row per data row, where the plate
    is longer or shorter than the rows) is a `PlateRowsError`, not a reshape failure
    later on."""
    batch = tuple(dist.batch_shape)
    shape = step.plate_shape
    if shape is not None:  # E9.9: a product plate: the arguments' axes end its axes
        if batch and batch != shape[len(shape) - len(batch):]:
            from qvr.runtime.errors import PlateRowsError
            raise PlateRowsError(
                f"the plate `{step.plate_name}` has shape {shape}, but the arguments of "
                f"`{step.name}` have shape {batch}: they must end with the plate's axes",
                site=step.name, plate=step.plate, plate_name=step.plate_name, rows=batch[0])
        return
    if batch and batch[0] != step.plate:
        from qvr.runtime.errors import PlateRowsError
        raise PlateRowsError(
            f"the plate `{step.plate_name}` has {step.plate} elements, but the arguments of "
            f"`{step.name}` have {batch[0]} rows: host data read by a plate site needs one "
            f"row per element of `{step.plate_name}` (or one value for all)",
            site=step.name, plate=step.plate, plate_name=step.plate_name, rows=batch[0])


def _from_python(steps):
    """Convert the tuple steps of spec 5.11 to step records and modules."""
    out, modules = [], {}
    for t in steps:
        names = t[0]
        name = names[0] if isinstance(names, (tuple, list)) else names
        if t[1] is None:
            if len(t) >= 4 and t[3]:
                out.append(LetStep(name, t[2], score=True, python=True))
            else:
                out.append(LetStep(name, t[2], python=True))
            continue
        morphism, args = t[1], t[2]
        observed = bool(t[3]) if len(t) >= 4 else False
        is_global = args is None and getattr(morphism, "domain", None) == Unit
        out.append(SiteStep(name, observed, None, tuple(args) if args is not None else None,
                            site_kind="global" if is_global else "local",
                            python_global=is_global))
        modules[name] = morphism
    return out, modules
