"""Constructors for semantic diagnostics (QVR1xx-QVR7xx, QVR900 from the checker).

One function per error shape; messages follow qvr-language.md section 12 (lower-case start,
QVR names in backticks, no final period, types named with their structure).  Checkers never
build message strings inline.
"""
from __future__ import annotations

from typing import Optional

from qvr.diagnostics import Related, error, warning
from qvr.sema.families import ROLES
from qvr.sema.suggest import did_you_mean
from qvr.sema.types import MorType, Ty, describe, describe_mor, spell_mor
from qvr.text import Span


def _sug(s):
    return (("suggest", s),) if s else ()


# ---------------------------------------------------------------- names (QVR1xx)

def undefined_object(span: Span, name: str, s: Optional[str]):
    return error("QVR101", span, f"undefined object `{name}`{did_you_mean(s)}", data=_sug(s))


def undefined_morphism(span: Span, name: str, s: Optional[str]):
    return error("QVR102", span, f"undefined morphism `{name}`{did_you_mean(s)}", data=_sug(s))


def used_before_declaration(span: Span, name: str, line: int):
    return error("QVR103", span, f"`{name}` is used before its declaration on line {line}")


def duplicate_declaration(span: Span, name: str, line: Optional[int], first: Optional[Span]):
    where = f" on line {line}" if line else ""
    related = (Related(first, f"`{name}` is first declared here"),) if first else ()
    return error("QVR104", span, f"`{name}` is already declared{where}", related=related)


def object_not_morphism(span: Span, name: str):
    return error("QVR105", span, f"`{name}` is an object, not a morphism")


def not_an_object(span: Span, name: str, kind: str):
    return error("QVR105", span, f"`{name}` is a {kind}, not an object")


def group_misuse(span: Span, name: str, members: tuple):
    shown = ", ".join(members) if len(members) <= 2 else f"{members[0]}, …, {members[-1]}"
    return error("QVR105", span, f"`{name}` is a replica group ({shown}); use it as an argument of "
                                 f"fan(…) or name a member")


def deduction_not_morphism(span: Span, name: str, what: str = "used as a morphism"):
    return error("QVR105", span, f"`{name}` is a deduction and cannot be {what}")


def template_not_morphism(span: Span, name: str):
    return error("QVR105", span, f"`{name}` is a parametric program and cannot be used as a morphism; "
                                 f"call it from a `sample` step")


def self_call(span: Span, name: str):
    return error("QVR105", span, f"`{name}` cannot call itself")


def unbound_variable(span: Span, name: str, s: Optional[str]):
    return error("QVR106", span, f"unbound variable `{name}`{did_you_mean(s)}", data=_sug(s))


def unbound_later(span: Span, name: str, line: int):
    return error("QVR106", span, f"unbound variable `{name}`: it is bound later in this program (line {line})")


def host_data_step_arg(span: Span, name: str):
    return error("QVR106", span, f"unbound variable `{name}`: step arguments must be program variables; "
                                 f"host data reaches a step through a `let` expression")


def bound_twice(span: Span, name: str, line: int, first: Span):
    return error("QVR107", span, f"`{name}` is already bound in this program (line {line})",
                 related=(Related(first, f"`{name}` is first bound here"),))


def duplicate_parameter(span: Span, name: str, first: Span):
    return error("QVR107", span, f"parameter `{name}` is given more than once",
                 related=(Related(first, f"`{name}` is first given here"),))


def unknown_target(span: Span, name: str, s: Optional[str]):
    return error("QVR108", span, f"unknown morphism or distribution family `{name}`{did_you_mean(s)}",
                 data=_sug(s))


def unknown_family(span: Span, name: str, s: Optional[str]):
    return error("QVR108", span, f"unknown distribution family `{name}`{did_you_mean(s)}", data=_sug(s))


def unknown_function(span: Span, name: str, s: Optional[str]):
    return error("QVR109", span, f"unknown function `{name}`{did_you_mean(s)}", data=_sug(s))


def cannot_call_morphism(span: Span, name: str, kind: str):
    return error("QVR109", span, f"`{name}` is a {kind}; morphisms and programs cannot be called "
                                 f"inside let-expressions")


def unknown_method(span: Span, name: str):
    return error("QVR110", span, f"unknown chart method `{name}`; expected goal_weight")


def unknown_postfix(span: Span, name: str):
    return error("QVR110", span, f"unknown postfix operation `.{name}`")


def not_visible(span: Span, name: str, line: int):
    return error("QVR112", span, f"`{name}` is not visible here (it is bound inside a marginalize block "
                                 f"on line {line})")


# sizes read from the data (`FinSet N`, `Real N`; docs/extensions.md, sizes from the data)

