"""Checking of `object`, `composition`, `morphism`, top-level `let` and `export` (sections 3-6).

Each `check_*` function checks one declaration in a `DeclContext` and registers what it
binds; programs live in `check_program`, deductions in `check_deduction`.
"""
from __future__ import annotations

from typing import Optional

from qvr.sema import errors as E
from qvr.sema import stats_errors as SE  # E9
from qvr.sema.check_pretrained import PRETRAINED_KEYS, check_pretrained  # E10
from qvr.sema.check_morph import (MORPHISM_BUILTINS, MInfo, family_lookup, infer_morph,
                                  value_lookup_error)
from qvr.sema.context import DeclContext
from qvr.sema.families import (ATTENTION_FAMILIES, COMPOSITION_LEVELS, COMPOSITION_RULES,
                               FAMILIES, LOCATION_SCALE, OUTSIDE_CORE_FAMILIES, ROLES,
                               RUNTIME_RULES, SPACES, Space, space_of)
from qvr.sema.options import expect_int, expect_name, expect_names, expect_number, read_options
from qvr.sema.runnable import kernel_supported  # E9.9
from qvr.sema.resolve import resolve_type, type_names
from qvr.sema.suggest import suggest
from qvr.sema.symbols import (DeductionSym, GroupSym, LetSym, MorphismSym, ObjectSym,
                              ProgramSym, UnknownSym)
from qvr.sema.types import (UNKNOWN, FinSet, MorType, Real, atoms, compatible, describe, dim, is_continuous,
                            is_discrete, is_sized, is_unknown, size, size_names, spell, spell_mor, strip)
from qvr.syntax import ast as A
from qvr.syntax.errors import outside_core

MORPHISM_KEYS = ("role", "replicate", "scale", "init", "hidden_dim", "n_layers", "rank",
                 "temperature", "bins", "over", "iid", "heads", "head_dim", "causal", "positions",
                 "model", "dtype")
ROLE_KEYS = {
    "latent": {"role", "replicate", "scale", "init", "over", "iid"},
    "observed": {"role", "replicate", "scale"},
    "kernel": {"role", "replicate", "scale", "hidden_dim", "n_layers", "rank", "temperature",
               "over", "iid"},
    "embed": {"role", "replicate", "scale", "positions"},
    "discretize": {"role", "replicate", "scale", "bins"},
    "let": {"role", "replicate", "scale"},
    "attention": {"role", "replicate", "scale", "heads", "head_dim", "causal"},
    "pretrained": PRETRAINED_KEYS,  # E10
}


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def check_duplicate(ctx: DeclContext, ns: str, name: A.Name) -> bool:
    """QVR104 when `name` is already bound in namespace `ns`; True if it is a duplicate."""
    existing = ctx.value(name.text) if ns == "value" else ctx.object(name.text)
    if existing is None:
        return False
    ctx.report(E.duplicate_declaration(name.span, name.text, ctx.line_of(ns, name.text),
                                       ctx.rel_loc_of(ns, name.text)))
    return True


def check_family_shadow(ctx: DeclContext, name: A.Name) -> None:
    if name.text in FAMILIES:
        ctx.report(E.shadows_family(name.span, name.text))


# ---------------------------------------------------------------- object

def check_object(ctx: DeclContext, d: A.ObjectDecl) -> None:
    dup = check_duplicate(ctx, "type", d.name)
    if isinstance(d.type, A.TAtom) and d.type.kind not in ("FinSet", "Real"):
        t = _space(ctx, d.type)  # extension E9.2: `Ordered 2`, `Simplex 3`, …
    elif isinstance(d.type, A.TSize):
        t = _data_size(ctx, d.type)  # issue 36: `FinSet N`, a size read from the data
    else:
        t = resolve_type(ctx, d.type)
        if not isinstance(d.type, A.TName) and check_space_use(ctx, d.type, "a factor of a product type"):
            t = UNKNOWN
    opts = read_options(ctx, d.options, "object")
    if opts:
        if not (isinstance(d.type, (A.TAtom, A.TSize)) and d.type.kind == "Real"):
            first = d.options.entries[0]
            ctx.report(E.bounds_need_real(first.key.span))
        else:
            low = high = None
            for key, entry in opts.items():
                if key not in ("low", "high"):
                    ctx.report(E.unknown_option(entry.key.span, key, "an object",
                                                suggest(key, ("low", "high"))))
                    continue
                v = expect_number(ctx, entry)
                if key == "low":
                    low = v
                else:
                    high = v
            if low is not None and high is not None and low >= high:
                ctx.report(E.low_not_below_high(opts["high"].key.span))
            elif not is_unknown(t):
                t = Real(strip(t).n, low, high)
    ctx.fact(d.name.span, "def", ("type", d.name.text))
    if not dup:
        ctx.bind("type", d.name.text, ObjectSym(d.name.text, t), d.name.span)


