"""The in-context regression example (seed 003): its data, its program and a small study.

`examples/icl_regression.qvr` is one softmax attention layer over tasks of L + 1 tokens
(x, y); its loss is the Normal log-density at the query only (the context's y is missing).
`examples/icl/make_data.py` draws the tasks and writes the shipped file byte for byte;
`examples/icl/run_study.py` trains H heads by SVI on fresh tasks and compares them with
least squares and one-step gradient descent.  The study here is small (d = 2, 600 steps)
so that it runs in seconds; its orderings are the seed's.
"""
from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ICL = ROOT / "examples" / "icl"
DATA = ROOT / "examples" / "data" / "icl_regression.json"


def _module(name):
    sys.path.insert(0, str(ICL))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ICL))


make_data = _module("make_data")
run_study = _module("run_study")


# ------------------------------------------------------------------ data

def test_committed_data_is_what_make_data_writes(tmp_path):
    make_data.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["icl_regression.json"]
    assert (tmp_path / "icl_regression.json").read_bytes() == DATA.read_bytes()


def test_shipped_tasks_are_linear_with_the_query_last_and_only_its_y_observed():
    from qvr.datafiles import load_data
    data = load_data(DATA)
    z, y = data["x"].astype(np.float64), data["y"].astype(np.float64)
    assert set(data) == {"x", "y"}
    assert z.shape == (32, 41, 6) and y.shape == (32, 41, 1)
    assert np.isnan(y[:, :40]).all() and np.isfinite(y[:, 40]).all()
    assert (z[:, 40, 5] == 0).all()                      # the query's y coordinate
    # the context is linear up to the noise (sd 0.01 sqrt(5)) and the query's target is
    # the same linear function: least squares on the 40 pairs predicts it to ~1e-4 (MSE)
    mse = np.mean((run_study.least_squares(z, 5) - y[:, 40, 0]) ** 2)
    assert mse < 1e-3, mse
    x, yc = z[:, :40, :5], z[:, :40, 5]
    beta = np.linalg.lstsq(x[0], yc[0], rcond=None)[0]
    resid = yc[0] - x[0] @ beta
    assert 0.01 < resid.std() < 0.04                     # the noise sd, 0.0224


def test_sample_tasks_follows_the_seed_setting():
    z, y, beta = make_data.sample_tasks(np.random.default_rng(0), 4000, d=3)
    assert z.shape == (4000, 25, 4) and y.shape == (4000, 25, 1) and beta.shape == (4000, 3)
    x = z[..., :3]
    resid = z[:, :24, 3] - np.einsum("ntd,nd->nt", x[:, :24], beta)
    # noise sd 0.01 sqrt(3); its estimate from 96000 draws has relative SE 0.23 %
    assert resid.std() == pytest.approx(0.01 * math.sqrt(3), rel=0.01)
    np.testing.assert_allclose(y[:, 24, 0], np.einsum("nd,nd->n", x[:, 24], beta))
    assert x.std() == pytest.approx(1.0, rel=0.01) and beta.std() == pytest.approx(1.0, rel=0.02)


# ------------------------------------------------------------------ the program

def test_program_text_substitutes_heads_and_d():
    text = run_study.program_text(4, 3)
    assert "object Z : Real 4\n" in text
    assert "[role=attention, heads=4, head_dim=4, causal=strict, scale=1.0] ~ Normal" in text
    program, attn = run_study.load(4, 3)
    # strictly causal: the query, last, sees the context and not itself (seed 003)
    assert (attn.heads, attn.head_dim, attn.causal, attn.strict, attn.family_name) == \
        (4, 4, True, True, "Normal")
    assert tuple(attn.w_q.shape) == (4, 4, 4) and tuple(attn.w_o.shape) == (1, 16)
    assert float(attn.log_scale.detach().exp()) == pytest.approx(1.0)


