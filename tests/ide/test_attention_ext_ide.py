"""Editor features for the language extension (docs/extensions.md E2-E4): hover,
completion, signature help, semantic tokens and formatting of attention declarations,
`positions` on embeds and the builtin morphism expressions."""
import pytest
from ide_fixture import at, cursor

from qvr.analysis import Document
from qvr.ide.completion import complete
from qvr.ide.hover import hover
from qvr.ide.semantic_tokens import semantic_tokens
from qvr.ide.signature import signature_help
from qvr.syntax.format import format_text

SRC = """\
object Token : FinSet 32
object Latent : Real 16
morphism tok : Token -> Latent [role=embed, positions=16]
morphism attn : Latent -> Latent [role=attention, heads=4, causal, scale=0.05] ~ Normal
morphism mix : Latent -> Latent [role=attention, heads=2, head_dim=3]
morphism icl : Latent -> Latent [role=attention, heads=2, causal=strict] ~ Normal
morphism ff : Latent -> Latent [role=kernel] ~ Normal
morphism head : Latent -> Token [role=kernel] ~ Categorical
let block = residual(layer_norm(Latent) >> attn)
let ln = rms_norm(Latent)
let lm = tok >> stack(block, 2) >> layer_norm(Latent) >> head
export lm
"""

F = "```qvr\n{}\n```"


def h(sig, facts="", doc=""):
    return F.format(sig) + (f"\n{facts}" if facts else "") + (f"\n\n{doc}" if doc else "")


@pytest.mark.parametrize("needle, token, text", [
    ("morphism at$0tn", "attn",
     h("attn : Latent -> Latent", "morphism · role attention ~ Normal · 4 heads × 4, causal · scale 0.05")),
    (">> at$0tn)", "attn",
     h("attn : Latent -> Latent", "morphism · role attention ~ Normal · 4 heads × 4, causal · scale 0.05")),
    ("morphism m$0ix", "mix", h("mix : Latent -> Latent", "morphism · role attention (deterministic) · 2 heads × 3")),
    ("morphism t$0ok", "tok", h("tok : Token -> Latent", "morphism · role embed · 16 positions")),
    ("let l$0n", "ln", h("ln : Latent -> Latent", "let · deterministic last link")),
    ("let bl$0ock", "block", h("block : Latent -> Latent", "let")),
    ("resid$0ual(", "residual",
     h("residual(f)", "morphism constructor",
       "x -> x + y with y ~ f(x), for f : A -> A over Real spaces; deterministic when f is")),
    ("= rms_n$0orm(", "rms_norm",
     h("rms_norm(A)", "morphism constructor",
       "deterministic A -> A over a Real space: x / sqrt(mean(x^2) + 1e-5) * gain + bias, gain and bias learned")),
    ("caus$0al,", "causal",
     h("causal", "option of a morphism · attention: position i attends only to positions j <= i (a bare "
                 "flag); `causal=strict`: only to j < i (position 0 attends to nothing: 0)")),
    ("morphism i$0cl", "icl",
     h("icl : Latent -> Latent", "morphism · role attention ~ Normal · 2 heads × 8, strictly causal")),
    ("posi$0tions", "positions",
     h("positions", "option of a morphism · embed: a learned vector per position index, added to the "
                    "embedding; the longest sequence it accepts")),
])
def test_hover(needle, token, text):
    doc, off = cursor(SRC, needle)
    got = hover(doc, off)
    assert got is not None
    assert doc.text[got.span.start:got.span.end] == token
    assert got.text == text


def test_hover_of_a_builtin_sub_expression_shows_its_type():
    doc, off = cursor(SRC, "layer_norm(Lat$0ent) >> attn")
    # the object argument is an object reference
    assert hover(doc, off).text.startswith(F.format("Latent : Real 16"))
    doc, off = cursor(SRC, "layer_norm(Latent) $0>> attn")
    assert hover(doc, off).text == h("layer_norm(Latent) >> attn : Latent -> Latent",
                                     "structure: Real 16 -> Real 16")


def labels(src):
    doc, off = at(src)
    return [(i.label, i.insert) for i in complete(doc, off).items]


def test_completion_offers_the_attention_role():
    got = labels(SRC + "morphism z : Latent -> Latent [role=$0")
    assert ("attention", "") in got and ("kernel", "") in got


def test_completion_offers_attention_keys_with_causal_as_a_flag():
    assert labels(SRC + "morphism z : Latent -> Latent [role=attention, $0") == [
        ("causal", "causal"), ("head_dim", "head_dim="), ("heads", "heads="), ("replicate", "replicate="),
        ("scale", "scale=")]
    # keys already written, the bare flag included, are not offered again
    assert labels(SRC + "morphism z : Latent -> Latent [role=attention, causal, heads=2, $0") == [
        ("head_dim", "head_dim="), ("replicate", "replicate="), ("scale", "scale=")]


