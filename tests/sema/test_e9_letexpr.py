"""E9.1 in the checker: axes typed by objects, `data` steps, the builtins, `@`, list
literals, `log_density` and observed values read before their `observe`
(docs/e9/letexpr.md): the axes of every local, the hover text and every new diagnostic
with its exact message."""
import pytest

from qvr.analysis import Document
from qvr.ide.hover import hover
from qvr.sema.axes import Axis, broadcast, matmul_axes, site_axes, spell_axes
from qvr.sema.families import BUILTINS, OUTSIDE_CORE_BUILTINS

HEAD = """object Household : FinSet 40
object Coef : FinSet 3
object Region : FinSet 3
object Lag : FinSet 4
object Vec : Real 2
"""


def program(body: str, dom: str = "Household") -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").split("\n"))
    return HEAD + f"\nprogram p : {dom} -> {dom}\n{lines}\n"


def diags(body: str, dom: str = "Household"):
    """The diagnostics of a program body, but the unused lets (QVR713) of these snippets."""
    doc = Document(program(body, dom))
    return [(d.code, d.message) for d in doc.diagnostics() if d.code != "QVR713"]


def local_types(body: str, dom: str = "Household") -> dict:
    """name -> (type text, detail) of every program local."""
    doc = Document(program(body, dom))
    out = {}
    for slot in doc.state.slots:
        for f in (slot.result.facts if slot.result else ()):
            if f.kind == "local":
                out[f.data.name] = (f.data.type_text, f.data.detail)
    return out


def hover_at(text: str, needle: str):
    """Hover at the `$0` of `needle` (its first occurrence in `text` without the marker)."""
    plain = needle.replace("$0", "")
    off = text.index(plain) + needle.index("$0")
    return hover(Document(text), off).text


def h(sig, facts):
    return f"```qvr\n{sig}\n```\n{facts}"


# ---------------------------------------------------------------- the axis rules

def test_broadcast_aligns_from_the_right_and_keeps_object_names():
    H, C = Axis("Household", 40), Axis("Coef", 3)
    assert broadcast((H, C), (C,)) == (H, C)
    assert broadcast((H, C), ()) == (H, C)
    assert broadcast((Axis(None, 3),), (C,)) == (C,)  # an anonymous size takes the name
    assert broadcast((H, Axis(None, 1)), (C,)) == (H, C)  # size 1 broadcasts
    assert broadcast((C,), (Axis("Region", 3),)) is None  # two objects: unknown
    assert broadcast((C,), None) is None


def test_matmul_axes_follow_torch_matmul():
    H, C, R = Axis("Household", 40), Axis("Coef", 3), Axis("Region", 3)
    assert matmul_axes((H, C), (C,)) == ((H,), None)
    assert matmul_axes((C,), (C, R)) == ((R,), None)
    assert matmul_axes((C,), (C,)) == ((), None)
    assert matmul_axes((H, C), (C, R)) == ((H, R), None)
    assert matmul_axes((Axis(None, 5), H, C), (C, R)) == ((Axis(None, 5), H, R), None)
    assert matmul_axes((H, C), (R,)) == (None, ("contract", C, R))
    assert matmul_axes((), (C,)) == (None, ("scalar", "left"))


def test_site_axes_put_the_plate_first_and_event_axes_last():
    I, K = Axis("I", 4), Axis("K", 3)
    assert site_axes((I,), None, 0, [(), ()]) == (I,)
    assert site_axes((I,), (K,), 1, [()]) == (I, K)
    assert site_axes(None, (K,), 1, [()]) == (K,)
    assert site_axes(None, None, 0, [(), ()]) == ()
    assert site_axes(None, None, 0, [(I,), ()]) == (I,)
    assert site_axes(None, None, 1, [()]) is None  # the event size is not known
    assert spell_axes((I, K)) == "I * K" and spell_axes(()) == "scalar"


# ---------------------------------------------------------------- axes of locals

