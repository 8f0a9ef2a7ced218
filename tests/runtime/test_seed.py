"""The user's seed program (transformer_lm) and its "Generating synthetic data" snippet."""
import contextlib
import io
import os
from pathlib import Path

import pytest
import torch

import qvr
from runtime_support import EXAMPLES, ROOT

SEED_DOC = Path("/work/shared/seeds/000_8de481a00e4717e5.txt")

# The snippet exactly as the seed document gives it, except the two lines the issue
# allows to change: the import (`from quivers.dsl import load`) and the path.
SNIPPET = '''\
import torch
from qvr import load

torch.manual_seed(0)
prog = load("examples/transformer_lm.qvr")
model = prog.morphism

for _, p in model.named_parameters():
    p.data.copy_(torch.randn_like(p) * 0.3)

batch, seq_len, vocab = 2, 1, 32
contexts = torch.randint(0, vocab, (batch, seq_len))
targets = model.rsample(contexts)
print("contexts:", contexts.shape, contexts.dtype)
print("targets: ", targets.shape, targets.dtype)
'''


@pytest.mark.skipif(not SEED_DOC.exists(), reason="the seed document is not available")
def test_snippet_is_the_seed_documents_snippet():
    doc = SEED_DOC.read_text()
    original = SNIPPET.replace("from qvr import load", "from quivers.dsl import load").replace(
        '"examples/transformer_lm.qvr"', '"docs/examples/source/transformer_lm.qvr"')
    assert original in doc


def test_generating_synthetic_data_snippet_runs_unchanged():
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(SNIPPET, "seed-snippet", "exec"), {})
    finally:
        os.chdir(cwd)
    assert out.getvalue().splitlines() == [
        "contexts: torch.Size([2, 1]) torch.int64",
        "targets:  torch.Size([2, 1]) torch.int64",
    ]


@pytest.fixture(scope="module")
def seed():
    torch.manual_seed(0)
    return qvr.load(EXAMPLES / "transformer_lm.qvr")


@pytest.mark.parametrize("L", [1, 4])
def test_rsample_shapes_for_sequence_lengths(seed, L):
    model = seed.morphism
    contexts = torch.randint(0, 32, (3, L))
    y = model.rsample(contexts)
    assert y.shape == (3, L) and y.dtype == torch.int64
    assert int(y.min()) >= 0 and int(y.max()) < 32
    assert model._step_h.rsample(contexts).shape == (3, L, 16)
    assert model.rsample(contexts, torch.Size([2])).shape == (2, 3, L)


def test_program_facts(seed):
    model = seed.morphism
    assert model.observed_names == {"next_token"}
    assert model.effect_set == {"Sample", "Score"}
    assert [(s.name, s.step, s.site_kind) for s in model.site_infos()] == [
        ("h", "sample", "local"), ("next_token", "observe", "local")]
    assert [s.name for s in model.latent_sites({"next_token"})] == ["h"]
    assert model._step_h is seed["backbone"]
    assert model._step_next_token is seed["lm_head"]
    with pytest.raises(NotImplementedError):
        model.log_prob(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long))


def _nparams(m):
    return sum(p.numel() for p in m.parameters())


def test_parameters_stack_copies_and_heads_are_distinct(seed):
    model = seed.morphism
    params = dict(model.named_parameters())
    # the whole model: embed + 2 x (4 heads + 5 kernels) + lm_head, every tensor distinct
    assert len({p.data_ptr() for p in params.values()}) == len(params)
    layer = seed["layer"]
    backbone = seed["backbone"]
    embed = seed["tok_embed"]
    assert _nparams(backbone) == _nparams(embed) + 2 * _nparams(layer)
    # the stacked copies are fresh modules, not the `layer` object itself
    links = backbone.links()
    assert len(links) == 1 + 2 * 6
    assert all(lk is not o for lk in links for o in layer.links())
    copy1, copy2 = links[1:7], links[7:13]
    # heads of one layer: four different parameter sets
    heads = list(copy1[0].parts)
    assert len({id(h.param_source.net[0].weight) for h in heads}) == 4
    # copies start equal and are independent afterwards
    w1 = copy1[1].param_source.net[0].weight
    w2 = copy2[1].param_source.net[0].weight
    assert torch.equal(w1, w2) and w1.data_ptr() != w2.data_ptr()
    with torch.no_grad():
        w1.add_(1.0)
    assert not torch.equal(w1, w2)
    with torch.no_grad():
        w1.sub_(1.0)


def test_log_joint_is_backbone_density_plus_head_likelihood(seed):
    model = seed.morphism
    x = torch.randint(0, 32, (2, 3))
    with torch.no_grad():
        h = model._step_h.rsample(x)
        y = model.rsample(x)
        lj = model.log_joint(x, {"h": h, "next_token": y})
        parts = model._step_h.log_prob(x, h) + model._step_next_token.log_prob(h, y)
    assert lj.shape == (2,)
    assert torch.allclose(lj, parts.sum(-1))
    assert torch.isfinite(lj).all()
