"""Constructors for semantic diagnostics (QVR1xx-QVR7xx, QVR900 from the checker).

One function per error shape; messages follow qvr-language.md section 12 (lower-case start,
QVR names in backticks, no final period, types named with their structure).  Checkers never
build message strings inline.  The statistics extension's (docs/extensions.md E9) are in
`stats_errors.py`, the deductions' in `deduction_errors.py`.
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