AXES_BODY = """
data X : Household * Coef
data w : Coef
sample alpha <- Normal(0.0, 1.0)
sample beta : Coef <- Normal(0.0, 10.0)
sample theta : Region <- Dirichlet(1.0) [over=Coef]
let mu = X @ beta
let eta = alpha + mu
let s = sum(X, Household)
let t = sum(X)
let both = [beta, w]
let nested = [[1.0, 2.0], [3.0, 4.0]]
let cov = factor i : Coef, j : Coef in w[i] * w[j]
let chol = cholesky(cov + eye(Coef))
let z = tri_solve(chol, beta)
let ld = logdet(cov)
let lp = log_density(Normal(mu, 1.0), X @ w)
let tail = slice(beta, 1)
let m = max(beta, w)
let tt = transpose(X)
let sm = softmax(X, Household)
record r = mu * 2.0
score total = sum(lp)
observe y : Household <- Normal(eta, 1.0)
return alpha
"""


def test_every_local_has_its_axes():
    types = local_types(AXES_BODY)
    assert {n: t for n, (t, _) in types.items()} == {
        "X": "Household * Coef", "w": "Coef", "alpha": "Real", "beta": "[Coef] Real",
        "theta": "[Region] Simplex", "mu": "Household", "eta": "Household", "s": "Coef",
        "t": "Household", "both": "FinSet 2 * Coef", "nested": "FinSet 2 * FinSet 2",
        "i": "index over Coef", "j": "index over Coef", "cov": "Coef * Coef",
        "chol": "Coef * Coef", "z": "Coef", "ld": "numeric", "lp": "Household",
        "tail": "FinSet 2", "m": "Coef", "tt": "Coef * Household", "sm": "Household * Coef",
        "r": "Household", "total": "numeric", "y": "[Household] Real",
    }
    assert types["X"][1] == "data step"
    assert diags(AXES_BODY) == []


def test_the_axes_are_on_the_checker_locals():
    from qvr.sema.check_program import ProgramChecker

    seen = {}
    original = ProgramChecker.finish

    def finish(self):
        seen.update({n: l.value_axes for n, l in self.first.items()})
        original(self)

    ProgramChecker.finish = finish
    try:
        Document(program(AXES_BODY)).diagnostics()
    finally:
        ProgramChecker.finish = original
    H, C, R = Axis("Household", 40), Axis("Coef", 3), Axis("Region", 3)
    assert seen["theta"] == (R, C) and seen["beta"] == (C,) and seen["alpha"] == ()
    assert seen["ld"] == () and seen["total"] == () and seen["mu"] == (H,)
    assert seen["tail"] == (Axis(None, 2),)


def test_hover_shows_the_axes_of_data_let_and_record_locals():
    text = program(AXES_BODY)
    assert hover_at(text, "data $0X") == h("X : Household * Coef", "data step · line 8")
    assert hover_at(text, "let m$0u") == h("mu : Household", "let step · line 13")
    assert hover_at(text, "let co$0v") == h("cov : Coef * Coef", "let step · line 19")
    assert hover_at(text, "record $0r") == h("record r : Household", "recorded per draw · line 28")


def test_builtins_show_optional_parameters_in_their_signature():
    assert BUILTINS["sum"].signature == "sum(x, axis?)"
    assert BUILTINS["slice"].signature == "slice(x, start, stop?)"
    assert BUILTINS["eye"].signature == "eye(O)"
    assert BUILTINS["log_density"].signature == "log_density(F, x)"
    text = program(AXES_BODY)
    assert hover_at(text, "sum(X, Hou$0sehold)") == h("Household : FinSet 40", "object")
    assert hover_at(text, "tri_$0solve") == h(
        "tri_solve(L, b)", "builtin · numeric, numeric -> numeric\n\n"
                           "x solving L x = b, L lower triangular (b a vector or a matrix)")
    for name in ("sum", "cholesky", "abs", "log_density", "slice", "relu", "var"):
        assert name not in OUTSIDE_CORE_BUILTINS
    assert {"fold", "map"} & OUTSIDE_CORE_BUILTINS == {"map"}


