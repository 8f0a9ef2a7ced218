"""`fit(..., start_from=RUN)`: SMC generation from an SVI-fitted language model, and the
errors when a program no longer matches the run it starts from."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from qvr import load
from qvr.inference import FitConfig, fit
from qvr.inference.front.start import StartError
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
    # the suite's budget: 24 rows, 40 steps at lr 0.05 (5.7 s; 48 rows x 120 steps at 0.03
    # took 24 s); the fitted model still scores the SMC text ~800 nats above fresh weights
    small = {"x": corpus["x"][:24], "next_char": corpus["next_char"][:24]}
    torch.manual_seed(0)
    fitted = fit(load(LM), small, FitConfig(method="svi", steps=40, lr=0.05, seed=0,
                                            pointwise=False),
                 run_dir=tmp_path / "svi")
    assert fitted.status == "finished"
    assert np.mean(fitted.losses[-10:]) < np.mean(fitted.losses[:10])
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
    from qvr.inference.front.start import load_start
    load_start(tmp_path / "svi").apply_to_model(fitted_prog.morphism)
    bos = eos
    ll_fitted = mean_log_likelihood(fitted_prog, seqs, bos, eos)
    ll_fresh = mean_log_likelihood(fresh_prog, seqs, bos, eos)
    assert ll_fitted > ll_fresh + 1.0, (ll_fitted, ll_fresh)


def test_a_program_that_no_longer_matches_the_run_is_a_clear_error(tmp_path):
    small = tmp_path / "lm.qvr"
    small.write_text(LM.read_text())
    data = {"x": torch.randint(0, 64, (6, 5)), "next_char": torch.randint(0, 64, (6,))}
    fit(load(small), data, FitConfig(method="svi", steps=2, pointwise=False),
        run_dir=tmp_path / "r")
    changed = LM.read_text().replace("object State : Real 32", "object State : Real 24")
    small.write_text(changed)
    with pytest.raises(StartError) as info:
        fit(load(small), data, FitConfig(method="svi", steps=2, pointwise=False),
            start_from=tmp_path / "r", run_dir=tmp_path / "r2")
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
    from qvr.inference.front.start import declaration_of
    model = load(LM).morphism
    assert declaration_of(model, "_step_next_char.param_source.net.0.bias") == \
        "morphism `readout` (parameter `param_source.net.0.bias`)"
    assert declaration_of(model, "_step_hidden.left.left.weight") == \
        "morphism `char_embed` (parameter `weight`)"
    assert declaration_of(model, "_step_gone.weight") == \
        "program `char_rnn` (parameter `_step_gone.weight`)"


# ---------------------------------------------------------------- start_at="draws"

#: a positive global (its transform is exp) and a plate site of three coordinates
DRAWS_SRC = """
object Dim : FinSet 3
object Obs : FinSet 10
program m : Obs -> Obs
    sample sigma <- HalfNormal(2.0)
    sample xs : Dim <- Normal(1.0, 1.0) [iid_over=Dim]
    observe y : Obs <- Normal(0.0, sigma)
    return sigma
