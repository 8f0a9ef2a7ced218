"""Checks of `deduction` bodies (qvr-language.md section 10) via `check_deduction_body`.

Each case is a small module; diagnostics are compared as exact
(code, message, source text under the span) triples.
"""
from __future__ import annotations

import pytest

from qvr.diagnostics import Severity
from qvr.sema.check_deduction import check_deduction_body, resembles
from qvr.sema.context import DeclContext, Env, LocalInfo
from qvr.syntax import ast
from qvr.syntax.parser import parse_module

SPEC_EXAMPLE = """\
object Item : FinSet 8

deduction Arith : Item -> Item [semiring=Viterbi, start=E, depth=5]
    atoms E, T, Num, Plus, Times, span, one, two
    rule add : span(I, K, E), span(K, L, Plus), span(L, J, T) |- span(I, J, E) #[learnable]
    rule mul : span(I, K, T), span(K, L, Times), span(L, J, Num) |- span(I, J, T) #[learnable]
    rule num_term : span(I, J, Num) |- span(I, J, T)
    rule term_expr : span(I, J, T) |- span(I, J, E) #[learnable, bounded]
    lexicon
        "1" : Num = one #[learnable]
        "2" : Num = two
        "+" : Plus = Plus
        "*" : Times = Times

deduction Meaning : Item -> Item [semiring=LogProb, start=S, depth=4]
    atoms S, NP, Fwd, Bwd, span, Pred, Ref, Ap, loves, ann, bob
    binders Fn
    rule apply_right : span(I, K, Fwd(A, B), F), span(K, J, A, X) |- span(I, J, B, Ap(F, X)) #[learnable]
    rule apply_left : span(I, K, A, X), span(K, J, Bwd(A, B), F) |- span(I, J, B, Ap(F, X)) #[learnable]
    lexicon
        "ann" : NP = ann
        "bob" : NP = bob
        "loves" : Fwd(NP, Bwd(NP, S)) = Fn(y, Fn(x, Pred(loves, Ref(x), Ref(y)))) #[learnable]

program joint_fit : Item -> Item
    let arith_chart = parse(Arith, tokens)
    let both = compose(Meaning, Arith)
    let joint_chart = parse(both, tokens)
    score fit = arith_chart.goal_weight() + 0.5 * joint_chart.goal_weight()
    return fit
"""


class Checked:
    def __init__(self, text, start, ctx, result):
        self.text = text
        self.start = start
        self.ctx = ctx
        self.result = result
        self.diagnostics = ctx.result().diagnostics

    def src(self, span):
        return self.text[self.start + span.start:self.start + span.end]

    @property
    def triples(self):
        return [(d.code, d.message, self.src(d.span)) for d in self.diagnostics]

    def facts(self, kind):
        return [(self.src(f.span), f.data) for f in self.ctx.facts if f.kind == kind]


def check_all(text: str) -> list[Checked]:
    module = parse_module(text)
    out = []
    for i, (start, chunk, parsed) in enumerate(module.chunks):
        assert not [d for d in parsed.diagnostics if d.is_error], parsed.diagnostics
        if isinstance(parsed.decl, ast.DeductionDecl):
            ctx = DeclContext(Env(prescan={}, lines=[], name_spans={}), i, chunk.clean)
            out.append(Checked(module.text, start, ctx, check_deduction_body(ctx, parsed.decl)))
    return out


def ded(body: str, options: str = "") -> Checked:
    """Check one deduction whose body lines are `body` (indented here by four spaces)."""
    lines = "\n".join("    " + line if line else line for line in body.strip("\n").split("\n"))
    head = f"deduction D : Item -> Item{' [' + options + ']' if options else ''}\n"
    (c,) = check_all("object Item : FinSet 4\n\n" + head + lines + "\n")
    return c


def codes(c: Checked):
    return [t[0] for t in c.triples]


# ---------------------------------------------------------------- valid programs

def test_spec_example_has_no_diagnostics():
    arith, meaning = check_all(SPEC_EXAMPLE)
    assert arith.triples == []
    assert meaning.triples == []
    assert arith.result == {
        "semiring": "Viterbi", "start": "E",
        "atoms": ("E", "T", "Num", "Plus", "Times", "span", "one", "two"),
        "binders": (), "n_rules": 4, "n_lexicon": 4,
    }
    assert meaning.result == {
        "semiring": "LogProb", "start": "S",
        "atoms": ("S", "NP", "Fwd", "Bwd", "span", "Pred", "Ref", "Ap", "loves", "ann", "bob"),
        "binders": ("Fn",), "n_rules": 2, "n_lexicon": 3,
    }