def size_name_placement(span: Span, kind: str, name: str):
    return error("QVR113", span, f"`{kind} {name}` (a size read from the data) can only be an object's "
                                 f"right-hand side: declare `object Row : {kind} {name}` and use `Row` here")


def size_name_is_object(span: Span, name: str, line: Optional[int]):
    where = f" (declared on line {line})" if line else ""
    return error("QVR114", span, f"`{name}` is an object{where}; a size read from the data needs a "
                                 f"name that is not an object's (e.g. `N_{name}`)")


def size_name_literal(span: Span, what: str, name: str, obj: str):
    return error("QVR115", span, f"{what} needs a size written in the program, but `{obj}` has the "
                                 f"size `{name}` read from the data")


# ---------------------------------------------------------------- options (QVR2xx)

def unknown_option(span: Span, key: str, where: str, s: Optional[str]):
    return error("QVR201", span, f"unknown option `{key}` for {where}{did_you_mean(s)}", data=_sug(s))


def option_not_for_role(span: Span, key: str, role: str):
    article = "an" if role[0] in "aeiou" else "a"
    return error("QVR201", span, f"option `{key}` does not apply to {article} `{role}` morphism")


def duplicate_option(span: Span, key: str):
    return error("QVR202", span, f"option `{key}` is given more than once")


def option_shape(span: Span, key: str, expects: str):
    return error("QVR203", span, f"option `{key}` expects {expects}")


def causal_shape(span: Span):
    """`causal=1`, `causal="x"`: the option is a bare flag or `strict` (docs/extensions.md E2)."""
    return error("QVR203", span, "option `causal` is written alone (keys j <= i) or as "
                                 "`causal=strict` (keys j < i)")


def unknown_causal_value(span: Span, value: str, s: Optional[str]):
    """`causal=yes`: the one value `causal` takes is `strict`."""
    return error("QVR204", span, f"unknown `causal` value `{value}`; expected strict (keys j < i), "
                                 f"or `causal` alone (keys j <= i){did_you_mean(s)}", data=_sug(s))


def from_data_shape(span: Span):
    return error("QVR203", span, "`from_data` expects a string key, e.g. `from_data(\"weights\")`")


def unknown_role(span: Span, value: str, s: Optional[str]):
    return error("QVR204", span, f"unknown role `{value}`; expected one of {', '.join(ROLES)}"
                                 f"{did_you_mean(s)}", data=_sug(s))


def unknown_value(span: Span, what: str, value: str, expected: tuple, s: Optional[str]):
    return error("QVR204", span, f"unknown {what} `{value}`; expected "
                                 f"{'one of ' if len(expected) > 1 else ''}{', '.join(expected)}"
                                 f"{did_you_mean(s)}", data=_sug(s))


def out_of_range(span: Span, key: str, rule: str, got: str):
    return error("QVR205", span, f"`{key}` must be {rule}, got {got}")


def size_zero(span: Span, kind: str):
    return error("QVR205", span, f"`{kind}` size must be at least 1, got 0")


def low_not_below_high(span: Span):
    return error("QVR205", span, "`low` must be smaller than `high`")


def missing_role(span: Span, name: str):
    return error("QVR206", span, f"morphism `{name}` is missing the required option `role`")


def missing_bins(span: Span, name: str):
    return error("QVR206", span, f"discretize morphism `{name}` is missing the required option `bins`")


def event_axes_need_family(span: Span):
    return error("QVR207", span, "`over`/`iid_over` apply only to a distribution family")


def morphism_axes_need_family(span: Span, key: str, name: str):
    return error("QVR207", span, f"`{key}` needs a family: `{name}` has no `~` family or prior")


def bounds_need_real(span: Span):
    return error("QVR207", span, "bounds apply only to a single `Real n` object")


# ---------------------------------------------------------------- types (QVR3xx)

def compose_mismatch(span: Span, left: str, lt: Ty, right: str, rt: Ty):
    return error("QVR301", span, f"cannot compose: `{left}` has codomain {describe(lt)} but `{right}` "
                                 f"has domain {describe(rt)}")


def fan_domains(span: Span, i: int, got: Ty, expected: Ty):
    return error("QVR302", span, f"fan: argument {i} has domain {describe(got)}, expected {describe(expected)}")


def not_endomorphism(span: Span, comb: str, mt: MorType):
    return error("QVR303", span, f"`{comb}` needs a morphism whose domain and codomain agree, but its "
                                 f"argument has type `{spell_mor(mt)}`")