# ---------------------------------------------------------------- sizes read from the data

def _data_size(ctx: DeclContext, t: A.TSize):
    """`FinSet N` / `Real N` on an object's right-hand side (docs/extensions.md, sizes from
    the data): a finite set / space whose size is the name `N`, bound when data are
    (`qvr.runtime.load.bind_sizes`).  QVR114 when `N` is an object's name."""
    name = t.name.text
    sym = ctx.object(name)
    line = ctx.line_of("type", name) if sym is not None else ctx.later("type", name)
    if sym is not None or line is not None:
        ctx.report(E.size_name_is_object(t.name.span, name, line))
        return UNKNOWN
    ctx.fact(t.name.span, "size", name)
    return FinSet(name) if t.kind == "FinSet" else Real(name)


# ---------------------------------------------------------------- E9.2 constrained spaces

def _space(ctx: DeclContext, t: A.TAtom):
    """The resolved `Space` of an object right-hand side `Ordered 2` (QVR900 for the
    constructors of section 15 this extension does not give meaning to)."""
    if t.kind not in SPACES:
        ctx.report(outside_core(t.kw_span, f"the object constructor `{t.kind}`"))
        return UNKNOWN
    if t.size < 1:
        ctx.report(E.size_zero(t.size_span, t.kind))
        return UNKNOWN
    ctx.fact(t.kw_span, "keyword", t.kind)
    n = t.size * t.size if SPACES[t.kind].matrix else t.size
    return Space(n, kind=t.kind, size=t.size)


def check_space_use(ctx: DeclContext, t, where: str) -> bool:
    """QVR428 for every constrained-space object named in the type expression `t` (a
    morphism's domain or codomain, a program's, a plate annotation, a product, …), where
    a space has no meaning: it names the event of a sample step only (`[over=Mu]`).
    True when one was reported."""
    found = False
    if t is None:
        return False
    for n in type_names(t):
        sym = ctx.object(n.text)
        sp = space_of(sym.type) if isinstance(sym, ObjectSym) else None
        if sp is not None:
            ctx.report(SE.space_misuse(n.span, n.text, sp.spelling, where))
            found = True
    return found


# ---------------------------------------------------------------- composition

def check_composition(ctx: DeclContext, d: A.CompositionDecl) -> None:
    name = d.name.text
    rule = next((r for r in COMPOSITION_RULES if r.lower() == name.lower()), None)
    ctx.fact(d.name.span, "keyword", "composition")
    second = ctx._ask(("composition_before",))
    if second:
        ctx.report(E.second_composition(d.name.span))
    if ctx._ask(("body_before",)):
        ctx.report(E.late_composition(d.name.span))
    if rule is None:
        ctx.report(E.unknown_rule(d.name.span, name, suggest(name, COMPOSITION_RULES)))
        return
    level = COMPOSITION_RULES[rule]
    if d.level is not None:
        want = d.level.text
        if want not in COMPOSITION_LEVELS:
            ctx.report(E.unknown_value(d.level.span, "composition level", want, COMPOSITION_LEVELS,
                                       suggest(want, COMPOSITION_LEVELS)))
        elif (want == "algebra" and level != "algebra") or want == "bilinear_form":
            ctx.report(E.rule_level(d.level.span, rule, level, want))
    if rule.lower() not in RUNTIME_RULES:  # E9.9: the checker refuses it, not `qvr run`
        ctx.report(SE.runtime_unsupported(d.name.span, f"composition rule `{name.lower()}`"))
    if not second:
        ctx.composition = (rule, level)