def test_defaults_without_options():
    c = ded("""
atoms S
rule r : S |- S
""")
    assert c.triples == []
    assert c.result == {"semiring": "LogProb", "start": None, "atoms": ("S",), "binders": (),
                        "n_rules": 1, "n_lexicon": 0}


def test_atoms_may_follow_the_rules_and_options_that_use_them():
    c = ded("""
rule r : span(I, J, N) |- span(I, J, S)
lexicon
    "dog" : N = dog
atoms S, N, span, dog
""", "start=S")
    assert c.triples == []
    assert c.result["start"] == "S"


def test_valid_options_and_pragmas():
    c = ded("""
atoms S
rule r : S |- S #[learnable, bounded,]
""", "semiring=Counting, tolerance=0, depth=0")
    assert c.triples == []
    assert c.result["semiring"] == "Counting"


# ---------------------------------------------------------------- options

def test_qvr201_unknown_option():
    c = ded("atoms S", "semirng=Viterbi")
    assert c.triples == [
        ("QVR201", "unknown option `semirng` for a deduction; did you mean `semiring`?", "semirng")]


def test_qvr201_unknown_option_without_suggestion():
    c = ded("atoms S", "colour=red")
    assert c.triples == [("QVR201", "unknown option `colour` for a deduction", "colour")]


def test_qvr202_duplicate_option():
    c = ded("atoms S, T", "start=S, start=T")
    assert c.triples == [("QVR202", "option `start` is given more than once", "start")]
    assert c.diagnostics[0].span.start > c.text.index("start=S") - c.start
    assert c.result["start"] == "S"


@pytest.mark.parametrize("options, message, anchor", [
    ("depth=2.5", "option `depth` expects an integer", "depth"),
    ("depth", "option `depth` expects an integer", "depth"),
    ("depth=deep", "option `depth` expects an integer", "depth"),
    ("tolerance=small", "option `tolerance` expects a number", "tolerance"),
    ("semiring=1", "option `semiring` expects a name", "semiring"),
    ("start=\"S\"", "option `start` expects a name", "start"),
    ("start=[S]", "option `start` expects a name", "start"),
])
def test_qvr203_option_value_shape(options, message, anchor):
    c = ded("atoms S", options)
    assert c.triples == [("QVR203", message, anchor)]


def test_qvr204_unknown_semiring():
    c = ded("atoms S", "semiring=LogProbs")
    assert c.triples == [(
        "QVR204",
        "unknown semiring `LogProbs`; expected one of LogProb, Viterbi, Boolean, Counting; "
        "did you mean `LogProb`?",
        "LogProbs")]
    assert c.result["semiring"] == "LogProb"


def test_qvr204_unknown_semiring_case():
    c = ded("atoms S", "semiring=viterbi")
    assert c.triples == [(
        "QVR204",
        "unknown semiring `viterbi`; expected one of LogProb, Viterbi, Boolean, Counting; "
        "did you mean `Viterbi`?",
        "viterbi")]


def test_qvr205_negative_depth_and_tolerance():
    c = ded("atoms S", "depth=-1, tolerance=-0.5")
    assert c.triples == [
        ("QVR205", "`depth` must be at least 0, got -1", "depth"),
        ("QVR205", "`tolerance` must be at least 0, got -0.5", "tolerance"),
    ]


@pytest.mark.parametrize("key", ["max_iterations", "axioms", "signature", "encoder"])
def test_qvr900_outside_core_options(key):
    c = ded("atoms S", f"{key}=x")
    assert c.triples == [("QVR900", f"option `{key}` is outside the supported core", key)]


def test_qvr900_call_option_value():
    c = ded("atoms S", "depth=f(1)")
    assert c.triples == [("QVR900", "the option value `f(…)` is outside the supported core", "f(1)")]


def test_qvr505_start_not_an_atom():
    c = ded("atoms S, NP, N", "start=Sentence")
    assert c.triples == [("QVR505", "start symbol `Sentence` is not a declared atom", "Sentence")]
    assert c.result["start"] is None