def bad_scan_cell(span: Span, mt: MorType, finite_state: Optional[str] = None,
                  cell: str = "step"):
    """`finite_state`: "cell" (`A * H -> H` with H finite) or "endomorphism" (`H -> H`
    finite) adds what to write instead; None the plain message."""
    msg = f"`scan` needs a cell of type `A * H -> H` over Real spaces, got `{spell_mor(mt)}`"
    if finite_state == "cell":
        # scan threads a Real state only (runtime spec 4.7: its states have no density);
        # the finite-state recurrence is a chain of sample steps, which enumeration sums
        # out by the forward algorithm (qvr.inference.enumeration.enumerate)
        msg += (f"; `scan` does not thread a finite state: write one `sample` step per time "
                f"step (`sample h2 <- {cell}(x2, h1)`, `sample h3 <- {cell}(x3, h2)`, ...; "
                f"inference sums the states out by the forward algorithm)")
    elif finite_state == "endomorphism":
        msg += (f"; `scan` does not thread a finite state: `repeat({cell}, n)` applies a "
                f"finite endomorphism n times")
    return error("QVR304", span, msg)


def scan_state_mismatch(span: Span, last: Ty, cod: Ty):
    return error("QVR304", span, f"scan cell: last domain factor {describe(last)} does not match "
                                 f"codomain {describe(cod)}")


def needs_relational(span: Span, what: str):
    return error("QVR305", span, f"{what} needs a relational (finite) morphism")


def needs_algebra(span: Span, what: str):
    return error("QVR305", span, f"{what} needs a composition rule of level algebra")


def role_signature(span: Span, message: str):
    return error("QVR306", span, message)


def arg_type(span: Span, arg: str, got: Ty, callee: str, expected: Ty):
    return error("QVR307", span, f"argument `{arg}` has type {describe(got)} but `{callee}` expects "
                                 f"{describe(expected)}")


def input_type(span: Span, name: str, dom: Ty, inp: Ty):
    return error("QVR307", span, f"`{name}` has domain {describe(dom)} but the program input is {describe(inp)}")


def count_below_one(span: Span, comb: str, n: int):
    return error("QVR308", span, f"`{comb}` count must be at least 1, got {n}")


def not_finite(span: Span, what: str, t: Ty):
    return error("QVR309", span, f"{what} must be a finite set, got {describe(t)}")


def identity_needs_object(span: Span):
    return error("QVR101", span, "`identity` needs an object name, e.g. `identity(Tag)`")


def identity_not_finite(span: Span, t: Ty):
    return error("QVR309", span, f"`identity` needs a finite set, got {describe(t)}")


def initializer_not_allowed(span: Span, message: str):
    return error("QVR311", span, message)


def family_position(span: Span, name: str):
    return error("QVR312", span, f"family `{name}` can only be used as a kernel family (`~ {name}`)")


def missing_initializer(span: Span, role: str, example: str):
    return error("QVR313", span, f"an `{role}` morphism needs a `~` initializer (e.g. `{example}`)")


def initializer_type(span: Span, got: MorType, name: str, declared: MorType):
    return error("QVR314", span, f"the initializer has type {describe_mor(got)} but `{name}` is declared "
                                 f"{describe_mor(declared)}")


def observed_not_relational(span: Span, text: str):
    return error("QVR314", span, f"the initializer of an observed morphism must be a finite (relational) "
                                 f"morphism; `{text}` is stochastic")


def observed_sizes(span: Span, which: str, got: int, want: int):
    return error("QVR314", span, f"the initializer's {which} has {got} elements, the declaration's {want}")


# ---- extension (docs/extensions.md E2-E4): QVR316-QVR318

def observe_deterministic(span: Span, name: str, whole: bool, kind: str = "observe"):
    """`whole`: the target is itself an attention without a family (it can be given one)."""
    what = f"`{name}` is deterministic" if whole else f"`{name}` ends in a deterministic morphism"
    fix = "give the attention a family (`~ Normal`)" if whole else "end it with a kernel"
    # the quick fix (`qvr.ide.code_actions`) gives the attention `name` a family
    data = (("family_for", name),) if whole else ()
    if kind == "sample":
        return error("QVR316", span, f"{what}: a sampled value needs a density; {fix}, or "
                                     f"observe through it (`let f = {name} >> head`, then "
                                     f"`observe y <- f`)", data=data)
    return error("QVR316", span, f"{what}: an observed value needs a density; {fix}", data=data)


def heads_divide(span: Span, heads: int, t: Ty, width: int):
    return error("QVR317", span, f"`heads={heads}` does not divide the width {width} of {describe(t)}; "
                                 f"give `head_dim` or a number of heads that divides {width}")


def needs_real_object(span: Span, name: str, t: Ty):
    return error("QVR318", span, f"`{name}` needs a Real space, got {describe(t)}")