# ---------------------------------------------------------------- `data` steps

def test_data_steps_are_never_unused_and_draw_no_host_warnings():
    assert diags("""
data X : Household * Coef
data unused : Coef
let early = X * 2.0
sample beta : Coef <- Normal(0.0, 1.0)
let mu = X @ beta + early[0, 0]
observe y : Household <- Normal(mu, 1.0)
return beta
""") == []


def test_data_step_misuse_is_qvr430():
    text = HEAD + "object Mix : Coef * Real 2\n" + """
program p : Household -> Household
    data M : Mix
    sample b <- Normal(0.0, 1.0)
    marginalize z <- Bernoulli(0.5)
        data Z : Coef
        observe y : Household <- Normal(b, 1.0)
    return b
"""
    got = [(d.code, d.message) for d in Document(text).diagnostics()]
    assert got == [
        ("QVR430", "`Mix` cannot be an axis of data: `Mix` (FinSet 3 * Real 2) mixes finite and "
                   "real factors (an axis is a finite set or a real space)"),
        ("QVR430", "a `data` step cannot be inside a marginalize block: host data does not depend "
                   "on the marginalized value; declare it before the block"),
    ]


def test_a_data_name_bound_twice_and_an_unknown_object():
    got = diags("""
data X : Household * Coeff
data X : Coef
sample b <- Normal(0.0, 1.0)
return b
""")
    assert [c for c, _ in got] == ["QVR101", "QVR107"]


# ---------------------------------------------------------------- `@` (QVR421)

def test_contracting_two_different_objects_is_qvr421():
    assert diags("""
data X : Household * Coef
sample beta : Region <- Normal(0.0, 1.0)
let mu = X @ beta
let nu = 2.0 @ beta
sample L <- Normal(0.0, 1.0)
data A : Lag * Lag
let s = tri_solve(A, beta)
return L
""") == [
        ("QVR421", "`X @ beta` contracts `Coef` of `X` with `Region` of `beta`"),
        ("QVR421", "`2.0 @ beta` needs an axis on both sides, but `2.0` is a scalar"),
        ("QVR421", "`tri_solve(A, beta)` contracts `Lag` (size 4) of `A` with `Region` (size 3) "
                   "of `beta`"),
    ]


def test_contracting_anonymous_axes_of_different_sizes_is_qvr421():
    assert diags("""
sample b <- Normal(0.0, 1.0)
let v = [1.0, 2.0, 3.0]
let m = [[1.0, 2.0], [3.0, 4.0]]
let bad = m @ v
let good = v @ v
return b
""") == [("QVR421", "`m @ v` contracts an axis of size 2 of `m` with an axis of size 3 of `v`")]


# ---------------------------------------------------------------- reductions (QVR422)

def test_reducing_over_an_object_that_is_not_an_axis_is_qvr422():
    assert diags("""
data X : Household * Coef
data C : Coef * Coef
sample b <- Normal(0.0, 1.0)
let a = sum(X, Region)
let c = mean(unknown_host, Coef)
let d = logsumexp(C, Coef)
let e = sum(b, Coef)
let f = softmax(X, Lag)
let g = cholesky(X[0])
let k = transpose(b)
let l = diag(b)
let m = slice(b, 1)
return b
""") == [
        ("QVR422", "`sum(X, Region)`: `Region` is not an axis of `X`, whose axes are "
                   "`Household * Coef`"),
        ("QVR422", "`mean(unknown_host, Coef)`: the axes of `unknown_host` are not known here, so "
                   "`Coef` names none of them; reduce its last axis with one argument"),
        ("QVR422", "`logsumexp(C, Coef)`: `Coef` types 2 axes of `C` (`Coef * Coef`); it must "
                   "name exactly one"),
        ("QVR422", "`sum(b, Coef)`: `Coef` is not an axis of `b`, a scalar"),
        ("QVR422", "`softmax(X, Lag)`: `Lag` is not an axis of `X`, whose axes are "
                   "`Household * Coef`"),
        ("QVR422", "`cholesky` needs a square matrix, but `X[0]` has axes `Coef`"),
        ("QVR422", "`transpose` needs at least two axes, but `b` has no axes (a scalar)"),
        ("QVR422", "`diag` needs a vector, but `b` has no axes (a scalar)"),
        ("QVR422", "`slice` needs an axis to slice, but `b` has no axes (a scalar)"),
    ]


