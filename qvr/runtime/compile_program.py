"""Compile a `program` block into a `MonadicProgram` (runtime spec section 5).

`compile_program(mc, td, values, deductions, consts)` resolves every step of the block:
step targets (a morphism, an inline family, or a template call, which is inlined with
fresh names `<x>__<local>`), family arguments, let-expressions (`qvr.runtime.letexpr`),
`via` options and index annotations; it computes the level of every local (global <
plate < row, spec 5.3) to classify sites, and registers one `_step_<name>` submodule per
`sample`/`observe`.  `check_program_families` reports QVR950 for inline families this
runtime lacks, for templates that are compiled only later.  Running programs is
`qvr.runtime.monadic`'s job.
"""
from __future__ import annotations

from typing import Optional

from qvr.runtime.families import inline_supported
from qvr.runtime.letexpr import compile_let, free_names
from qvr.runtime.monadic import MonadicProgram
from qvr.runtime.morphisms.base import Morphism
from qvr.runtime.objects import from_type
from qvr.runtime.steps import (GLOBAL, PLATE, ROW, AliasStep, Arg, FamilyStep, LetStep,
                               MarginalizeStep, SiteStep)
from qvr.runtime.templates import Skip, Template
from qvr.sema.families import FAMILIES
from qvr.runtime.data_step import DataStep  # E9.1
from qvr.sema.axes import Axis, family_step_axes, observed_axes, spell_axes, type_expr_axes
from qvr.sema.axes_walk import ExprAxes
from qvr.sema.symbols import ProgramSym
from qvr.sema.typed import option_values
from qvr.syntax import ast as A

_SITE_STEPS = (A.SampleStep, A.ObserveStep)


def _family_targets(steps, values):
    for s in steps:
        if isinstance(s, (A.SampleStep, A.ObserveStep, A.MarginalizeStep)):
            if s.target.name.text not in values and s.target.name.text in FAMILIES:
                yield s.target
        if isinstance(s, A.MarginalizeStep):
            yield from _family_targets(s.body, values)


def check_program_families(mc, td) -> bool:
    """Report QVR950 for every inline family of the block this runtime does not implement."""
    ok = True
    for t in _family_targets(td.decl.body, mc.values):
        if not inline_supported(t.name.text) and not _space_family(mc, td.decl.body, t):
            mc.unsupported(td, t.name.span, f"family `{t.name.text}`")
            ok = False
    return ok


def _space_family(mc, steps, target) -> bool:
    """E9.2: `LKJCholesky(eta) [over=L]` with `object L : CorrCholesky K` (or `CholeskyFactor
    K`) is implemented (`qvr.runtime.constraints.SupportStep`); nowhere else (QVR439)."""
    from qvr.sema.families import space_of
    for s in steps:
        if isinstance(s, A.MarginalizeStep):
            if _space_family(mc, s.body, target):
                return True
        if getattr(s, "target", None) is target and s.options is not None:
            for e in s.options.entries:
                if e.key.text == "over" and isinstance(e.value, A.OVName):
                    sym = mc.tm.symbol("type", e.value.text)
                    sp = space_of(sym.type) if sym is not None else None
                    return sp is not None and sp.kind in ("CholeskyFactor", "CorrCholesky")
    return False


def compile_program(mc, td, *, values: dict, deductions: dict,
                    consts: Optional[dict] = None) -> Optional[MonadicProgram]:
    if not check_program_families(mc, td):
        return None
    return _Builder(mc, values, deductions).program(td, consts or {})


