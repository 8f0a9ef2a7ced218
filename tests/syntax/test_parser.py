"""Unit tests per construct: the parser's AST shapes, spans, layout and chunking."""
import pytest

from qvr.analysis import Document
from qvr.syntax import ast as A
from qvr.syntax.chunks import comments, split
from qvr.syntax.parser import parse_module


def one(text):
    m = parse_module(text)
    assert m.diagnostics == [], m.diagnostics
    decls = m.decls
    assert len(decls) == 1
    start = m.chunks[0][0]
    return decls[0], m.chunks[0][1].text


def src(text, node):
    return text[node.span.start:node.span.end]


def test_object_with_product_and_bounds():
    d, t = one("object Stereo : (Signal * Signal) * Real 2 [low=-1.0, high=1.0]\n")
    assert isinstance(d, A.ObjectDecl) and d.name.text == "Stereo"
    assert isinstance(d.type, A.TProd) and len(d.type.factors) == 2
    assert isinstance(d.type.factors[0], A.TParen)
    assert [(e.key.text, e.value.value) for e in d.options.entries] == [("low", -1.0), ("high", 1.0)]
    assert src(t, d.type) == "(Signal * Signal) * Real 2"


def test_morphism_expression_precedence():
    d, t = one("let g = a >> b @ c.dagger >> fan(h, k) >> stack(l, 2) >> repeat(m) >> scan(n)\n")
    e = d.expr
    # left associative >>, @ binds tighter, postfix tighter still
    assert isinstance(e, A.MCompose) and isinstance(e.right, A.MScan)
    inner = e.left.left.left.left
    assert isinstance(inner.right, A.MTensor)
    assert isinstance(inner.right.right, A.MPostfix) and inner.right.right.name.text == "dagger"
    assert src(t, inner.right) == "b @ c.dagger"
    assert src(t, e) == "a >> b @ c.dagger >> fan(h, k) >> stack(l, 2) >> repeat(m) >> scan(n)"


def test_morphism_declaration_with_initializer():
    d, t = one("morphism same : Tag -> Tag [role=observed] ~ identity(Tag)\n")
    assert isinstance(d.init.expr, A.MCall) and d.init.expr.callee.text == "identity"
    assert d.options.entries[0].value.text == "observed"
    d, _ = one("morphism w : A -> B [role=let] ~ f >> g\n")
    assert isinstance(d.init.expr, A.MCompose)
    d, _ = one("morphism r : A -> B [role=let]\n")  # `let` as an option value
    assert d.options.entries[0].value.text == "let"


def test_program_steps_and_marginalize_block():
    text = (
        "program mix(centre : Real) : Click -> Click\n"
        "    sample share <- Dirichlet(centre) [over=Segment]\n"
        "    marginalize seg : Segment <- Categorical(share) [over=Visitor, reduction=logsumexp]\n"
        "        observe clicked : Click <- Bernoulli(ctr[seg]) [via=visitor_of]\n"
        "    let e = factor b : Band in { 0 -> 1.0, 1 -> -x / 2.0, }\n"
        "    score s = exp(e) + c.goal_weight() - m[i, 2]\n"
        "    return share\n")
    d, t = one(text)
    assert isinstance(d, A.ProgramDecl)
    assert d.params.items[0].kind.kind == "Real"
    kinds = [type(s).__name__ for s in d.body]
    assert kinds == ["SampleStep", "MarginalizeStep", "LetStep", "ScoreStep", "ReturnStep"]
    marg = d.body[1]
    assert isinstance(marg.body[0], A.ObserveStep)
    assert isinstance(marg.body[0].target.args[0], A.DAIndex)
    assert src(t, marg.body[0]) == "observe clicked : Click <- Bernoulli(ctr[seg]) [via=visitor_of]"
    fac = d.body[2].rhs
    assert isinstance(fac, A.EFactor) and isinstance(fac.body, A.FactorCases)
    case1 = fac.body.cases[1].expr
    assert isinstance(case1, A.EBinOp) and isinstance(case1.left, A.ENeg)  # -x / 2.0 is (-x) / 2.0
    score = d.body[3].rhs
    assert isinstance(score, A.EBinOp) and score.op == "-"
    assert isinstance(score.right, A.EIndex) and isinstance(score.left.right, A.EMethod)


def test_deduction_entries():
    text = (
        "deduction Arith : Item -> Item [semiring=Viterbi, start=E]\n"
        "    atoms E, T\n"
        "    binders Fn\n"
        "    rule add : span(I, K, E), span(K, J, T) |- span(I, J, E) #[learnable]\n"
        "    lexicon\n"
        "        \"1\" : T = one #[learnable]\n")
    d, t = one(text)
    assert [type(e).__name__ for e in d.entries] == ["AtomsEntry", "BindersEntry", "RuleEntry", "LexiconBlock"]
    rule = d.entries[2]
    assert len(rule.premises) == 2 and rule.conclusion.head.text == "span"
    assert rule.pragma.entries[0].key.text == "learnable"
    assert d.entries[3].items[0].word.value == "1"


