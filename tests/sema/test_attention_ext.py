"""The language extension's front end (docs/extensions.md E2-E4): role=attention, positions
on embed, the builtin morphism expressions residual/layer_norm/rms_norm, and deterministic
observe targets.  Symbols are what the runtime reads (`qvr.sema.typed`), so their fields are
asserted exactly; diagnostics by (code, source text, message)."""
import pytest

from qvr.analysis import Document, Edit
from qvr.sema.symbols import LetSym, MorphismSym
from qvr.sema.typed import option_values, typed_module
from qvr.sema.types import spell_mor

HEAD = """\
object Token : FinSet 32
object Latent : Real 16
object Wide : Real 64
object Pair : Latent * Latent
"""


def diags(src):
    doc = Document(HEAD + src)
    return [(d.code, doc.text[d.span.start:d.span.end], d.message) for d in doc.diagnostics()]


def sym(src, name):
    tm = typed_module(HEAD + src)
    assert tm.errors == [], [d.message for d in tm.errors]
    return tm.symbol("value", name)


# ---------------------------------------------------------------- symbols the runtime reads

def test_attention_symbol_carries_resolved_options():
    s = sym("morphism attn : Latent -> Latent [role=attention, heads=4, causal, scale=0.2] ~ Normal\n",
            "attn")
    assert isinstance(s, MorphismSym)
    assert (s.role, s.family, s.stratum, s.heads, s.head_dim, s.causal, s.scale, s.deterministic,
            s.positions) == ("attention", "Normal", "stochastic", 4, 4, True, 0.2, False, None)
    assert spell_mor(s.type) == "Latent -> Latent"


def test_attention_defaults_one_head_of_full_width_and_is_deterministic_without_family():
    s = sym("morphism attn : Latent -> Wide [role=attention]\n", "attn")
    assert (s.heads, s.head_dim, s.causal, s.family, s.scale, s.deterministic) == (1, 16, False, None, None, True)


def test_explicit_head_dim_needs_no_divisibility():
    s = sym("morphism attn : Latent -> Latent [role=attention, heads=3, head_dim=5] ~ Laplace\n", "attn")
    assert (s.heads, s.head_dim, s.family) == (3, 5, "Laplace")


def test_width_of_a_product_domain_is_its_total_width():
    s = sym("morphism attn : Pair -> Latent [role=attention, heads=8] ~ Cauchy\n", "attn")
    assert (s.heads, s.head_dim) == (8, 4)


def test_causal_strict_is_causal_and_strict_and_the_bare_flag_is_not_strict():
    strict = sym("morphism attn : Latent -> Latent [role=attention, heads=4, causal=strict] ~ Normal\n",
                 "attn")
    assert (strict.causal, strict.causal_strict, strict.heads, strict.family) == (True, True, 4, "Normal")
    bare = sym("morphism attn : Latent -> Latent [role=attention, heads=4, causal] ~ Normal\n", "attn")
    assert (bare.causal, bare.causal_strict) == (True, False)
    none = sym("morphism attn : Latent -> Latent [role=attention, heads=4] ~ Normal\n", "attn")
    assert (none.causal, none.causal_strict) == (False, False)
    rep = typed_module(HEAD + "morphism a : Latent -> Latent [role=attention, causal=strict, "
                              "replicate=2]\n")
    assert [(rep.symbol("value", m).causal, rep.symbol("value", m).causal_strict)
            for m in ("a_0", "a_1")] == [(True, True), (True, True)]


def test_option_values_reads_the_bare_flag_as_true():
    tm = typed_module(HEAD + "morphism attn : Latent -> Latent [role=attention, heads=2, causal]\n")
    d = next(td.decl for td in tm.decls if getattr(getattr(td.decl, "name", None), "text", "") == "attn")
    assert option_values(d.options) == {"role": "attention", "heads": 2, "causal": True}


def test_replicated_attention_members_carry_the_options():
    tm = typed_module(HEAD + "morphism a : Latent -> Latent [role=attention, heads=2, replicate=2] ~ Normal\n")
    for m in ("a_0", "a_1"):
        s = tm.symbol("value", m)
        assert (s.heads, s.head_dim, s.replica[1]) == (2, 8, 2)


def test_embed_positions_and_other_roles_leave_the_fields_empty():
    s = sym("morphism tok : Token -> Latent [role=embed, positions=16]\n", "tok")
    assert (s.positions, s.heads, s.head_dim, s.causal, s.deterministic) == (16, None, None, False, False)
    k = sym("morphism k : Latent -> Latent [role=kernel] ~ Normal\n", "k")
    assert (k.positions, k.heads, k.head_dim, k.causal, k.deterministic) == (None, None, None, False, False)


# ---------------------------------------------------------------- builtin expressions