def needs_real_morphism(span: Span, name: str, mt: MorType):
    return error("QVR318", span, f"`{name}` needs a morphism between Real spaces, got {describe_mor(mt)}")


# ---- issue 36 point 8: `marginalize z : I <- …` sums out one latent per element of I
# (QVR319-QVR321)

def _per_row_tail(z: str, plate: str) -> str:
    return (f"`marginalize {z} : {plate}` sums out one `{z}` per element of `{plate}`, each "
            f"against the terms of its own row")


def per_row_term(span: Span, z: str, plate: str, name: str, kind: str,
                 index: Optional[str] = None):
    """A step of a per-row block with no term per element of its plate (QVR319)."""
    if kind == "score":
        return error("QVR319", span, f"a `score` step has no term per element of `{plate}`: "
                     f"{_per_row_tail(z, plate)}; write the row's density as an `observe "
                     f"… : {plate} <- …` in the block, or the whole mixture as a `score` "
                     f"with `logsumexp` after the block")
    head = f"`{name}` is indexed by `{index}`, not `{plate}`" if index else \
        f"`{name}` has no term per element of `{plate}`"
    return error("QVR319", span, f"{head}: {_per_row_tail(z, plate)}, so each `{kind}` in "
                 f"its block is indexed by `{plate}` (`{kind} {name} : {plate} <- …`); for one "
                 f"`{z}` shared by all rows, drop the annotation (`marginalize {z} <- …`)")


def per_row_combines(span: Span, z: str, plate: str, name: str, what: str):
    """A let of a per-row block that mixes the rows of a value depending on z (QVR320)."""
    return error("QVR320", span, f"`{name}` combines the elements of a value that depends on "
                 f"`{z}` ({what}): {_per_row_tail(z, plate)}, and a row may read only its own "
                 f"`{z}` (elementwise arithmetic, `a[{z}]`); compute it from values that do "
                 f"not depend on `{z}`, or drop the annotation for one `{z}` shared by all "
                 f"rows (`marginalize {z} <- …`)")


def per_row_plate(span: Span, z: str, text: str):
    """The annotation of a plain block is not one declared object (QVR321)."""
    return error("QVR321", span, f"the annotation of a marginalize without `over` is its "
                 f"plate, one declared object (`marginalize {z} : Obs <- …` sums out one "
                 f"`{z}` per element of `Obs`); `{text}` is not one: declare an object for "
                 f"the rows")


def builtin_needs_object(span: Span, name: str):
    return error("QVR101", span, f"`{name}` needs an object name, e.g. `{name}(Latent)`")


def builtin_literal_arg(span: Span, name: str, what: str):
    return error("QVR406", span, f"`{name}` takes {what}, not a literal")


def rule_mismatch(span: Span, left: str, lr: str, right: str, rr: str):
    return error("QVR315", span, f"cannot combine relational morphisms with different composition rules: "
                                 f"`{left}` uses {lr}, `{right}` uses {rr}")


# ---------------------------------------------------------------- programs (QVR4xx)

def missing_return(span: Span, name: str):
    return error("QVR401", span, f"program `{name}` ends without a `return` step")


def step_after_return(span: Span):
    return error("QVR402", span, "no step may follow `return`")


def second_return(span: Span):
    return error("QVR402", span, "a program has exactly one `return` step")


def return_in_block(span: Span):
    return error("QVR402", span, "`return` may not appear inside a marginalize block")


def param_count(span: Span, name: str, n: int, dom: str, k: int):
    return error("QVR403", span, f"program `{name}` has {n} parameter{'s' if n != 1 else ''} but its "
                                 f"domain `{dom}` has {k} factor{'s' if k != 1 else ''}")


def mixed_params(span: Span):
    return error("QVR404", span, "a program's parameters must be all typed or all untyped")


def arity(span: Span, name: str, n: int, params: str, got: int):
    return error("QVR405", span, f"`{name}` expects {n} argument{'s' if n != 1 else ''}"
                                 f"{f' ({params})' if params else ''}, got {got}")


def literal_to_morphism(span: Span, name: str):
    return error("QVR406", span, f"a literal cannot be passed to `{name}`; bind it with `let` first")


def prior_not_number(span: Span):
    return error("QVR406", span, "the hyper-parameters of a prior must be numbers")


def family_needs_args(span: Span, sig: str, name: str):
    return error("QVR407", span, f"family `{name}` needs arguments: {sig}")


def vector_literal(span: Span, param: str, family: str, kind: str):
    what = "a vector" if kind == "vec" else "a matrix"
    return error("QVR408", span, f"the parameter `{param}` of `{family}` is {what} and cannot be a literal")


def truncated_needs_variable(span: Span):
    return error("QVR408", span, "`TruncatedNormal` needs at least one variable argument")


