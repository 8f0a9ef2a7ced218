"""Step targets of a program (qvr-language.md 7.4) and the E9.2 supports of family steps
(docs/extensions.md E9.2: improper priors, truncation, constrained spaces, host data as
family arguments).

`TargetChecks` is a mixin of `ProgramChecker` (check_program.py): `target` resolves a
step's target to a morphism, a parametric program or a family and checks its arguments;
`Block` is what a step knows of its enclosing block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema import axes as X  # E9.1
from qvr.sema.families import FAMILIES, OUTSIDE_CORE_FAMILIES, space_of
from qvr.sema import runnable  # E9.9
from qvr.sema.resolve import lookup_object
from qvr.sema.suggest import suggest
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ObjectSym,
                              ProgramSym, UnknownSym)
from qvr.sema.types import compatible, factors
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core


@dataclass
class Block:
    """The block a step sits in."""

    grouped_coord: Optional[str] = None  # coordinate name of a grouped marginalize block
    in_marginalize: bool = False  # E9.2: a marginalize block (no improper prior inside)


class TargetChecks:
    """Step targets and family supports: a mixin of `ProgramChecker`."""

    def target(self, t: A.Target, kind: str, indexed: bool, blk: Block):
        """Resolve and check a step target; returns (kind, payload)."""
        ctx = self.ctx
        name = t.name.text
        if name == self.owner:
            ctx.report(E.self_call(t.name.span, name))
            self._args_as_uses(t)
            return ("unknown", None)
        sym = ctx.value(name)
        if sym is not None:
            ctx.fact(t.name.span, "ref", ("value", name))
        if isinstance(sym, UnknownSym):
            self._args_as_uses(t)
            return ("unknown", None)
        if isinstance(sym, DeductionSym):
            ctx.report(E.deduction_not_morphism(t.name.span, name, "drawn from"))
            return ("unknown", None)
        if isinstance(sym, GroupSym):
            ctx.report(E.group_misuse(t.name.span, name, sym.members))
            return ("unknown", None)
        if isinstance(sym, ProgramSym) and sym.parametric:
            ctx.use("value", name)
            return self._template(t, sym, kind, indexed)
        if isinstance(sym, (MorphismSym, LetSym, ProgramSym)):
            ctx.use("value", name)
            if isinstance(sym, (MorphismSym, LetSym)) and sym.deterministic:
                # E4: an observed or sampled value needs a density (a sampled one is a latent
                # site that SVI guides and MCMC moves); the last link of this target has none.
                # Decision: no "deterministic binding" reading of `sample` — a diagnostic.
                whole = isinstance(sym, MorphismSym) and sym.role == "attention"
                ctx.report(E.observe_deterministic(t.name.span, name, whole, kind))
            return self._morphism_target(t, sym)
        fam = FAMILIES.get(name)
        if fam is not None:
            ctx.fact(t.name.span, "family", name)
            return self._family_target(t, fam, blk, kind)
        line = ctx.later("value", name)
        if line is not None:
            ctx.report(E.used_before_declaration(t.name.span, name, line))
        elif ctx.object(name) is not None:
            ctx.report(E.object_not_morphism(t.name.span, name))
        elif name in OUTSIDE_CORE_FAMILIES:
            ctx.report(outside_core(t.name.span, f"family `{name}`"))
        else:
            s = suggest(name, set(FAMILIES) | set(ctx.names("value")))
            if s and s not in FAMILIES:
                ctx.suggest("value", s, name, "referenced and undefined")
            ctx.report(E.unknown_target(t.name.span, name, s))
        self._args_as_uses(t)
        return ("unknown", None)

    def _args_as_uses(self, t: A.Target) -> None:
        for a in t.args or ():
            if isinstance(a, A.Name):
                self.use_local_quiet(a)
            elif A.is_expr_arg(a):  # E9.10: references inside (goto, unused lets)
                self.infer(a)

    def _morphism_target(self, t: A.Target, sym):
        from qvr.sema.check_morph import sym_info
        ctx = self.ctx
        info = sym_info(sym)
        if info.known:
            ctx.fact(t.name.span, "expr", (info.type, t.name.text))
        if t.args is None:
            if info.known and not compatible(info.type.dom, self.input):
                ctx.report(E.input_type(t.name.span, t.name.text, info.type.dom, self.input))
            return ("morphism", info) if info.known else ("unknown", None)
        dom_factors = factors(info.type.dom) if info.known else None
        ok_count = dom_factors is None or len(t.args) in (1, len(dom_factors))
        if not ok_count:
            n = len(dom_factors)
            ctx.report(E.arity(t.name.span, t.name.text, n, "", len(t.args)))
        for i, a in enumerate(t.args):
            if isinstance(a, A.Number):
                ctx.report(E.literal_to_morphism(a.span, t.name.text))
                continue
            if isinstance(a, A.DAIndex):
                ctx.report(E.bracket_arg(a.span))
                self.use_local_quiet(a.base)
                continue
            if A.is_expr_arg(a):  # E9.10: only family targets take expressions
                ctx.report(SE.expr_arg_not_variable(a.span, t.name.text, "morphism"))
                self.infer(a)
                continue
            local = self.use_step_arg(a)
            if local is None or local.type is None or not ok_count or dom_factors is None:
                continue
            expected = info.type.dom if len(t.args) == 1 else dom_factors[i]
            if not compatible(local.type, expected):
                ctx.report(E.arg_type(a.span, a.text, local.type, t.name.text, expected))
        return ("morphism", info) if info.known else ("unknown", None)

    def _template(self, t: A.Target, sym: ProgramSym, kind: str, indexed: bool):
        ctx = self.ctx
        if kind != "sample" or indexed:
            ctx.report(E.template_misuse(t.name.span, t.name.text))
            self._args_as_uses(t)
            return ("unknown", None)
        args = t.args or ()
        if len(args) != len(sym.params):
            ctx.report(E.arity(t.name.span, t.name.text, len(sym.params),
                               ", ".join(p for p, _ in sym.params), len(args)))
        for a in args:
            if isinstance(a, A.Name):
                self.use_step_arg(a)
            elif isinstance(a, A.DAIndex):
                ctx.report(E.bracket_arg(a.span))
            elif A.is_expr_arg(a):  # E9.10
                ctx.report(SE.expr_arg_not_variable(a.span, t.name.text, "program"))
                self.infer(a)
        return ("template", sym)

    def _family_target(self, t: A.Target, fam, blk: Block, kind: str = "sample"):
        ctx = self.ctx
        if fam.step == "no":
            ctx.report(E.family_position(t.name.span, fam.name))
            self._args_as_uses(t)
            return ("unknown", None)
        if fam.improper:  # E9.2: `Flat`, `HalfFlat`
            return self._improper_target(t, fam, blk, kind)
        if not runnable.step_supported(fam.name):  # E9.9: the checker refuses it, not `qvr run`
            ctx.report(SE.runtime_unsupported(t.name.span, f"family `{fam.name}`"))
        elif fam.name in runnable.SPACE_FAMILIES and kind != "sample":
            ctx.report(SE.space_family_needs_space(t.name.span, fam.name,
                                                  step=f"{'an' if kind == 'observe' else 'a'} "
                                                       f"`{kind}` step"))
        if t.args is None:
            ctx.report(E.family_needs_args(t.name.span, fam.signature, fam.name))
            return ("family", fam)
        for i, a in enumerate(t.args):
            if isinstance(a, A.Name):
                self.family_arg(a)  # E9.2: a local, or host data
            elif is_bracket_arg(a, blk.grouped_coord):
                self.use_step_arg(a.base)
                self.use_local_quiet(a.index)
            elif not isinstance(a, A.Number):  # E9.10: `let tmp = <a>`, then `F(tmp, …)`
                pname = fam.params[i][0] if i < len(fam.params) else None
                self.family_expr_arg(A.arg_expr(a), pname, fam.name)
        if len(t.args) != len(fam.params):
            ctx.report(E.arity(t.name.span, fam.name, len(fam.params),
                               ", ".join(p for p, _ in fam.params), len(t.args)))
            return ("family", fam)
        for (pname, pkind), a in zip(fam.params, t.args):
            if isinstance(a, A.Number) and pkind in ("vec", "mat"):
                ctx.report(E.vector_literal(a.span, pname, fam.name, pkind))
        if fam.name == "TruncatedNormal" and all(isinstance(a, A.Number) for a in t.args):
            ctx.report(E.truncated_needs_variable(t.name.span))
        from qvr.sema.check_decls import check_literal_support
        check_literal_support(ctx, fam, list(zip(fam.params, t.args)))
        return ("family", fam)

    def family_expr_arg(self, e, param: Optional[str], family: str) -> None:
        """E9.10: a family argument that is a let-expression, checked as the right-hand
        side of `let tmp = e` (kinds, names, axes); its axes are the argument's."""
        ctx = self.ctx
        vkind = self.infer(e)
        if vkind in ("chart", "deduction"):
            ctx.report(E.kind_mismatch(e.span, f"a family argument needs a numeric value, got a {vkind}"))
            self.arg_axes[id(e)] = None
            return
        axes = self.value_axes_of(e)
        self.arg_axes[id(e)] = axes
        ctx.fact(e.span, "argexpr", (ctx.snippet(e.span, limit=60), X.spell_axes(axes) if axes is not None
                                     else "numeric", param, family))

    # ------------------------------------------------------------ E9.2 supports
    # docs/extensions.md E9.2: improper priors, truncation, constrained spaces, host data
    # as family arguments.

    def family_arg(self, name: A.Name) -> None:
        """A family argument or a truncation bound that is a name: a visible local; a
        name bound elsewhere in the program (later, or inside a closed marginalize block)
        keeps its error (QVR106, QVR112); any other name is host data, with the warnings
        of names in let-expressions (QVR701, QVR702)."""
        if self.use_local_quiet(name) is not None:
            return
        later = name.text in self.planned and self.planned[name.text] > name.span.start
        if later:  # E9.1: an observed value or a `data` name read early is not an error
            early = getattr(self, "observe_sites", {}).get(name.text) is not None or \
                getattr(self, "data_sites", {}).get(name.text) is not None
            later = not early
        if name.text in self.closed or later:
            self._unbound(name)
        else:
            self._name(name)

    def _improper_target(self, t: A.Target, fam, blk: Block, kind: str):
        ctx = self.ctx
        if t.args is not None:
            ctx.report(SE.improper_args(t.name.span, fam.name))
            self._args_as_uses(t)
            return ("family", fam)
        where = {"observe": "an `observe` step", "marginalize": "a `marginalize` step"}.get(kind)
        if where is None and blk.in_marginalize:
            where = "a step inside a marginalize block"
        if where is not None:
            ctx.report(SE.improper_position(t.name.span, fam.name, where))
        return ("family", fam)

    def _space_object(self, n):
        """The `Space` of an option name that is a constrained-space object, else None."""
        sym = self.ctx.object(n.text)
        return space_of(sym.type) if isinstance(sym, ObjectSym) else None

    def _space_family(self, n, fam, step) -> None:
        """QVR428 when family `fam` cannot draw the values of the space named by `n`."""
        ctx = self.ctx
        sym = lookup_object(ctx, A.Name(n.text, n.span))  # the reference (goto, hover)
        sp = space_of(sym.type) if sym is not None else None
        if sp is None:
            return
        kind = sp.space
        what = f"{kind.describe(sp.size)} ({sp.spelling})"
        if kind.families:
            if fam.name not in kind.families:
                need = " or ".join(f"`{f}`" for f in kind.families)
                ctx.report(SE.space_family(step.target.name.span, n.text, what, need, fam.name, ""))
        elif fam.support != kind.support or fam.event_rank != 0 or fam.discrete:
            need = {"Real": "a family on the real line (`Flat`, `Normal`, …)",
                    "Positive": "a family on the positive reals (`HalfFlat`, `Gamma`, …)"}[kind.support]
            ctx.report(SE.space_family(step.target.name.span, n.text, what, need, fam.name,
                                      f" ({fam.support_text})"))

    def _truncation(self, opts: dict, res, step) -> None:
        """`[lower=a, upper=b]` on a sample or observe step (QVR427); the entries are
        taken out of `opts` (the other option checks never see them)."""
        ctx = self.ctx
        entries = {k: opts.pop(k) for k in ("lower", "upper") if k in opts}
        if not entries:
            return
        first = next(iter(entries.values()))
        literal = {}
        for key, entry in entries.items():
            v = entry.value
            if isinstance(v, A.Number):
                literal[key] = float(v.value)
            elif isinstance(v, A.OVName):
                self.family_arg(A.Name(v.text, v.span))
            else:
                ctx.report(E.option_shape(entry.key.span, key, "a number or a name"))
        if res[0] == "unknown":
            return
        if res[0] != "family":
            ctx.report(SE.truncation_target(first.key.span, step.target.name.text))
            return
        fam = res[1]
        if fam.discrete:
            ctx.report(SE.truncation_discrete(first.key.span, fam.name))
            return
        if fam.event_rank != 0:
            ctx.report(SE.truncation_vector(first.key.span, fam.name, fam.event_rank))
            return
        over = opts.get("over")
        if over is not None and isinstance(over.value, A.OVName) and self._space_object(over.value):
            ctx.report(SE.truncation_space(first.key.span, over.value.text))
            return
        if not fam.improper and fam.name not in runnable.CDF_FAMILIES and (
                any(isinstance(e.value, A.OVName) for e in entries.values())
                or not all(isinstance(a, A.Number) for a in step.target.args or ())):
            # E9.9: the runtime renormalises by quadrature only with numbers (QVR950 there)
            ctx.report(SE.runtime_unsupported(step.target.name.span, f"truncation of "
                                             f"`{fam.name}` with variable arguments"))
        lo, hi = literal.get("lower"), literal.get("upper")
        num = lambda x: repr(float(x))  # noqa: E731
        if lo is not None and hi is not None and lo >= hi:
            ctx.report(SE.truncation_empty(entries["upper"].key.span,
                                          f"`lower={num(lo)}` is not below `upper={num(hi)}`"))
        elif hi is not None and fam.support in ("Positive", "Unit") and hi <= 0:
            ctx.report(SE.truncation_empty(entries["upper"].key.span,
                                          f"`{fam.name}` draws {fam.support_text}, none of them "
                                          f"below `upper={num(hi)}`"))
        elif lo is not None and fam.support == "Unit" and lo >= 1:
            ctx.report(SE.truncation_empty(entries["lower"].key.span,
                                          f"`{fam.name}` draws {fam.support_text}, none of them "
                                          f"above `lower={num(lo)}`"))


def is_bracket_arg(a, grouped_coord: Optional[str]) -> bool:
    """`a[z]` is the bracketed argument of 7.5 exactly when z is the coordinate of the
    enclosing grouped marginalize block; any other `a[i]` is an index (E9.10)."""
    return isinstance(a, A.DAIndex) and grouped_coord is not None and a.index.text == grouped_coord


def is_improper(target) -> bool:
    """Whether a step target is an improper family (`Flat`, `HalfFlat`: QVR426 says why)."""
    fam = FAMILIES.get(target.name.text)
    return fam is not None and fam.improper