DECLS = """\
morphism attn : Latent -> Latent [role=attention, heads=4, causal] ~ Normal
morphism det : Latent -> Latent [role=attention, heads=4]
morphism ff : Latent -> Latent [role=kernel] ~ Normal
morphism head : Latent -> Token [role=kernel] ~ Categorical
morphism tok : Token -> Latent [role=embed, positions=16]
"""


@pytest.mark.parametrize("expr, typ, deterministic", [
    ("layer_norm(Latent)", "Latent -> Latent", True),
    ("rms_norm(Pair)", "Pair -> Pair", True),
    ("residual(ff)", "Latent -> Latent", False),
    ("residual(det)", "Latent -> Latent", True),
    ("residual(layer_norm(Latent) >> attn)", "Latent -> Latent", False),
    ("residual(attn >> layer_norm(Latent))", "Latent -> Latent", True),
    ("(layer_norm(Latent))", "Latent -> Latent", True),
    ("layer_norm(Latent) >> ff", "Latent -> Latent", False),
    ("ff >> det", "Latent -> Latent", True),
    ("tok >> stack(residual(layer_norm(Latent) >> attn), 2) >> rms_norm(Latent)", "Token -> Latent", True),
    ("tok >> stack(residual(layer_norm(Latent) >> attn), 2) >> head", "Token -> Token", False),
    ("stack(det, 2)", "Latent -> Latent", True),
    ("ff @ layer_norm(Latent)", "Latent * Latent -> Latent * Latent", True),
    ("fan(ff, det)", "Latent -> Latent * Latent", True),
    ("fan(ff, attn)", "Latent -> Latent * Latent", False),
])
def test_builtin_types_and_deterministic_last_link(expr, typ, deterministic):
    s = sym(DECLS + f"let e = {expr}\n", "e")
    assert isinstance(s, LetSym)
    assert (spell_mor(s.type), s.stratum, s.deterministic) == (typ, "stochastic", deterministic)


def test_role_let_morphism_inherits_deterministic():
    s = sym(DECLS + "morphism blk : Latent -> Latent [role=let] ~ ff >> layer_norm(Latent)\n", "blk")
    assert (s.role, s.deterministic, s.heads) == ("let", True, None)


def test_a_declaration_named_like_a_builtin_does_not_change_the_call():
    # as for `identity` (6.1): the call is recognised by its spelling
    src = DECLS + "morphism residual : Latent -> Latent [role=kernel] ~ Normal\nlet e = residual(det)\nlet g = residual\n"
    assert diags(src) == []
    tm = typed_module(HEAD + src)
    assert tm.symbol("value", "e").deterministic is True
    assert tm.symbol("value", "g").deterministic is False


def test_let_expression_builtins_are_unchanged():
    src = DECLS + "program p : Latent -> Latent\n    sample h <- ff\n    let y = layer_norm(h)\n    return y\n"
    assert diags(src) == [("QVR900", "layer_norm", "the builtin `layer_norm` is outside the supported core")]


# ---------------------------------------------------------------- diagnostics

@pytest.mark.parametrize("src, expected", [
    ("let e = residual(head)\n",
     [("QVR318", "residual", "`residual` needs a morphism between Real spaces, got `Latent -> Token` "
                             "(Real 16 -> FinSet 32)")]),
    ("morphism up : Latent -> Wide [role=kernel] ~ Normal\nlet e = residual(up)\n",
     [("QVR303", "residual", "`residual` needs a morphism whose domain and codomain agree, but its "
                             "argument has type `Latent -> Wide`")]),
    ("let e = residual()\n", [("QVR405", "residual", "`residual` expects 1 argument (f), got 0")]),
    ("let e = rms_norm()\n", [("QVR405", "rms_norm", "`rms_norm` expects 1 argument (A), got 0")]),
    ("let e = layer_norm(Token)\n", [("QVR318", "Token", "`layer_norm` needs a Real space, got `Token` (FinSet 32)")]),
    ("let e = layer_norm(Latnt)\n", [("QVR101", "Latnt", "undefined object `Latnt`; did you mean `Latent`?")]),
    ("let e = layer_norm(ff)\n", [("QVR105", "ff", "`ff` is a morphism, not an object")]),
    ("let e = residual(fff)\n", [
        ("QVR714", "ff", "`ff` is never used, but `fff` is referenced and undefined; is one of them misspelled?"),
        ("QVR102", "fff", "undefined morphism `fff`; did you mean `ff`?")]),
    ("let e = det.dagger\n", [("QVR305", "dagger", "`.dagger` needs a relational (finite) morphism")]),
    ("let e = repeat(residual(ff))\n",
     [("QVR305", "repeat", "`repeat` without a count needs a relational (finite) morphism")]),
    ("let e = head >> layer_norm(Latent)\n",
     [("QVR301", ">>", "cannot compose: `head` has codomain `Token` (FinSet 32) but `layer_norm(Latent)` has "
                       "domain `Latent` (Real 16)")]),
    ("morphism o : Token -> Token [role=observed] ~ tok >> head\n",
     [("QVR314", "tok >> head", "the initializer of an observed morphism must be a finite (relational) "
                                "morphism; `tok >> head` is stochastic")]),
    ("morphism l : Token -> Token [role=latent] ~ residual(ff)\n",
     [("QVR311", "~ residual(ff)", "a latent morphism takes no expression initializer; give a prior "
                                   "`~ F(args)` or nothing")]),
])
def test_builtin_diagnostics(src, expected):
    assert diags(DECLS + src) == expected


