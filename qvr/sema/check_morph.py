"""Typing of morphism expressions (qvr-language.md 6.1-6.2).

`infer_morph` returns an `MInfo` (type, stratum, composition rule) for an expression and
records an ``expr`` fact for every sub-expression, which is what hover shows.  An operand
of unknown type makes the whole expression unknown without further diagnostics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from qvr.sema import errors as E
from qvr.sema.context import DeclContext
from qvr.sema.families import COMPOSITION_RULES, FAMILIES, OUTSIDE_CORE_FAMILIES
from qvr.sema.resolve import lookup_object
from qvr.sema.suggest import suggest
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ProgramSym,
                              UnknownSym)
from qvr.sema.types import (MorType, Named, Prod, compatible, factors, is_continuous,
                            is_discrete, strip)
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core

OUTSIDE_POSTFIX = {"marginalize", "curry_left", "curry_right", "change_base", "trace", "freeze"}


@dataclass(frozen=True)
class MInfo:
    type: Optional[MorType]  # None: unknown
    stratum: Optional[str] = None  # relational | stochastic | None (unknown)
    rule: Optional[str] = None
    # The last link has no density (docs/extensions.md E4): an attention without a family,
    # `layer_norm`/`rms_norm`, `residual` of such a morphism, and every expression that
    # ends in one.  Only the observe-step check (QVR316) reads it.
    deterministic: bool = False
    # Some link mixes positions (docs/extensions.md E1: an attention, or an expression
    # holding one).  Only the `scan` cell check (QVR715) reads it.
    mixes: bool = False

    @property
    def known(self) -> bool:
        return self.type is not None


UNKNOWN_M = MInfo(None)


def _record(ctx: DeclContext, node, info: MInfo) -> MInfo:
    if info.type is not None:
        ctx.fact(node.span, "expr", (info.type, ctx.snippet(node.span, 80)))
    return info


def sym_info(sym) -> MInfo:
    if isinstance(sym, (MorphismSym, LetSym)):
        return MInfo(sym.type, sym.stratum, sym.rule, sym.deterministic, sym.mixes)
    if isinstance(sym, ProgramSym):
        return MInfo(sym.type, "stochastic", None)
    return UNKNOWN_M


def value_lookup_error(ctx: DeclContext, name: A.Name, missing_code: str = "QVR102") -> None:
    """Report a name that is not a value declared earlier (QVR103, QVR105, QVR102)."""
    line = ctx.later("value", name.text)
    if line is not None:
        ctx.report(E.used_before_declaration(name.span, name.text, line))
        return
    obj = ctx.object(name.text)
    if obj is not None:
        ctx.report(E.object_not_morphism(name.span, name.text))
        return
    s = suggest(name.text, ctx.names("value"))
    if s:
        ctx.suggest("value", s, name.text, "referenced and undefined")
    ctx.report(E.undefined_morphism(name.span, name.text, s))


def infer_name(ctx: DeclContext, name: A.Name, allow_group: bool = False):
    """Resolve a morphism name; returns (MInfo, symbol)."""
    sym = ctx.value(name.text)
    if sym is None:
        value_lookup_error(ctx, name)
        return UNKNOWN_M, None
    if isinstance(sym, UnknownSym):
        ctx.fact(name.span, "ref", ("value", name.text))
        return UNKNOWN_M, sym
    ctx.fact(name.span, "ref", ("value", name.text))
    if isinstance(sym, GroupSym):
        if allow_group:
            ctx.use("value", name.text)
            return MInfo(sym.type, "stochastic", None, sym.deterministic, sym.mixes), sym
        ctx.report(E.group_misuse(name.span, name.text, sym.members))
        return UNKNOWN_M, sym
    if isinstance(sym, DeductionSym):
        ctx.report(E.deduction_not_morphism(name.span, name.text))
        return UNKNOWN_M, sym
    if isinstance(sym, ProgramSym) and sym.parametric:
        ctx.report(E.template_not_morphism(name.span, name.text))
        return UNKNOWN_M, sym
    ctx.use("value", name.text)
    return sym_info(sym), sym


def _level(rule: Optional[str]) -> Optional[str]:
    return COMPOSITION_RULES.get(rule) if rule else None


def infer_morph(ctx: DeclContext, e, allow_from_data=None) -> MInfo:
    """Infer the type of morphism expression `e`.

    `allow_from_data` is the declared type (MorType) when `e` is the whole initializer of
    an observed morphism, the only place `from_data("KEY")` is allowed.
    """
    if isinstance(e, A.MName):
        info, _ = infer_name(ctx, e.name)
        return _record(ctx, e, info)
    if isinstance(e, A.MParen):
        return _record(ctx, e, infer_morph(ctx, e.inner))
    if isinstance(e, A.MCall):
        return _record(ctx, e, _infer_call(ctx, e, allow_from_data))
    if isinstance(e, A.MCompose):
        return _record(ctx, e, _infer_compose(ctx, e))
    if isinstance(e, A.MTensor):
        return _record(ctx, e, _infer_tensor(ctx, e))
    if isinstance(e, A.MPostfix):
        return _record(ctx, e, _infer_postfix(ctx, e))
    if isinstance(e, A.MFan):
        return _record(ctx, e, _infer_fan(ctx, e))
    if isinstance(e, (A.MStack, A.MRepeat)):
        return _record(ctx, e, _infer_iterate(ctx, e))
    if isinstance(e, A.MScan):
        return _record(ctx, e, _infer_scan(ctx, e))
    return UNKNOWN_M


def _object_arg(ctx: DeclContext, arg, not_an_object):
    """The type of a builtin's object argument (`identity(A)`, `layer_norm(A)`), or None
    after reporting `not_an_object(span)` for a non-name (an unknown name is reported by
    `lookup_object`)."""
    if not isinstance(arg, A.MName):
        ctx.report(not_an_object(arg.span))
        return None
    obj = lookup_object(ctx, arg.name)
    if obj is None:
        return None
    return Named(arg.name.text, obj.type)


def _infer_call(ctx: DeclContext, e: A.MCall, allow_from_data) -> MInfo:
    callee = e.callee.text
    if callee == "identity":
        ctx.fact(e.callee.span, "builtin", "identity")
        if len(e.args) != 1:
            ctx.report(E.arity(e.callee.span, "identity", 1, "A", len(e.args)))
            return UNKNOWN_M
        arg = e.args[0]
        t = _object_arg(ctx, arg, E.identity_needs_object)
        if t is None:
            return UNKNOWN_M
        if not is_discrete(t):
            ctx.report(E.identity_not_finite(arg.span, t))
            return UNKNOWN_M
        rule, level = ctx.rule()
        if level != "algebra":
            ctx.report(E.needs_algebra(e.callee.span, "`identity`"))
            return UNKNOWN_M
        return MInfo(MorType(t, t), "relational", rule)
    if callee == "from_data":
        if allow_from_data is None:
            ctx.report(outside_core(e.span, "`from_data(…)` outside the initializer of an observed morphism"))
            return UNKNOWN_M
        if len(e.args) != 1:
            ctx.report(E.arity(e.callee.span, "from_data", 1, "key", len(e.args)))
            return UNKNOWN_M
        if not isinstance(e.args[0], A.StringLit):
            ctx.report(E.from_data_shape(e.args[0].span))
            return UNKNOWN_M
        return MInfo(allow_from_data, "relational", ctx.rule()[0])
    if callee in MORPHISM_BUILTINS:
        return _infer_builtin(ctx, e)
    if callee in ("cup", "cap"):
        ctx.report(outside_core(e.span, f"`{callee}(…)`"))
    else:
        ctx.report(outside_core(e.span, f"calls `{callee}(…)` in morphism expressions", plural=True))
    return UNKNOWN_M


# Builtin morphism expressions of the extension (docs/extensions.md E4), recognised by the
# callee's spelling whatever the module declares, exactly like `identity` (6.1): a
# declaration named `residual` does not change what `residual(f)` means.
MORPHISM_BUILTINS = ("residual", "layer_norm", "rms_norm")


def _infer_builtin(ctx: DeclContext, e: A.MCall) -> MInfo:
    """`residual(f)` for f : A -> A over Real spaces; `layer_norm(A)`, `rms_norm(A)` for a
    continuous object A.  All three are stochastic-stratum (never relational), so `.dagger`,
    count-less `repeat` and observed initializers reject them with the core's diagnostics."""
    callee = e.callee.text
    ctx.fact(e.callee.span, "builtin", callee)
    if callee == "residual":
        for a in e.args:  # record references and uses even when the call is malformed
            if not isinstance(a, (A.Number, A.StringLit)) and len(e.args) != 1:
                infer_morph(ctx, a)
        if len(e.args) != 1:
            ctx.report(E.arity(e.callee.span, callee, 1, "f", len(e.args)))
            return UNKNOWN_M
        arg = e.args[0]
        if isinstance(arg, (A.Number, A.StringLit)):
            ctx.report(E.builtin_literal_arg(arg.span, callee, "a morphism"))
            return UNKNOWN_M
        inner = infer_morph(ctx, arg)
        if not inner.known:
            return UNKNOWN_M
        if not (is_continuous(inner.type.dom) and is_continuous(inner.type.cod)):
            ctx.report(E.needs_real_morphism(e.callee.span, callee, inner.type))
            return UNKNOWN_M
        if not compatible(inner.type.dom, inner.type.cod):
            ctx.report(E.not_endomorphism(e.callee.span, callee, inner.type))
            return UNKNOWN_M
        return MInfo(inner.type, "stochastic", None, inner.deterministic, inner.mixes)
    # layer_norm(A), rms_norm(A)
    if len(e.args) != 1:
        ctx.report(E.arity(e.callee.span, callee, 1, "A", len(e.args)))
        return UNKNOWN_M
    arg = e.args[0]
    t = _object_arg(ctx, arg, lambda span: E.builtin_needs_object(span, callee))
    if t is None:
        return UNKNOWN_M
    if not is_continuous(t):
        ctx.report(E.needs_real_object(arg.span, callee, t))
        return UNKNOWN_M
    return MInfo(MorType(t, t), "stochastic", None, True)