def test_object_arguments_draw_no_host_warning_and_locals_win():
    # `Coef` as an axis argument is the object (no QVR702); `max(beta, w)` is elementwise
    assert diags("""
data X : Household * Coef
data w : Coef
sample beta : Coef <- Normal(0.0, 1.0)
let a = sum(X, Coef) + max(beta, w) + min(X, Household)
let e = eye(Coef) @ beta
return beta
""") == []
    # an object name elsewhere is still host data named like a declaration (QVR702)
    assert [c for c, _ in diags("""
sample b <- Normal(0.0, 1.0)
let a = exp(Coef)
return b
""")] == ["QVR702"]


# ---------------------------------------------------------------- kinds and arity

def test_builtin_arity_kinds_and_object_arguments():
    assert diags("""
data X : Household * Coef
sample b <- Normal(0.0, 1.0)
let a = sum(X, Coef, 1.0)
let c = eye(3)
let d = sum(X, 2)
let e = slice(X, 1.5)
let f = slice(X, b)
let g = pow(b)
let k = clamp(b, 0.0, 1.0, 2.0)
let m = slice(X, 1, 2, 3)
return b
""") == [
        ("QVR416", "`sum` expects 1 or 2 arguments, got 3"),
        ("QVR420", "the first argument of `eye` must be an object name (its rows and columns), "
                   "got `3`"),
        ("QVR420", "the second argument of `sum` must be an object name (the axis to use), got `2`"),
        ("QVR420", "the bounds of `slice` must be integer literals or data (fixed when the program "
                   "runs), got `1.5`"),
        ("QVR420", "the bounds of `slice` must be integer literals or data (fixed when the program "
                   "runs), got `b`"),
        ("QVR416", "`pow` expects 2 arguments, got 1"),
        ("QVR416", "`clamp` expects 3 arguments, got 4"),
        ("QVR416", "`slice` expects 2 or 3 arguments, got 4"),
    ]


def test_slice_bounds_may_be_data_and_template_parameters():
    assert diags("""
data X : Household * Coef
data n : Coef
let a = slice(X, 1, -1)
let b = slice(X, k_host)
let c = slice(X, (2))
sample s <- Normal(0.0, 1.0)
return s
""") == []


def test_builtins_outside_e9_stay_qvr900_and_numeric_kinds_are_checked():
    got = diags("""
sample b <- Normal(0.0, 1.0)
let a = cumprod(b)
let c = map(b)
let d = sum(Grammar)
return b
""")
    assert got[:2] == [("QVR900", "the builtin `cumprod` is outside the supported core"),
                       ("QVR900", "the builtin `map` is outside the supported core")]


# ---------------------------------------------------------------- lists (QVR423)

def test_list_items_of_different_shapes_are_qvr423():
    assert diags("""
data X : Household * Coef
sample beta : Coef <- Normal(0.0, 1.0)
let a = [beta, X]
let b = [1.0, beta]
let c = [[1.0, 2.0], [3.0]]
let ok = [beta, beta * 2.0, X[0]]
return beta
""") == [
        ("QVR423", "the items of a list must have one shape: `beta` has axes `Coef` but `X` has "
                   "axes `Household * Coef`"),
        ("QVR423", "the items of a list must have one shape: `1.0` has axes `scalar` but `beta` "
                   "has axes `Coef`"),
        ("QVR423", "the items of a list must have one shape: `[1.0, 2.0]` has axes `FinSet 2` but "
                   "`[3.0]` has axes `FinSet 1`"),
    ]


