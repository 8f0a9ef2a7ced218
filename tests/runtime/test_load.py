"""`qvr.load`: front-end errors, runtime compile errors (QVR950), and the Program surface."""
import subprocess
import sys

import pytest
import torch

import qvr
from qvr.runtime.errors import CompileError, ParseError
from runtime_support import EXAMPLES, ROOT


def test_import_qvr_does_not_import_torch():
    code = ("import sys, qvr; assert qvr.__version__; "
            "print(','.join(m for m in ('torch', 'qvr.runtime', 'lark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_load_accepts_a_path_a_path_string_and_source():
    torch.manual_seed(3)
    a = qvr.load(EXAMPLES / "transformer_lm.qvr")
    torch.manual_seed(3)
    b = qvr.load(str(EXAMPLES / "transformer_lm.qvr"))
    torch.manual_seed(3)
    c = qvr.load((EXAMPLES / "transformer_lm.qvr").read_text())
    pa, pb, pc = (dict(p.named_parameters()) for p in (a, b, c))
    assert list(pa) == list(pb) == list(pc)
    for k in pa:  # same seed -> identical parameters (spec 2.1)
        assert torch.equal(pa[k], pb[k]) and torch.equal(pa[k], pc[k])
    assert a.path.endswith("transformer_lm.qvr") and c.path == "<string>"


def test_front_end_errors_raise_one_exception_listing_all():
    src = ("object A : FinSet 3\n"
           "morphism f : A -> B [role=latent]\n"
           "morphism g : A -> A [role=kernl]\n"
           "export f\n")
    with pytest.raises(CompileError) as ei:
        qvr.loads(src, path="bad.qvr")
    e = ei.value
    assert e.codes == ["QVR101", "QVR204"]
    assert e.lines == [
        "bad.qvr:2:19: error[QVR101]: undefined object `B`",
        "bad.qvr:3:27: error[QVR204]: unknown role `kernl`; expected one of latent, observed, "
        "kernel, embed, discretize, let, attention, pretrained; did you mean `kernel`?",
    ]
    assert str(e).splitlines() == ["bad.qvr: 2 errors; nothing was compiled", *e.lines]


def test_a_syntax_error_makes_it_a_parse_error():
    src = "object A : FinSet 3\nmorphism g : A -> A [role=kernl]\nlet h = g >>\n"
    with pytest.raises(ParseError) as ei:
        qvr.loads(src, path="p.qvr")
    assert ei.value.codes == ["QVR204", "QVR001"]
    assert ei.value.lines[1].startswith("p.qvr:3:12: error[QVR001]: ")


def test_warnings_do_not_prevent_loading():
    src = "object A : FinSet 2\nmorphism f : A -> A [role=latent] ~ Normal(0.0, 1.0)\nexport f\n"
    from qvr.sema.typed import typed_module
    assert [d.code for d in typed_module(src).diagnostics] == ["QVR707"]  # a warning
    prog = qvr.loads(src)
    assert prog.morphism.tensor.shape == (2, 2)


@pytest.mark.parametrize("src, line", [
    ("object V : Real 2\nmorphism k : V -> V [role=kernel] ~ Wishart\nexport k\n",
     "m.qvr:2:37: error[QVR950]: family `Wishart` is not supported by this runtime"),
    ("object V : Real 2\nmorphism k : V -> V [role=kernel] ~ Dirichlet\nexport k\n",
     "m.qvr:2:37: error[QVR950]: family `Dirichlet` is not supported by this runtime"),
    ("object V : Real 2\nobject K : FinSet 3\nprogram p : V -> V\n"
     "    sample w <- Horseshoe(1.0) [over=K]\n    return w\nexport p\n",
     "m.qvr:4:17: error[QVR950]: family `Horseshoe` is not supported by this runtime"),
    ("composition tropical as algebra\nobject A : FinSet 2\n"
     "morphism f : A -> A [role=latent]\nexport f\n",
     "m.qvr:1:13: error[QVR950]: composition rule `tropical` is not supported by this runtime"),
])
def test_optional_features_raise_qvr950_at_compile_time(src, line):
    with pytest.raises(CompileError) as ei:
        qvr.loads(src, path="m.qvr")
    assert ei.value.codes == ["QVR950"]
    assert ei.value.lines == [line]


def test_qvr950_in_a_template_is_reported_at_load():
    src = ("object S : FinSet 4\nobject K : FinSet 3\n"
           "program t(a : Real) : S -> S\n    sample w <- Horseshoe(a) [over=K]\n    return w\n"
           "export t\n")
    with pytest.raises(CompileError) as ei:
        qvr.loads(src, path="t.qvr")
    assert ei.value.lines == ["t.qvr:4:17: error[QVR950]: family `Horseshoe` is not supported "
                              "by this runtime"]


KG = ("composition log_prob as algebra\nobject City : FinSet 3\nobject Country : FinSet 2\n"
      "morphism located_in : City -> Country [role=observed] ~ from_data(\"cc\")\nexport located_in\n")


def test_from_data_fills_an_observed_morphism():
    t = torch.log(torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]))
    prog = qvr.loads(KG, data={"cc": t.flatten()})
    assert torch.allclose(prog.morphism.tensor, t)
    assert prog.morphism.algebra.name == "log_prob"
    assert list(prog.named_parameters()) == []  # a buffer, never learned
    assert [n for n, _ in prog.named_buffers()] == ["morphism.value"]


