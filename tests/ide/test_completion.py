"""Completion by context (the text before the cursor need not parse)."""
import pytest
from ide_fixture import at, example

from qvr.ide.completion import complete
from qvr.sema.families import BUILTINS

SEED = example("transformer_lm")


def labels(src: str, kinds=None, n=None):
    doc, off = at(src)
    res = complete(doc, off)
    items = [i for i in res.items if kinds is None or i.kind in kinds]
    return [i.label for i in items][:n]


def seed_with(old: str, new: str) -> str:
    assert old in SEED
    return SEED.replace(old, new, 1)


def test_after_compose_morphisms_whose_domain_matches_come_first():
    src = seed_with("let backbone = tok_embed >> stack(layer, 2)", "let backbone = tok_embed >> $0")
    doc, off = at(src)
    res = complete(doc, off)
    ranked = [(i.label, i.sort[0]) for i in res.items if i.kind in ("morphism", "let")]
    # tok_embed : Token -> Latent, so everything from Latent first; ff_down (FFHidden ->) and
    # tok_embed (Token ->) last; replica groups only inside fan(...)
    assert ranked == [("attn_proj", "0"), ("ff_up", "0"), ("head_0", "0"), ("head_1", "0"), ("head_2", "0"),
                      ("head_3", "0"), ("layer", "0"), ("lm_head", "0"), ("residual_attn", "0"),
                      ("residual_ff", "0"), ("ff_down", "1"), ("tok_embed", "1")]
    assert [i.label for i in res.items if i.kind == "combinator"] == [
        "fan", "identity", "layer_norm", "repeat", "residual", "rms_norm", "scan", "stack"]


def test_ranking_uses_the_codomain_of_the_whole_chain_so_far():
    src = seed_with("let backbone = tok_embed >> stack(layer, 2)",
                    "let backbone = tok_embed >> stack(layer, 2)\nlet x = backbone >> ff_up >> $0")
    first = labels(src, kinds=("morphism", "let"), n=1)
    assert first == ["ff_down"]  # ff_up : Latent -> FFHidden, and only ff_down takes FFHidden


def test_replica_groups_are_offered_inside_fan():
    src = seed_with("let layer = fan(head)", "let layer = fan($0")
    assert "head" in labels(src, kinds=("morphism",))
    src = seed_with("let layer = fan(head)", "let layer = fan(head) >> $0")
    assert "head" not in labels(src, kinds=("morphism",))


def test_only_names_declared_before_the_statement_are_offered():
    src = seed_with("object Latent : Real 16", "let early = $0\nobject Latent : Real 16")
    assert labels(src, kinds=("morphism", "let", "program")) == []


def test_families_after_tilde_and_after_larrow():
    src = seed_with("[role=kernel] ~ Categorical", "[role=kernel] ~ Cat$0")
    # E9.9: not the kernels this runtime does not build (QVR950): `OneHotCategorical`, …
    assert labels(src) == ["Categorical"]
    src = seed_with("    sample h <- backbone", "    sample h <- Half$0")
    doc, off = at(src)
    items = complete(doc, off).items
    # the improper `HalfFlat` (E9) takes no arguments: inserted without parentheses
    assert [(i.label, i.insert, i.snippet) for i in items] == [
        ("HalfCauchy", "HalfCauchy(${1:scale})", True), ("HalfFlat", "", False),
        ("HalfNormal", "HalfNormal(${1:scale})", True)]
    # step targets also offer declared morphisms, but not the kernel-only family Flow
    src = seed_with("    sample h <- backbone", "    sample h <- $0")
    got = labels(src)
    assert "backbone" in got and "Normal" in got and "Flow" not in got