def test_list_items_must_be_numeric():
    text = """object W : FinSet 3
deduction D : W -> W [start=N]
    atoms N, dog
    lexicon
        "dog" : N = dog

program p : W -> W
    sample b <- Normal(0.0, 1.0)
    let a = [b, D]
    return b
"""
    got = [(d.code, d.message) for d in Document(text).diagnostics()]
    assert ("QVR420", "a list literal needs numeric operands, got a deduction") in got


# ---------------------------------------------------------------- log_density

def test_log_density_takes_a_family_call_and_checks_its_arity():
    assert diags("""
data X : Household * Coef
sample b <- Normal(0.0, 1.0)
let a = log_density(Normal(b), X)
let c = log_density(b, X)
let d = log_density(Normall(b, 1.0), X)
let e = log_density(Binomial(b), X)
let f = Normal(b, 1.0)
let g = log_density(Flow(), X)
let k = log_density(Poisson(exp(b)), X) + log_density(Dirichlet(X), X[0])
return b
""") == [
        ("QVR405", "`Normal` expects 2 arguments (loc, scale), got 1"),
        ("QVR420", "the first argument of `log_density` must be a family call, e.g. "
                   "`Normal(mu, sigma)`, got `b`"),
        ("QVR108", "unknown distribution family `Normall`; did you mean `Normal`?"),
        ("QVR900", "family `Binomial` is outside the supported core"),
        ("QVR423", "`Normal(…)` is a distribution, not a value: a family call is allowed only as "
                   "the first argument of `log_density`, e.g. `log_density(Normal(…), x)`"),
        ("QVR423", "`Flow` has no density to evaluate: `log_density` needs a proper family usable "
                   "as a step target"),
    ]


# ---------------------------------------------------------------- observed before observe

AR = """object Time : FinSet 30
object Step : FinSet 29

program ar1 : Time -> Time
    sample rho <- Normal(0.0, 1.0)
    let lagged = slice(y, 0, -1)
    let mu = rho * lagged
    score lik = sum(log_density(Normal(mu, 1.0), slice(y, 1)))
    let first = y[0]
    observe y : Time <- Normal(0.0, 10.0)
    return rho
"""


def test_an_observed_series_read_before_its_observe_is_no_host_data():
    doc = Document(AR)
    assert [(d.code, d.message) for d in doc.diagnostics()] == [
        ("QVR713", "`first` is bound but never used")]
    types = {f.data.name: f.data.type_text for s in doc.state.slots
             for f in (s.result.facts if s.result else ()) if f.kind == "local"}
    assert types["lagged"] == "FinSet 29" and types["mu"] == "FinSet 29"


def test_hover_on_an_observed_series_read_early_names_its_observe():
    assert hover_at(AR, "slice($0y, 0") == h("y : [Time] Real", "observed data of `y` (line 10)")
    assert hover_at(AR, "observe $0y") == h("y : [Time] Real", "observe step · plate over Time · line 10")


def test_goto_from_an_early_read_reaches_the_observe():
    from qvr.ide.goto import definition
    doc = Document(AR)
    off = AR.index("slice(y, 0") + len("slice(")
    target = definition(doc, off)
    spans = target if isinstance(target, list) else [target]
    assert any(AR[s.start:s.end] == "y" and s.start == AR.index("observe y") + len("observe ")
               for s in (getattr(t, "span", t) for t in spans))


def test_a_family_argument_may_read_an_observed_value_early_too():
    # E9.2 lets family arguments read host data; the observed value is read the same way
    got = Document(AR.replace("    let first = y[0]\n", "    sample z : Time <- Normal(y, 1.0)\n"))
    assert [d.code for d in got.diagnostics()] == []


def test_an_observe_in_a_closed_block_is_still_qvr703():
    text = """object T : FinSet 5
program p : T -> T
    sample b <- Normal(0.0, 1.0)
    marginalize z <- Bernoulli(0.5)
        observe y : T <- Normal(b, 1.0)
    let late = y * 2.0
    return late
"""
    assert [d.code for d in Document(text).diagnostics()] == ["QVR703"]