def _operand_text(ctx, node) -> str:
    return ctx.snippet(node.span)


def _infer_compose(ctx: DeclContext, e: A.MCompose) -> MInfo:
    left = infer_morph(ctx, e.left)
    right = infer_morph(ctx, e.right)
    if e.op.text != ">>":
        ctx.report(outside_core(e.op.span, f"the operator `{e.op.text}`"))
        return UNKNOWN_M
    if not (left.known and right.known):
        return UNKNOWN_M
    if not compatible(left.type.cod, right.type.dom):
        ctx.report(E.compose_mismatch(e.op.span, _operand_text(ctx, e.left), left.type.cod,
                                      _operand_text(ctx, e.right), right.type.dom))
        return UNKNOWN_M
    rel = left.stratum == "relational" and right.stratum == "relational"
    if rel and left.rule and right.rule and left.rule != right.rule:
        ctx.report(E.rule_mismatch(e.op.span, _operand_text(ctx, e.left), left.rule,
                                   _operand_text(ctx, e.right), right.rule))
        return UNKNOWN_M
    stratum = None if None in (left.stratum, right.stratum) else ("relational" if rel else "stochastic")
    info = MInfo(MorType(left.type.dom, right.type.cod), stratum, left.rule if rel else None,
                 right.deterministic, left.mixes or right.mixes)
    ctx.fact(e.op.span, "expr", (info.type, ctx.snippet(e.span, 80)))
    return info


