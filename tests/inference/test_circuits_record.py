"""The attention record of a fit (design E7): ``circuits.npz`` and ``patterns.npz`` after an
SVI fit of a tiny attention program (shapes, values equal to `qvr.runtime.circuits` of the
fitted program, patterns equal to `Attention.pattern` of the layer's input), read back by
`qvr.runs.Run`; nothing for a program without attention."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import qvr
from qvr.inference import FitConfig, fit
from qvr.inference.methods.circuits import PATTERN_DRAWS, record_circuits
from qvr.runs import layout, open_run
from qvr.runtime import attention_layers, circuits

TINY = """\
object Token : FinSet 8
object Latent : Real 8
morphism tok : Token -> Latent [role=embed, positions=16]
morphism attn : Latent -> Latent [role=attention, heads=2, causal] ~ Normal
morphism head : Latent -> Token [role=kernel] ~ Categorical
let backbone = tok >> residual(layer_norm(Latent) >> attn)
program lm : Token -> Token
    sample h <- backbone
    observe next_token : Token <- head(h)
    return next_token
export lm
"""

NO_ATTENTION = """\
object Token : FinSet 8
object Latent : Real 8
morphism tok : Token -> Latent [role=embed]
morphism head : Latent -> Token [role=kernel] ~ Categorical
program lm : Token -> Token
    sample h <- tok
    observe next_token : Token <- head(h)
    return next_token
