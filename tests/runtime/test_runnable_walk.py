"""E9.9: the checker refuses exactly what the runtime cannot run.

Walks every family of `qvr.sema.families.FAMILIES` (as a `sample` target, in
`log_density` and as a kernel `~ F`) and every builtin of `BUILTINS`: either `qvr check`
reports QVR950 (or the position's own refusal: QVR312, QVR426, QVR439) at the family's
name, or the program checks clean, the runtime compiles it and one evaluation gives a
finite log density.  For builtins, every argument combination from a small pool that
checks clean must compile and evaluate without an exception, and at least one of them
must give a finite value (a builtin the checker accepts in no combination is refused
with QVR950/QVR900, or has an explicit program below).
"""
from __future__ import annotations

import itertools

import pytest
import torch

import qvr
from qvr.sema import runnable
from qvr.sema.families import BUILTINS, COMPOSITION_RULES, FAMILIES, RUNTIME_RULES
from qvr.sema.typed import typed_module

HEAD = ("object K : FinSet 3\nobject Row : FinSet 4\nobject C : CorrCholesky 3\n"
        "program p : Row -> Row\n"
        "    sample u <- Beta(2.0, 2.0)\n"
        "    let g = 1.5 + u\n"
        "    sample v : K <- HalfNormal(1.0)\n"
        "    sample w <- Dirichlet(1.0) [over=K]\n"
        "    let M = diag(v) + eye(K)\n"
        "    let Lm = cholesky(M)\n")
TAIL = "    return u\nexport p\n"


def _errors(src: str) -> list:
    """Errors, and the warnings that a name is read from host data (QVR701-QVR703: the
    walk supplies none)."""
    return [d for d in typed_module(src).diagnostics
            if d.is_error or d.code in ("QVR701", "QVR702", "QVR703")]


def _log_joint(src: str, values=None) -> torch.Tensor:
    prog = qvr.loads(src).morphism
    torch.manual_seed(0)
    return prog.execute(torch.zeros(2, 1), values or {}).log_joint


# ---------------------------------------------------------------- families

LITERAL = {"real": "0.5", "pos": "2.0", "unit": "0.3", "vec": "w", "mat": "Lm"}
SPECIAL_ARGS = {"Uniform": "-1.0, 2.0", "TruncatedNormal": "u, 1.0, -1.0, 2.0",
                "Pareto": "1.5, 3.0"}
REFUSALS = {"QVR950", "QVR312", "QVR426", "QVR439"}


def _call(name: str) -> str:
    fam = FAMILIES[name]
    if fam.improper or not fam.params:
        return name
    args = SPECIAL_ARGS.get(name) or ", ".join(LITERAL[k] for _, k in fam.params)
    return f"{name}({args})"


def _over(name: str) -> str:
    fam = FAMILIES[name]
    if name in runnable.SPACE_FAMILIES:
        return " [over=C]"
    return {0: "", 1: " [over=K]", 2: " [over=[K, K]]"}[fam.event_rank]


def _refused_at(src: str, name: str, codes=REFUSALS) -> bool:
    errs = _errors(src)
    return bool(errs) and all(d.code in codes for d in errs) and \
        all(src[d.span.start:d.span.end] == name for d in errs)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_as_a_sample_target_runs_or_is_refused(name):
    src = HEAD + f"    sample x <- {_call(name)}{_over(name)}\n" + TAIL
    if FAMILIES[name].step == "no" or not runnable.step_supported(name):
        assert _refused_at(src, name), [(d.code, d.message) for d in _errors(src)]
        return
    assert _errors(src) == []
    # an improper prior has no forward draws: its value is given
    values = {"x": torch.tensor(0.5)} if FAMILIES[name].improper else {}
    assert torch.isfinite(_log_joint(src, values)).all()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_in_log_density_runs_or_is_refused(name):
    fam = FAMILIES[name]
    ok = fam.step != "no" and not fam.improper and runnable.step_supported(name) and \
        name not in runnable.SPACE_FAMILIES
    draw = f"    sample x <- {_call(name)}{_over(name)}\n" if ok else "    let x = u\n"
    src = HEAD + draw + f"    score s = log_density({_call(name)}, x)\n" + TAIL
    if not ok:
        errs = _errors(src)
        # QVR420: `Flat` is not a family call; QVR423: `Flow` has no density
        assert errs and {d.code for d in errs} <= {"QVR950", "QVR420", "QVR423"}, \
            [(d.code, d.message) for d in errs]
        return
    assert _errors(src) == []
    assert torch.isfinite(_log_joint(src)).all()


