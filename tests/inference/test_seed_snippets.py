"""The user's two snippets (seed 000, "SVI fit" and "HMC posterior") with only the import
lines and the example path changed."""
import torch


def test_svi_fit_snippet_loss_falls():
    from qvr import load
    from qvr.inference import AutoNormalGuide, ELBO, SVI

    torch.manual_seed(0)
    prog = load("examples/transformer_lm.qvr")
    model = prog.morphism

    for _, p in model.named_parameters():
        p.data.copy_(torch.randn_like(p) * 0.3)
    batch, seq_len, vocab = 2, 1, 32
    contexts = torch.randint(0, vocab, (batch, seq_len))
    targets = model.rsample(contexts)
    observations = {"next_token": targets}

    torch.manual_seed(1)
    for _, p in model.named_parameters():
        p.data.copy_(torch.randn_like(p) * 0.3)

    guide = AutoNormalGuide(model, observed_names={"next_token"})
    optim = torch.optim.Adam(
        list(model.parameters()) + list(guide.parameters()), lr=5e-2,
    )
    svi = SVI(model, guide, optim, ELBO(num_particles=1))

    losses = [svi.step(contexts, observations)]
    for _ in range(8):
        losses.append(svi.step(contexts, observations))

    print(f"initial loss: {losses[0]:.2f}")
    print(f"final loss:   {losses[-1]:.2f}")
    assert losses[-1] < losses[0]
    assert sum(losses[-3:]) < sum(losses[:3])


def test_hmc_posterior_snippet_reports_acceptance_and_divergences(capsys, monkeypatch):
    from qvr import load
    from qvr.inference.mcmc.potential import ProgramTarget
    # six evaluations of a large density: eager, as a user's run (nothing here asserts
    # how the steps ran; tracing it took 9.6 s of the test's 17)
    monkeypatch.setattr(ProgramTarget, "trace_s_per_op", 1e-3)
    from qvr.inference import MCMC, HMCKernel, bayesian_lift_parameters

    torch.manual_seed(0)
    prog = load("examples/transformer_lm.qvr")
    model = prog.morphism
    for _, p in model.named_parameters():
        p.data.copy_(torch.randn_like(p) * 0.3)
    batch, seq_len, vocab = 2, 1, 32
    contexts = torch.randint(0, vocab, (batch, seq_len))
    targets = model.rsample(contexts)
    observations = {"next_token": targets}

    h_shape = tuple(model._step_h.rsample(contexts).shape)
    lifted, lx, lobs = bayesian_lift_parameters(
        model, contexts, observations,
        prior_scale=1.0,
        additional_latents={"h": h_shape},
    )
    kernel = HMCKernel(step_size=0.001, num_steps=1, target_accept=0.6)
    mc     = MCMC(kernel, num_warmup=3, num_samples=3, num_chains=1)
    result = mc.run(lifted, lx, lobs)

    print(f"acceptance:  {float(result.acceptance_rates.mean()):.2f}")
    print(f"divergences: {int(result.divergence_counts.sum())}")
    out = capsys.readouterr().out
    assert "acceptance:" in out and "divergences:" in out
    assert 0.0 <= float(result.acceptance_rates.mean()) <= 1.0
    assert result.divergence_counts.shape == (1,)
    assert result.log_densities.shape == (1, 3) and torch.isfinite(result.log_densities).all()
    assert all(v.shape[:2] == (1, 3) for v in result.samples.values())
    assert all(p.grad is None for p in model.parameters())