def template_misuse(span: Span, name: str):
    return error("QVR409", span, f"parametric program `{name}` can only be called from an unindexed "
                                 f"`sample` step")


def marginalize_requirement(span: Span, message: str):
    return error("QVR410", span, message)


def bracket_arg(span: Span):
    return error("QVR411", span, "a bracketed argument `a[z]` is allowed only inside a grouped "
                                 "marginalize block, indexed by its coordinate")


def event_rank(span: Span, family: str, rank: int, n: int):
    return error("QVR412", span, f"family `{family}` has event rank {rank}, but `over` names {n} "
                                 f"object{'s' if n != 1 else ''}")


def both_lists(span: Span, name: str, a: str, b: str):
    return error("QVR412", span, f"`{name}` cannot appear in both `{a}` and `{b}`")


def not_axis(span: Span, name: str, morph: str, axes: tuple):
    return error("QVR412", span, f"`{name}` is not an axis of `{morph}`; expected one of {', '.join(axes)}")


def iid_needs_index(span: Span, index: str):
    return error("QVR412", span, f"`iid_over` must include the plate index `{index}`")


def factor_problem(span: Span, message: str):
    return error("QVR414", span, message)


def too_many_indices(span: Span, name: str, axes: int, got: int):
    return error("QVR415", span, f"`{name}` has {axes} ax{'es' if axes != 1 else 'is'} but is indexed "
                                 f"with {got} indices")


def index_out_of_range(span: Span, i: int, size: int):
    return error("QVR415", span, f"index {i} is out of range for an axis of size {size}")


def index_not_integer(span: Span):
    return error("QVR415", span, "an index must be an integer")


def builtin_arity(span: Span, name: str, n: int, got: int):
    return error("QVR416", span, f"`{name}` expects {n} argument{'s' if n != 1 else ''}, got {got}")


def needs_deduction(span: Span, which: str, fn: str):
    return error("QVR417", span, f"the {which} argument of `{fn}` must be a deduction")


def not_a_chart(span: Span, name: str):
    return error("QVR418", span, f"`{name}` is not a chart; methods can only be called on the result of `parse`")


def kind_mismatch(span: Span, message: str):
    return error("QVR420", span, message)


# ---------------------------------------------------------------- module (QVR6xx)

def unknown_rule(span: Span, name: str, s: Optional[str]):
    return error("QVR601", span, f"unknown composition rule `{name}`{did_you_mean(s)}", data=_sug(s))


def rule_level(span: Span, name: str, level: str, want: str):
    return error("QVR601", span, f"composition rule `{name}` is a {level}, not an {want}"
                 if want[0] in "aeiou" else f"composition rule `{name}` is a {level}, not a {want}")


def not_exportable(span: Span, name: str, what: str):
    return error("QVR602", span, f"`{name}` is a {what} and cannot be exported")


def second_composition(span: Span):
    return error("QVR603", span, "a module may contain at most one composition declaration")


# ---------------------------------------------------------------- warnings (QVR7xx)

def host_resembles(span: Span, name: str, s: str):
    return warning("QVR701", span, f"`{name}` is not bound in this program and will be read from host data; "
                                   f"did you mean `{s}`?", data=_sug(s))


def host_is_declaration(span: Span, name: str):
    return warning("QVR702", span, f"`{name}` names a top-level declaration, which is not a value here; "
                                   f"it will be read from host data")


def host_bound_later(span: Span, name: str, line: int):
    return warning("QVR703", span, f"`{name}` is bound later in this program (line {line}); here it is "
                                   f"read from host data")


def host_closed_block(span: Span, name: str, line: int):
    return warning("QVR703", span, f"`{name}` is bound inside a marginalize block that has closed (line "
                                   f"{line}); here it is read from host data")


def literal_support(span: Span, message: str):
    return warning("QVR706", span, message)


def no_effect(span: Span, message: str):
    return warning("QVR707", span, message)


def binder_shadows(span: Span, name: str):
    return warning("QVR709", span, f"factor binder `{name}` shadows a program variable")


def duplicate_export(span: Span, name: str):
    return warning("QVR710", span, f"`{name}` is exported more than once")


def late_composition(span: Span):
    return warning("QVR711", span, "composition declaration should precede all morphism declarations")


def shadows_family(span: Span, name: str):
    return warning("QVR712", span, f"`{name}` shadows the distribution family of the same name")


def attention_in_scan(span: Span):
    return warning("QVR715", span, "the cell of this `scan` holds an attention, but `scan` feeds "
                                   "its cell one position at a time: the attention sees a sequence "
                                   "of length 1 (the current position; none at all if strictly "
                                   "causal); attend before or after the scan")