@pytest.mark.parametrize("decl, expected", [
    ("morphism a : Latent -> Latent [role=attention, heads=3]\n",
     [("QVR317", "heads", "`heads=3` does not divide the width 16 of `Latent` (Real 16); give `head_dim` or "
                          "a number of heads that divides 16")]),
    ("morphism a : Latent -> Latent [role=attention, heads=32] ~ Normal\n",
     [("QVR317", "heads", "`heads=32` does not divide the width 16 of `Latent` (Real 16); give `head_dim` "
                          "or a number of heads that divides 16")]),
    ("morphism a : Latent -> Token [role=attention] ~ Normal\n",
     [("QVR306", "Token", "an attention morphism needs a Real codomain, got `Token` (FinSet 32)")]),
    ("morphism a : Latent -> Latent [role=attention] ~ Categorical\n",
     [("QVR306", "Categorical", "attention draws from a location-scale family: Normal, Laplace or Cauchy, "
                                "got `Categorical`")]),
    ("morphism a : Latent -> Latent [role=attention] ~ Normall\n",
     [("QVR108", "Normall", "unknown distribution family `Normall`; did you mean `Normal`?")]),
    ("morphism a : Latent -> Latent [role=attention] ~ Normal(0.0, 1.0)\n",
     [("QVR311", "~ Normal(0.0, 1.0)", "an `attention` morphism takes a family (`~ Normal`, `~ Laplace`, "
                                       "`~ Cauchy`) or no initializer")]),
    ("morphism a : Latent -> Latent [role=attention, causal=yes] ~ Normal\n",
     [("QVR204", "yes", "unknown `causal` value `yes`; expected strict (keys j < i), or `causal` "
                        "alone (keys j <= i)")]),
    ("morphism a : Latent -> Latent [role=attention, causal=Strict] ~ Normal\n",
     [("QVR204", "Strict", "unknown `causal` value `Strict`; expected strict (keys j < i), or "
                           "`causal` alone (keys j <= i); did you mean `strict`?")]),
    ("morphism a : Latent -> Latent [role=attention, causal=1] ~ Normal\n",
     [("QVR203", "causal", "option `causal` is written alone (keys j <= i) or as `causal=strict` "
                           "(keys j < i)")]),
    ("morphism a : Latent -> Latent [role=attention, causal=\"strict\"] ~ Normal\n",
     [("QVR203", "causal", "option `causal` is written alone (keys j <= i) or as `causal=strict` "
                           "(keys j < i)")]),
    ("morphism a : Latent -> Latent [role=kernel, causal=strict] ~ Normal\n",
     [("QVR201", "causal", "option `causal` does not apply to a `kernel` morphism")]),
    ("morphism a : Latent -> Latent [role=attention, heads=2.5] ~ Normal\n",
     [("QVR203", "heads", "option `heads` expects an integer")]),
    ("morphism a : Latent -> Latent [role=attention, head_dim=0] ~ Normal\n",
     [("QVR205", "head_dim", "`head_dim` must be at least 1, got 0")]),
    ("morphism a : Latent -> Latent [role=attention, scale=0.0] ~ Normal\n",
     [("QVR205", "scale", "`scale` must be positive, got 0.0")]),
    ("morphism a : Latent -> Latent [role=attention, hidden_dim=8] ~ Normal\n",
     [("QVR201", "hidden_dim", "option `hidden_dim` does not apply to an `attention` morphism")]),
    ("morphism a : Latent -> Latent [role=attention, positions=8] ~ Normal\n",
     [("QVR201", "positions", "option `positions` does not apply to an `attention` morphism")]),
    ("morphism a : Latent -> Latent [role=attention, hedas=2] ~ Normal\n",
     [("QVR201", "hedas", "unknown option `hedas` for a morphism; did you mean `heads`?")]),
    ("morphism a : Latent -> Latent [role=kernel, causal] ~ Normal\n",
     [("QVR201", "causal", "option `causal` does not apply to a `kernel` morphism")]),
    ("morphism a : Token -> Latent [role=embed, head_dim=4]\n",
     [("QVR201", "head_dim", "option `head_dim` does not apply to an `embed` morphism")]),
    ("morphism a : Token -> Latent [role=embed, positions=0]\n",
     [("QVR205", "positions", "`positions` must be at least 1, got 0")]),
    ("morphism a : Latent -> Latent [role=atention] ~ Normal\n",
     [("QVR204", "atention", "unknown role `atention`; expected one of latent, observed, kernel, embed, "
                             "discretize, let, attention, pretrained; did you mean `attention`?")]),
    ("morphism a : Latent -> Latent [role=attention, scale=0.3]\n",
     [("QVR707", "scale", "`scale` has no effect on an attention morphism without a family")]),
])
def test_attention_option_diagnostics(decl, expected):
    assert diags(decl) == expected