def test_qvr505_suggests_an_atom():
    c = ded("atoms Sent, NP, N\nbinders Fn", "start=sent")
    assert c.triples == [
        ("QVR505", "start symbol `sent` is not a declared atom; did you mean `Sent`?", "sent")]


def test_qvr505_binder_is_not_an_atom():
    c = ded("atoms S\nbinders Fn", "start=Fn")
    assert c.triples == [("QVR505", "start symbol `Fn` is not a declared atom", "Fn")]


# ---------------------------------------------------------------- atoms and rule names

def test_qvr710_duplicate_atom():
    c = ded("""
atoms S, NP
atoms S
""")
    assert c.triples == [("QVR710", "atom `S` is declared more than once", "S")]
    assert c.diagnostics[0].severity is Severity.WARNING
    assert c.diagnostics[0].span.start == c.text.index("atoms S\n") + len("atoms ") - c.start
    assert c.result["atoms"] == ("S", "NP")


def test_qvr710_duplicate_on_one_line_and_binder():
    c = ded("""
atoms S, S
binders Fn, Fn
""")
    assert c.triples == [
        ("QVR710", "atom `S` is declared more than once", "S"),
        ("QVR710", "binder `Fn` is declared more than once", "Fn"),
    ]


def test_qvr104_duplicate_rule_name():
    c = ded("""
atoms S, NP
rule merge : NP |- S
rule merge : S |- NP
""")
    assert c.triples == [("QVR104", "`merge` is already declared in this deduction", "merge")]
    d = c.diagnostics[0]
    assert d.span.start == c.text.index("merge : S") - c.start
    (rel,) = d.related
    assert rel.message == "first declared here"
    assert rel.span.start == c.text.index("merge : NP") - c.start
    assert c.result["n_rules"] == 2


# ---------------------------------------------------------------- rules

def test_qvr501_undeclared_constructor():
    c = ded("""
atoms S, span
rule r : spam(I, J, S) |- span(I, J, S)
""")
    assert c.triples == [(
        "QVR501", "constructor `spam` is not declared in `atoms` or `binders`; did you mean `span`?",
        "spam")]


def test_qvr501_checks_arguments_too():
    c = ded("""
atoms S, span
rule r : Foo(I, J, dgo) |- span(I, J, S)
""")
    assert c.triples == [
        ("QVR501", "constructor `Foo` is not declared in `atoms` or `binders`", "Foo"),
        ("QVR704", "`dgo` is not a declared atom, so it is a pattern variable; "
                   "did you forget to list it in `atoms`?", "dgo"),
    ]


def test_binder_is_a_constructor_in_rules():
    c = ded("""
atoms S
binders Fn
rule r : Fn(X, S) |- Fn(X, S)
""")
    assert c.triples == []


def test_qvr704_lower_case_variable_at_first_occurrence():
    c = ded("""
atoms S, NP, span
rule r : span(I, J, dog), span(J, K, dog) |- span(I, K, NP)
""")
    assert c.triples == [(
        "QVR704",
        "`dog` is not a declared atom, so it is a pattern variable; did you forget to list it in `atoms`?",
        "dog")]
    assert c.diagnostics[0].span.start == c.text.index("dog") - c.start
    assert c.diagnostics[0].severity is Severity.WARNING


def test_qvr704_singleton_lower_case_variable_resembling_nothing():
    c = ded("""
atoms S, span
rule r : span(I, J, cat) |- span(I, J, S)
""")
    assert codes(c) == ["QVR704"]


def test_qvr705_singleton_resembling_a_variable_by_prefix():
    c = ded("""
atoms N, span
rule merge : span(I, J, N), span(JJ, K, N) |- span(I, J, N)
""")
    assert c.triples == [(
        "QVR705", "pattern variable `JJ` occurs only once in rule `merge` and resembles `J`; "
                  "is it a misspelling?", "JJ")]
    assert c.diagnostics[0].severity is Severity.WARNING


def test_qvr705_singleton_resembling_a_constructor():
    c = ded("""
atoms S, Noun, span
rule r : span(I, J, Nuon) |- span(I, J, S)
""")
    assert c.triples == [(
        "QVR705", "pattern variable `Nuon` occurs only once in rule `r` and resembles `Noun`; "
                  "is it a misspelling?", "Nuon")]