class _Builder:
    def __init__(self, mc, values, deductions):
        self.mc = mc
        self.values = values
        self.deductions = deductions
        self.modules: dict = {}
        self.levels: dict = {}
        self.host: set = set()
        self.pre: list = []  # E9.2: steps a site needs first (host-data arguments)
        self.grouped: list = []  # E9.10: coordinates of the grouped marginalize blocks open
        self.arg_axes: dict = {}  # E9.10: id(family argument expression) -> its typed axes
        self.axes: dict = {}  # E9.1: env key -> typed axes (qvr.sema.axes), None: unknown
        self.observed_done: set = set()  # E9.1: env keys of observe steps compiled so far

    # ------------------------------------------------------------ the program
    def program(self, td, consts: dict) -> MonadicProgram:
        d: A.ProgramDecl = td.decl
        sym: ProgramSym = td.bindings[("value", d.name.text)]
        domain, codomain = from_type(sym.type.dom), from_type(sym.type.cod)
        self.codomain = codomain
        scope: dict = {}
        input_parts = []
        if sym.param_style == "data":
            for (pname, _), part in zip(sym.params, domain.components):
                scope[pname] = pname
                self.levels[pname] = ROW
                input_parts.append((pname, part))
                self.axes[pname] = _param_axes(part)  # E9.1
        ctx = _Ctx(td, scope, dict(consts), "", self.values, self.deductions)
        steps, ret = self.block(d.body, ctx)
        prog = MonadicProgram(domain, codomain, steps, (ret,), label=d.name.text,
                              modules=self.modules, host_names=self.host,
                              deductions=dict(self.deductions), input_parts=input_parts,
                              effect_set=set(sym.effects))
        prog._qvr_named = True
        prog.levels = dict(self.levels)
        return prog

    def block(self, body, ctx, marg: Optional[str] = None):
        steps, ret = [], None
        for s in body:
            if isinstance(s, A.SampleStep) and s.target.name.text in ctx.values and \
                    _is_template(ctx.values[s.target.name.text]):
                steps.extend(self.template_call(s, ctx))
            elif isinstance(s, _SITE_STEPS):
                step = self.site(s, ctx, marg)
                self.shape_plate(step, s)  # E9.9
                steps.extend(self.pre)  # E9.2: host-data family arguments, read first
                self.pre.clear()
                steps.append(step)
            elif isinstance(s, A.LetStep):
                steps.append(self.let(s, ctx, score=False))
            elif isinstance(s, A.ScoreStep):
                steps.append(self.let(s, ctx, score=True))
            elif isinstance(s, A.MarginalizeStep):
                step = self.marginalize(s, ctx)
                steps.extend(self.pre)
                self.pre.clear()
                steps.append(step)
            elif isinstance(s, A.DataStep):
                steps.append(self.data(s, ctx))  # E9.1
            elif isinstance(s, A.ReturnStep):
                ret = ctx.scope[s.value.text]
        return steps, ret

    # ------------------------------------------------------------ helpers
    def key(self, ctx, name: str) -> str:
        k = ctx.prefix + name
        ctx.scope[name] = k
        return k

    def resolver(self, ctx):
        def resolve(name):
            if name in ctx.scope:
                return ("local", ctx.scope[name])
            if name in ctx.consts:
                return ("const", ctx.consts[name])
            if name in ctx.deductions:
                return ("deduction", name)
            if self.observed_later(ctx, name) is not None:  # E9.1: read before its observe
                return ("observed", ctx.prefix + name)
            self.host.add(name)
            return ("host", name)
        return resolve

    def level_of(self, ctx, name) -> int:
        if name in ctx.scope:
            return self.levels.get(ctx.scope[name], ROW)
        if name in ctx.consts or name in ctx.deductions:
            return GLOBAL
        return ROW  # host data

    def arg(self, a, ctx):
        """A family argument and its level."""
        if isinstance(a, A.Number):
            return Arg("lit", float(a.value)), GLOBAL
        if isinstance(a, A.Name):
            if a.text in ctx.scope:
                return Arg("local", ctx.scope[a.text]), self.level_of(ctx, a.text)
            if a.text not in ctx.consts:  # E9.2: host data
                return self.host_arg(a.text, ctx), ROW
            return Arg("lit", float(ctx.consts[a.text])), GLOBAL
        if isinstance(a, A.DAIndex) and self.grouped and a.index.text == self.grouped[-1]:
            # a[c] inside a grouped marginalize block whose coordinate is c
            return Arg("gather", ctx.scope[a.base.text], ctx.scope[a.index.text]), ROW
        return self.expr_arg(A.arg_expr(a), ctx)  # E9.10: any other let-expression

    def expr_arg(self, e, ctx):
        """E9.10: a family argument that is a let-expression: a hidden `let` step run just
        before the site, compiled exactly as `let tmp = e` (closure, level, typed axes)."""
        fn, vaxes, level, reads = self.compiled_expr(e, ctx)
        key = f"{ctx.prefix}_arg{len(self.levels)}"
        self.levels[key] = level
        self.axes[key] = vaxes
        self.arg_axes[id(e)] = vaxes
        self.pre.append(LetStep(key, fn, text=f"argument `{self.text(ctx, e)}`", reads=reads))
        return Arg("local", key), level

    def text(self, ctx, node) -> str:
        return " ".join(ctx.td.source(node).split())

    # ------------------------------------------------------------ steps
    def site(self, s, ctx, marg):
        observe = isinstance(s, A.ObserveStep)
        name = s.bind.text
        tname = s.target.name.text
        opts = option_values(s.options)
        plate = plate_name = None
        if s.index is not None:
            obj = self.mc.resolve_type(s.index)
            plate, plate_name = obj.size, obj.name
        via = None
        if "via" in opts and marg is not None:
            v = opts["via"]
            if v in ctx.scope:
                via = ("local", ctx.scope[v])
            else:
                via = ("host", v)
                self.host.add(v)
        target = ctx.values.get(tname)
        text = self.text(ctx, s)
        if isinstance(target, Morphism):
            args = None
            arg_discrete = ()
            if s.target.args is not None:
                args = tuple(ctx.scope[a.text] for a in s.target.args)
                comps = target.domain.components
                if len(args) == len(comps) and len(args) > 1:
                    arg_discrete = tuple(c.is_discrete for c in comps)
                else:
                    arg_discrete = (target.domain.is_discrete,)
            key = self.key(ctx, name)
            self.modules[key] = target
            self.levels[key] = ROW
            return SiteStep(key, observe, None, args, arg_discrete, plate, plate_name,
                            site_kind="local", via=via, text=text)
        fam = FAMILIES.get(tname)
        if fam is None:
            # a declaration the checker accepted but this runtime could not compile (its
            # QVR950 is already among the diagnostics): the program cannot be built either
            raise Skip
        computed = self.computed_value(s, ctx) if observe and s.value is not None else None
        pairs = [self.arg(a, ctx) for a in s.target.args or ()]
        support = self.support_options(s, ctx, fam, pairs)  # E9.2
        args = tuple(p[0] for p in pairs)
        level = max((p[1] for p in pairs), default=GLOBAL)
        event_size = None
        if support is not None and support["space"] is not None:
            event_size = support["space"].size
        elif "over" in opts and fam.event_rank >= 1:
            over = opts["over"]
            names = over if isinstance(over, list) else [over]
            size = 1
            for n in names:
                size *= self.mc.object_of(n).size
            event_size = size
        default_event = None
        if fam.event_rank >= 1:
            cod = self.codomain
            default_event = cod.size if cod.is_discrete else cod.width
        if observe:
            kind = "local"
        elif plate is not None:
            kind = "plate"
        elif level == GLOBAL:
            kind = "global"
        else:
            kind = "local"
        vaxes = family_step_axes(s, fam, self.object_type, self.axes_scope(ctx).name_axes,  # E9.1
                                 expr_axes=lambda e: self.arg_axes.get(id(e)))  # E9.10
        key = self.key(ctx, name)
        self.axes[key] = vaxes
        if observe:
            self.observed_done.add(key)
        if support is not None:
            self.modules[key] = self.support_step(key, tname, event_size, default_event,
                                                  f"{tname} ({name})", support, s, ctx)
        else:
            self.modules[key] = FamilyStep(tname, event_size, default_event,
                                           label=f"{tname} ({name})")
        self.levels[key] = {"global": GLOBAL, "plate": PLATE}.get(kind, ROW)
        return SiteStep(key, observe, tname, args, (), plate, plate_name, event_size,
                        site_kind=kind, all_global=level == GLOBAL, via=via, text=text,
                        computed=computed)

    def computed_value(self, s, ctx) -> str:
        """E9.7 `observe v = e <- F`: a hidden `let` of e, run before the site; its key."""
        fn, vaxes, _, reads = self.compiled_expr(s.value, ctx)
        key = f"{ctx.prefix}_observed_{s.bind.text}"
        self.levels[key] = ROW
        self.axes[key] = vaxes
        self.pre.append(LetStep(key, fn, text=f"observed value of `{s.bind.text}`",
                                reads=reads))
        return key

    def shape_plate(self, step, s) -> None:
        """E9.9: a family site over a product plate `z : Group * Coef` has the value of its
        typed axes (|Group|, |Coef|), as the checker's axes say (a matrix to `@`)."""
        if step.family is None or step.plate is None:
            return
        from qvr.sema.axes import type_expr_axes
        axes = type_expr_axes(s.index, self.object_type)
        if axes is not None and len(axes) > 1 and all(a.size for a in axes):
            step.plate_shape = tuple(a.size for a in axes)

    # ------------------------------------------------------------ E9.2 supports
    def host_arg(self, name: str, ctx) -> Arg:
        """A family argument or bound read from host data: a hidden `let` step before
        the site reads it (so the executor sees an ordinary local)."""
        key = f"{ctx.prefix}_host{len(self.levels)}_{name}"
        self.levels[key] = ROW
        from qvr.runtime.numeric import _num
        if self.observed_later(ctx, name) is not None:  # E9.1: an observed value read early
            from qvr.runtime.data_step import read_observed
            self.pre.append(LetStep(key, lambda frame, b, _k=ctx.prefix + name, _n=name:
                                    _num(frame, read_observed(frame, _k, _n)),
                                    text=f"observed `{name}`", reads=()))
            return Arg("local", key)
        self.host.add(name)
        self.pre.append(LetStep(key, lambda frame, b, _n=name: _num(frame, frame.host(_n)),
                                text=f"host data `{name}`", reads=()))
        return Arg("local", key)

    def support_options(self, s, ctx, fam, pairs):
        """E9.2: the truncation bounds (appended to `pairs`, lower then upper), the
        constrained space of `over=`, and whether the support's bounds are run-time values;
        None for a step that uses none of it (an ordinary `FamilyStep`)."""
        from qvr.sema.families import space_of
        entries = {e.key.text: e.value for e in (s.options.entries if s.options else ())}
        bounds = {}
        for key in ("lower", "upper"):
            v = entries.get(key)
            if isinstance(v, A.Number):
                bounds[key] = (Arg("lit", float(v.value)), GLOBAL)
            elif isinstance(v, A.OVName):
                bounds[key] = self.arg(A.Name(v.text, v.span), ctx)
        space = None
        over = entries.get("over")
        if isinstance(over, A.OVName):
            sym = self.mc.tm.symbol("type", over.text)
            space = space_of(sym.type) if sym is not None else None
        by_args = {"Uniform": (0, 1), "TruncatedNormal": (2, 3), "Pareto": (0,)}.get(fam.name, ())
        dependent = any(i < len(pairs) and pairs[i][0].kind != "lit" for i in by_args)
        dependent = dependent or any(b[0].kind != "lit" for b in bounds.values())
        if not (bounds or space is not None or fam.improper or dependent):
            return None
        params = [p[0] for p in pairs]
        pairs.extend(bounds[k] for k in ("lower", "upper") if k in bounds)
        return {"lower": "lower" in bounds, "upper": "upper" in bounds, "space": space,
                "dependent": dependent, "bounds": bounds, "params": params}

    def support_step(self, key, family, event_size, default_event, label, support, s, ctx):
        from qvr.runtime.constraints import (CDF_FAMILIES, SupportStep,
                                             constant_log_normaliser)
        fam = FAMILIES[family]
        log_norm = None
        bounds = support["bounds"]
        if bounds and not fam.improper:
            literal = support["params"]
            if all(a.kind == "lit" for a in literal) and \
                    all(b[0].kind == "lit" for b in bounds.values()):
                lo = bounds["lower"][0].value if "lower" in bounds else None
                hi = bounds["upper"][0].value if "upper" in bounds else None
                log_norm = constant_log_normaliser(family, [a.value for a in literal], lo, hi)
            elif family not in CDF_FAMILIES:
                self.mc.unsupported(ctx.td, s.target.name.span,
                                    f"truncation of `{family}` with variable arguments")
                raise Skip
        space = support["space"]
        return SupportStep(family, event_size, default_event, label=label, site=key,
                           has_lower=support["lower"], has_upper=support["upper"],
                           log_norm=log_norm, space=space.kind if space is not None else None,
                           space_size=space.size if space is not None else 0,
                           dependent=support["dependent"])

    def compiled_expr(self, e, ctx) -> tuple:
        """`e` compiled as the right-hand side of a `let` (and of the hidden lets of E9.7
        and E9.10): `(fn, typed axes, level, env keys of the locals it reads)`."""
        self.check_densities(e, ctx)  # E9.1: QVR950 for `log_density` of a family we lack
        walker = ExprAxes(self.axes_scope(ctx))  # E9.1: typed axes of every sub-expression
        vaxes = walker.expr(e)
        fn = compile_let(e, self.resolver(ctx), self.mc.resolve_size, walker)
        names = free_names(e, is_object=lambda n: n not in ctx.scope and n not in ctx.consts
                           and self.object_type(n) is not None)
        level = max((self.level_of(ctx, n) for n in names), default=GLOBAL)
        reads = tuple(ctx.scope[n] for n in sorted(_names_in(e)) if n in ctx.scope)
        return fn, vaxes, level, reads

    def let(self, s, ctx, score: bool):
        fn, vaxes, level, reads = self.compiled_expr(s.rhs, ctx)
        if getattr(s, "index", None) is not None and not score:  # E9.11 `let v : T = e`
            from qvr.sema.axes import annotate_axes, type_expr_axes
            vaxes = annotate_axes(vaxes, type_expr_axes(s.index, self.object_type) or ())
        key = self.key(ctx, s.bind.text)
        self.levels[key] = level
        self.axes[key] = vaxes
        per = per_name = None
        if score and getattr(s, "index", None) is not None:  # E9.7 `score v : T = e`
            per = tuple(self.object_type_sizes(s.index))
            per_name = " ".join(ctx.td.source(s.index).split())
        return LetStep(key, fn, score=score, text=self.text(ctx, s),
                       recorded=bool(getattr(s, "recorded", False)), reads=reads,
                       per=per, per_name=per_name)

    def object_type_sizes(self, index) -> list:
        """E9.7: the sizes of the axes of a type written `A * B` (one per factor)."""
        from qvr.sema.axes import type_expr_axes
        axes = type_expr_axes(index, self.object_type)
        return [a.size for a in axes]

    def marginalize(self, s: A.MarginalizeStep, ctx):
        opts = option_values(s.options)
        pairs = [self.arg(a, ctx) for a in s.target.args or ()]
        group = classes = plate = plate_name = None
        if "over" in opts:
            group = self.mc.object_of(opts["over"]).size
            if s.index is not None:
                classes = self.mc.resolve_type(s.index).size
        elif s.index is not None:  # a plain block's plate: one latent per row
            obj = self.mc.resolve_type(s.index)
            plate, plate_name = obj.size, obj.name
        inner = ctx.child()
        key = self.key(inner, s.bind.text)
        self.levels[key] = ROW
        own_pre, self.pre = self.pre, []  # this step's own argument lets stay before it
        if group is not None:
            self.grouped.append(s.bind.text)
        try:
            body, _ = self.block(s.body, inner, marg=key)
        finally:
            if group is not None:
                self.grouped.pop()
            self.pre = own_pre + self.pre
        for b in body:
            if group is not None and not (isinstance(b, SiteStep) and b.observe) and \
                    not (isinstance(b, LetStep) and not b.score):
                self.mc.unsupported(ctx.td, s.kw, "a `sample` or `score` step inside a "
                                    "grouped marginalize block")
                raise Skip
        return MarginalizeStep(key, s.target.name.text, tuple(p[0] for p in pairs), body,
                               classes, group, str(opts.get("reduction", "logsumexp")),
                               text=self.text(ctx, s).split(" ", 1)[0], plate=plate,
                               plate_name=plate_name)

    def template_call(self, s: A.SampleStep, ctx):
        t = ctx.values[s.target.name.text]
        name = s.bind.text
        inner = _Ctx(t.td, {}, {}, f"{ctx.prefix}{name}__", t.values, t.deductions)
        for p, a in zip(t.params, s.target.args or ()):
            if isinstance(a, A.Number):
                inner.consts[p] = float(a.value)
            elif a.text in ctx.scope:
                inner.scope[p] = ctx.scope[a.text]
            else:
                inner.consts[p] = ctx.consts[a.text]
        steps, ret = self.block(t.td.decl.body, inner)
        key = self.key(ctx, name)
        self.levels[key] = self.levels.get(ret, ROW)
        return steps + [AliasStep(key, ret, text=self.text(ctx, s))]


    # ------------------------------------------------------------ E9.1
    def object_type(self, name: str):
        """The front end's resolved type of object `name`, None if it is not an object."""
        from qvr.sema.symbols import ObjectSym
        sym = self.mc.tm.symbol("type", name)
        return sym.type if isinstance(sym, ObjectSym) else None

    def axes_scope(self, ctx) -> "_AxesScope":
        return _AxesScope(self, ctx)

    def observed_later(self, ctx, name: str):
        """The `observe` step of this block's program that binds `name` later (so a
        let-expression before it reads the observed value), or None."""
        if ctx.prefix + name in self.observed_done:
            return None
        return _observe_steps(ctx.td.decl.body).get(name)

    def data(self, s: A.DataStep, ctx) -> DataStep:
        """`data X : T` (E9.1): reads host data `X`, checks its shape, binds it."""
        axes = type_expr_axes(s.type, self.object_type) or ()
        name = s.bind.text
        self.host.add(name)
        dom = ctx.td.decl.dom
        first = s.type
        while isinstance(first, A.TParen):
            first = first.inner
        if isinstance(first, A.TProd):
            first = first.factors[0]
        row_axis = isinstance(first, A.TName) and isinstance(dom, A.TName) \
            and first.name.text == dom.name.text
        key = self.key(ctx, name)
        self.levels[key] = ROW if row_axis else GLOBAL
        self.axes[key] = axes
        return DataStep(key, name, tuple(a.size for a in axes), spell_axes(axes), row_axis,
                        text=self.text(ctx, s))

    def check_densities(self, rhs, ctx) -> None:
        """QVR950 for a `log_density(F(…), x)` whose family this runtime does not build."""
        bad = [c for c in _family_calls(rhs) if not inline_supported(c.callee.text)]
        for c in bad:
            self.mc.unsupported(ctx.td, c.callee.span, f"family `{c.callee.text}` in `log_density`")
        if bad:
            raise Skip