# ---------------------------------------------------------------- morphism

def _role_of(ctx: DeclContext, opts: dict) -> Optional[str]:
    entry = opts.get("role")
    if entry is None:
        return None
    v = entry.value
    if not isinstance(v, A.OVName):
        ctx.report(E.option_shape(entry.key.span, "role", "a role name"))
        return None
    if v.text not in ROLES:
        ctx.report(E.unknown_role(v.span, v.text, suggest(v.text, ROLES)))
        return None
    return v.text


def _check_axes(ctx, d: A.MorphismDecl, opts: dict, family, axis_names: tuple) -> None:
    lists = {}
    for key in ("over", "iid"):
        if key in opts:
            names = expect_names(ctx, opts[key])
            if names is not None:
                lists[key] = names
    for key, names in lists.items():
        for n in names:
            if n.text not in axis_names:
                ctx.report(E.not_axis(n.span, n.text, d.name.text, axis_names))
    if "over" in lists and "iid" in lists:
        over = {n.text for n in lists["over"]}
        for n in lists["iid"]:
            if n.text in over:
                ctx.report(E.both_lists(n.span, n.text, "over", "iid"))
    if "over" in lists and family is not None and len(lists["over"]) != family.event_rank:
        ctx.report(E.event_rank(opts["over"].key.span, family.name, family.event_rank,
                                len(lists["over"])))


def check_literal_support(ctx, fam, params_args) -> None:
    """QVR706 for numeric literals outside a parameter's support."""
    lits = {}
    for (pname, kind), arg in params_args:
        if not isinstance(arg, A.Number):
            continue
        lits[pname] = arg
        if kind == "pos" and arg.value <= 0:
            ctx.report(E.literal_support(arg.span, f"`{pname}` of `{fam.name}` must be positive, got {arg.text}"))
        elif kind == "unit" and not (0 <= arg.value <= 1):
            ctx.report(E.literal_support(arg.span, f"`{pname}` of `{fam.name}` must be between 0 and 1, got {arg.text}"))
    if fam.name in ("Uniform", "TruncatedNormal") and "low" in lits and "high" in lits:
        if lits["low"].value >= lits["high"].value:
            ctx.report(E.literal_support(lits["low"].span, f"`low` of `{fam.name}` must be smaller than `high`"))


