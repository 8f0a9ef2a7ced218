"""Compile a checked module (`qvr.sema.typed.TypedModule`) into runtime values.

`compile_module(tm, data)` walks the declarations in source order (runtime spec 2.1:
compilation is eager and every parameter is created during `load`):

* `composition` selects the algebra of the relational morphisms declared after it;
* `object` declarations become runtime objects (`qvr.runtime.objects`);
* `morphism` declarations become one runtime morphism per replica, by role (spec 3;
  `role=attention` -> `Attention`, `positions=N` on an embed, design E2/E3);
* the builtin morphism expressions `identity(A)`, `layer_norm(A)`, `rms_norm(A)` and
  `residual(f)` (design E4) compile to fresh modules at every textual occurrence;
* `let` binds the *same* object as its expression (spec 4);
* `program` blocks compile to `MonadicProgram`s (`qvr.runtime.compile_program`);
  parametric programs become `Template`s, compiled when instantiated;
* `deduction` blocks become `DeductionSystem`s;
* `export` statements are collected in order.

Failures of this runtime (an optional family or composition rule it lacks, QVR950; a
`from_data` key missing or of the wrong size) are collected as diagnostics; the caller
raises one `CompileError` listing all of them.  Front-end errors never reach this module.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Optional

import torch

from qvr.diagnostics import error
from qvr.runtime.algebras import get_algebra
from qvr.runtime.combinators import Fan, Scan, compose, repeat, stack, tensor
from qvr.runtime.compile_program import check_program_families, compile_program
from qvr.runtime.deduction import DeductionSystem
from qvr.runtime.families import kernel_supported
from qvr.runtime.morphisms.finite import (Dagger, FiniteMorphism, IdentityMorphism,
                                          LatentMorphism, ObservedMorphism, RepeatRuntime,
                                          StochasticMatrix)
from qvr.runtime.morphisms.attention import Attention
from qvr.runtime.morphisms.kernels import Discretize, Embed, FamilyKernel
from qvr.runtime.morphisms.norms import LayerNorm, Residual, RMSNorm
from qvr.runtime.morphisms.pretrained import PretrainedLM  # E10
from qvr.runtime.objects import FinSet, Euclidean, from_type, product
from qvr.runtime.templates import Skip, Template
from qvr.sema.symbols import GroupSym, MorphismSym, ProgramSym
from qvr.sema.typed import TypedModule, option_values
from qvr.syntax import ast as A
from qvr.text import Span


@dataclass
class Group:
    """A replica group `f` (members `f_0 ... f_{k-1}`); only usable inside `fan(...)`."""

    name: str
    members: list


@dataclass
class CompiledModule:
    values: dict
    exports: list  # (key, value)
    deductions: dict
    objects: dict
    diagnostics: list = field(default_factory=list)


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip())


class ModuleCompiler:
    def __init__(self, tm: TypedModule, data: Optional[dict] = None):
        self.tm = tm
        self.data = dict(data or {})
        self.values: dict = {}
        self.objects: dict = {}
        self.deductions: dict = {}
        self.exports: list = []
        self.diagnostics: list = []
        self.rule = "product_fuzzy"

    # ------------------------------------------------------------ diagnostics
    def report(self, td, span: Span, code: str, message: str, data: tuple = ()) -> None:
        self.diagnostics.append(error(code, span.shift(td.start), message, data=data))

    def unsupported(self, td, span: Span, what: str) -> None:
        self.report(td, span, "QVR950", f"{what} is not supported by this runtime")

    # ------------------------------------------------------------ driver
    def run(self) -> CompiledModule:
        for td in self.tm.decls:
            d = td.decl
            try:
                if isinstance(d, A.CompositionDecl):
                    self.composition(td, d)
                elif isinstance(d, A.ObjectDecl):
                    self.objects[d.name.text] = self.object_of(d.name.text)
                elif isinstance(d, A.MorphismDecl):
                    self.morphism(td, d)
                elif isinstance(d, A.LetDecl):
                    obj = self.expr(td, d.expr)
                    _name(obj, d.name.text)
                    self.values[d.name.text] = obj
                elif isinstance(d, A.ProgramDecl):
                    self.program(td, d)
                elif isinstance(d, A.DeductionDecl):
                    self.deductions[d.name.text] = DeductionSystem.from_decl(
                        d, option_values(d.options))
                elif isinstance(d, A.ExportDecl):
                    self.export(td, d)
            except Skip:
                pass
        return CompiledModule(self.values, self.exports, self.deductions, self.objects,
                              self.diagnostics)

    # ------------------------------------------------------------ declarations
    def composition(self, td, d: A.CompositionDecl) -> None:
        name = d.name.text.lower()
        if get_algebra(name) is None:
            self.unsupported(td, d.name.span, f"composition rule `{name}`")
            raise Skip
        self.rule = name

    def object_of(self, name: str):
        sym = self.tm.symbol("type", name)
        return from_type(sym.type, name)

    def resolve_type(self, t):
        """The runtime object of a type expression written inside a declaration."""
        if isinstance(t, A.TName):
            return self.object_of(t.name.text)
        if isinstance(t, A.TAtom):
            return FinSet(f"FinSet {t.size}", t.size) if t.kind == "FinSet" else \
                Euclidean(f"Real {t.size}", t.size)
        if isinstance(t, A.TProd):
            return product([self.resolve_type(f) for f in t.factors])
        if isinstance(t, A.TParen):
            return self.resolve_type(t.inner)
        raise TypeError(f"cannot resolve {t!r}")

    def resolve_size(self, t) -> int:
        return self.resolve_type(t).size

    def algebra(self, td, rule: Optional[str], span: Span):
        alg = get_algebra(rule or "product_fuzzy")
        if alg is None:
            raise Skip  # reported at the composition declaration
        return alg

    def morphism(self, td, d: A.MorphismDecl) -> None:
        syms = [s for (ns, _), s in td.bindings.items()
                if ns == "value" and isinstance(s, MorphismSym)]
        syms.sort(key=lambda s: s.replica[0] if s.replica else 0)
        group = next((s for (ns, _), s in td.bindings.items() if isinstance(s, GroupSym)), None)
        if not syms:
            raise Skip
        opts = option_values(d.options)
        base = None
        built = []
        for sym in syms:
            dom = from_type(sym.type.dom)
            cod = from_type(sym.type.cod)
            role = sym.role
            if role == "latent":
                m = LatentMorphism(dom, cod, self.algebra(td, sym.rule, d.name.span),
                                   scale=float(opts.get("scale", 0.5)), label=sym.name)
            elif role == "kernel" and sym.family:
                if not kernel_supported(sym.family):
                    self.unsupported(td, d.init.expr.span if d.init else d.name.span,
                                     f"family `{sym.family}`")
                    raise Skip
                m = FamilyKernel(dom, cod, sym.family, scale=opts.get("scale"),
                                 hidden_dim=int(opts.get("hidden_dim", 64)), label=sym.name)
            elif role == "kernel":
                m = StochasticMatrix(dom, cod, label=sym.name)
            elif role == "embed":
                m = Embed(dom, cod, label=sym.name, positions=getattr(sym, "positions", None))
            elif role == "attention":
                scale = getattr(sym, "scale", None)
                m = Attention(dom, cod, heads=sym.heads or 1, head_dim=sym.head_dim,
                              causal="strict" if sym.causal_strict else bool(sym.causal),
                              family=sym.family,
                              scale=0.1 if scale is None else float(scale), label=sym.name)
            elif role == "discretize":
                m = Discretize(dom, cod, int(opts["bins"]), label=sym.name)
            elif role == "pretrained":  # E10: the model is loaded on first use
                spelled, folder, _type, _layers, _vocab, dtype, _cached = sym.pretrained
                m = PretrainedLM(dom, cod, folder, dtype, spelled, label=sym.name)
            elif role == "observed":
                if base is None:
                    base = self.observed_value(td, d, sym, dom, cod)
                alg, value = base
                m = ObservedMorphism(dom, cod, alg, value, label=sym.name)
            elif role == "let":
                if base is None:
                    base = self.expr(td, d.init.expr)
                m = copy.deepcopy(base) if sym.replica else base
                _name(m, sym.name)
            else:  # pragma: no cover - the front end rejects it
                raise Skip
            if role != "let":
                m._qvr_named = True
            self.values[sym.name] = m
            built.append(m)
        if group is not None:
            self.values[group.name] = Group(group.name, built)

    def observed_value(self, td, d, sym, dom, cod):
        e = d.init.expr
        if isinstance(e, A.MCall) and e.callee.text == "from_data":
            key = e.args[0].value if isinstance(e.args[0], A.StringLit) else str(e.args[0])
            if key not in self.data:
                self.report(td, e.span, "QVR951",
                            f"`from_data(\"{key}\")` of `{sym.name}`: no tensor under the key "
                            f"\"{key}\" in `data` (given keys: "
                            f"{', '.join(repr(k) for k in sorted(self.data)) or 'none'})",
                            data=(("relation", sym.name), ("key", key)))
                raise Skip
            t = torch.as_tensor(self.data[key]).to(torch.get_default_dtype())
            need = dom.size * cod.size
            if t.numel() != need:
                self.report(td, e.span, "QVR951",
                            f"`from_data(\"{key}\")` of `{sym.name}` : {dom.name} -> {cod.name}: "
                            f"expected {need} = {dom.size}·{cod.size} elements, got {t.numel()} "
                            f"(shape {tuple(t.shape)})")
                raise Skip
            return self.algebra(td, sym.rule, e.span), t
        init = self.expr(td, e)
        with torch.no_grad():
            value = init.tensor.detach().clone()
        return init.algebra, value

    def program(self, td, d: A.ProgramDecl) -> None:
        sym = td.bindings.get(("value", d.name.text))
        if not isinstance(sym, ProgramSym):
            raise Skip
        if sym.parametric:
            if not check_program_families(self, td):
                raise Skip
            self.values[d.name.text] = Template(d.name.text, td, tuple(p for p, _ in sym.params),
                                                dict(self.values), dict(self.deductions), self)
            return
        prog = compile_program(self, td, values=self.values, deductions=self.deductions)
        if prog is None:
            raise Skip
        self.values[d.name.text] = prog

    def instantiate(self, template: Template, args: dict):
        """Compile a parametric program with numbers for its params (`Template.instantiate`)."""
        return compile_program(self, template.td, values=template.values,
                               deductions=template.deductions, consts=dict(args))

    def export(self, td, d: A.ExportDecl) -> None:
        e = d.expr
        if isinstance(e, A.MName):
            key = e.name.text
            if key not in self.values:
                raise Skip
            value = self.values[key]
        else:
            key = collapse(td.source(e))
            value = self.expr(td, e)
        self.exports.append((key, value))

    # ------------------------------------------------------------ expressions
    def expr(self, td, e):
        if isinstance(e, A.MName):
            name = e.name.text
            if name not in self.values:
                raise Skip  # a declaration that failed to compile
            return self.values[name]
        if isinstance(e, A.MParen):
            return self.expr(td, e.inner)
        if isinstance(e, A.MCall):
            callee = e.callee.text
            if callee == "identity":
                obj = self.object_of(e.args[0].name.text)
                return IdentityMorphism(obj, self.algebra(td, self.rule, e.span))
            # design E4: each textual occurrence is its own module (its own parameters)
            if callee in ("layer_norm", "rms_norm"):
                obj = self.object_of(e.args[0].name.text)
                cls = LayerNorm if callee == "layer_norm" else RMSNorm
                return cls(obj, label=collapse(td.source(e)))
            if callee == "residual":
                return Residual(self.expr(td, e.args[0]), label=collapse(td.source(e)))
            raise Skip  # from_data is handled by observed_value; other calls are QVR900
        if isinstance(e, A.MFan):
            parts = []
            for a in e.args:
                v = self.values.get(a.name.text) if isinstance(a, A.MName) else None
                if isinstance(v, Group):
                    parts.extend(v.members)
                else:
                    parts.append(self.expr(td, a))
            return Fan(parts, label=collapse(td.source(e)))
        if isinstance(e, A.MStack):
            return stack(self.expr(td, e.arg), e.count, label=collapse(td.source(e)))
        if isinstance(e, A.MRepeat):
            f = self.expr(td, e.arg)
            if e.count is None:
                return RepeatRuntime(f, label=collapse(td.source(e)))
            return f if e.count == 1 else repeat(f, e.count, label=collapse(td.source(e)))
        if isinstance(e, A.MScan):
            return Scan(self.expr(td, e.arg), label=collapse(td.source(e)))
        if isinstance(e, A.MCompose):
            return compose(self.expr(td, e.left), self.expr(td, e.right), check=False,
                           label=collapse(td.source(e)))
        if isinstance(e, A.MTensor):
            return tensor(self.expr(td, e.left), self.expr(td, e.right),
                          label=collapse(td.source(e)))
        if isinstance(e, A.MPostfix) and e.name.text == "dagger":
            base = self.expr(td, e.base)
            if not isinstance(base, FiniteMorphism):  # pragma: no cover - QVR305
                raise Skip
            return Dagger(base, label=collapse(td.source(e)))
        raise Skip


def _name(obj, name: str) -> None:
    """Give a morphism the first name it is bound to (for messages)."""
    if hasattr(obj, "label") and not getattr(obj, "_qvr_named", False):
        obj.label = name
        obj._qvr_named = True


def compile_module(tm: TypedModule, data: Optional[dict] = None) -> CompiledModule:
    return ModuleCompiler(tm, data).run()