class _AxesScope:
    """What names mean to the axes walk (qvr.sema.axes_walk.ExprAxes) at compile time."""

    def __init__(self, builder: "_Builder", ctx):
        self.b, self.ctx = builder, ctx

    def name_axes(self, text: str):
        if text in self.ctx.scope:
            return self.b.axes.get(self.ctx.scope[text])
        if text in self.ctx.consts:
            return ()
        step = self.b.observed_later(self.ctx, text)
        return observed_axes(step, self.b.object_type) if step is not None else None

    def is_local(self, text: str) -> bool:
        return text in self.ctx.scope or text in self.ctx.consts

    def object_type(self, text: str):
        return self.b.object_type(text)


def _observe_steps(body) -> dict:
    """name -> the first `observe` step binding it, marginalize blocks included."""
    out: dict = {}
    for s in body:
        if isinstance(s, A.ObserveStep) and isinstance(s.bind, A.Name):
            out.setdefault(s.bind.text, s)
        elif isinstance(s, A.MarginalizeStep):
            for k, v in _observe_steps(s.body).items():
                out.setdefault(k, v)
    return out


def _family_calls(e) -> list:
    """The family calls `F(…)` that are first arguments of `log_density` in `e`."""
    out = []

    def walk(x):
        if isinstance(x, A.ECall):
            if x.callee.text == "log_density" and x.args:
                f = x.args[0]
                while isinstance(f, A.EParen):
                    f = f.inner
                if isinstance(f, A.ECall) and f.callee.text in FAMILIES:
                    out.append(f)
            for a in x.args:
                walk(a)
        elif isinstance(x, A.EBinOp):
            walk(x.left)
            walk(x.right)
        elif isinstance(x, (A.ENeg,)):
            walk(x.operand)
        elif isinstance(x, A.EParen):
            walk(x.inner)
        elif isinstance(x, A.EList):
            for a in x.items:
                walk(a)
        elif isinstance(x, A.EIndex):
            for a in x.indices:
                walk(a)
        elif isinstance(x, A.ELambda):
            walk(x.body)
        elif isinstance(x, A.EFactor):
            if isinstance(x.body, A.FactorCases):
                for c in x.body.cases:
                    walk(c.expr)
            else:
                walk(x.body)
    walk(e)
    return out


