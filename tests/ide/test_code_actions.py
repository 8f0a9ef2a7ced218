"""Quick fixes: did-you-mean, declare a missing object or morphism, remove a duplicate."""
import pytest
from ide_fixture import apply

from qvr.analysis import Document
from qvr.ide.code_actions import code_actions
from qvr.text import Span


def fixes(src):
    doc = Document(src)
    return [(a.title, a.diagnostic.code, apply(src, a.edits)) for a in code_actions(doc, Span(0, len(src)))]


def test_did_you_mean_and_declare_object():
    src = "object Size : FinSet 3\n## doc of B\nobject B : Siez\n"
    assert fixes(src) == [
        ("Change `Siez` to `Size`", "QVR101", "object Size : FinSet 3\n## doc of B\nobject B : Size\n"),
        ("Declare object `Siez`", "QVR101",
         "object Size : FinSet 3\nobject Siez : FinSet 2\n## doc of B\nobject B : Siez\n"),
    ]
    fixed = fixes(src)[1][2]
    assert [d.code for d in Document(fixed).diagnostics()] == []


def test_declare_morphism_stub_typed_from_its_neighbours():
    src = ("object A : Real 2\nobject C : FinSet 4\nmorphism f : A -> A [role=kernel] ~ Normal\n"
           "morphism g : A -> C [role=kernel] ~ Categorical\n## the pipeline\nlet h = f >> polsh >> g\n")
    ((title, code, out),) = fixes(src)
    assert (title, code) == ("Declare morphism `polsh`", "QVR102")
    assert out == src.replace("## the pipeline", "morphism polsh : A -> A [role=kernel] ~ Normal\n## the pipeline")
    assert Document(out).diagnostics() == []


@pytest.mark.parametrize("src,expected", [
    ("object A : FinSet 2\n## first\nobject A : FinSet 3\nobject B : FinSet 2\n",
     "object A : FinSet 2\nobject B : FinSet 2\n"),
    ("object A : Real 2\nmorphism f : A -> A [role=kernel, scale=0.1, scale=0.2] ~ Normal\n",
     "object A : Real 2\nmorphism f : A -> A [role=kernel, scale=0.1] ~ Normal\n"),
    ("object A : Real 2\nmorphism f : A -> A [role=kernel] ~ Normal\nexport f\nexport f\n",
     "object A : Real 2\nmorphism f : A -> A [role=kernel] ~ Normal\nexport f\n"),
    ("object I : FinSet 2\ndeduction D : I -> I\n    atoms S, span\n    rule r : span(I, J, S) |- span(I, J, S)\n"
     "    rule r : span(I, J, S) |- span(J, I, S)\n",
     "object I : FinSet 2\ndeduction D : I -> I\n    atoms S, span\n    rule r : span(I, J, S) |- span(I, J, S)\n"),
    ("object I : FinSet 2\ndeduction D : I -> I\n    atoms S, S, span\n    rule r : span(I, J, S) |- span(I, J, S)\n",
     "object I : FinSet 2\ndeduction D : I -> I\n    atoms S, span\n    rule r : span(I, J, S) |- span(I, J, S)\n"),
])
def test_remove_duplicate(src, expected):
    ((title, _code, out),) = [f for f in fixes(src) if f[0].startswith("Remove duplicate")]
    assert out == expected
    assert [d.code for d in Document(out).diagnostics()] == []


def test_actions_only_for_diagnostics_in_the_range():
    src = "object K : FinSet 3\nprogram p : K -> K\n    sample sigma <- HalfNormal(1.0)\n" \
          "    observe y : K <- Normal(0.0, sigm)\n    return sigma\n"
    doc = Document(src)
    at = src.index("sigm)")
    assert [a.title for a in code_actions(doc, Span(at, at))] == ["Change `sigm` to `sigma`"]
    assert code_actions(doc, Span(0, 5)) == []


@pytest.mark.parametrize("options", ["[role=attention, heads=2, causal]", "[role=attention]"])
@pytest.mark.parametrize("step", ["observe y", "sample h"])
def test_qvr316_gives_the_attention_a_family(options, step):
    """An observed or sampled attention without a family (QVR316): the fix appends
    `~ Normal` to its declaration, and the program then checks clean."""
    decl = f"morphism attn : Latent -> Latent {options}"
    src = ("object Latent : Real 4\n" + decl + "  # mixes positions\n"
           "program p : Latent -> Latent\n"
           f"    {step} <- attn\n"
           f"    return {step.split()[1]}\n")
    ((title, code, out),) = fixes(src)
    assert (title, code) == ("Give `attn` a family (`~ Normal`)", "QVR316")
    assert out == src.replace(decl, decl + " ~ Normal")
    assert [d.code for d in Document(out).diagnostics()] == []


def test_qvr316_through_a_let_has_no_family_fix():
    src = ("object Latent : Real 4\nmorphism ff : Latent -> Latent [role=kernel] ~ Normal\n"
           "let f = ff >> layer_norm(Latent)\n"
           "program p : Latent -> Latent\n    observe y <- f\n    return y\n")
    assert fixes(src) == []