def test_qvr705_wins_over_qvr704_on_one_occurrence():
    c = ded("""
atoms S, N, span
rule r : span(I, J, n) |- span(I, J, S)
""")
    assert c.triples == [(
        "QVR705", "pattern variable `n` occurs only once in rule `r` and resembles `N`; "
                  "is it a misspelling?", "n")]


def test_conclusion_only_and_projection_variables_are_fine():
    c = ded("""
atoms S, span
rule any : S |- span(I, J, S)
rule proj : span(I, J, Whatever) |- S
""")
    assert c.triples == []


def test_resembles_rule():
    assert resembles("JJ", ["span"], ["I", "J", "JJ"]) == "J"
    assert resembles("n", ["N"], ["n"]) == "N"
    assert resembles("X", ["span"], ["I", "X"]) is None
    assert resembles("Ix", [], ["I", "Ix"]) == "I"


# ---------------------------------------------------------------- pragmas

def test_qvr201_unknown_rule_pragma():
    c = ded("atoms S\nrule r : S |- S #[learnabel]")
    assert c.triples == [("QVR201", "unknown pragma `learnabel`; did you mean `learnable`?", "learnabel")]


def test_qvr201_bounded_on_lexicon_entry_and_unknown_lexicon_pragma():
    c = ded("""
atoms N, dog
lexicon
    "dog" : N = dog #[bounded]
    "dogs" : N = dog #[learnabl]
""")
    assert c.triples == [
        ("QVR201", "pragma `bounded` does not apply to a lexicon entry", "bounded"),
        ("QVR201", "unknown pragma `learnabl`; did you mean `learnable`?", "learnabl"),
    ]


def test_qvr202_duplicate_pragma():
    c = ded("atoms S\nrule r : S |- S #[learnable, learnable]")
    assert c.triples == [("QVR202", "pragma `learnable` is given more than once", "learnable")]
    assert c.diagnostics[0].span.start == c.text.rindex("learnable") - c.start


def test_qvr203_pragma_flag_with_value():
    c = ded("""
atoms S, N, dog
rule r : S |- S #[learnable=1, bounded=yes]
lexicon
    "dog" : N = dog #[learnable=true]
""")
    assert c.triples == [
        ("QVR203", "pragma flag `learnable` takes no value", "learnable"),
        ("QVR203", "pragma flag `bounded` takes no value", "bounded"),
        ("QVR203", "pragma flag `learnable` takes no value", "learnable"),
    ]


def test_qvr708_bounded_without_learnable():
    c = ded("atoms S\nrule r : S |- S #[bounded]")
    assert c.triples == [("QVR708", "`bounded` has no effect without `learnable`", "bounded")]
    assert c.diagnostics[0].severity is Severity.WARNING


def test_qvr900_parent_pragma():
    c = ded("atoms S\nrule r : S |- S #[learnable, parent=q]")
    assert c.triples == [("QVR900", "the pragma `parent` is outside the supported core", "parent")]


# ---------------------------------------------------------------- lexicon

def test_qvr502_non_atom_in_category():
    c = ded("""
atoms Noun, Fwd, dog
binders Fn
lexicon
    "dog" : Nuon = dog
    "big" : Fwd(Noun, Fn) = dog
""")
    assert c.triples == [
        ("QVR502", "`Nuon` in a lexicon category is not a declared atom; did you mean `Noun`?", "Nuon"),
        ("QVR502", "`Fn` in a lexicon category is not a declared atom", "Fn"),
    ]


def test_qvr503_unresolved_names_in_logical_forms():
    c = ded("""
atoms N, dog, Ref
binders Fn
lexicon
    "dog" : N = dogg
    "a" : N = Foo(dog)
    "b" : N = Fn(arg, Ref(ag))
    "c" : N = Fn(x, x(dog))
    "d" : N = Fn
""")
    assert c.triples == [
        ("QVR503", "`dogg` in a logical form is neither a declared atom nor a bound variable; "
                   "did you mean `dog`?", "dogg"),
        ("QVR503", "`Foo` in a logical form is neither a declared atom nor a bound variable", "Foo"),
        ("QVR503", "`ag` in a logical form is neither a declared atom nor a bound variable; "
                   "did you mean `arg`?", "ag"),
        ("QVR503", "`x` is a bound variable; only atoms and binders can be applied in a logical form", "x"),
        ("QVR503", "`Fn` in a logical form is neither a declared atom nor a bound variable", "Fn"),
    ]