def test_the_loss_is_the_squared_loss_at_the_query_only():
    """Missing entries add exactly nothing: the negative ELBO (no latent sites) is
    sum_n (m_q - y_q)^2 / 2 + n log sqrt(2 pi), and so are its gradients."""
    from qvr.inference import ELBO, AutoNormalGuide
    program, attn = run_study.load(2, 5, seed=3)
    model = program.exports["icl_regression"]
    z, y, _ = make_data.sample_tasks(np.random.default_rng(1), 16)
    zt, yt = (torch.as_tensor(a, dtype=torch.float32) for a in (z, y))
    guide = AutoNormalGuide(model, observed_names={"y"})
    assert guide.latent_names == []
    loss = ELBO()(model, guide, zt, {"y": yt})
    loss.backward()
    grads = [p.grad.clone() for p in (attn.w_q, attn.w_k, attn.w_v, attn.w_o)]
    for p in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
        p.grad = None
    m = attn.mean(zt)[:, -1, 0]
    manual = (0.5 * (m - yt[:, -1, 0]) ** 2).sum() + 16 * 0.5 * math.log(2 * math.pi)
    manual.backward()
    assert loss.item() == pytest.approx(manual.item(), rel=1e-6)
    for g, p in zip(grads, (attn.w_q, attn.w_k, attn.w_v, attn.w_o)):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


def _set_paired_heads(attn, d: int, w: float, mu: float):
    """The seed's trained form, by hand: head 0 scores +w x_q . x_i, head 1 -w x_q . x_i
    (QK / sqrt(k) = +-w diag(I_d, 0)); each reads the token's y and writes +-mu of it."""
    k = attn.head_dim
    a = math.sqrt(w * math.sqrt(k))
    with torch.no_grad():
        for p in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
            p.zero_()
        for h, sign in enumerate((1.0, -1.0)):
            attn.w_q[h, :d, :d] = sign * a * torch.eye(d)
            attn.w_k[h, :d, :d] = a * torch.eye(d)
            attn.w_v[h, 0, d] = 1.0
            attn.w_o[0, h * k] = sign * mu


def test_paired_heads_are_the_kernel_estimator_and_near_gd_when_qk_is_small():
    """Seed 003's closed form: with QK circuits +-w diag(I_d, 0) and OV reading y, the
    attention is sum_h mu^h sum_i y_i softmax_i(w^h x_q . x_i) over the 40 context tokens
    (strictly causal: the query does not see itself); as w -> 0 it is a centred one-step GD
    estimator."""
    d, L = 5, 40
    program, attn = run_study.load(2, d)
    z, y, _ = make_data.sample_tasks(np.random.default_rng(7), 4000, d, L)
    yq = y[:, -1, 0]
    # the kernel estimator at the seed's trained values (w = 0.14, mu = 3.18)
    _set_paired_heads(attn, d, 0.14, 3.18)
    ctx = z[:, :-1]
    s = np.einsum("ntd,nd->nt", ctx[..., :d], z[:, -1, :d])
    kernel = sum(mu * np.einsum("nt,nt->n", np.exp(w * s) / np.exp(w * s).sum(1, keepdims=True),
                                ctx[..., d]) for w, mu in ((0.14, 3.18), (-0.14, -3.18)))
    np.testing.assert_allclose(run_study.predict(attn, z), kernel, rtol=1e-4, atol=1e-4)
    # small w: k(w) - k(-w) ~ 2 w x the limit feature, so mu = c / (2 w) gives c x it
    c = run_study.best_scale(run_study.kernel_limit_feature, d, L, 20_000)
    w = 1e-3
    _set_paired_heads(attn, d, w, c / (2 * w))  # 2 mu w x the feature = c x the feature
    m = run_study.predict(attn, z)
    limit = c * run_study.kernel_limit_feature(z, d)
    np.testing.assert_allclose(m, limit, atol=2e-2 * np.abs(limit).max())
    gd = run_study.best_step(d, L, 20_000) * run_study.gd_feature(z, d)
    mse_m, mse_gd = np.mean((m - yq) ** 2), np.mean((gd - yq) ** 2)
    # near GD: the centred scores cost ~2.5 % of MSE (measured 0.652 against 0.636 on these
    # 4000 tasks); the two estimators' predictions differ by ~2 % of GD's MSE
    assert abs(mse_m - mse_gd) < 0.05 * mse_gd, (mse_m, mse_gd)
    assert np.mean((m - gd) ** 2) < 0.1 * mse_gd