def test_unicode_turnstile_and_strings():
    d, _ = one("deduction D : I -> I\n    atoms A\n    rule r : A ⊢ A\n")
    assert d.entries[1].conclusion.head.text == "A"


def test_layout_bracket_joining_and_blank_lines():
    d, _ = one("morphism probe : Cell -> Hidden [\n    role=embed,\n]\n")
    assert d.options.entries[0].key.text == "role"
    d, _ = one("program p : A -> A\n    sample x <- f\n\n    # comment\n\n    return x\n")
    assert len(d.body) == 2


def test_tab_counts_eight_columns():
    d, _ = one("program p : A -> A\n\tsample x <- f\n        return x\n")
    assert len(d.body) == 2


def test_missing_final_newline():
    d, _ = one("object A : FinSet 3")
    assert d.type.size == 3


def test_chunks_and_doc_comments():
    text = "## first doc\n#! second doc\nobject A : FinSet 2\n\n# not a doc\nobject B : FinSet 3\n"
    parts, _ = split(text)
    assert [c.kind for _, c in parts] == ["stmt", "stmt"]
    doc = Document(text)
    assert doc.docs_for("type", "A") == ("first doc", "second doc")
    assert doc.docs_for("type", "B") == ()
    assert [k for _, _, k in doc.comments()] == ["doc", "doc", "line"]


def test_syntax_error_does_not_hide_other_statements():
    doc = Document("object A : FinSet 3\nmorphism f : A -> [role=latent]\nlet g = h\n")
    assert [d.code for d in doc.diagnostics()] == ["QVR001", "QVR102"]


def test_syntax_error_name_is_registered_unknown():
    doc = Document("morphism f : A -> B [role=latent\nlet g = f\n")
    # QVR008 for the bracket; `f` is known (with an unknown type), so no QVR102 on `g`
    assert [d.code for d in doc.diagnostics()] == ["QVR008"]


@pytest.mark.parametrize("text,code", [
    ("object A : FinSet 3\nobject A FinSet 3\n", "QVR001"),
    ("let x = a $ b\n", "QVR002"),
    ("let x = \"abc\n", "QVR003"),
    ("object A : FinSet 3\n#{ open\n", "QVR004"),
    ("object A : FinSet 3\n    object B : FinSet 3\n", "QVR006"),
    ("program p : A -> A\nobject B : FinSet 2\n", "QVR007"),
    ("let x = f )\n", "QVR008"),
    ("object scan : FinSet 2\n", "QVR009"),
    ("signature S\n    sorts A\n", "QVR900"),
])
def test_lexical_and_layout_errors(text, code):
    assert code in [d.code for d in Document(text).diagnostics()]


def test_comment_scanner_ignores_strings_and_pragmas():
    got = comments('let x = "a # b" # real\n    rule r : A |- A #[learnable]\n')
    assert [(t, k) for _, t, k in got] == [("# real", "line")]


def test_block_comment_after_code_stays_in_one_chunk():
    text = "program p : A -> A\n    return x #{ c\n d }#\n# x\nobject B : FinSet 2\n"
    doc = Document(text)
    assert [c.text for c in doc.chunks] == ["program p : A -> A\n    return x #{ c\n d }#\n",
                                            "# x\nobject B : FinSet 2\n"]
    assert [t for _, t, _ in doc.comments()] == ["#{ c\n d }#", "# x"]


def test_form_feed_counts_zero_columns():
    # 1.7: a form feed (and a lone CR) count 0 columns of indentation
    doc = Document("object A : FinSet 2\n\fobject B : FinSet 3\nprogram p : A -> A\n\f    sample x <- Normal(0.0, 1.0)\n    return x\n")
    assert [d.code for d in doc.diagnostics()] == []
    assert len(doc.chunks) == 3


def test_factor_over_a_vector_body_can_take_more_indices():
    # 8.5: a factor value has one axis per binder *followed by the body's own shape*, so
    # extra indices are an error only when the body is known to be a scalar
    text = ("object L : FinSet 3\nobject R : FinSet 5\nprogram p : R -> R\n"
            "    sample base <- Normal(0.0, 1.0)\n"
            "    let vec = factor a : L in weights_row\n"
            "    let ok = vec[1, 2]\n"
            "    let t = factor a : L in base * 2.0\n"
            "    let bad = t[1, 2]\n"
            "    let y = ok + bad\n"
            "    return y\n")
    diags = Document(text).diagnostics()
    assert [(d.code, d.message) for d in diags] == [
        ("QVR415", "`t` has 1 axis but is indexed with 2 indices")]
