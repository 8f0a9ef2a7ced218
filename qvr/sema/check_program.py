"""Checking of `program` declarations: header, steps, targets and scopes (section 7).

Let-expressions (section 8) are checked by `check_letexpr`, step targets and family
supports by `check_targets`.  Locals live in a side table (`Scope`), never in the tree.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.check_decls import check_duplicate, check_family_shadow, check_space_use
from qvr.sema.check_letexpr import LetChecker, Local
from qvr.sema.check_observed import ObservedChecks  # E9.7
from qvr.sema.steering_scores import SteeringChecks, steering_sample  # E10 score steps
from qvr.sema.check_targets import Block, TargetChecks, is_improper
from qvr.sema import axes as X  # E9.1
from qvr.sema.check_morph import value_lookup_error
from qvr.sema.context import DeclContext, LocalInfo
from qvr.sema import marginal_rows  # issue 36: per-row marginalize blocks
from qvr.sema import runnable  # E9.9
from qvr.sema.options import expect_names, read_options
from qvr.sema.resolve import lookup_object, resolve_type
from qvr.sema.suggest import suggest
from qvr.sema.symbols import ProgramSym
from qvr.sema.types import (UNKNOWN, MorType, Named, factors, is_continuous, is_discrete,
                            is_unknown, spell)
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core

OUTSIDE_PARAM_KINDS = {"FinSet", "Space", "Object", "Nat", "Mor"}
MARGINAL_FAMILIES = ("Categorical", "Bernoulli", "ContinuousBernoulli")


def check_program(ctx: DeclContext, d: A.ProgramDecl) -> None:
    ProgramChecker(ctx, d).run()


class ProgramChecker(SteeringChecks, ObservedChecks, TargetChecks, LetChecker):
    def __init__(self, ctx: DeclContext, d: A.ProgramDecl):
        super().__init__(ctx, d.name.text)
        self.d = d
        self.effects: set[str] = set()
        self.returned = False
        self.after_return_reported = False
        self.input = UNKNOWN
        self.arg_axes: dict = {}  # E9.10: id(family argument expression) -> its axes

    # ------------------------------------------------------------ header
    def run(self) -> None:
        ctx, d = self.ctx, self.d
        dup = check_duplicate(ctx, "value", d.name)
        check_family_shadow(ctx, d.name)
        dom = resolve_type(ctx, d.dom)
        cod = resolve_type(ctx, d.cod)
        if check_space_use(ctx, d.dom, "a program's domain"):  # E9.2
            dom = UNKNOWN
        if check_space_use(ctx, d.cod, "a program's codomain"):
            cod = UNKNOWN
        self.input = dom
        self.push_scope()  # parameters
        style, params = self._params(dom)
        opts = read_options(ctx, d.options, "program")
        for key, entry in opts.items():
            if key in ("effects", "over"):
                ctx.report(outside_core(entry.key.span, f"the program option `{key}`"))
            else:
                ctx.report(E.unknown_option(entry.key.span, key, "a program", None))
        self.prescan(d.body)
        self.steering = steering_sample(ctx, d)  # E10: `sample NAME <- LM` and score steps
        if self.steering is not None:
            self.steering_header(d)
        self.block(d.body, Block(), top=True)
        if not self.returned:
            last = d.body[-1]
            while isinstance(last, A.MarginalizeStep) and last.body:
                last = last.body[-1]
            ctx.report(E.missing_return(last.span, d.name.text))
        self.finish()
        ctx.fact(d.name.span, "def", ("value", d.name.text))
        if not dup:
            order = ("Sample", "Score", "Marginal")
            ctx.bind("value", d.name.text,
                     ProgramSym(d.name.text, MorType(dom, cod), style, params,
                                tuple(e for e in order if e in self.effects)), d.name.span)

    def _params(self, dom):
        ctx, d = self.ctx, self.d
        if d.params is None:
            return "none", ()
        items = d.params.items
        typed = [p for p in items if p.kind is not None]
        if typed and len(typed) != len(items):
            ctx.report(E.mixed_params(d.params.span))
        style = "typed" if typed else "data"
        seen: dict[str, A.Name] = {}
        facs = factors(dom) if not is_unknown(dom) else None
        if style == "data" and facs is not None and len(facs) != len(items):
            ctx.report(E.param_count(d.params.span, d.name.text, len(items), spell(dom), len(facs)))
            facs = None
        out = []
        for i, p in enumerate(items):
            if p.name.text in seen:
                ctx.report(E.duplicate_parameter(p.name.span, p.name.text, seen[p.name.text].span))
                continue
            seen[p.name.text] = p.name
            kind_text = None
            if p.kind is not None:
                k = p.kind
                if k.kind == "Real":
                    kind_text = "Real"
                elif k.kind == "FinSet" or (k.kind in ("name", "mor") and k.name.text in OUTSIDE_PARAM_KINDS):
                    label = "FinSet" if k.kind == "FinSet" else k.name.text
                    ctx.report(outside_core(k.span, f"the parameter kind `{label}`"))
                else:
                    ctx.report(E.unknown_value(k.span, "parameter kind", k.name.text, ("Real",),
                                               suggest(k.name.text, ("Real",))))
            out.append((p.name.text, kind_text))
            if style == "typed" or p.kind is not None:
                self.bind_local(p.name, "parameter", None, "Real (parameter)", "numeric",
                                detail="parameter", scalar=True, value_axes=())
            else:
                t = facs[i] if facs is not None else UNKNOWN
                self.bind_local(p.name, "parameter", t if facs is not None else None,
                                spell(t) if facs is not None else "?", "numeric", detail="data parameter",
                                value_axes=_e9_param_axes(t) if facs is not None else None)
        return style, tuple(out)

    # ------------------------------------------------------------ blocks and steps
    def block(self, steps, blk: Block, top: bool) -> None:
        self.push_scope()
        for step in steps:
            if top and self.returned and not self.after_return_reported:
                self.ctx.report(E.step_after_return(step.span))
                self.after_return_reported = True
            if top and self.steering is not None:
                self.steering_step(step)  # E10: what SMC cannot run (QVR864)
            if isinstance(step, A.ReturnStep):
                self.step_return(step, top)
            elif isinstance(step, A.SampleStep):
                self.step_draw(step, "sample", blk)
            elif isinstance(step, A.ObserveStep):
                self.step_draw(step, "observe", blk)
            elif isinstance(step, A.MarginalizeStep):
                self.step_marginalize(step, blk, top)
            elif isinstance(step, A.LetStep):
                self.step_let(step)
            elif isinstance(step, A.ScoreStep):
                self.step_score(step)
            elif isinstance(step, A.DataStep):
                self.step_data(step, top)  # E9.1
        self.pop_scope()

    def step_return(self, step: A.ReturnStep, top: bool) -> None:
        ctx = self.ctx
        ctx.fact(step.kw, "keyword", "return")
        if not top:
            ctx.report(E.return_in_block(step.span))
        elif self.returned:
            ctx.report(E.second_return(step.span))
        else:
            self.returned = True
        if isinstance(step.value, A.TupleReturn):
            ctx.report(outside_core(step.value.span, "tuple returns", plural=True))
            return
        self.use_local_strict(step.value)

    def _index_annotation(self, index) -> tuple[Optional[object], str]:
        """Resolve an index annotation `: I` (must be discrete, QVR309)."""
        if index is None:
            return None, ""
        if check_space_use(self.ctx, index, "a plate annotation"):  # E9.2
            return UNKNOWN, "?"
        t = resolve_type(self.ctx, index)
        if not is_unknown(t) and not is_discrete(t):
            self.ctx.report(E.not_finite(index.span, "an index annotation", t))
        return t, spell(t)

    def step_draw(self, step, kind: str, blk: Block) -> None:
        ctx = self.ctx
        self.effects.add("Sample" if kind == "sample" else "Score")
        index_t, index_text = self._index_annotation(step.index)
        res = self.target(step.target, kind, indexed=step.index is not None, blk=blk)
        if kind == "sample" and blk.in_marginalize and not is_improper(step.target):
            # a latent there is neither summed out nor a site of a fit (`qvr run` would fail)
            ctx.report(SE.runtime_unsupported(step.kw, "a `sample` step inside a marginalize "
                                             "block (draw it before the block)"))
        # options
        opts = read_options(ctx, step.options, f"{kind} step")
        self._truncation(opts, res, step)  # E9.2: takes `lower`/`upper` out of `opts`
        space = None
        if kind == "sample":
            space = self._sample_options(opts, res, step)
        else:
            self._observe_options(opts, blk)
            if step.value is not None:  # E9.7 `observe v = e <- F`
                self.observe_value(step, res)
        if isinstance(step.bind, A.Name):  # E9.7: sampled values are latent, observed data
            self.note_latent(step.bind.text, step.bind.text if kind == "sample" else None)
        # the bound local (7.12)
        if isinstance(step.bind, A.TupleBind):
            ctx.report(outside_core(step.bind.span, "tuple bindings", plural=True))
            for n in step.bind.names:
                self.bind_local(n, kind, None, "?", "numeric", detail=f"{kind} step")
            return
        t, text = self._bound_type(res, index_t, index_text)
        if space is not None:  # E9.2: a draw of a constrained space
            text = f"[{index_text}] {space}" if index_text else space
        scalar = res[0] == "family" and res[1].event_rank == 0 and step.index is None \
            and space is None
        self.bind_local(step.bind, kind, t, text, "numeric", scalar=scalar, detail=f"{kind} step"
                        + (f" · plate over {index_text}" if index_text else "")
                        + (" · its value computed from data" if getattr(step, "value", None)
                           is not None else ""),  # E9.7
                        value_axes=self._e9_site_axes(step, res))

    def _bound_type(self, res, index_t, index_text):
        kind, payload = res
        if kind == "morphism":
            cod = payload.type.cod
            if index_t is not None:
                return None, f"[{index_text}] {spell(cod)}"
            return cod, spell(cod)
        if kind == "family":
            sup = payload.support
            return None, f"[{index_text}] {sup}" if index_text else sup
        if kind == "template":
            return None, "value"
        return None, "?"

    def _sample_options(self, opts, res, step) -> Optional[str]:
        """Check the options of a sample step; the name of the constrained space its
        `over=` names (E9.2), if any."""
        ctx = self.ctx
        lists = {}
        space = None
        for key, entry in opts.items():
            if key not in ("over", "iid_over"):
                ctx.report(E.unknown_option(entry.key.span, key, "a sample step",
                                            suggest(key, ("over", "iid_over", "lower", "upper"))))
                continue
            if res[0] != "family":
                if res[0] != "unknown":
                    ctx.report(E.event_axes_need_family(entry.key.span))
                continue
            names = expect_names(ctx, entry)
            if names is None:
                continue
            spaces = [n for n in names if self._space_object(n) is not None]
            if spaces:  # E9.2: `over=Mu` with `object Mu : Ordered 2`
                if key == "iid_over":
                    sp = self._space_object(spaces[0])
                    ctx.report(SE.space_misuse(spaces[0].span, spaces[0].text, sp.spelling,
                                              "an `iid_over` list"))
                elif len(names) > 1:
                    ctx.report(SE.space_alone(spaces[0].span, spaces[0].text))
                else:
                    space = names[0]
                continue
            for n in names:
                self._discrete_object(n)
            lists[key] = names
        if res[0] != "family":
            return None
        fam = res[1]
        if space is not None:
            self._space_family(space, fam, step)
            return space.text
        if fam.name in runnable.SPACE_FAMILIES:  # E9.9: `LKJCholesky` needs its space
            over = opts.get("over")
            ctx.report(SE.space_family_needs_space(step.target.name.span, fam.name,
                                                  ctx.snippet(over.value.span) if over else ""))
            return None
        if "over" in lists and len(lists["over"]) != fam.event_rank:
            ctx.report(E.event_rank(opts["over"].key.span, fam.name, fam.event_rank, len(lists["over"])))
        if "over" in lists and "iid_over" in lists:
            over = {n.text for n in lists["over"]}
            for n in lists["iid_over"]:
                if n.text in over:
                    ctx.report(E.both_lists(n.span, n.text, "over", "iid_over"))
        if "iid_over" in lists and isinstance(step.index, A.TName):
            if step.index.name.text not in {n.text for n in lists["iid_over"]}:
                ctx.report(E.iid_needs_index(opts["iid_over"].key.span, step.index.name.text))
        return None

    def _discrete_object(self, n) -> None:
        name = A.Name(n.text, n.span)
        sym = lookup_object(self.ctx, name)
        if sym is not None:
            t = Named(n.text, sym.type)
            if not is_discrete(t):
                self.ctx.report(E.not_finite(n.span, f"`{n.text}`", t))

    def _observe_options(self, opts, blk: Block) -> None:
        ctx = self.ctx
        for key, entry in opts.items():
            if key != "via":
                ctx.report(E.unknown_option(entry.key.span, key, "an observe step",
                                            suggest(key, ("via", "lower", "upper"))))
                continue
            v = entry.value
            if isinstance(v, (A.OVList, A.OVCall)):
                ctx.report(outside_core(entry.key.span, "product fibrations (`via` lists or calls)", plural=True))
                continue
            if not isinstance(v, A.OVName):
                ctx.report(E.option_shape(entry.key.span, "via", "a name"))
                continue
            self.use_via(A.Name(v.text, v.span))
            if blk.grouped_coord is None:
                ctx.report(E.no_effect(entry.key.span, "`via` has no effect outside a marginalize block with `over`"))

    def step_marginalize(self, step: A.MarginalizeStep, blk: Block, top: bool) -> None:
        ctx = self.ctx
        self.effects.add("Marginal")
        if not top:
            ctx.report(outside_core(step.kw, "nested `marginalize` blocks", plural=True))
        index_t, index_text = self._index_annotation(step.index)
        opts = read_options(ctx, step.options, "marginalize step")
        grouped = None
        for key, entry in opts.items():
            if key == "over":
                v = entry.value
                if isinstance(v, A.OVList):
                    ctx.report(outside_core(entry.key.span, "product grouping (`over` lists)"))
                    grouped = "?"  # still a grouped block, so its `via` and `a[z]` stay valid
                elif isinstance(v, A.OVName):
                    self._discrete_object(v)
                    grouped = v.text
                else:
                    ctx.report(E.option_shape(entry.key.span, "over", "an object name"))
            elif key == "reduction":
                v = entry.value
                if not isinstance(v, A.OVName):
                    ctx.report(E.option_shape(entry.key.span, "reduction", "a name"))
                elif v.text not in ("logsumexp", "sum", "mean"):
                    opts_ = ("logsumexp", "sum", "mean")
                    ctx.report(E.unknown_value(v.span, "reduction", v.text, opts_, suggest(v.text, opts_)))
            else:
                ctx.report(E.unknown_option(entry.key.span, key, "a marginalize step",
                                            suggest(key, ("over", "reduction"))))
        res = self.target(step.target, "marginalize", indexed=step.index is not None, blk=blk)
        fam = res[1] if res[0] == "family" else None
        if fam is not None and fam.improper:  # E9.2: reported by `_family_target`
            res, fam = ("unknown", None), None
        if grouped is None:
            if res[0] != "unknown" and (fam is None or fam.name not in MARGINAL_FAMILIES):
                ctx.report(E.marginalize_requirement(step.target.span, "a marginalize block must draw from "
                                                     "Categorical, Bernoulli or ContinuousBernoulli"))
        else:
            if step.index is None:
                ctx.report(E.marginalize_requirement(step.bind.span, "a grouped marginalize needs a class "
                                                     "annotation (`marginalize z : K <- …`)"))
            if res[0] != "unknown" and (fam is None or fam.name != "Categorical"):
                ctx.report(E.marginalize_requirement(step.target.span, "a grouped marginalize must draw from "
                                                     "`Categorical`"))
            elif fam is not None and step.target.args and not isinstance(step.target.args[0], A.Name):
                ctx.report(E.marginalize_requirement(step.target.args[0].span, "the class probabilities of a "
                                                     "grouped marginalize must be a program variable"))
            observes = [s for s in step.body if isinstance(s, A.ObserveStep)]
            if not observes:
                ctx.report(E.marginalize_requirement(step.bind.span, "a grouped marginalize block needs at "
                                                     "least one `observe` step"))
            for s in observes:
                keys = {e.key.text for e in (s.options.entries if s.options else ())}
                if s.index is None:
                    ctx.report(E.marginalize_requirement(s.bind.span, "an observe inside a grouped marginalize "
                                                         "needs an index annotation (`observe y : N <- …`)"))
                elif "via" not in keys:
                    ctx.report(E.marginalize_requirement(s.bind.span, "an observe inside a grouped marginalize "
                                                         "needs a `via` option"))
        plate = marginal_rows.plate_of(self, step) if grouped is None else None  # issue 36
        if plate is not None:
            marginal_rows.check_per_row(self, step, plate)
        elif grouped is not None:
            marginal_rows.check_grouped(self, step)
        # the block, with the coordinate visible only inside it
        self.push_scope()
        if grouped is not None:
            text = f"class index over {index_text or '?'}"
        else:
            text = self._bound_type(res, index_t, index_text)[1]
        self.bind_local(step.bind, "marginalize", None, text, "numeric", detail="marginalize coordinate"
                        + (f" · one per element of {plate}" if plate else ""))
        self.note_latent(step.bind.text, step.bind.text)  # E9.7
        self.block(step.body, Block(grouped_coord=step.bind.text if grouped else None,
                                     in_marginalize=True), top=False)
        self.pop_scope()

    def step_let(self, step: A.LetStep) -> None:
        self.ctx.fact(step.kw, "keyword", "record" if step.recorded else "let")
        if isinstance(step.rhs, A.EName):
            vkind = self.bare_local(step.rhs)
        else:
            vkind = self.infer(step.rhs)
        text = vkind if vkind != "unknown" else "numeric"
        rhs = step.rhs
        if vkind == "chart" and isinstance(rhs, A.ECall) and rhs.callee.text == "parse" and rhs.args \
                and isinstance(rhs.args[0], A.EName):
            text = f"chart of {rhs.args[0].name.text}"  # hover: `chart : chart of Arith` (14.2)
        inner = rhs
        while isinstance(inner, A.EParen):
            inner = inner.inner
        if isinstance(inner, A.EFactor):
            exact = self.last_exact
        elif isinstance(inner, A.EName) and self.visible(inner.name.text) is not None:
            exact = self.visible(inner.name.text).axes_exact
        else:
            exact = False
        if step.recorded:
            self._check_record(step, vkind)
        last_axes = self.last_axes
        vaxes = self.value_axes_of(rhs) if vkind in ("numeric", "unknown") else None  # E9.1
        vaxes = self.let_annotation(step, vaxes)  # E9.11 `let v : T = e`
        text = X.hover_text(vaxes) or text
        self.note_rhs(step.bind.text, rhs)  # E9.7
        self.bind_local(step.bind, "record" if step.recorded else "let", None, text, vkind,
                        detail="recorded per draw" if step.recorded else "let step",
                        axes=last_axes, counted=not self.returned and not step.recorded,
                        axes_exact=exact, scalar=self.is_scalar(rhs), value_axes=vaxes)

    def _check_record(self, step: A.LetStep, vkind: str) -> None:
        """E9.6 `record v = e`: a number per draw (QVR429 for a chart or a deduction), never
        inside a marginalize block (its value would depend on the summed-out coordinate)."""
        if vkind in ("chart", "deduction"):
            self.ctx.report(SE.record_not_numeric(step.rhs.span, step.bind.text, vkind))
        coord = next((local for scope in self.scopes for local in scope.values()
                      if local.kind == "marginalize"), None)
        if coord is not None:
            self.ctx.report(SE.record_in_marginalize(step.kw, step.bind.text, coord.name))

    def step_score(self, step: A.ScoreStep) -> None:
        if self.steering is not None:
            return self.steering_score(step)  # E10: a log potential of SMC steering
        self.effects.add("Score")
        vkind = self.infer(step.rhs)
        if vkind in ("chart", "deduction"):
            self.ctx.report(E.kind_mismatch(step.rhs.span, f"a score step needs a numeric value, got a {vkind}"))
        vaxes = self.value_axes_of(step.rhs) if vkind in ("numeric", "unknown") else None  # E9.1
        per = self.score_per_element(step, vaxes)  # E9.7 `score v : T = e`
        self.note_rhs(step.bind.text, step.rhs)
        self.bind_local(step.bind, "score", None, f"[{per}] numeric" if per else "numeric",
                        "numeric", detail=f"score step · one term per element of {per}"
                        if per else "score step", value_axes=vaxes)

    # ------------------------------------------------------------ E9.1 `data` steps and site axes
    def step_data(self, step: A.DataStep, top: bool) -> None:
        """`data X : T`: host data `X` with the axes of T (docs/e9/letexpr.md).  Never
        QVR713: it declares what the caller supplies, used or not."""
        ctx = self.ctx
        ctx.fact(step.kw, "keyword", "data")
        if not top:
            ctx.report(SE.data_in_marginalize(step.kw))
        t = resolve_type(ctx, step.type)
        axes = None
        if not is_unknown(t):
            axes = X.type_expr_axes(step.type, self.object_type)
            for n in _type_names(step.type):
                ty = self.object_type(n.text)
                if ty is not None and not is_discrete(ty) and not is_continuous(ty):
                    ctx.report(SE.data_axis_type(n.span, n.text, Named(n.text, ty)))
                    axes = None
        text = X.spell_axes(axes) if axes else spell(t)
        self.bind_local(step.bind, "data", None, text, "numeric", detail="data step",
                        value_axes=axes)

    def _e9_site_axes(self, step, res):
        """The axes of a family sample/observe step's value (qvr.sema.axes)."""
        if res[0] != "family":
            return None

        def local_axes(text):
            local = self.visible(text)
            return local.value_axes if local is not None else None
        return X.family_step_axes(step, res[1], self.object_type, local_axes,
                                  expr_axes=lambda e: self.arg_axes.get(id(e)))  # E9.10


# ---------------------------------------------------------------- E9.1 helpers

def _e9_param_axes(t):
    """The axes of a data parameter of type t: a finite index per row has none, a real
    vector one (its dimension)."""
    from qvr.sema.types import atoms, dim as _dim
    if is_unknown(t):
        return None
    if is_discrete(t) and len(atoms(t)) == 1:
        return ()
    if is_continuous(t):
        return (X.Axis(None, _dim(t)),)
    return None


def _type_names(t) -> list:
    from qvr.sema.resolve import type_names
    return type_names(t)