PROGRAM = DECLS + """\
let block = residual(layer_norm(Latent) >> attn)
let ln_end = ff >> layer_norm(Latent)
let lm = tok >> block >> head
program p : Token -> Token
    sample h <- tok
    sample g <- attn(h)
    observe z <- {target}(h)
    return z
"""


@pytest.mark.parametrize("target, expected", [
    ("attn", []),
    ("ff", []),
    ("block", []),
    ("det", [("QVR316", "det", "`det` is deterministic: an observed value needs a density; give the "
                               "attention a family (`~ Normal`)")]),
    ("ln_end", [("QVR316", "ln_end", "`ln_end` ends in a deterministic morphism: an observed value needs a "
                                     "density; end it with a kernel")]),
])
def test_observe_needs_a_density(target, expected):
    assert diags(PROGRAM.format(target=target)) == expected


def test_sample_from_a_deterministic_morphism_needs_a_density_too():
    # a sampled value is a latent site (SVI guides it, MCMC moves it): it needs a density;
    # decision: `sample` of a deterministic target is QVR316, not a deterministic binding
    text = PROGRAM.format(target="attn").replace("sample g <- attn(h)", "sample g <- ln_end(h)")
    assert diags(text) == [("QVR316", "ln_end", "`ln_end` ends in a deterministic morphism: a sampled "
                                                "value needs a density; end it with a kernel, or observe "
                                                "through it (`let f = ln_end >> head`, then "
                                                "`observe y <- f`)")]


def test_observe_diagnostic_follows_an_edit_of_the_declaration():
    text = HEAD + PROGRAM.format(target="det")
    doc = Document(text)
    assert [d.code for d in doc.diagnostics()] == ["QVR316"]
    # give `det` a family: the program's observe is fine again (incremental re-check)
    at = doc.text.index("[role=attention, heads=4]\n") + len("[role=attention, heads=4]")
    doc.apply_edits([Edit(at, at, " ~ Normal")])
    assert doc.diagnostics() == []
    assert [d.code for d in Document(doc.text).diagnostics()] == []
    doc.apply_edits([Edit(at, at + len(" ~ Normal"), "")])
    assert [d.code for d in doc.diagnostics()] == ["QVR316"]


# ---------------------------------------------------------------- docs/extensions.md examples

def _doc_blocks():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "extensions.md").read_text(encoding="utf-8")
    text = text.split("\n## E9.")[0]  # the attention extension (E1-E8); E9's in test_e9_docs
    return re.findall(r"```qvr\n(.*?)```", text, re.S)


def test_the_documented_examples_check_as_documented():
    """Valid blocks check clean; in an invalid block (one with `# QVRnnn` markers) each line
    — or a whole `program` block — gives exactly the marked codes, with the last valid
    block's declarations in scope."""
    import re
    blocks = _doc_blocks()
    assert len(blocks) >= 5
    prelude = ""
    checked = 0
    for block in blocks:
        if "# QVR" not in block:
            doc = Document(block)
            assert [(d.code, d.message) for d in doc.diagnostics()] == [], block
            prelude = block
            continue
        units = [block] if block.startswith("program") else [ln for ln in block.splitlines() if ln.strip()]
        for unit in units:
            expected = re.findall(r"# (QVR\d+)", unit)
            doc = Document(prelude + unit + "\n")
            assert [d.code for d in doc.diagnostics()] == expected, unit
            checked += 1
    assert checked >= 15


def test_a_fan_of_replicated_deterministic_attention_is_deterministic():
    # the group symbol of `replicate` carries the members' flag (fan(mixr) was missed)
    src = """\
morphism mixr : Latent -> Latent [role=attention, replicate=2]
let g = fan(mixr)
program p : Latent -> Latent * Latent
    observe y <- g
    return y
"""
    assert [c for c, _, _ in diags(src)] == ["QVR316"]
    assert diags(src.replace("replicate=2]", "replicate=2] ~ Normal")) == []