def check_morphism(ctx: DeclContext, d: A.MorphismDecl) -> None:
    name = d.name.text
    dup = check_duplicate(ctx, "value", d.name)
    check_family_shadow(ctx, d.name)
    dom = resolve_type(ctx, d.dom)
    cod = resolve_type(ctx, d.cod)
    if check_space_use(ctx, d.dom, "a morphism's domain"):  # E9.2
        dom = UNKNOWN
    if check_space_use(ctx, d.cod, "a morphism's codomain"):
        cod = UNKNOWN
    mt = MorType(dom, cod)
    opts = read_options(ctx, d.options, "morphism")
    role = _role_of(ctx, opts)
    role_given = "role" in opts
    allowed = ROLE_KEYS.get(role, set(MORPHISM_KEYS))
    suggested_role = False
    for key, entry in opts.items():
        if key not in MORPHISM_KEYS:
            s = suggest(key, sorted(allowed))
            suggested_role = suggested_role or s == "role"
            ctx.report(E.unknown_option(entry.key.span, key, "a morphism", s))
        elif role is not None and key not in allowed:
            ctx.report(E.option_not_for_role(entry.key.span, key, role))
    if not role_given and not suggested_role:
        ctx.report(E.missing_role(d.name.span, name))

    def ok(key):
        return key in opts and (role is None or key in allowed)

    replicate = expect_int(ctx, opts["replicate"], 1) if ok("replicate") else None
    scale = expect_number(ctx, opts["scale"], positive=True) if ok("scale") else None
    if ok("init"):
        v = expect_name(ctx, opts["init"], "the name `auto`")
        if v is not None and v != "auto":
            ctx.report(E.unknown_value(opts["init"].value.span, "init value", v, ("auto",), suggest(v, ("auto",))))
    for key in ("hidden_dim", "n_layers", "rank"):
        if ok(key):
            expect_int(ctx, opts[key], 1)
    if ok("temperature"):
        expect_number(ctx, opts["temperature"], positive=True)
    bins = expect_int(ctx, opts["bins"], 1) if ok("bins") else None
    heads = expect_int(ctx, opts["heads"], 1) if ok("heads") else None
    head_dim = expect_int(ctx, opts["head_dim"], 1) if ok("head_dim") else None
    positions = expect_int(ctx, opts["positions"], 1) if ok("positions") else None
    # `causal` (position i sees keys j <= i) or `causal=strict` (j < i: no position sees
    # itself, seed 003's query); any other value is QVR203 (not a name) or QVR204 (another
    # name), and the attention is then read as not causal (docs/extensions.md E2)
    causal = causal_strict = False
    if ok("causal"):
        v = opts["causal"].value
        if v is None:
            causal = True
        elif isinstance(v, A.OVName) and v.text == "strict":
            causal = causal_strict = True
        elif isinstance(v, A.OVName):
            ctx.report(E.unknown_causal_value(v.span, v.text, suggest(v.text, ("strict",))))
        else:
            ctx.report(E.causal_shape(opts["causal"].key.span))

    pretrained = check_pretrained(ctx, d, opts, dom, cod) if role == "pretrained" else None

    # ---- initializer by role (5.4)
    init = d.init
    family = None
    prior = None
    init_info: Optional[MInfo] = None
    if role == "attention" and init is not None:
        e = init.expr
        if isinstance(e, A.MName) and ctx.value(e.name.text) is None:
            family = family_lookup(ctx, e.name)
            if family is not None and family.name not in ATTENTION_FAMILIES:
                ctx.report(E.role_signature(e.name.span, f"attention draws from a location-scale family: "
                                                         f"Normal, Laplace or Cauchy, got `{family.name}`"))
                family = None
        else:
            ctx.report(E.initializer_not_allowed(init.span, "an `attention` morphism takes a family "
                                                            "(`~ Normal`, `~ Laplace`, `~ Cauchy`) or no "
                                                            "initializer"))
    elif role in ("embed", "discretize") and init is not None:
        ctx.report(E.initializer_not_allowed(init.span,
                                             f"{_article(role)} `{role}` morphism takes no `~` initializer"))
    elif role == "kernel" and init is not None:
        e = init.expr
        if isinstance(e, A.MName):
            family = family_lookup(ctx, e.name)
            if family is not None and family.improper:  # E9.2: `~ Flat`
                ctx.report(SE.improper_position(e.name.span, family.name, f"a kernel (`~ {family.name}`)"))
                family = None
            elif family is not None and family.kernel == "no":
                ctx.report(E.family_position(e.name.span, family.name))
                family = None
            elif family is not None and not kernel_supported(family.name):  # E9.9
                ctx.report(SE.runtime_unsupported(e.name.span, f"family `{family.name}`"))
        else:
            ctx.report(outside_core(init.span, "a kernel initializer with arguments or an expression"))
    elif role == "latent" and init is not None:
        e = init.expr
        improper = e.name if isinstance(e, A.MName) else (e.callee if isinstance(e, A.MCall) else None)
        if improper is not None and improper.text in FAMILIES and FAMILIES[improper.text].improper \
                and ctx.value(improper.text) is None:  # E9.2: `~ Flat` as a prior
            ctx.fact(improper.span, "family", improper.text)
            ctx.report(SE.improper_position(improper.span, improper.text, "a latent morphism's prior"))
        elif isinstance(e, A.MName) and (e.name.text in FAMILIES or e.name.text in OUTSIDE_CORE_FAMILIES):
            fam = FAMILIES.get(e.name.text)
            example = fam.signature if fam else f"{e.name.text}(…)"
            ctx.report(E.initializer_not_allowed(init.span, f"a latent morphism's prior needs "
                                                             f"hyper-parameters: `~ {example}`"))
        elif isinstance(e, A.MCall) and e.callee.text not in ("identity", "from_data", *MORPHISM_BUILTINS) \
                and ctx.value(e.callee.text) is None:
            prior = family_lookup(ctx, e.callee)
            if prior is not None:
                if len(e.args) != len(prior.params):
                    ctx.report(E.arity(e.callee.span, prior.name, len(prior.params),
                                       ", ".join(p for p, _ in prior.params), len(e.args)))
                else:
                    bad = [a for a in e.args if not isinstance(a, A.Number)]
                    for a in bad:
                        ctx.report(E.prior_not_number(a.span))
                    if not bad:
                        check_literal_support(ctx, prior, list(zip(prior.params, e.args)))
                ctx.report(E.no_effect(init.span, "a prior on a latent morphism has no effect at run time"))
        else:
            ctx.report(E.initializer_not_allowed(init.span, "a latent morphism takes no expression initializer; "
                                                            "give a prior `~ F(args)` or nothing"))
    elif role in ("observed", "let"):
        if init is None:
            example = "~ identity(" + (d.dom.name.text if isinstance(d.dom, A.TName) else "A") + ")" \
                if role == "observed" else "~ f >> g"
            ctx.report(E.missing_initializer(d.name.span, role, example))
        else:
            e = init.expr
            head = e.name if isinstance(e, A.MName) else (e.callee if isinstance(e, A.MCall) else None)
            if head is not None and head.text in FAMILIES and ctx.value(head.text) is None \
                    and not (isinstance(e, A.MCall) and head.text in ("identity", "from_data")):
                ctx.fact(head.span, "family", head.text)
                ctx.report(E.initializer_not_allowed(init.span, f"{_article(role)} `{role}` morphism's initializer "
                                                                f"must be a morphism expression, not a family"))
            else:
                init_info = infer_morph(ctx, e, allow_from_data=mt if role == "observed" else None)
                if init_info.known and mt.known:
                    if role == "let":
                        if not (compatible(init_info.type.dom, dom) and compatible(init_info.type.cod, cod)):
                            ctx.report(E.initializer_type(init.expr.span, init_info.type, name, mt))
                    else:
                        if init_info.stratum == "stochastic":
                            ctx.report(E.observed_not_relational(init.expr.span, ctx.snippet(init.expr.span)))
                        elif is_discrete(init_info.type.dom) and is_discrete(init_info.type.cod) \
                                and is_discrete(dom) and is_discrete(cod):
                            if size(init_info.type.dom) != size(dom):
                                ctx.report(E.observed_sizes(init.expr.span, "domain", size(init_info.type.dom), size(dom)))
                            elif size(init_info.type.cod) != size(cod):
                                ctx.report(E.observed_sizes(init.expr.span, "codomain", size(init_info.type.cod), size(cod)))

    # ---- signature requirements by role (5.3)
    known = mt.known
    if role in ("latent", "observed") and known and not (is_discrete(dom) and is_discrete(cod)):
        ctx.report(E.role_signature(d.name.span, f"{_article(role)} {role} morphism needs finite-set domain "
                                                 f"and codomain, got `{spell_mor(mt)}`"))
    elif role == "kernel" and init is None and known and not (is_discrete(dom) and is_discrete(cod)):
        ctx.report(E.role_signature(d.name.span, f"a lookup-table kernel (no `~` family) needs finite-set "
                                                 f"domain and codomain, got `{spell_mor(mt)}`; did you mean to "
                                                 f"add a family such as `~ Normal`?"))
    elif role == "kernel" and family is not None and not is_unknown(cod):
        if family.kernel_cod == "discrete" and not is_discrete(cod):
            ctx.report(E.role_signature(d.cod.span, f"family `{family.name}` needs a finite-set codomain, "
                                                    f"got {describe(cod)}"))
        elif family.kernel_cod == "bool" and not (is_discrete(cod) and [a.n for a in atoms(cod)] == [2]):
            ctx.report(E.role_signature(d.cod.span, f"family `{family.name}` needs the codomain `FinSet 2`, "
                                                    f"got {describe(cod)}"))
        elif family.kernel_cod == "continuous" and not is_continuous(cod):
            ctx.report(E.role_signature(d.cod.span, f"family `{family.name}` needs a Real codomain, "
                                                    f"got {describe(cod)}"))
    elif role == "embed" and known:
        if not isinstance(strip(dom), FinSet):
            ctx.report(E.role_signature(d.dom.span, f"an embed morphism needs a single `FinSet` domain, "
                                                    f"got {describe(dom)}"))
        elif not is_continuous(cod):
            ctx.report(E.role_signature(d.cod.span, f"an embed morphism needs a Real codomain, got {describe(cod)}"))
    elif role == "attention":
        for t, where, node in ((dom, "domain", d.dom), (cod, "codomain", d.cod)):
            if not is_unknown(t) and not is_continuous(t):
                ctx.report(E.role_signature(node.span, f"an attention morphism needs a Real {where}, "
                                                       f"got {describe(t)}"))
        if not is_unknown(dom) and is_continuous(dom) and is_sized(dom):
            ctx.report(E.size_name_literal(d.dom.span, "an attention morphism's width",
                                           size_names(dom)[0], spell(dom)))
        elif not is_unknown(dom) and is_continuous(dom):
            width = dim(dom)
            h = heads if heads is not None else (None if "heads" in opts else 1)
            if h is not None and head_dim is None and "head_dim" not in opts:
                if width % h:
                    ctx.report(E.heads_divide(opts["heads"].key.span, h, dom, width))
                else:
                    head_dim = width // h
            heads = h
    elif role == "discretize":
        if "bins" not in opts:
            ctx.report(E.missing_bins(d.name.span, name))
        if not is_unknown(dom):
            sd = strip(dom)
            if not (isinstance(sd, Real) and sd.n == 1 and sd.low is not None and sd.high is not None):
                ctx.report(E.role_signature(d.dom.span, f"discretize needs a bounded `Real 1` domain, "
                                                        f"got {describe(dom)}"))
            elif bins is not None and not is_unknown(cod) and not (isinstance(strip(cod), FinSet)
                                                                   and strip(cod).n == bins):
                ctx.report(E.role_signature(d.cod.span, f"discretize with bins={bins} needs a codomain of "
                                                        f"{bins} elements, got {describe(cod)}"))

    # ---- over / iid (5.2) and options without effect (QVR707)
    axis_names = tuple(dict.fromkeys(["dom", "cod"] + [n.text for n in type_names(d.dom) + type_names(d.cod)]))
    for key in ("over", "iid"):
        if key in opts and role in ("latent", "kernel"):
            if (role == "latent" and prior is None) or (role == "kernel" and init is None):
                ctx.report(E.morphism_axes_need_family(opts[key].key.span, key, name))
                break
    else:
        if role in ("latent", "kernel"):
            _check_axes(ctx, d, opts, prior or family, axis_names)
    if "scale" in opts and role in ("embed", "discretize", "observed", "let"):
        ctx.report(E.no_effect(opts["scale"].key.span, f"`scale` has no effect on {_article(role)} {role} morphism"))
    if "scale" in opts and role == "attention" and init is None:
        ctx.report(E.no_effect(opts["scale"].key.span, "`scale` has no effect on an attention morphism "
                                                       "without a family"))
    if role == "kernel":
        fname = family.name if family else None
        if "hidden_dim" in opts and (family is None or is_discrete(dom)):
            why = "a kernel with a discrete domain" if family is not None else "a kernel without a family"
            ctx.report(E.no_effect(opts["hidden_dim"].key.span, f"`hidden_dim` has no effect on {why}"))
        for key, fams in (("n_layers", {"Flow"}), ("rank", {"LowRankMVN"}),
                          ("temperature", {"RelaxedBernoulli", "RelaxedOneHotCategorical"})):
            if key in opts and fname not in fams:
                ctx.report(E.no_effect(opts[key].key.span, f"`{key}` has no effect with "
                                       + (f"family `{fname}`" if fname else "a kernel without a family")))

    # ---- what it binds (5.6)
    if role in ("latent",):
        stratum, rule = "relational", ctx.rule()[0]
    elif role == "kernel" and init is None:
        stratum, rule = "relational", "markov"
    elif role == "observed":
        stratum = "relational"
        rule = init_info.rule if init_info and init_info.known else None
    elif role == "let":
        stratum = init_info.stratum if init_info and init_info.known else None
        rule = init_info.rule if init_info and init_info.known else None
    elif role in ("kernel", "embed", "discretize", "attention", "pretrained"):
        stratum, rule = "stochastic", None
    else:
        stratum, rule = None, None
    lookup = role == "kernel" and init is None
    init_text = ctx.snippet(init.expr.span, 60) if init is not None else None
    fam_name = family.name if family else (prior.name if prior else None)
    # extension fields (E2-E4): an attention without a family has no density; a `let`
    # morphism inherits whether its expression ends in such a morphism
    if role == "attention":
        deterministic = init is None
        ext = dict(deterministic=deterministic, heads=heads, head_dim=head_dim, causal=causal,
                   causal_strict=causal_strict, mixes=True)
    elif role == "let":
        known = bool(init_info and init_info.known)
        ext = dict(deterministic=known and init_info.deterministic,
                   mixes=known and init_info.mixes)
    elif role == "pretrained":  # E10: position i's draw reads the tokens up to i
        ext = dict(pretrained=pretrained, mixes=True, causal=True)
    else:
        ext = dict(positions=positions) if role == "embed" else {}
    ctx.fact(d.name.span, "def", ("value", name))
    if dup:
        return
    if replicate and replicate > 1 or (replicate == 1 and "replicate" in opts):
        members = tuple(f"{name}_{i}" for i in range(replicate))
        for i, member in enumerate(members):
            existing = ctx.value(member)
            if existing is not None:
                ctx.report(E.duplicate_declaration(d.name.span, member, ctx.line_of("value", member),
                                                   ctx.rel_loc_of("value", member)))
                continue
            ctx.bind("value", member, MorphismSym(member, mt, role, fam_name, stratum, rule, lookup,
                                                  init_text, scale, bins, (i, replicate, name), axis_names,
                                                  **ext),
                     d.name.span)
        ctx.bind("value", name, GroupSym(name, members, mt,
                                         deterministic=bool(ext.get("deterministic")),
                                         mixes=bool(ext.get("mixes"))),
                 d.name.span)
    else:
        ctx.bind("value", name, MorphismSym(name, mt, role, fam_name, stratum, rule, lookup, init_text,
                                            scale, bins, None, axis_names, **ext), d.name.span)


