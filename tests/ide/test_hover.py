"""Hover: the exact text for each kind of token (qvr-language.md 14.2)."""
import pytest
from ide_fixture import at, cursor, example

from qvr.ide.hover import hover

F = "```qvr\n{}\n```"


def h(sig, facts="", doc=""):
    return F.format(sig) + (f"\n{facts}" if facts else "") + (f"\n\n{doc}" if doc else "")


CASES = [
    # top-level names
    ("transformer_lm", "sample h <- back$0bone", "backbone", h("backbone : Token -> Latent", "let")),
    ("transformer_lm", "program transformer$0_lm", "transformer_lm",
     h("transformer_lm : Token -> Token", "program · effects Sample, Score")),
    ("transformer_lm", "object Tok$0en", "Token",
     h("Token : FinSet 32", "object", "Transformer language model over a 32-symbol vocabulary (seed 000).")),
    ("transformer_lm", "morphism attn$0_proj", "attn_proj",
     h("attn_proj : Latent -> Latent", "morphism · role kernel ~ Normal · scale 0.1")),
    ("transformer_lm", "fan(he$0ad)", "head", h("head : Latent -> HeadOut", "replica group of 4: head_0 … head_3")),
    ("vae", "encoder_head_$00", "encoder_head_0",
     h("encoder_head_0 : Image -> Half", "morphism · role kernel ~ Normal · replica 1 of 2 of encoder_head",
       "Two encoder heads; `fan` concatenates their outputs into a full code.")),
    ("crop_yields", "program site_eff$0ects", "site_effects",
     h("site_effects(centre : Real, spread : Real) : Site -> Site", "parametric program",
       "Multiplicative site effects centred on `centre` with log-scale `spread`.")),
    ("sensor_tracking", "program ce$0ll(o, m)", "cell",
     h("cell(o, m) : Obs * Mem -> Mem", "program",
       "One tracker step: `o` is the reading, `m` the previous memory.")),
    ("humidity_bands", "object Humid$0ity", "Humidity",
     h("Humidity : Real 1 [low=0.0, high=1.0]", "object", "Relative humidity, a bounded real line.")),
    ("humidity_bands", "morphism humidity_b$0and", "humidity_band",
     h("humidity_band : Humidity -> Band", "morphism · role discretize · 5 bins",
       "Soft assignment of a humidity reading to one of five bands.")),
    ("humidity_bands", "morphism band_s$0ky", "band_sky",
     h("band_sky : Band -> Sky", "morphism · role kernel (lookup table) · rule markov",
       "Sky condition per band (lookup table).")),
    ("humidity_bands", "morphism fore$0cast", "forecast",
     h("forecast : Humidity -> Sky", "morphism · role let ~ humidity_band >> band_sky",
       "Humidity to sky, as a named and checked pipeline.")),
    ("relational_authors", "morphism wri$0tes", "writes",
     h("writes : Author -> Topic", "morphism · role latent · rule product_fuzzy",
       "Which topics an author writes about (learned relation).")),
    ("pcfg_deduction", "compose(Morphology, Gram$0mar", "Grammar",
     h("Grammar : Word -> Word", "deduction · semiring LogProb · start S · 12 atoms · 3 rules · 5 lexicon entries",
       "Phrase structure: S -> NP VP, NP -> Det N, VP -> V NP. Determiners carry\n"
       "a logical form; `Lam` binds the variable of a quantifier.")),
    # morphism sub-expressions and operators
    ("transformer_lm", "let layer = $0fan(head)", "fan(head)",
     h("fan(head) : Latent -> HeadOut * HeadOut * HeadOut * HeadOut", "structure: Real 16 -> Real 16")),
    ("transformer_lm", "fan(head) $0>> attn_proj", ">>",
     h("fan(head) >> attn_proj : Latent -> Latent", "structure: Real 16 -> Real 16")),
    ("transformer_lm", "tok_embed >> $0stack(layer, 2)", "stack(layer, 2)",
     h("stack(layer, 2) : Latent -> Latent", "structure: Real 16 -> Real 16")),
    ("transformer_lm", "let backbone = tok_embed $0>> stack", ">>",
     h("tok_embed >> stack(layer, 2) : Token -> Latent", "structure: FinSet 32 -> Real 16")),
    # program locals: value, plate, draw, parameter, let, data parameter
    ("transformer_lm", "lm_head($0h)", "h", h("h : Latent", "sample step · line 25")),
    ("transformer_lm", "observe next_$0token", "next_token",
     h("next_token : [Token] Token", "observe step · plate over Token · line 27")),
    ("crop_yields", "sample eff$0ect", "effect", h("effect : [Site] Positive", "sample step · plate over Site · line 13")),
    ("crop_yields", "sample sh$0ift", "shift", h("shift : Real", "sample step · line 12")),
    ("crop_yields", "Normal(cen$0tre, 1.0)", "centre", h("centre : Real (parameter)", "parameter · line 11")),
    ("crop_yields", "let exp$0ected", "expected", h("expected : numeric", "let step · line 23")),
    ("sensor_tracking", "decay($0m)", "m", h("m : Mem", "data parameter · line 18")),
    ("item_response", "factor $0", "lvl", h("lvl : index over Level", "factor binder · line 21")),
    # host data, families, builtins, options, deduction locals
    ("crop_yields", "site_mult[site$0_of]", "site_of", h("site_of : host data", "supplied at run time")),
    ("transformer_lm", "~ Norm$0al", "Normal",
     h("Normal(loc, scale)", "family · support Real · continuous", "real line; event rank 0; loc: real, scale: pos")),
    ("crop_yields", "log$0(site_mult", "log", h("log(x)", "builtin · numeric -> numeric", "elementwise natural logarithm")),
    ("relational_authors", "identi$0ty(", "identity",
     h("identity(A)", "morphism constructor", "the identity relation on a finite object A")),
    ("transformer_lm", "[role=embed$0]", None, None),
    ("transformer_lm", "[ro$0le=embed]", "role",
     h("role", "option of a morphism · what kind of morphism this is: latent, observed, kernel, embed, "
               "discretize, let, attention or pretrained (required)")),
    ("ccg_semantics", "binders F$0n", "Fn", h("binder Fn", "deduction Meaning")),
]