def unused_let(span: Span, name: str):
    return warning("QVR713", span, f"`{name}` is bound but never used")


def companion(span: Span, name: str, used: str, how: str):
    return warning("QVR714", span, f"`{name}` is never used, but `{used}` is {how}; is one of them misspelled?")


# ---------------------------------------------------------------- E9.3 recurrences and ODEs (QVR424, QVR425)

def recurrence_not_object(span: Span, fn: str, got: str):
    return error("QVR424", span, f"the first argument of `{fn}` must be a discrete object (the index "
                                 f"set of the recurrence), got {got}")


def recurrence_needs_lambda(span: Span, fn: str):
    return error("QVR424", span, f"the third argument of `{fn}` must be a lambda `(s, t) -> body`")


def recurrence_lambda_arity(span: Span, fn: str, got: int):
    return error("QVR424", span, f"the lambda of `{fn}` takes 2 parameters (the state and the index), "
                                 f"got {got}")


def recurrence_lambda_misplaced(span: Span, fn: str, which: str):
    return error("QVR424", span, f"a lambda cannot be the {which} argument of `{fn}`; only its third "
                                 f"argument is a lambda")


def recurrence_lambda_repeated(span: Span, fn: str, name: str):
    return error("QVR424", span, f"the parameters of the lambda of `{fn}` must be distinct: `{name}` "
                                 f"is repeated")


def ode_arity(span: Span, got: int):
    return error("QVR425", span, f"`ode` expects 3 to 6 arguments (f, y0, t0?, times, rtol?, atol?), "
                                 f"got {got}")


def ode_t0_scalar(span: Span, got: str, axes: str):
    return error("QVR425", span, f"the initial time of `ode(f, y0, t0, times)` must be a number, but "
                                 f"`{got}` has axes `{axes}` (a fourth argument that is not a number "
                                 f"literal makes the third the initial time)")


def ode_needs_lambda(span: Span):
    return error("QVR425", span, "the first argument of `ode` must be a lambda `(y, t) -> dydt`")


def ode_lambda_arity(span: Span, got: int):
    return error("QVR425", span, f"the lambda of `ode` takes 2 parameters (the state and the time), got {got}")


def ode_lambda_misplaced(span: Span, which: str):
    return error("QVR425", span, f"a lambda cannot be the {which} argument of `ode`; only its first "
                                 f"argument is a lambda")


def ode_lambda_repeated(span: Span, name: str):
    return error("QVR425", span, f"the parameters of the lambda of `ode` must be distinct: `{name}` is repeated")


def ode_times_scalar(span: Span):
    return error("QVR425", span, "the times of `ode` must be a vector (a data vector or a list literal), "
                                 "got a number")


def ode_tolerance(span: Span, which: str):
    return error("QVR425", span, f"`{which}` of `ode` must be a positive number literal")


# ---------------------------------------------------------------- E9.6 recorded quantities (QVR429)

def record_not_numeric(span: Span, name: str, vkind: str):
    return error("QVR429", span, f"`record {name}` needs a numeric value, got a {vkind}: only numbers "
                                 f"are recorded per draw (bind it with `let`)")


def record_in_marginalize(span: Span, name: str, coord: str):
    return error("QVR429", span, f"`{name}` cannot be recorded inside the marginalize block of "
                                 f"`{coord}`: its value depends on the summed-out coordinate `{coord}`; "
                                 f"record it after the block")


# ---------------------------------------------------------------- E9.2 supports (QVR426-QVR428)
# docs/extensions.md E9.2: improper flat priors, truncation, constrained spaces.

def improper_position(span: Span, family: str, where: str):
    return error("QVR426", span, f"`{family}` is an improper prior (a flat density with no "
                                 f"normalising constant): only a `sample` step can draw from it, "
                                 f"not {where}")


def improper_args(span: Span, family: str):
    return error("QVR426", span, f"`{family}` takes no arguments: write `sample x <- {family}`")


def truncation_discrete(span: Span, family: str):
    return error("QVR427", span, f"truncation `[lower=…, upper=…]` needs a continuous family, "
                                 f"but `{family}` is discrete")


def truncation_vector(span: Span, family: str, rank: int):
    return error("QVR427", span, f"truncation `[lower=…, upper=…]` needs a scalar family, but "
                                 f"`{family}` has event rank {rank}")


def truncation_target(span: Span, name: str):
    return error("QVR427", span, f"truncation `[lower=…, upper=…]` applies to a family target, "
                                 f"but `{name}` is not a family")


def truncation_space(span: Span, name: str):
    return error("QVR427", span, f"truncation `[lower=…, upper=…]` cannot be combined with the "
                                 f"constrained space `{name}`: the space fixes the support")