def test_role_values_and_option_keys():
    assert labels(seed_with("[role=embed]", "[role=$0]")) == [
        "attention", "discretize", "embed", "kernel", "latent", "let", "observed", "pretrained"]
    assert labels(seed_with("[role=embed]", "[role=k$0]")) == ["kernel"]
    assert labels(seed_with("[role=embed]", "[role=kernel, $0]")) == [
        "hidden_dim", "iid", "n_layers", "over", "rank", "replicate", "scale", "temperature"]
    assert labels(seed_with("[role=embed]", "[role=latent, i$0]")) == ["iid", "init"]
    assert labels(seed_with("[role=embed]", "[role=kernel, dim$0]")) == ["hidden_dim"]
    assert labels(seed_with("[role=embed]", "[role=latent, init=$0]")) == ["auto"]


def test_option_values_over_names_and_step_keys():
    src = ("object K : FinSet 3\nobject V : Real 2\nprogram p : K -> K\n"
           "    sample w <- Dirichlet(1.0) [$0]\n    return w\n")
    assert labels(src) == ["iid_over", "lower", "over", "upper"]  # lower/upper: truncation (E9)
    assert labels(src.replace("[$0]", "[over=$0]")) == ["K"]  # discrete objects only
    src = ("object K : FinSet 3\nobject V : Real 2\n"
           "morphism f : K * V -> V [role=kernel, over=[$0]] ~ Normal\n")
    assert labels(src) == ["dom", "cod", "K", "V"]


def test_types_after_colon():
    assert labels(seed_with("object FFHidden : Real 32", "object FFHidden : $0")) == [
        "HeadOut", "Latent", "Token", "FinSet", "FinSet N", "Real", "Real N",
        # sizes read from the data and the constrained spaces of E9, only after `object X :`
        "CholeskyFactor", "CorrCholesky", "Ordered", "PositiveOrdered", "Simplex"]


def test_statement_step_and_entry_keywords():
    assert labels(SEED + "\n$0", kinds=("keyword",)) == [
        "composition", "deduction", "export", "let", "morphism", "object", "program"]
    assert labels(seed_with("    return next_token", "    $0\n    return next_token"), kinds=("keyword",)) == [
        "data", "let", "marginalize", "observe", "record", "return", "sample", "score"]
    assert labels("object I : FinSet 2\ndeduction D : I -> I\n    atoms S\n    $0\n", kinds=("keyword",)) == [
        "atoms", "binders", "lexicon", "rule"]


def test_let_expressions_offer_visible_locals_builtins_and_deductions():
    src = ("object K : FinSet 3\nprogram p : K -> K\n    sample a <- Normal(0.0, 1.0)\n"
           "    marginalize z <- Bernoulli(0.5)\n        let inner = a * z\n"
           "    let b = $0\n    return a\n")
    # every builtin of the checker's table (it grows with the extensions), after the locals
    assert labels(src) == ["a", *sorted(BUILTINS), "and", "factor", "not", "or"]  # E9.10: and, not, or
    assert {"compose", "exp", "log", "parse", "sigmoid", "sqrt"} <= set(BUILTINS)


def test_step_arguments_offer_visible_locals():
    src = seed_with("lm_head(h)", "lm_head($0)")
    assert labels(src) == ["h"]


def test_deduction_patterns_offer_atoms_and_binders():
    src = ("object I : FinSet 2\ndeduction D : I -> I\n    atoms S, NP, span\n    binders Fn\n"
           "    rule r : span(I, J, $0")
    assert labels(src) == ["Fn", "NP", "S", "span"]


def test_composition_rules_and_levels():
    assert labels("composition log$0") == ["log_prob"]
    assert labels("composition log_prob as $0") == ["algebra", "semigroupoid", "bilinear_form", "rule"]


@pytest.mark.parametrize("src", ["# a comment morph$0", 'object A : FinSet 2\n"unterminated $0'])
def test_nothing_in_comments(src):
    assert labels(src) == []


def test_replace_span_covers_the_word_around_the_cursor():
    doc, off = at("object A : Fin$0Set 2\n")
    res = complete(doc, off)
    assert doc.text[res.span.start:res.span.end] == "FinSet"