def test_circuits_of_the_paired_form_are_read_by_the_study():
    import qvr.runtime
    program, attn = run_study.load(2, 5)
    _set_paired_heads(attn, 5, 0.14, 3.18)
    c = qvr.runtime.circuits(program)["attn"]
    assert tuple(c["qk"].shape) == (2, 6, 6) and tuple(c["ov"].shape) == (2, 1, 6)
    summary = run_study.circuit_summary(program)["heads"]
    for hd, sign in zip(summary, (1.0, -1.0)):
        assert run_study.seed_w(hd["qk"], 5, 6) == pytest.approx(sign * 0.14, rel=1e-5)
        np.testing.assert_allclose(np.sort(hd["eig"].real),
                                   np.sort([0.0] + [sign * 0.14 * math.sqrt(6)] * 5),
                                   atol=1e-5)
        np.testing.assert_allclose(hd["ov_row"], [0, 0, 0, 0, 0, sign * 3.18], atol=1e-6)


# ------------------------------------------------------------------ baselines

def test_baselines_match_their_closed_forms():
    """d = 5, L = 40, 20000 tasks: the zero predictor's MSE is d, least squares'
    sigma^2 d / (L - d - 1), the best GD step L / (L + d + 1 + sigma^2) and its MSE
    d (1 - eta); tolerances are 3 Monte-Carlo standard errors."""
    d, L, n = 5, 40, 20_000
    z, y, _ = make_data.sample_tasks(np.random.default_rng(11), n, d, L)
    yq = y[:, -1, 0]
    assert np.mean(yq ** 2) == pytest.approx(d, abs=3 * np.std(yq ** 2) / math.sqrt(n))
    e_ls = (run_study.least_squares(z, d) - yq) ** 2
    sigma2 = d * 0.01 ** 2
    assert np.mean(e_ls) == pytest.approx(sigma2 * d / (L - d - 1),
                                          abs=3 * np.std(e_ls) / math.sqrt(n))
    eta = run_study.best_step(d, L, n)
    assert eta == pytest.approx(run_study.eta_closed_form(d, L), abs=0.01)
    e_gd = (eta * run_study.gd_feature(z, d) - yq) ** 2
    assert np.mean(e_gd) == pytest.approx(d * (1 - run_study.eta_closed_form(d, L)),
                                          abs=3 * np.std(e_gd) / math.sqrt(n))


# ------------------------------------------------------------------ the study, small

@pytest.fixture(scope="module")
def small_study():
    """H = 1, 2 with d = 2 (L = 16), 600 SVI steps of 64 fresh tasks, seeds 0-2."""
    return run_study.run((1, 2), (0, 1, 2), d=2, steps=600, lr=0.02, n_test=4000,
                         eta_tasks=20_000, log=None)


def test_small_study_orders_least_squares_gd_and_the_zero_predictor(small_study):
    b = small_study.baselines
    assert b["least squares"] < 1e-3 < b["one-step GD"] < 0.5 < b["zero predictor"]
    verdicts = run_study.report(small_study, log=lambda *a: None)
    assert verdicts["least squares < one-step GD < zero"][0]
    assert verdicts["1 head(s) beat the zero predictor"][0]
    assert verdicts["2 head(s) beat the zero predictor"][0]


def test_small_study_two_heads_beat_one(small_study):
    """Measured on these fixed seeds (strictly causal, as the seed): the 1-head models at
    1.313, 0.600, 0.641, the 2-head models at 0.376, 0.336, 0.337, one-step GD 0.351.

    At d = 2 one head has two optima (MSE ~0.6 and ~1.3-1.4: seeds 0-4 at 400 steps gave
    1.32, 0.60, 0.64, 1.39, 1.40), so the between-seed sd of the 1-head MSE is ~0.4 and the
    study's 3-seed verdict "2 heads beat 1" (3 SE ~ 0.70 against a mean gap of ~0.50)
    cannot resolve what every seed shows; the full study (d = 5) resolves it (3 SE 0.05).
    Asserted instead, per seed: the 2-head model is below the 1-head model of the same
    seed by more than 0.15 (the smallest gap measured is 0.26) and below the best 1-head
    model; the mean gap exceeds 0.3 (measured 0.50); and 2 heads ~ one-step GD by the
    study's own rule (difference 0.002, tolerance 0.075)."""
    one, two = small_study.models[1], small_study.models[2]
    assert np.mean(two) < np.mean(one) - 0.3, (one, two)
    assert all(b < a - 0.15 for a, b in zip(one, two)), (one, two)
    assert max(two) < min(one), (one, two)
    assert run_study.report(small_study, log=lambda *a: None)["2 heads ~ one-step GD"][0]
    # training went somewhere: every model is well below the zero predictor (MSE 2)
    assert max(one + two) < 1.6