def truncation_empty(span: Span, why: str):
    return error("QVR427", span, f"the truncation is empty: {why}")


def space_misuse(span: Span, name: str, spelling: str, where: str):
    return error("QVR428", span, f"`{name}` is a constrained space ({spelling}): it names the "
                                 f"values of a sample step (`[over={name}]`), not {where}")


def space_family(span: Span, name: str, spelling: str, need: str, family: str, got: str):
    return error("QVR428", span, f"`{name}` is a space of {spelling}: draw it from {need}, got "
                                 f"`{family}`{got}")


def space_alone(span: Span, name: str):
    return error("QVR428", span, f"`{name}` is a constrained space: it must be the only object "
                                 f"of `over`")


# ---------------------------------------------------------------- E9.1 axes, builtins, data steps (QVR421-QVR423, QVR430)
# (docs/e9/letexpr.md; the axis rules are qvr.sema.axes_walk/axes_calls, which name these constructors)

def contraction(span: Span, expr: str, a: str, axis_a: str, b: str, axis_b: str):
    return error("QVR421", span, f"`{expr}` contracts {axis_a} of `{a}` with {axis_b} of `{b}`")


def contraction_scalar(span: Span, expr: str, side: str):
    return error("QVR421", span, f"`{expr}` needs an axis on both sides, but `{side}` is a scalar")


def axis_not_known(span: Span, call: str, value: str, obj: str):
    return error("QVR422", span, f"`{call}`: the axes of `{value}` are not known here, so `{obj}` "
                                 f"names none of them; reduce its last axis with one argument")


def not_an_axis_of(span: Span, call: str, obj: str, value: str, axes: Optional[str]):
    has = f"whose axes are `{axes}`" if axes else "a scalar"
    return error("QVR422", span, f"`{call}`: `{obj}` is not an axis of `{value}`, {has}")


def axis_ambiguous(span: Span, call: str, obj: str, n: int, value: str, axes: str):
    return error("QVR422", span, f"`{call}`: `{obj}` types {n} axes of `{value}` (`{axes}`); it "
                                 f"must name exactly one")


def needs_axes(span: Span, fn: str, need: str, value: str, axes: Optional[str]):
    has = f"axes `{axes}`" if axes else "no axes (a scalar)"
    return error("QVR422", span, f"`{fn}` needs {need}, but `{value}` has {has}")


def list_shapes(span: Span, first: str, first_axes: str, item: str, item_axes: str):
    return error("QVR423", span, f"the items of a list must have one shape: `{first}` has axes "
                                 f"`{first_axes}` but `{item}` has axes `{item_axes}`")


def family_call_value(span: Span, name: str):
    return error("QVR423", span, f"`{name}(…)` is a distribution, not a value: a family call is "
                                 f"allowed only as the first argument of `log_density`, e.g. "
                                 f"`log_density({name}(…), x)`")


def density_family(span: Span, name: str):
    return error("QVR423", span, f"`{name}` has no density to evaluate: `log_density` needs a "
                                 f"proper family usable as a step target")


def log_density_needs_family(span: Span, got: str):
    return error("QVR420", span, f"the first argument of `log_density` must be a family call, e.g. "
                                 f"`Normal(mu, sigma)`, got `{got}`")


def builtin_arity_range(span: Span, name: str, lo: int, hi: int, got: int):
    if hi == lo:
        return builtin_arity(span, name, lo, got)
    return error("QVR416", span, f"`{name}` expects {lo} or {hi} arguments, got {got}" if hi == lo + 1
                 else f"`{name}` expects {lo} to {hi} arguments, got {got}")


def needs_object_arg(span: Span, fn: str, which: str, got: str):
    what = "the axis to use" if which == "second" else "its rows and columns"
    return error("QVR420", span, f"the {which} argument of `{fn}` must be an object name ({what}), "
                                 f"got `{got}`")


def slice_bounds(span: Span, got: str):
    return error("QVR420", span, f"the bounds of `slice` must be integer literals or data (fixed "
                                 f"when the program runs), got `{got}`")


def range_bounds(span: Span, got: str):
    return error("QVR420", span, f"the bounds of a range in an index must be integer literals or "
                                 f"data (fixed when the program runs), got `{got}`")


def list_axis_size(span: Span, call: str, obj: str, value: str, items: int, size):
    return error("QVR422", span, f"`{call}`: `{obj}` is not an axis of `{value}`: a list literal's "
                                 f"axis takes the name of the object it is reduced over only when "
                                 f"their sizes agree, but the list has {items} "
                                 f"item{'s' if items != 1 else ''} and `{obj}` has {size} elements")


