"""Building morphisms and programs from Python (runtime spec 3, 5.11, 7.3)."""
import pytest
import torch
from torch.distributions import Normal

import qvr
from qvr.runtime.errors import IncompatibleMorphismsError
from qvr.runtime.monadic import MonadicProgram
from qvr.runtime.morphisms.base import ContinuousMorphism
from qvr.runtime.objects import Euclidean, FinSet, Unit


class Prior(ContinuousMorphism):
    """A user subclass: a standard Normal on R^2, from the one-point object."""

    def __init__(self):
        super().__init__(Unit, Euclidean("theta", 2))
        self.shift = torch.nn.Parameter(torch.zeros(2))

    def rsample(self, x, sample_shape=torch.Size()):
        # one draw per input row; a 0-d input (a global site) gives one event
        return self.shift + torch.randn(*sample_shape, *torch.as_tensor(x).shape, 2)

    def log_prob(self, x, y):
        return Normal(self.shift, 1.0).log_prob(y).sum(-1)


def test_helper_objects():
    assert Unit == FinSet("1", 1) and Unit.size == 1 and Unit.shape == (1,)
    e = Euclidean("E", 3, low=0.0, high=1.0)
    assert e.is_bounded and e == Euclidean("E", 3, 0.0, 1.0) and e.dim == 3
    assert not Euclidean("F", 2, low=0.0).is_bounded
    assert FinSet("T", 5).cardinality == 5


def test_a_python_built_program_around_a_user_morphism():
    prior = Prior()
    steps = [(("theta",), prior, None),
             (("mu",), None, lambda env: env["theta"].sum()),
             (("one",), None, 1.0),
             (("alias",), None, "mu"),
             (("ll",), None, lambda env: Normal(env["alias"], env["one"]).log_prob(env["y"]).sum(),
              True)]
    prog = MonadicProgram(Unit, Unit, steps, ("theta",))
    assert [(s.name, s.site_kind) for s in prog.site_infos()] == [("theta", "global")]
    assert [n for n, _ in prog.named_parameters()] == ["_step_theta.shift"]
    y = torch.tensor([0.5, 1.5])
    theta = torch.tensor([0.2, 0.7])
    lj = prog.log_joint(torch.zeros(1, 1), {"theta": theta, "y": y})
    expected = Normal(0., 1.).log_prob(theta).sum() + Normal(0.9, 1.0).log_prob(y).sum()
    assert torch.allclose(lj, expected.reshape(1))
    assert prog.rsample(torch.zeros(1, 1), observations={"y": y}).shape == (2,)
    assert prog.effect_set == {"Sample", "Score"} and prog.observed_names == set()


def test_user_morphisms_compose_with_compiled_ones():
    prog = qvr.loads("object Z : Real 2\nobject Y : Real 1\n"
                     "morphism k : Z -> Y [role=kernel] ~ Normal\nexport k\n")
    pipe = Prior() >> prog.morphism
    u = torch.zeros(4, dtype=torch.long)
    assert pipe.rsample(u).shape == (4, 1)
    assert pipe.log_prob(u, torch.zeros(4, 1)).shape == (4,)
    with pytest.raises(IncompatibleMorphismsError) as ei:
        prog.morphism >> Prior()
    assert isinstance(ei.value, TypeError)


def test_finite_morphisms_with_different_algebras_do_not_combine():
    a = qvr.loads("composition real as algebra\nobject A : FinSet 2\n"
                  "morphism f : A -> A [role=latent]\nexport f\n").morphism
    b = qvr.loads("object A : FinSet 2\nmorphism g : A -> A [role=latent]\nexport g\n").morphism
    with pytest.raises(TypeError, match="incompatible algebras"):
        a >> b
    with pytest.raises(TypeError, match="incompatible algebras"):
        a @ b
    assert torch.allclose((a >> a).tensor, a.tensor @ a.tensor)


def test_snippet_import_paths():
    from qvr.continuous.morphisms import ContinuousMorphism as CM
    from qvr.continuous.programs import MonadicProgram as MP
    from qvr.continuous.spaces import Euclidean as E
    from qvr.core.objects import FinSet as F, Unit as U
    from qvr.dsl import CompileError, ParseError, load, loads
    assert (CM, MP, E, F, U) == (ContinuousMorphism, MonadicProgram, Euclidean, FinSet, Unit)
    assert load is qvr.runtime.load and loads is qvr.runtime.loads
    assert issubclass(ParseError, Exception) and issubclass(CompileError, Exception)