def _flat(t, node):
    return list(strip(t).factors) if isinstance(node, A.MTensor) and isinstance(strip(t), Prod) else [t]


def _infer_tensor(ctx: DeclContext, e: A.MTensor) -> MInfo:
    left = infer_morph(ctx, e.left)
    right = infer_morph(ctx, e.right)
    if not (left.known and right.known):
        return UNKNOWN_M
    rel = left.stratum == "relational" and right.stratum == "relational"
    if rel and left.rule and right.rule and left.rule != right.rule:
        ctx.report(E.rule_mismatch(e.op, _operand_text(ctx, e.left), left.rule,
                                   _operand_text(ctx, e.right), right.rule))
        return UNKNOWN_M
    dom = Prod(tuple(_flat(left.type.dom, e.left)) + (right.type.dom,))
    cod = Prod(tuple(_flat(left.type.cod, e.left)) + (right.type.cod,))
    stratum = None if None in (left.stratum, right.stratum) else ("relational" if rel else "stochastic")
    info = MInfo(MorType(dom, cod), stratum, left.rule if rel else None,
                 left.deterministic or right.deterministic, left.mixes or right.mixes)
    ctx.fact(e.op, "expr", (info.type, ctx.snippet(e.span, 80)))
    return info


def _infer_postfix(ctx: DeclContext, e: A.MPostfix) -> MInfo:
    base = infer_morph(ctx, e.base)
    name = e.name.text
    if name in OUTSIDE_POSTFIX or (name == "dagger" and e.args is not None):
        ctx.report(outside_core(e.name.span, f"the postfix operation `.{name}`"))
        return UNKNOWN_M
    if name != "dagger":
        ctx.report(E.unknown_postfix(e.name.span, name))
        return UNKNOWN_M
    ctx.fact(e.name.span, "keyword", "dagger")
    if not base.known:
        return UNKNOWN_M
    if base.stratum == "stochastic":
        ctx.report(E.needs_relational(e.name.span, "`.dagger`"))
        return UNKNOWN_M
    if base.rule and _level(base.rule) != "algebra":
        ctx.report(E.needs_algebra(e.name.span, "`.dagger`"))
        return UNKNOWN_M
    return MInfo(MorType(base.type.cod, base.type.dom), base.stratum, base.rule)