def _param_axes(part):
    """The axes of a data parameter (E9.1): none for a finite index, one for a vector."""
    if part.is_discrete and part.width == 1:
        return ()
    if part.is_continuous:
        return (Axis(None, part.width),)
    return None


class _Ctx:
    """Name resolution state of one block: scope (source name -> env key), constants."""

    def __init__(self, td, scope, consts, prefix, values, deductions):
        self.td = td
        self.scope = scope
        self.consts = consts
        self.prefix = prefix
        self.values = values
        self.deductions = deductions

    def child(self) -> "_Ctx":
        return _Ctx(self.td, dict(self.scope), self.consts, self.prefix, self.values,
                    self.deductions)


def _names_in(node) -> set:
    """Every name spelled anywhere in a let-expression's tree (binders and lambda parameters
    included: an over-approximation of what it reads, whatever its shape; E9.6 uses it to
    know which steps a recorded value needs)."""
    import dataclasses
    out: set = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name):
            out.add(n.text)
        elif isinstance(n, (list, tuple)):
            stack.extend(n)
        elif dataclasses.is_dataclass(n) and not isinstance(n, type):
            stack.extend(getattr(n, f.name) for f in dataclasses.fields(n))
    return out


def _is_template(v) -> bool:
    return isinstance(v, Template)