def test_qvr503_bound_variable_is_scoped_to_its_binder():
    c = ded("""
atoms N, P
binders Fn
lexicon
    "a" : N = P(Fn(x, x), x)
""")
    assert c.triples == [
        ("QVR503", "`x` in a logical form is neither a declared atom nor a bound variable", "x")]
    assert c.diagnostics[0].span.start == c.text.rindex("x)") - c.start


@pytest.mark.parametrize("lf", ["Fn(App(x), y)", "Fn(x)", "Fn()"])
def test_qvr504_malformed_binder_application(lf):
    c = ded(f"""
atoms N, App
binders Fn
lexicon
    "a" : N = {lf}
""")
    assert c.triples == [
        ("QVR504", "binder `Fn` needs a variable name as first argument and a body", "Fn")]


@pytest.mark.parametrize("lf, construct, anchor", [
    ("1", "a number", "1"),
    ('"dog"', "a string literal", '"dog"'),
    ("dog + dog", "arithmetic", "+"),
    ("-dog", "arithmetic", "-"),
    ("dog.f()", "a method call", "dog.f()"),
    ("dog[1]", "indexing", "dog[1]"),
    ("[dog]", "a list", "[dog]"),
    ("(dog)", "a parenthesized expression", "(dog)"),
    ("P(dog, 2.5)", "a number", "2.5"),
])
def test_qvr900_logical_forms_outside_core(lf, construct, anchor):
    c = ded(f"""
atoms N, P, dog
lexicon
    "a" : N = {lf}
""")
    assert c.triples == [("QVR900", f"{construct} in a logical form is outside the supported core", anchor)]


def test_qvr900_lexicon_categories_outside_core():
    c = ded("""
atoms N, A, B, dog
lexicon
    "a" : * = dog
    "b" : {A, B} = dog
""")
    assert c.triples == [
        ("QVR900", "the lexicon category `*` is outside the supported core", "*"),
        ("QVR900", "lexicon categories `{…}` are outside the supported core", "{"),
    ]
    assert c.result["n_lexicon"] == 2


def test_qvr900_lexicon_file():
    c = ded("""
atoms N
lexicon from "words.tsv" [sep=tab]
""")
    assert c.triples == [("QVR900", "`lexicon from` files are outside the supported core", "lexicon")]


# ---------------------------------------------------------------- facts for the IDE

def test_facts():
    (_, meaning) = check_all(SPEC_EXAMPLE)
    locals_ = meaning.facts("local")
    info = {}
    for src, d in locals_:
        info.setdefault((src, d.kind), d)
    assert info[("S", "atom")] == LocalInfo("S", "atom", "", detail="", owner="Meaning")
    assert info[("Fn", "binder")] == LocalInfo("Fn", "binder", "", detail="", owner="Meaning")
    assert info[("apply_right", "rule")] == LocalInfo("apply_right", "rule", "", detail="", owner="Meaning")
    assert info[("I", "patvar")] == LocalInfo("I", "patvar", "", detail="apply_right", owner="Meaning")
    assert info[("y", "bound")] == LocalInfo("y", "bound", "", detail="Fn", owner="Meaning")
    refs = meaning.facts("localref")
    # every use of `span` points at its declaration in `atoms`
    span_decl = [f.span for f in meaning.ctx.facts if f.kind == "local" and f.data.name == "span"]
    assert len(span_decl) == 1
    span_uses = [d for src, d in refs if src == "span"]
    assert len(span_uses) == 6 and set(span_uses) == {span_decl[0]}
    # the start value refers to the atom
    start_at = meaning.text.index("start=S") + len("start=") - meaning.start
    assert any(f.kind == "localref" and f.span.start == start_at for f in meaning.ctx.facts)
    # later occurrences of a pattern variable refer to its first occurrence in the rule
    first_x = [f.span for f in meaning.ctx.facts
               if f.kind == "local" and f.data.kind == "patvar" and f.data.name == "X"]
    assert len(first_x) == 2  # one per rule
    x_refs = [d for src, d in refs if src == "X"]
    assert set(x_refs) == set(first_x)
    # bound variables: uses of `x` in the logical form point at its binder argument
    bound_x = [f.span for f in meaning.ctx.facts if f.kind == "local" and f.data.kind == "bound"
               and f.data.name == "x"]
    assert [d for src, d in refs if src == "x"] == bound_x
    # option keys
    assert ("semiring", ("deduction", "semiring")) in meaning.facts("option")