def let_axes(span: Span, what: str, want: str, has: str):
    return error("QVR436", span, f"`{what}` names the leading axes of its value `{want}`, but the "
                                 f"value {has}")


def concat_scalars(span: Span, call: str):
    return error("QVR435", span, f"`{call}` needs a vector or a matrix: both operands are scalars")


def concat_scalar(span: Span, call: str, scalar: str, axes: str):
    return error("QVR435", span, f"`{call}`: a scalar (`{scalar}`) is appended only to a vector, "
                                 f"but this operand has axes `{axes}`")


def concat_axes(span: Span, call: str, a: str, a_axes: str, b: str, b_axes: str, need: str):
    return error("QVR435", span, f"`{call}` joins values with {need}: `{a}` has axes `{a_axes}` "
                                 f"but `{b}` has axes `{b_axes}`")


def data_in_marginalize(span: Span):
    return error("QVR430", span, "a `data` step cannot be inside a marginalize block: host data "
                                 "does not depend on the marginalized value; declare it before "
                                 "the block")


def data_axis_type(span: Span, name: str, t: Ty):
    return error("QVR430", span, f"`{name}` cannot be an axis of data: {describe(t)} mixes finite "
                                 f"and real factors (an axis is a finite set or a real space)")


# ---------------------------------------------------------------- E9.9 multivariate families (QVR439, QVR950)

def runtime_unsupported(span: Span, what: str):
    """QVR950 from the checker: the runtime cannot run it (qvr.sema.runnable)."""
    return error("QVR950", span, f"{what} is not supported by this runtime")


def space_family_needs_space(span: Span, name: str, over: str = "", step: str = ""):
    """QVR439: `LKJCholesky` drawn without `over=` a `CorrCholesky K` object (`over`: the
    `over=` written, if any), or by an `observe`/`marginalize` step (`step`)."""
    if step:
        return error("QVR439", span, f"`{name}` is drawn only by a `sample` step with `over=` a "
                                     f"`CorrCholesky K` object, not by {step}")
    got = f", not `over={over}`" if over else ""
    return error("QVR439", span, f"`{name}` needs `over=` a `CorrCholesky K` object (the size of "
                                 f"the Cholesky factor it draws){got}: declare `object L : "
                                 f"CorrCholesky 3` and write `sample l <- {name}(2.0) [over=L]`")


# ---------------------------------------------------------------- E9.10 expression arguments, comparisons (QVR431, QVR432)

def expr_arg_not_variable(span: Span, name: str, what: str):
    """QVR431: an expression given to a morphism or template target (only family targets
    take expressions)."""
    return error("QVR431", span, f"an argument of {what} `{name}` must be a program variable; "
                                 f"bind the expression with `let` first (`let v = …`, then "
                                 f"`{name}(v)`)")


def chained_comparison(span: Span, text: str):
    """QVR432: `a < b < c` (comparisons do not chain)."""
    return error("QVR432", span, f"comparisons do not chain: `{text}` compares a 0/1 value; "
                                 f"write `(a < b) and (b < c)`, or add parentheses to compare "
                                 f"the 0/1 value on purpose")


# ---------------------------------------------------------------- E9.7 computed observes (QVR322-QVR325)
# docs/extensions.md E9.7: `score v : T = e` (one term per element), `observe v = e <- F`.

def observed_latent(span: Span, site: str, name: str, latent: str):
    via = "" if name == latent else f" (through `{name}`)"
    return error("QVR322", span, f"the observed value of `{site}` depends on the latent "
                                 f"`{latent}`{via}: observing a function of a latent is a change "
                                 f"of variables that needs its Jacobian; compute the observed "
                                 f"value from data only, or write the likelihood as a score: "
                                 f"`score {site} : T = log_density(F(…), e)` (plus the "
                                 f"log-Jacobian when it is not constant)")


def computed_in_marginalize(span: Span, what: str, coord: str):
    return error("QVR323", span, f"{what} cannot be inside the marginalize block of `{coord}`: "
                                 f"the block's terms are its marginal per row; put it before "
                                 f"or after the block")


def computed_observe_target(span: Span, site: str, target: str):
    return error("QVR324", span, f"`observe {site} = …` needs a family target (its replicates "
                                 f"are drawn from the family), but `{target}` is a morphism; "
                                 f"observe a family, e.g. `Normal(mu, sigma)`")


def computed_reads_itself(span: Span, site: str):
    return error("QVR324", span, f"the observed value of `{site}` reads `{site}` itself: "
                                 f"compute it from data steps, host data and other observed values")


def per_element_axes(span: Span, what: str, want: str, got: str):
    return error("QVR325", span, f"{what} has one term per element of `{want}`, but its value "
                                 f"{got}")