def _codomain(name):
    return {"continuous": "Real 2", "discrete": "FinSet 5", "bool": "FinSet 2"}[
        FAMILIES[name].kernel_cod]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_as_a_kernel_runs_or_is_refused(name):
    src = (f"object X : Real 3\nobject V : {_codomain(name)}\n"
           f"morphism k : X -> V [role=kernel] ~ {name}\nexport k\n")
    if not runnable.kernel_supported(name):
        assert _refused_at(src, name), [(d.code, d.message) for d in _errors(src)]
        return
    assert _errors(src) == []
    k = qvr.loads(src).morphism
    x = torch.randn(5, 3)
    assert torch.isfinite(k.log_prob(x, k.rsample(x))).all()


# ---------------------------------------------------------------- builtins

POOL = ("u", "g", "v", "M", "K", "0", "2")
#: builtins whose arguments the pool cannot give (deductions, lambdas, family calls)
EXPLICIT = {
    "fold": ("    let r = fold(K, u, (s, t) -> 0.5 * s + 1.0)\n", {}),
    "scan": ("    let r = scan(K, u, (s, t) -> 0.5 * s + 1.0)\n", {}),
    "ode": ("    data ts : K\n    let r = ode((y, t) -> -y, g, ts)\n",
            {"ts": torch.tensor([0.0, 0.5, 1.0])}),
    "log_density": ("    let r = log_density(Normal(u, g), v)\n", {}),
}
#: builtins run by a whole example (deductions)
EXAMPLES = {"parse": "pcfg_deduction", "compose": "pcfg_deduction"}


def _program(call: str) -> str:
    return HEAD + f"    let r = {call}\n    score s = log_density(Normal(0.0, 1.0), r)\n" + TAIL


def _clean_calls(name: str):
    b = BUILTINS[name]
    for n in range(len(b.params), len(b.params) + len(b.optional) + 1):
        for args in itertools.product(POOL, repeat=n):
            src = _program(f"{name}({', '.join(args)})")
            if not _errors(src):
                yield src


@pytest.mark.filterwarnings("ignore:(var|std)\\(\\)")  # a scalar's variance is NaN, not an error
@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_runs_or_is_refused(name):
    if name in EXAMPLES:
        from pathlib import Path
        path = Path(__file__).parents[2] / "examples" / f"{EXAMPLES[name]}.qvr"
        text = path.read_text(encoding="utf-8")
        assert f"{name}(" in text
        assert _errors(text) == []
        qvr.load(str(path))  # compiles (the example's own tests run it)
        return
    if name in EXPLICIT:
        body, values = EXPLICIT[name]
        src = HEAD + body + "    score s = log_density(Normal(0.0, 1.0), r)\n" + TAIL
        assert _errors(src) == [], [(d.code, d.message) for d in _errors(src)]
        assert torch.isfinite(_log_joint(src, values)).all()
        return
    finite = 0
    clean = list(_clean_calls(name))
    if not clean:  # the checker refuses every use: it must say why
        src = _program(f"{name}(u)")
        assert {d.code for d in _errors(src)} & {"QVR950", "QVR900"}, name
        return
    for src in clean:
        lj = _log_joint(src)  # no exception: what checks clean runs
        finite += bool(torch.isfinite(lj).all())
    assert finite >= 1, f"`{name}`: {len(clean)} programs check clean, none evaluates finitely"


# ---------------------------------------------------------------- composition rules

@pytest.mark.parametrize("rule", sorted(COMPOSITION_RULES))
def test_every_composition_rule_runs_or_is_refused(rule):
    level = COMPOSITION_RULES[rule]
    src = (f"composition {rule} as {level}\nobject A : FinSet 2\n"
           "morphism f : A -> A [role=latent]\nexport f\n")
    if rule not in RUNTIME_RULES:
        assert _refused_at(src, rule, {"QVR950"}), [(d.code, d.message) for d in _errors(src)]
        return
    assert _errors(src) == []
    assert qvr.loads(src).morphism.tensor.shape == (2, 2)