export m
"""
DRAWS_DATA = {"y": torch.linspace(-3.0, 3.0, 10)}


@pytest.fixture(scope="module")
def nuts_run(tmp_path_factory):
    """A small NUTS run (2 chains x 15 draws) to start from, and its draws."""
    from qvr import loads
    path = tmp_path_factory.mktemp("draws") / "nuts"
    fit(loads(DRAWS_SRC), DRAWS_DATA, FitConfig(method="nuts", num_warmup=40, num_samples=15,
                                               num_chains=2, seed=1), run_dir=path)
    with np.load(path / "samples.npz") as f:
        draws = {k: f[k].astype(np.float64) for k in ("sigma", "xs")}
    assert draws["sigma"].shape == (2, 15, 1) and draws["xs"].shape == (2, 15, 3)
    return path, draws


def test_nuts_from_a_nuts_run_with_draws_starts_each_chain_at_a_last_draw(nuts_run, tmp_path,
                                                                          monkeypatch):
    """Three chains from a two-chain run: chain c starts at the last draw of the run's chain
    c mod 2, unconstrained (log sigma, xs) — seen where the kernel receives them."""
    from qvr import loads
    from qvr.inference.mcmc.nuts import NUTSKernel
    path, draws = nuts_run
    seen = []
    init = NUTSKernel.init

    def spy(self, target, z0, *args, **kw):
        seen.append(([s.name for s in target.registry.sites], z0.clone()))
        return init(self, target, z0, *args, **kw)

    monkeypatch.setattr(NUTSKernel, "init", spy)
    res = fit(loads(DRAWS_SRC), DRAWS_DATA,
              FitConfig(method="nuts", num_warmup=3, num_samples=3, num_chains=3, seed=2,
                        start_at="draws"), start_from=path, run_dir=tmp_path / "more")
    assert res.status == "finished"
    assert len(seen) == 1
    names, z0 = seen[0]
    assert names == ["sigma", "xs"]
    expected = np.stack([np.concatenate([np.log(draws["sigma"][c % 2, -1]),
                                         draws["xs"][c % 2, -1]]) for c in range(3)])
    np.testing.assert_allclose(z0.double().numpy(), expected, rtol=0, atol=1e-6)
    assert not np.allclose(expected[0], expected[1])  # the chains start dispersed
    assert open_run(tmp_path / "more").meta["start_from"]["at"] == "draws"


def test_initial_positions_are_given_to_the_driver_as_they_are(nuts_run):
    from qvr import loads
    from qvr.inference.mcmc.driver import MCMC
    from qvr.inference.mcmc.nuts import NUTSKernel
    from qvr.inference.mcmc.potential import make_target
    from qvr.inference.front.start import load_start
    path, draws = nuts_run
    model = loads(DRAWS_SRC).morphism
    x, obs = torch.zeros(10, 1), {"y": DRAWS_DATA["y"]}
    target = make_target(model, x, obs)
    start = load_start(path, FitConfig(method="hmc", start_at="draws"))
    z = start.initial_positions(target, 5)
    assert z.shape == (5, 4) and z.dtype == torch.get_default_dtype()
    assert torch.equal(z[4], z[0]) and torch.equal(z[3], z[1])
    back = target.registry.constrain(z)
    np.testing.assert_allclose(back["sigma"].double().numpy(),
                               draws["sigma"][[0, 1, 0, 1, 0], -1, 0], rtol=1e-6)
    mc = MCMC(NUTSKernel(), num_warmup=1, num_samples=1, num_chains=5)
    assert torch.equal(mc._initial_positions(target, model, x, obs, None, z), z)
    with pytest.raises(ValueError, match=r"initial positions must have shape \(num_chains, "
                                         r"D\) = \(5, 4\), got \(2, 4\)"):
        mc.run(model, x, obs, initial=z[:2])


def test_svi_from_a_nuts_run_with_draws_is_the_guide_moment_matched_to_them(nuts_run):
    """loc = mean, log_scale = log sd (ddof 0) of the unconstrained draws, per coordinate:
    log sigma for the positive site, xs as it is (a plate site: one pair per element)."""
    from qvr import loads
    path, draws = nuts_run
    res = fit(loads(DRAWS_SRC), DRAWS_DATA,
              FitConfig(method="svi", steps=1, lr=1e-9, seed=3, start_at="draws"),
              start_from=path)
    log_sigma = np.log(draws["sigma"]).reshape(-1)
    xs = draws["xs"].reshape(-1, 3)
    p = res.params
    assert p["loc_sigma"].shape == (1,) and p["loc_xs"].shape == (3, 1)
    np.testing.assert_allclose(p["loc_sigma"], [log_sigma.mean()], atol=1e-6)
    np.testing.assert_allclose(p["log_scale_sigma"], [np.log(log_sigma.std())], atol=1e-5)
    np.testing.assert_allclose(p["loc_xs"][:, 0], xs.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(p["log_scale_xs"][:, 0], np.log(xs.std(axis=0)), atol=1e-5)
    # the means start (the default) differs: log of the mean, not mean of the log
    means = fit(loads(DRAWS_SRC), DRAWS_DATA, FitConfig(method="svi", steps=1, lr=1e-9, seed=3),
                start_from=path)
    assert float(means.params["loc_sigma"][0]) == pytest.approx(
        np.log(draws["sigma"].mean()), abs=1e-6)
    assert abs(float(means.params["loc_sigma"][0]) - log_sigma.mean()) > 1e-3


def test_a_coordinate_the_draws_never_moved_gets_the_floor_scale(nuts_run):
    from qvr import loads
    from qvr.inference.vi.guides import AutoNormalGuide
    from qvr.inference.front.start import SD_FLOOR, load_start
    path, _ = nuts_run
    start = load_start(path, FitConfig(method="svi", start_at="draws"))
    start.draws["xs"] = start.draws["xs"].copy()
    start.draws["xs"][..., 1] = 0.25
    model = loads(DRAWS_SRC).morphism
    guide = AutoNormalGuide(model, observed_names={"y"})
    start.apply_to_guide(guide, torch.zeros(10, 1), {"y": DRAWS_DATA["y"]})
    loc, log_scale = guide.loc_xs.detach(), guide.log_scale_xs.detach()
    assert float(loc[1, 0]) == pytest.approx(0.25, abs=1e-7)
    assert float(log_scale[1, 0]) == pytest.approx(np.log(SD_FLOOR), abs=1e-6)
    assert float(log_scale[0, 0]) > np.log(SD_FLOOR) + 1


def test_draws_come_from_the_draw_chunks_when_the_run_saved_no_samples(nuts_run, tmp_path):
    """A run killed before it saved samples.npz still has its draw chunks."""
    from qvr.inference.front.start import load_start
    path, draws = nuts_run
    copy = tmp_path / "killed"
    shutil.copytree(path, copy)
    (copy / "samples.npz").unlink()
    start = load_start(copy, FitConfig(method="nuts", start_at="draws"))
    np.testing.assert_allclose(start.draws["sigma"], draws["sigma"], rtol=1e-6)
    np.testing.assert_allclose(start.draws["xs"], draws["xs"], rtol=1e-6)


def test_draws_from_a_run_without_draws_or_without_a_run_is_a_clear_error(nuts_run, tmp_path):
    from qvr import loads
    from qvr.inference.config import ConfigError
    svi = tmp_path / "svi"
    fit(loads(DRAWS_SRC), DRAWS_DATA, FitConfig(method="svi", steps=2), run_dir=svi)
    with pytest.raises(StartError) as info:
        fit(loads(DRAWS_SRC), DRAWS_DATA, FitConfig(method="nuts", start_at="draws"),
            start_from=svi, run_dir=tmp_path / "bad")
    assert str(info.value) == (
        f"start from {svi}: start_at draws needs an HMC or NUTS run to start from, and that "
        f"run's method is svi (start_at means, the default, starts from its fitted "
        f"parameters)")
    assert open_run(tmp_path / "bad").status == "failed"
    for method in ("svi", "nuts"):
        with pytest.raises(ConfigError) as info:
            fit(loads(DRAWS_SRC), DRAWS_DATA, FitConfig(method=method, start_at="draws"))
        assert str(info.value) == (
            "start_at: draws needs a run to start from (--from RUN, fit(start_from=RUN)): "
            "an HMC or NUTS run whose draws start the fit")
    assert FitConfig(start_at="last").errors() == {
        "start_at": "must be one of means, draws; got 'last'"}


def test_qvr_run_start_at(nuts_run, tmp_path, capsys):
    from qvr.cli import main
    path, _ = nuts_run
    prog = tmp_path / "m.qvr"
    prog.write_text(DRAWS_SRC)
    (tmp_path / "data").mkdir()  # shipped beside the program: every method may be asked
    (tmp_path / "data" / "m.json").write_text('{"y": %s}' % DRAWS_DATA["y"].tolist())

    def qvr_run(*args):
        try:
            rc = main(["run", str(prog), "--runs-dir", str(tmp_path / "runs"),
                       *map(str, args)])
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, _ = qvr_run("--help")
    assert rc == 0 and "--start-at {means,draws}" in out
    rc, _, err = qvr_run("--method", "nuts", "--start-at", "draws")
    assert rc == 2 and err == (
        "qvr run: --start-at draws needs a run to start from (--from RUN, "
        "fit(start_from=RUN)): an HMC or NUTS run whose draws start the fit\n")
    rc, _, err = qvr_run("--method", "smc", "--start-at", "draws")
    assert rc == 2 and "--start-at is an option of --method svi|hmc|nuts" in err
    assert not (tmp_path / "runs").exists()  # usage errors leave no run folder
    rc, _, err = qvr_run("--method", "svi", "--steps", "2", "--from", path,
                         "--start-at", "draws", "--name", "a")
    assert rc == 0, err
    assert f"qvr run: starting from {path} (nuts): its draws (the guide moment-matched " \
           f"to them)\n" in err
    rc, _, err = qvr_run("--method", "nuts", "--warmup", "2", "--samples", "2", "--from", path,
                         "--name", "b")
    assert rc == 0, err
    assert f"qvr run: starting from {path} (nuts): its posterior means\n" in err
    (a,), (b,) = (list((tmp_path / "runs").glob(f"{n}-*")) for n in "ab")
    assert open_run(a).meta["start_from"]["at"] == "draws"
    assert open_run(b).meta["start_from"]["at"] == "means"
    svi = open_run(a).path
    rc, _, err = qvr_run("--method", "nuts", "--from", svi, "--start-at", "draws")
    assert rc == 2 and err == (
        f"qvr run: --start-at draws needs an HMC or NUTS run to start from, and that run's "
        f"method is svi (start_at means, the default, starts from its fitted parameters)\n")