export lm
"""


def _data(rows=10, length=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 8, (rows, length), generator=g)
    return {"x": x, "next_token": torch.roll(x, -1, dims=1)}


def _fit(tmp_path, source, name="run", steps=3):
    torch.manual_seed(0)
    program = qvr.loads(source)
    data = _data()
    res = fit(program, data=data, run_dir=tmp_path / name,
              config=FitConfig(method="svi", steps=steps, lr=0.02, seed=0))
    assert res.status == "finished", res.message
    return program, data, open_run(tmp_path / name)


def test_svi_fit_records_circuits_and_patterns(tmp_path):
    program, data, run = _fit(tmp_path, TINY)
    assert (run.path / layout.CIRCUITS).is_file() and (run.path / layout.PATTERNS).is_file()
    c = run.circuits()
    assert sorted(c) == ["ov/attn", "qk/attn"]
    assert c["qk/attn"].shape == (2, 8, 8) and c["ov/attn"].shape == (2, 8, 8)
    want = circuits(program)  # the fitted program (fit trains it in place)
    np.testing.assert_allclose(c["qk/attn"], want["attn"]["qk"].numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(c["ov/attn"], want["attn"]["ov"].numpy(), rtol=0, atol=1e-7)
    (_, attn), = attention_layers(program)
    w_q, w_k, w_v, w_o = (p.detach().numpy() for p in (attn.w_q, attn.w_k, attn.w_v, attn.w_o))
    np.testing.assert_allclose(c["qk/attn"][1], w_q[1].T @ w_k[1], atol=1e-6)
    np.testing.assert_allclose(c["ov/attn"][0], w_o[:, :4] @ w_v[0], atol=1e-6)
    p = run.patterns()
    assert sorted(p) == ["draws", "inputs", "pattern/attn", "tokens"]
    assert int(p["draws"]) == PATTERN_DRAWS and int(p["tokens"]) == 1
    assert p["inputs"].dtype == np.int64 and p["inputs"].shape == (8, 6)  # first 8 of 10
    np.testing.assert_array_equal(p["inputs"], data["x"][:8].numpy())
    pat = p["pattern/attn"]
    assert pat.shape == (8, 2, 6, 6)
    np.testing.assert_allclose(pat.sum(-1), 1.0, atol=1e-5)  # rows are distributions
    upper = np.triu(np.ones((6, 6), bool), 1)
    assert np.all(pat[..., upper] == 0.0)  # causal: no weight on later keys
    assert pat[0, 0, 0, 0] == pytest.approx(1.0)


def test_patterns_are_the_layer_pattern_of_its_input(tmp_path):
    """With the embedding's spread made negligible the attention's input is a function of
    the tokens: layer_norm(centers[x_t] + pos[t]); the recorded pattern must be
    `attn.pattern` of exactly that."""
    torch.manual_seed(0)
    program = qvr.loads(TINY)
    model = program.exports["lm"]
    mods = dict(program.named_modules())
    tok = next(m for m in mods.values() if type(m).__name__ == "Embed")
    ln = next(m for m in mods.values() if type(m).__name__ == "LayerNorm")
    (_, attn), = attention_layers(program)
    with torch.no_grad():
        tok.log_sigma.fill_(-30.0)
        ln.gain.mul_(1.5)
        ln.bias.add_(0.1)
    x = _data(rows=3, length=5)["x"]
    rec = record_circuits(model, x, draws=2)
    assert rec.note == ""
    with torch.no_grad():
        z = tok.centers[x] + tok.pos[:5]
        mu, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
        feats = (z - mu) / torch.sqrt(var + 1e-5) * ln.gain + ln.bias
        want = attn.pattern(feats).numpy()
    assert rec.patterns["pattern/attn"].shape == (3, 2, 5, 5)
    np.testing.assert_allclose(rec.patterns["pattern/attn"], want, atol=1e-5)
    # the caller's random stream is untouched by the recording's forward runs
    torch.manual_seed(5)
    a = torch.rand(3)
    torch.manual_seed(5)
    record_circuits(model, x, draws=2)
    np.testing.assert_array_equal(torch.rand(3).numpy(), a.numpy())
    assert "mean" not in attn.__dict__  # the catching wrapper is gone


def test_no_attention_no_files(tmp_path):
    _, _, run = _fit(tmp_path, NO_ATTENTION, name="plain")
    assert not (run.path / layout.CIRCUITS).exists()
    assert not (run.path / layout.PATTERNS).exists()
    assert run.circuits() is None and run.patterns() is None
    assert record_circuits(qvr.loads(NO_ATTENTION).exports["lm"], _data()["x"]) is None


def test_input_that_is_not_sequences_keeps_the_circuits():
    torch.manual_seed(0)
    model = qvr.loads(TINY).exports["lm"]
    rec = record_circuits(model, None)
    assert sorted(rec.circuits) == ["ov/attn", "qk/attn"] and rec.patterns == {}
    assert rec.note == ("no attention patterns: the program's input is not a batch of "
                        "sequences")
    assert str(rec.circuit_arrays()["note"]) == rec.note


def test_mcmc_records_circuits_only_when_started_from_a_run(tmp_path):
    """MCMC never moves the weights: without a start they are the initialisation (nothing
    written); started from an SVI run they are that run's fitted weights."""
    _, data, svi = _fit(tmp_path, TINY, name="svi")
    cfg = dict(method="hmc", num_warmup=2, num_samples=2, num_chains=1, num_steps=2, seed=0)
    torch.manual_seed(0)
    fit(qvr.loads(TINY), data=data, config=FitConfig(**cfg), run_dir=tmp_path / "cold")
    assert open_run(tmp_path / "cold").circuits() is None
    torch.manual_seed(0)
    fit(qvr.loads(TINY), data=data, config=FitConfig(**cfg), run_dir=tmp_path / "warm",
        start_from=svi.path)
    warm, fitted = open_run(tmp_path / "warm").circuits(), svi.circuits()
    assert sorted(warm) == sorted(fitted)
    for key in fitted:
        np.testing.assert_array_equal(warm[key], fitted[key])
    assert open_run(tmp_path / "warm").patterns()["pattern/attn"].shape == (8, 2, 6, 6)


def test_patterns_carry_the_vocabulary_so_readers_need_no_program_files(tmp_path):
    program = qvr.loads(TINY)
    torch.manual_seed(0)
    data = {"x": torch.randint(0, 8, (4, 6)), "next_token": torch.randint(0, 8, (4, 6))}
    vocab = [f"w{i}" for i in range(8)]
    fit(program, data=data, run_dir=tmp_path / "v", vocab=vocab,
        config=FitConfig(method="svi", steps=2))
    pats = open_run(tmp_path / "v").patterns()
    assert pats["vocab"].tolist() == vocab
    from qvr_tui.circuits_model import load_circuits  # the dashboard's reader
    shown = load_circuits(open_run(tmp_path / "v"), program_path=None)
    assert shown.vocab == vocab
    assert shown.labels[0] == tuple(vocab[i] for i in data["x"][0].tolist())