def test_from_data_problems_are_compile_errors():
    with pytest.raises(CompileError) as ei:
        qvr.loads(KG, path="kg.qvr", data={"other": torch.zeros(6)})
    assert ei.value.lines == ["kg.qvr:4:57: error[QVR951]: `from_data(\"cc\")` of `located_in`: "
                              "no tensor under the key \"cc\" in `data` (given keys: 'other')"]
    with pytest.raises(CompileError) as ei:
        qvr.loads(KG, path="kg.qvr", data={"cc": torch.zeros(5)})
    assert ei.value.lines == ["kg.qvr:4:57: error[QVR951]: `from_data(\"cc\")` of `located_in` "
                              ": City -> Country: expected 6 = 3·2 elements, got 5 (shape (5,))"]


def test_program_surface_on_the_hmm_example():
    from runtime_support import load_example
    prog = load_example("hmm")
    assert list(prog.exports) == ["regime_hmm", "emit_later", "stationary", "local_level"]
    assert prog.morphism is prog.exports["regime_hmm"] is prog["regime_hmm"]
    assert prog.domain.name == "Regime" and prog.codomain.name == "Symbol"
    # every named value is reachable, replica members and lets included
    assert prog["five_steps"] is prog.morphisms["five_steps"]
    assert prog.templates == {} and prog.deductions == {}
    # parameters: exactly those reachable from .morphism (the transition appears once)
    names = [n for n, _ in prog.named_parameters()]
    assert names == ["morphism._step_regime.left.left.left.left.logits",
                     "morphism._step_symbol.logits"]
    with pytest.raises(TypeError, match="continuous morphism"):
        prog(n_steps=2)


def test_call_with_n_steps_on_a_finite_primary():
    prog = qvr.loads("composition real as algebra\nobject A : FinSet 3\n"
                     "morphism f : A -> A [role=latent]\nlet g = repeat(f)\nexport g\n")
    m = prog["f"].tensor
    assert torch.allclose(prog(), m)
    assert torch.allclose(prog(n_steps=3), m @ m @ m, atol=1e-6)
    assert prog.morphism.n_steps == 3
    with pytest.raises(TypeError, match="finite morphism"):
        prog.rsample(torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError):
        prog(n_steps=0)


def test_expression_exports_and_an_empty_module():
    prog = qvr.loads("object A : FinSet 3\nmorphism f : A -> A [role=latent]\n"
                     "export f   >>  (f.dagger)\n")
    assert list(prog.exports) == ["f >> (f.dagger)"]
    empty = qvr.loads("object A : FinSet 3\n")
    assert empty.morphism is None and empty.exports == {}
    with pytest.raises(AttributeError):
        empty.domain


def test_templates_instantiate_into_new_programs():
    from runtime_support import load_example
    prog = load_example("crop_yields")
    inv = prog.templates["site_effects"]
    assert prog.exports["site_effects"] is inv and prog.site_effects is inv
    p1 = prog.site_effects(centre=1.0, spread=0.5)
    p2 = prog.site_effects(1.0, 0.5)
    assert isinstance(p1, qvr.runtime.Program) and p1.morphism.label == "site_effects"
    x = torch.zeros(3, 1)
    assert p1.morphism.rsample(x).shape == (12,)
    v = {"shift": torch.tensor(1.0), "effect": torch.full((12,), 2.0)}
    lj1, lj2 = p1.morphism.log_joint(x, v).sum(), p2.morphism.log_joint(x, v).sum()
    # Normal(1, 1) at 1 plus 12 LogNormal(1, 0.5) at 2
    ln = torch.distributions.LogNormal(1.0, 0.5).log_prob(torch.tensor(2.0))
    expected = torch.distributions.Normal(1.0, 1.0).log_prob(torch.tensor(1.0)) + 12 * ln
    assert torch.allclose(lj1, expected) and torch.allclose(lj2, expected)
    with pytest.raises(TypeError):
        prog.site_effects(1.0, spread=0.5)
    with pytest.raises(TypeError):
        prog.site_effects(centre=1.0)
    with pytest.raises(TypeError):
        prog.site_effects(1.0, 2.0, 3.0)


def test_dsl_module_path():
    import qvr.dsl as dsl
    assert dsl.load is qvr.runtime.load and dsl.CompileError is CompileError
    assert issubclass(dsl.ParseError, dsl.CompileError.__mro__[1])


def test_a_step_whose_target_failed_to_compile_gives_the_compile_error_not_a_keyerror():
    """A `let` over a morphism this runtime cannot build (QVR950) used as a step target:
    the load fails with that diagnostic (it raised KeyError from the family table)."""
    text = """\
object Obs : Real 1
object State : Real 3
morphism cell : Obs * State -> State [role=kernel] ~ OneHotCategorical
let filt = scan(cell)
program p : Obs -> State
    sample h <- filt
    return h
export p
"""
    from qvr.runtime.errors import CompileError
    with pytest.raises(CompileError) as info:
        qvr.loads(text)
    assert [d.code for d in info.value.diagnostics] == ["QVR950"]
    assert "family `OneHotCategorical` is not supported by this runtime" in str(info.value)