def _infer_fan(ctx: DeclContext, e: A.MFan) -> MInfo:
    infos = []
    for arg in e.args:
        if isinstance(arg, A.MName):
            info, sym = infer_name(ctx, arg.name, allow_group=True)
            if isinstance(sym, GroupSym):
                _record(ctx, arg, info)
                infos.extend([info] * len(sym.members))
                continue
            infos.append(_record(ctx, arg, info))
        else:
            infos.append(infer_morph(ctx, arg))
    if not infos or not all(i.known for i in infos):
        return UNKNOWN_M
    dom = infos[0].type.dom
    for i, info in enumerate(infos[1:], start=2):
        if not compatible(info.type.dom, dom):
            ctx.report(E.fan_domains(e.kw, i, info.type.dom, dom))
            return UNKNOWN_M
    cods = tuple(i.type.cod for i in infos)
    cod = cods[0] if len(cods) == 1 else Prod(cods)
    return MInfo(MorType(dom, cod), "stochastic", None, any(i.deterministic for i in infos),
                 any(i.mixes for i in infos))


def _infer_iterate(ctx: DeclContext, e) -> MInfo:
    comb = "stack" if isinstance(e, A.MStack) else "repeat"
    inner = infer_morph(ctx, e.arg)
    if e.count is not None and e.count < 1:
        ctx.report(E.count_below_one(e.count_span, comb, e.count))
        return UNKNOWN_M
    if not inner.known:
        return UNKNOWN_M
    if e.count is None:  # repeat(f)
        if not compatible(inner.type.dom, inner.type.cod):
            ctx.report(E.not_endomorphism(e.kw, comb, inner.type))
            return UNKNOWN_M
        if inner.stratum == "stochastic":
            ctx.report(E.needs_relational(e.kw, "`repeat` without a count"))
            return UNKNOWN_M
        return MInfo(inner.type, inner.stratum, inner.rule)
    if e.count >= 2 and not compatible(inner.type.dom, inner.type.cod):
        ctx.report(E.not_endomorphism(e.kw, comb, inner.type))
        return UNKNOWN_M
    return MInfo(inner.type, inner.stratum, inner.rule, inner.deterministic, inner.mixes)


def _infer_scan(ctx: DeclContext, e: A.MScan) -> MInfo:
    inner = infer_morph(ctx, e.arg)
    if e.init is not None:
        ctx.report(outside_core(e.init[0].span, "`scan(…, init=…)`"))
        return UNKNOWN_M
    if not inner.known:
        return UNKNOWN_M
    dom, cod = inner.type.dom, inner.type.cod
    fs = factors(dom)
    if len(fs) < 2 or not is_continuous(dom) or not is_continuous(cod):
        # advice only where it fits: a cell `A * H -> H` with a finite state H (steps), or
        # a finite endomorphism `H -> H` (repeat)
        finite_state = None
        if not is_continuous(cod) and compatible(fs[-1], cod):
            finite_state = "cell" if len(fs) >= 2 else "endomorphism"
        cell = e.arg.name.text if isinstance(e.arg, A.MName) else "step"
        ctx.report(E.bad_scan_cell(e.kw, inner.type, finite_state, cell))
        return UNKNOWN_M
    if not compatible(fs[-1], cod):
        ctx.report(E.scan_state_mismatch(e.kw, fs[-1], cod))
        return UNKNOWN_M
    if inner.mixes:
        # scan steps through the position axis one position at a time (runtime spec 4.7):
        # an attention in the cell sees a sequence of length 1, itself (design E1)
        ctx.report(E.attention_in_scan(e.kw))
    new_dom = fs[0] if len(fs) == 2 else Prod(tuple(fs[:-1]))
    return MInfo(MorType(new_dom, cod), "stochastic", None, inner.deterministic, inner.mixes)


def family_lookup(ctx: DeclContext, name: A.Name, report_unknown=True):
    """A family for a kernel initializer or prior: QVR108 / QVR900 when it is not one."""
    fam = FAMILIES.get(name.text)
    if fam is not None:
        ctx.fact(name.span, "family", name.text)
        return fam
    if name.text in OUTSIDE_CORE_FAMILIES:
        ctx.report(outside_core(name.span, f"family `{name.text}`"))
        return None
    if report_unknown:
        ctx.report(E.unknown_family(name.span, name.text, suggest(name.text, FAMILIES)))
    return None
