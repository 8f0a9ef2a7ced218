"""`fit(..., start_from=RUN)`: SMC generation from an SVI-fitted language model, and the
errors when a program no longer matches the run it starts from."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load
from qvr.inference import FitConfig, fit
from qvr.inference.start import StartError
from qvr.runs import open_run

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "examples" / "recurrent_lm.qvr"


def mean_log_likelihood(program, sequences, bos, eos, draws=4):
    """Mean over sequences of log p(s) = Σ_t log p(s_t | [bos] + s_<t), the hidden state
    averaged over `draws` draws per position (one batched call per prefix length)."""
    model = program.morphism
    total, count = 0.0, 0
    with torch.no_grad():
        for seq in sequences:
            seq = list(seq)
            for t, tok in enumerate(seq):
                x = torch.tensor([[bos] + seq[:t]] * draws, dtype=torch.long)
                y = torch.full((draws,), tok, dtype=torch.long)
                lp = model.execute(x, {"next_char": y}, score=True).log_joint
                total += float(torch.logsumexp(lp.reshape(-1), 0) - np.log(draws))
            count += 1
    return total / count


def test_smc_from_an_svi_fitted_language_model_generates_likelier_text(tmp_path):
    from qvr.datafiles import find_data, load_data
    corpus = load_data(find_data(LM))
    small = {"x": corpus["x"][:48], "next_char": corpus["next_char"][:48]}  # the suite's budget
    torch.manual_seed(0)
    fitted = fit(load(LM), small, FitConfig(method="svi", steps=120, lr=0.03, seed=0),
                 run_dir=tmp_path / "svi")
    assert fitted.status == "finished"
    assert np.mean(fitted.losses[-30:]) < np.mean(fitted.losses[:30])
    run = open_run(tmp_path / "svi")
    assert run.meta["data"]["kind"] == "given"
    smc_cfg = FitConfig(method="smc", particles=8, expansion=2, max_len=8, seed=1)
    torch.manual_seed(5)
    gen = fit(load(LM), config=smc_cfg, start_from=tmp_path / "svi", run_dir=tmp_path / "smc")
    rec = open_run(tmp_path / "smc")
    assert rec.meta["start_from"]["run"] == str((tmp_path / "svi").resolve())
    assert rec.meta["start_from"]["sha256"] == run.source_sha256
    eos = gen.stats["eos"]
    seqs = [tuple(p["tokens"]) for p in gen.sequences["particles"]]
    vocab = gen.sequences["vocab"]
    assert vocab and all(isinstance(t["text"], str) for t in gen.sequences["top"])
    # the same sequences, scored by the fitted model and by fresh parameters
    fitted_prog = load(LM)
    torch.manual_seed(5)
    fresh_prog = load(LM)
    from qvr.inference.start import load_start
    load_start(tmp_path / "svi").apply_to_model(fitted_prog.morphism)
    bos = eos
    ll_fitted = mean_log_likelihood(fitted_prog, seqs, bos, eos)
    ll_fresh = mean_log_likelihood(fresh_prog, seqs, bos, eos)
    assert ll_fitted > ll_fresh + 1.0, (ll_fitted, ll_fresh)


def test_a_program_that_no_longer_matches_the_run_is_a_clear_error(tmp_path):
    small = tmp_path / "lm.qvr"
    small.write_text(LM.read_text())
    data = {"x": torch.randint(0, 64, (6, 5)), "next_char": torch.randint(0, 64, (6,))}
    fit(load(small), data, FitConfig(method="svi", steps=2), run_dir=tmp_path / "r")
    changed = LM.read_text().replace("object State : Real 32", "object State : Real 24")
    small.write_text(changed)
    with pytest.raises(StartError) as info:
        fit(load(small), data, FitConfig(method="svi", steps=2), start_from=tmp_path / "r",
            run_dir=tmp_path / "r2")
    msg = str(info.value)  # the QVR declaration, not the torch module path
    assert msg == (f"start from {tmp_path / 'r'}: morphism `cell` (parameter "
                   f"`param_source.net.0.weight`) has shape (128, 48) in the run but "
                   f"(128, 40) in this program (the program's text has changed since that "
                   f"run)")
    assert "_step" not in msg
    assert open_run(tmp_path / "r2").status == "failed"
    with pytest.raises(StartError, match="not a run record"):
        fit(load(small), data, FitConfig(method="svi", steps=2), start_from=tmp_path)


def test_svi_starts_from_mcmc_posterior_means_in_the_unconstrained_space(tmp_path):
    """A positive site's posterior mean starts the guide at its log (the site's transform),
    not at the constrained value."""
    from qvr import loads
    from helpers import mu_sigma
    src = mu_sigma(30)
    data = {"y": torch.linspace(-2.0, 6.0, 30)}
    fit(loads(src), data, FitConfig(method="nuts", num_warmup=100, num_samples=100,
                                    num_chains=2, seed=1), run_dir=tmp_path / "mc")
    with np.load(tmp_path / "mc" / "samples.npz") as f:
        mu_mean, sigma_mean = float(f["mu"].mean()), float(f["sigma"].mean())
    res = fit(loads(src), data, FitConfig(method="svi", steps=1, lr=1e-9, seed=2),
              start_from=tmp_path / "mc")
    assert float(res.params["loc_mu"].reshape(-1)[0]) == pytest.approx(mu_mean, abs=1e-6)
    assert float(res.params["loc_sigma"].reshape(-1)[0]) == pytest.approx(
        np.log(sigma_mean), abs=1e-6)
    assert sigma_mean > 1.5  # the data's spread: log and value differ clearly


def test_a_mismatch_in_a_stacked_layer_names_the_morphism_and_the_copy(tmp_path):
    """transformer_lm stacks two copies of `layer`: the message names the declared
    morphism (`ff_up`), which copy, and the parameter within it — not the torch path
    ``_step_h.right.left.left.left.left.right.param_source.net.4.weight``."""
    prog = tmp_path / "tlm.qvr"
    text = (ROOT / "examples" / "transformer_lm.qvr").read_text()
    prog.write_text(text)
    cfg = FitConfig(method="smc", particles=2, max_len=2, eos=1, bos=0)
    fit(load(prog), config=cfg, run_dir=tmp_path / "r")
    prog.write_text(text.replace("object FFHidden : Real 32", "object FFHidden : Real 24"))
    with pytest.raises(StartError) as info:
        fit(load(prog), config=cfg, start_from=tmp_path / "r")
    assert str(info.value) == (
        f"start from {tmp_path / 'r'}: morphism `ff_up` (copy 1 of 2, parameter "
        f"`param_source.net.4.weight`) has shape (64, 64) in the run but (48, 64) in this "
        f"program (the program's text has changed since that run)")


def test_declaration_of_names_program_steps_and_unknown_paths():
    from qvr.inference.start import declaration_of
    model = load(LM).morphism
    assert declaration_of(model, "_step_next_char.param_source.net.0.bias") == \
        "morphism `readout` (parameter `param_source.net.0.bias`)"
    assert declaration_of(model, "_step_hidden.left.left.weight") == \
        "morphism `char_embed` (parameter `weight`)"
    assert declaration_of(model, "_step_gone.weight") == \
        "program `char_rnn` (parameter `_step_gone.weight`)"
