"""Constructors for the diagnostics of the statistics extension (docs/extensions.md E9):
recurrences and ODEs (E9.3), recorded quantities (E9.6), supports (E9.2), typed axes,
builtins and data steps (E9.1), multivariate families (E9.9), expression arguments and
comparisons (E9.10), computed observes (E9.7).

One function per error shape, as `qvr.sema.errors` (the core language's diagnostics);
messages follow qvr-language.md section 12.
"""
from __future__ import annotations

from typing import Optional

from qvr.diagnostics import error
from qvr.sema.errors import builtin_arity
from qvr.sema.types import Ty, describe
from qvr.text import Span


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
