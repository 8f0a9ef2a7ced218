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
from qvr.sema.families import FAMILIES
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
        if not inline_supported(t.name.text):
            mc.unsupported(td, t.name.span, f"family `{t.name.text}`")
            ok = False
    return ok


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
                steps.append(self.site(s, ctx, marg))
            elif isinstance(s, A.LetStep):
                steps.append(self.let(s, ctx, score=False))
            elif isinstance(s, A.ScoreStep):
                steps.append(self.let(s, ctx, score=True))
            elif isinstance(s, A.MarginalizeStep):
                steps.append(self.marginalize(s, ctx))
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
            return Arg("lit", float(ctx.consts[a.text])), GLOBAL
        # a[c] inside a grouped marginalize block
        return Arg("gather", ctx.scope[a.base.text], ctx.scope[a.index.text]), ROW

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
            from qvr.runtime.compile import Skip
            raise Skip
        pairs = [self.arg(a, ctx) for a in s.target.args or ()]
        args = tuple(p[0] for p in pairs)
        level = max((p[1] for p in pairs), default=GLOBAL)
        event_size = None
        if "over" in opts and fam.event_rank >= 1:
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
        key = self.key(ctx, name)
        self.modules[key] = FamilyStep(tname, event_size, default_event, label=f"{tname} ({name})")
        self.levels[key] = {"global": GLOBAL, "plate": PLATE}.get(kind, ROW)
        return SiteStep(key, observe, tname, args, (), plate, plate_name, event_size,
                        site_kind=kind, all_global=level == GLOBAL, via=via, text=text)

    def let(self, s, ctx, score: bool):
        fn = compile_let(s.rhs, self.resolver(ctx), self.mc.resolve_size)
        level = max((self.level_of(ctx, n) for n in free_names(s.rhs)), default=GLOBAL)
        key = self.key(ctx, s.bind.text)
        self.levels[key] = level
        return LetStep(key, fn, score=score, text=self.text(ctx, s))

    def marginalize(self, s: A.MarginalizeStep, ctx):
        opts = option_values(s.options)
        pairs = [self.arg(a, ctx) for a in s.target.args or ()]
        group = classes = None
        if "over" in opts:
            group = self.mc.object_of(opts["over"]).size
            if s.index is not None:
                classes = self.mc.resolve_type(s.index).size
        inner = ctx.child()
        key = self.key(inner, s.bind.text)
        self.levels[key] = ROW
        body, _ = self.block(s.body, inner, marg=key)
        for b in body:
            if group is not None and not (isinstance(b, SiteStep) and b.observe) and \
                    not (isinstance(b, LetStep) and not b.score):
                self.mc.unsupported(ctx.td, s.kw, "a `sample` or `score` step inside a "
                                    "grouped marginalize block")
                from qvr.runtime.compile import Skip
                raise Skip
        return MarginalizeStep(key, s.target.name.text, tuple(p[0] for p in pairs), body,
                               classes, group, str(opts.get("reduction", "logsumexp")),
                               text=self.text(ctx, s).split(" ", 1)[0])

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


def _is_template(v) -> bool:
    from qvr.runtime.compile import Template
    return isinstance(v, Template)