def test_completion_offers_strict_as_the_value_of_causal():
    assert labels(SRC + "morphism z : Latent -> Latent [role=attention, causal=$0") == [("strict", "")]
    # `causal=strict` counts as written: the key is not offered again
    assert ("causal", "causal") not in labels(SRC + "morphism z : Latent -> Latent "
                                                    "[role=attention, causal=strict, $0")


def test_completion_offers_positions_only_on_embed():
    assert ("positions", "positions=") in labels(SRC + "morphism z : Token -> Latent [role=embed, $0")
    kernel = labels(SRC + "morphism z : Latent -> Latent [role=kernel, $0")
    assert not {"positions", "heads", "head_dim", "causal"} & {label for label, _ in kernel}


def test_completion_offers_location_scale_families_after_an_attention():
    assert labels(SRC + "morphism z : Latent -> Latent [role=attention] ~ $0") == [
        ("Cauchy", ""), ("Laplace", ""), ("Normal", "")]


def test_completion_offers_the_builtins_in_morphism_expressions():
    doc, off = at(SRC + "let z = $0")
    items = {i.label: i for i in complete(doc, off).items}
    for name, snippet in (("residual", "residual(${1:f})"), ("layer_norm", "layer_norm(${1:A})"),
                          ("rms_norm", "rms_norm(${1:A})")):
        assert items[name].kind == "combinator"
        assert items[name].insert == snippet and items[name].snippet


def test_completion_inside_the_builtins():
    # layer_norm(…) takes a Real object; residual(…) a morphism
    assert labels(SRC + "let z = layer_norm($0") == [("Latent", "")]
    got = labels(SRC + "let z = residual($0")
    assert ("attn", "") in got and ("ff", "") in got and ("Latent", "") not in got


def test_completion_does_not_offer_the_builtins_as_step_targets():
    got = labels(SRC + "program p : Latent -> Latent\n    sample h <- $0")
    names = {label for label, _ in got}
    assert "attn" in names and not {"residual", "layer_norm", "rms_norm"} & names


@pytest.mark.parametrize("src, label, active", [
    ("let z = residual($0", "residual(f)", 0),
    ("let z = layer_norm($0", "layer_norm(A)", 0),
    ("morphism z : Latent -> Latent [role=let] ~ rms_norm($0", "rms_norm(A)", 0),
])
def test_signature_help(src, label, active):
    doc, off = at(SRC + src)
    sig = signature_help(doc, off)
    assert (sig.label, sig.active) == (label, active)
    assert sig.label[sig.params[0][0]:sig.params[0][1]] in ("f", "A")


def test_no_morphism_signature_for_the_let_expression_builtin():
    # inside a program `let` step, layer_norm is the let-expression builtin (outside the core)
    doc, off = at(SRC + "program p : Latent -> Latent\n    sample h <- ff\n    let y = layer_norm($0")
    assert signature_help(doc, off) is None


def test_semantic_tokens_classify_builtins_flags_and_the_role():
    doc = Document(SRC)
    toks = {(doc.text[t.start:t.end], t.type, t.modifiers) for t in semantic_tokens(doc)}
    assert ("residual", "function", ("defaultLibrary",)) in toks
    assert ("layer_norm", "function", ("defaultLibrary",)) in toks
    assert ("rms_norm", "function", ("defaultLibrary",)) in toks
    assert ("causal", "property", ()) in toks
    assert ("positions", "property", ()) in toks
    assert ("attention", "enumMember", ()) in toks


MESSY = """\
object Latent : Real 16
morphism attn:Latent->Latent[ role = attention ,heads=4,causal ,scale=0.1 ]~Normal
morphism mix : Latent -> Latent [role=attention,causal]
let block = residual( layer_norm( Latent )>>attn ) >> residual(rms_norm(Latent)>>mix)
"""


def test_format_keeps_the_bare_flag_and_is_idempotent():
    out = format_text(MESSY).text
    assert out == """\
object Latent : Real 16
morphism attn : Latent -> Latent [role=attention, heads=4, causal, scale=0.1] ~ Normal
morphism mix : Latent -> Latent [role=attention, causal]
let block = residual(layer_norm(Latent) >> attn) >> residual(rms_norm(Latent) >> mix)
"""
    assert format_text(out).text == out
    assert Document(out).diagnostics() == []
    assert format_text(SRC).text == SRC