@pytest.mark.parametrize("example_name,needle,token,expected", CASES, ids=[c[1] for c in CASES])
def test_hover(example_name, needle, token, expected):
    doc, off = cursor(example(example_name), needle)
    got = hover(doc, off)
    if expected is None:
        assert got is None
        return
    assert doc.text[got.span.start:got.span.end] == token
    assert got.text == expected


def test_hover_on_optional_family_and_pattern_variable():
    doc, off = at("object I : FinSet 3\n"
                  "deduction D : I -> I\n"
                  "    atoms S, span\n"
                  "    rule r : span(I, J, S) |- span(I, $0J, S)\n")
    assert hover(doc, off).text == h("pattern variable J", "deduction D · rule r")
    doc, off = at("object K : FinSet 3\nprogram p : K -> K\n    sample w <- Wis$0hart(v, v)\n    return w\n")
    assert hover(doc, off).text == h(
        "Wishart(df, scale_tril)",
        "family · support PosDef · continuous · not supported by this runtime as a step target "
        "or as a kernel",
        "positive-definite matrices; event rank 2; df: pos, scale_tril: mat")


def test_hover_on_a_later_duplicate_shows_the_binding_that_uses_refer_to():
    doc, off = at("object A : FinSet 2\nobject $0A : FinSet 3\n")
    assert hover(doc, off).text == h("A : FinSet 2", "object")


def test_hover_object_defined_by_names_shows_its_structure():
    doc, off = at("object Site : FinSet 12\nobject Gauge : FinSet 3\nobject Sta$0tion : Site * Gauge\n")
    assert hover(doc, off).text == h("Station : Site * Gauge\n= FinSet 12 * FinSet 3", "object")


def test_no_hover_in_comments_or_whitespace():
    doc, off = at("# Tok$0en is nice\nobject Token : FinSet 2\n")
    assert hover(doc, off) is None
    doc, off = at("object Token : FinSet 2\n$0\n")
    assert hover(doc, off) is None


def test_hover_on_a_chart_names_its_deduction():
    doc, off = cursor(example("pcfg_deduction"), "let cha$0rt")
    assert hover(doc, off).text == h("chart : chart of pipeline", "let step · line 38")


def test_hover_on_a_composition_rule():
    doc, off = cursor(example("relational_authors"), "composition product$0_fuzzy")
    assert hover(doc, off).text == h("composition product_fuzzy", "composition rule · level algebra")


def test_hover_on_a_replica_member_of_the_seed_matches_the_spec():
    src = example("transformer_lm") + "let second = head_2\n"
    doc, off = cursor(src, "let second = head$0_2")
    assert hover(doc, off).text == h("head_2 : Latent -> HeadOut", "morphism · role kernel ~ Normal · replica 3 of 4 of head")


# ---------------------------------------------------------------- E9.1: axes, data steps, observed series

E9_PROGRAM = """object Household : FinSet 40
object Coef : FinSet 3

program reg : Household -> Household
    data X : Household * Coef
    sample beta : Coef <- Normal(0.0, 10.0)
    let mu = X @ beta
    let lag = slice(y, 0, -1)
    let total = sum(lag)
    observe y : Household <- Normal(mu, 1.0)
    return total
"""


@pytest.mark.parametrize("needle,token,expected", [
    ("data $0X", "X", h("X : Household * Coef", "data step · line 5")),
    ("let m$0u", "mu", h("mu : Household", "let step · line 7")),
    ("$0X @ beta", "X", h("X : Household * Coef", "data step · line 5")),
    ("let l$0ag", "lag", h("lag : FinSet 39", "let step · line 8")),
    ("let tot$0al", "total", h("total : numeric", "let step · line 9")),
    ("slice($0y", "y", h("y : [Household] Real", "observed data of `y` (line 10)")),
    ("observe $0y", "y", h("y : [Household] Real", "observe step · plate over Household · line 10")),
    ("sum$0(lag", "sum", h("sum(x, axis?)", "builtin · numeric, object? -> numeric",
                           "sum over the last axis, or over the axis typed O")),
])
def test_hover_e9_axes_data_and_observed_series(needle, token, expected):
    doc, off = cursor(E9_PROGRAM, needle)
    got = hover(doc, off)
    assert doc.text[got.span.start:got.span.end] == token
    assert got.text == expected