# ---------------------------------------------------------------- let and export

def check_let(ctx: DeclContext, d: A.LetDecl) -> None:
    dup = check_duplicate(ctx, "value", d.name)
    check_family_shadow(ctx, d.name)
    info = infer_morph(ctx, d.expr)
    if d.where is not None:
        ctx.report(outside_core(d.where_kw, "`where` clauses", plural=True))
    ctx.fact(d.name.span, "def", ("value", d.name.text))
    if dup:
        return
    if info.known and d.where is None:
        sym = LetSym(d.name.text, info.type, info.stratum, info.rule, ctx.snippet(d.expr.span, 80),
                     info.deterministic, info.mixes)
    else:
        sym = UnknownSym(d.name.text)
    ctx.bind("value", d.name.text, sym, d.name.span)


def check_export(ctx: DeclContext, d: A.ExportDecl) -> None:
    e = d.expr
    if isinstance(e, A.MName):
        sym = ctx.value(e.name.text)
        if sym is None:
            value_lookup_error(ctx, e.name)
            return
        ctx.fact(e.name.span, "ref", ("value", e.name.text))
        if isinstance(sym, DeductionSym):
            ctx.report(E.not_exportable(e.name.span, e.name.text, "deduction"))
            return
        if isinstance(sym, GroupSym):
            ctx.report(E.not_exportable(e.name.span, e.name.text, "replica group"))
            return
        ctx.use("value", e.name.text)
        ctx.exports.append((e.name.text, e.name.span))
        if not isinstance(sym, UnknownSym) and not (isinstance(sym, ProgramSym) and sym.parametric):
            from qvr.sema.check_morph import sym_info
            info = sym_info(sym)
            if info.known:
                ctx.fact(e.span, "expr", (info.type, e.name.text))
        return
    infer_morph(ctx, e)
    ctx.exports.append((None, e.span))
