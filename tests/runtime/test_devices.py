"""Dtypes and devices (runtime spec 9.1-9.2): float32 by default, float64 works, `.to(device)`
moves every compiled value; CUDA tests run only where a GPU is present."""
import pytest
import torch

import qvr
from runtime_support import EXAMPLES

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _lm():
    torch.manual_seed(0)
    return qvr.load(EXAMPLES / "transformer_lm.qvr")


def test_float32_by_default():
    prog = _lm()
    assert {p.dtype for p in prog.parameters()} == {torch.float32}
    x = torch.randint(0, 32, (2, 3))
    h = prog.morphism._step_h.rsample(x)
    assert h.dtype == torch.float32
    assert prog.log_joint(x, {"h": h, "next_token": prog.rsample(x)}).dtype == torch.float32


def test_float64_with_the_default_dtype():
    torch.set_default_dtype(torch.float64)  # restored by the autouse fixture
    prog = _lm()
    assert {p.dtype for p in prog.parameters()} == {torch.float64}
    x = torch.randint(0, 32, (2, 3))
    h = prog.morphism._step_h.rsample(x)
    lj = prog.log_joint(x, {"h": h, "next_token": prog.rsample(x)})
    assert h.dtype == lj.dtype == torch.float64 and torch.isfinite(lj).all()
    reg = qvr.load(EXAMPLES / "regression_plates.qvr").morphism
    out = reg.rsample(torch.zeros(3, 1), observations={"income": torch.zeros(3),
                                                       "region_of": torch.tensor([0, 1, 2])})
    assert out.dtype == torch.float64


def test_double_converts_a_loaded_program():
    prog = _lm().double()
    assert {p.dtype for p in prog.parameters()} == {torch.float64}
    # the other exports and named values are converted too, not only `.morphism`
    assert prog["lm_head"].param_source.net[0].weight.dtype == torch.float64
    x = torch.randint(0, 32, (2, 3))
    h = prog.morphism._step_h.rsample(x)
    lj = prog.log_joint(x, {"h": h, "next_token": prog.rsample(x)})
    assert h.dtype == lj.dtype == torch.float64


def test_to_moves_non_primary_exports():
    prog = qvr.load(EXAMPLES / "hmm.qvr").double()
    assert prog.exports["local_level"]._step_level.cell.param_source.net[0].weight.dtype == \
        torch.float64
    assert prog.exports["emit_later"].tensor.dtype == torch.float64


@CUDA
@pytest.mark.gpu
def test_cuda_transformer():
    prog = _lm().to("cuda")
    assert {p.device.type for p in prog.parameters()} == {"cuda"}
    x = torch.randint(0, 32, (4, 5), device="cuda")
    y = prog.rsample(x)
    assert y.device.type == "cuda" and y.shape == (4, 5) and y.dtype == torch.int64
    h = prog.morphism._step_h.rsample(x)
    lj = prog.log_joint(x, {"h": h, "next_token": y})
    assert lj.device.type == "cuda" and torch.isfinite(lj).all()


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("stem", ["regression_plates", "mixture_marginalize", "hmm", "vae"])
def test_cuda_examples(stem):
    from runtime_cases import PROGRAMS
    prog = qvr.load(EXAMPLES / f"{stem}.qvr").to("cuda")
    for (s, export), make in PROGRAMS.items():
        if s != stem:
            continue
        x, host, sup = make(torch.Generator().manual_seed(0))
        move = lambda d: {k: v.cuda() if isinstance(v, torch.Tensor) else v  # noqa: E731
                          for k, v in d.items()}
        given = {**move(host), **move(sup)}
        p = prog.exports[export]
        ex = p.execute(x.cuda(), given, score=False)
        vals = {n: r.value for n, r in ex.sites.items() if r.step in ("sample", "observe")}
        lj = p.log_joint(x.cuda(), {**given, **vals})
        assert lj.device.type == "cuda" and torch.isfinite(lj).all()
