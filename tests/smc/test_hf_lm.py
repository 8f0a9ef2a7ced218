"""SMC steering of a Hugging Face causal LM (`qvr.smc.hf_lm.HFCausalLM`, issue 40):
the exact constrained target of a tiny random GPT-2 (vocabulary 6, length <= 3) enumerated
and matched (Ẑ unbiased, particle distribution in total variation), the KV-cached and
recomputed paths making the same draws, cache rows after resampling equal to fresh
forwards, bfloat16.  Skipped without transformers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

transformers = pytest.importorskip("transformers")

from qvr.smc import SMCSteering, forbid_tokens, require_token  # noqa: E402
from qvr.smc.hf_lm import HFCausalLM, load_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_lm"
V, EOS, BOS, MAX_LEN = 6, 0, 5, 3


@pytest.fixture(scope="module")
def gpt():
    """A random 2-layer GPT-2 over 6 tokens (made from a config, never downloaded)."""
    torch.manual_seed(3)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=8, n_embd=16, n_layer=2,
                                  n_head=2, eos_token_id=EOS, bos_token_id=BOS,
                                  tie_word_embeddings=False)
    model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # sharper next-token laws than the init's near-uniform ones
        model.lm_head.weight.mul_(10.0)
    return model.eval()


def lm_of(model, cache=True, prompt=(2,)):
    return HFCausalLM(model, None, prompt=prompt, eos=EOS, bos=BOS, cache=cache)


def exact(lm, potential):
    """``{s: p(s)·Π G}`` over every string (ending in EOS or cut at MAX_LEN) and `Z`,
    from fresh forwards of whole prefixes."""
    out = {}

    def walk(prefix, mass):
        probs = lm.log_probs([prefix])[0].exp()
        for a in range(V):
            child = prefix + (a,)
            g = float(potential([prefix], [child], len(child))[0])
            m = mass * float(probs[a]) * g
            if m == 0.0:
                continue
            if a == EOS or len(child) == MAX_LEN:
                out[child] = out.get(child, 0.0) + m
            else:
                walk(child, m)
    walk((), 1.0)
    return out, sum(out.values())


def constraint():
    return forbid_tokens(3) * require_token(4, within=2, eos=EOS)


def test_hat_z_is_unbiased_and_particles_match_the_exact_posterior(gpt):
    lm = lm_of(gpt)
    target, z = exact(lm, constraint())
    assert 0.02 < z < 0.9  # the constraint matters and is satisfiable
    runs, zs, pooled = 500, [], {}
    for seed in range(runs):
        res = SMCSteering(lm, potential=constraint(), num_particles=6, expansion=2,
                          max_len=MAX_LEN, generator=torch.Generator().manual_seed(seed)).run()
        zs.append(res.Z)
        for s, w in res.posterior().items():  # Ẑ-weighted pooling: consistent in the runs
            pooled[s] = pooled.get(s, 0.0) + res.Z * w
    zs = np.array(zs)
    se = zs.std(ddof=1) / math.sqrt(runs)
    assert abs(zs.mean() - z) < 4 * se, (zs.mean(), z, se)
    total = sum(pooled.values())
    tv = 0.5 * sum(abs(pooled.get(s, 0.0) / total - target.get(s, 0.0) / z)
                   for s in set(target) | set(pooled))
    assert set(pooled) <= set(target)  # no particle violates the constraint
    # Monte Carlo tolerance: twice the expected TV of an empirical law of n draws
    # (E|p̂ - p| = sqrt(2p(1-p)/(πn))), n = half the particles of all runs (the particles
    # of a run are correlated)
    n = runs * 6 / 2
    tol = 2 * 0.5 * sum(math.sqrt(2 * (m / z) * (1 - m / z) / (math.pi * n))
                        for m in target.values())
    assert tv < tol, (tv, tol, len(target))


def test_cached_and_recomputed_paths_make_the_same_draws(gpt):
    runs = []
    for cache in (True, False):
        lm = lm_of(gpt, cache=cache)
        runs.append(SMCSteering(lm, potential=forbid_tokens(3), num_particles=16,
                                expansion=3, max_len=6,
                                generator=torch.Generator().manual_seed(11)).run())
    a, b = runs
    assert a.sequences == b.sequences
    assert torch.equal(a.log_weights, b.log_weights) and a.log_Z == b.log_Z


@pytest.mark.parametrize("kind", ["shared-prefix", "dynamic"])
def test_resampled_cache_rows_give_the_logits_of_a_fresh_forward(gpt, kind):
    lm = lm_of(gpt, cache=True if kind == "shared-prefix" else kind)
    state = lm.start(4)
    assert lm.cache_kind == kind
    assert state[0].get_seq_length() == 2  # bos + the one-token prompt, shared
    prefixes = [(), (), (), ()]
    for rows, toks in (([2, 0, 0, 3], [1, 4, 2, 2]), ([1, 1, 3, 0], [0, 3, 5, 1]),
                       ([3, 2], [4, 4])):
        prefixes = [prefixes[r] + (t,) for r, t in zip(rows, toks)]
        state = lm.advance(state, torch.tensor(rows), torch.tensor(toks), prefixes)
        fresh = lm.logits(prefixes)
        torch.testing.assert_close(state[1], fresh, atol=1e-5, rtol=1e-5)
    if kind == "dynamic":  # layers, k/v, rows, length, width, float32
        assert HFCausalLM.cache_bytes(state) == 2 * 2 * 2 * 5 * 16 * 4
    else:  # layers, k/v, (the prompt once + 4 rows of 16 positions (the default)), width
        assert HFCausalLM.cache_bytes(state) == 2 * 2 * (2 + 4 * 16) * 16 * 4


def test_the_tiny_example_model_loads_in_bfloat16_and_steers_text():
    lm = load_lm(str(TINY), dtype="bfloat16", prompt="the old dog")
    assert lm.dtype == torch.bfloat16 and lm.eos == 0 and lm.bos == 0
    assert lm.decode(lm.encode("the small cat .")) == "the small cat ."
    from qvr.smc.text_potentials import forbid_words
    res = SMCSteering(lm, potential=forbid_words("the", decode=lm.decode, eos=lm.eos,
                                                 max_len=10),
                      num_particles=8, expansion=2, max_len=10,
                      generator=torch.Generator().manual_seed(0)).run()
    texts = [lm.decode(s) for s, w in zip(res.sequences, res.weights.tolist()) if w > 0]
    assert texts and all("the" not in t.replace("<eos>", " ").split() for t in texts)


def test_load_errors_name_the_model(tmp_path):
    from qvr.smc.hf_lm import LMLoadError
    with pytest.raises(LMLoadError, match="no such folder"):
        load_lm(str(tmp_path / "nothing") + "/")
    with pytest.raises(LMLoadError, match=f"--lm {tmp_path}: cannot load a causal language "
                                          f"model from the folder"):
        load_lm(str(tmp_path))


def test_without_transformers_the_error_is_one_line(monkeypatch):
    import sys

    from qvr.smc.hf_lm import LMUnavailable
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(LMUnavailable, match=r'^a pretrained language model '
                                            r'\(--lm, role=pretrained\) needs Hugging Face '
                                            r'transformers: pip install -e "\.\[lm\]"'):
        load_lm(str(TINY))


@pytest.mark.parametrize("family", ["Llama", "Qwen2"])
def test_llama_and_qwen_caches_reorder_and_match_recomputing(family):
    """Other cache layouts (rotary positions, grouped key/value heads) through the same
    protocol: fresh-forward logits after reordering, and the same draws as recomputing."""
    config = getattr(transformers, f"{family}Config")(
        vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
        eos_token_id=0, bos_token_id=1)
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    lm = HFCausalLM(model, None, prompt=(2, 3), eos=0, bos=1)
    state, prefixes = lm.start(3), [(), (), ()]
    for rows, toks in (([2, 0, 0], [4, 4, 2]), ([1, 1, 0], [3, 2, 6])):
        prefixes = [prefixes[r] + (t,) for r, t in zip(rows, toks)]
        state = lm.advance(state, torch.tensor(rows), torch.tensor(toks), prefixes)
        torch.testing.assert_close(state[1], lm.logits(prefixes), atol=1e-5, rtol=1e-5)
    runs = [SMCSteering(HFCausalLM(model, None, prompt=(2, 3), eos=0, bos=1, cache=c),
                        potential=forbid_tokens(5), num_particles=16, expansion=3, max_len=8,
                        generator=torch.Generator().manual_seed(2)).run().sequences
            for c in (True, False)]
    assert runs[0] == runs[1]


def test_a_name_outside_the_local_cache_is_not_downloaded():
    from qvr.smc.hf_lm import LMLoadError
    with pytest.raises(LMLoadError, match="--lm qvr-no-such-model-0: cannot load a causal "
                                          "language model from a model folder or a model "
                                          "in the Hugging Face cache"):
        load_lm("qvr-no-such-model-0")


def test_a_name_in_the_hugging_face_cache_loads_offline(tmp_path):
    """`--lm ORG/NAME` where the user has it cached (as `--lm gpt2` would): the tiny model
    laid out as the hub's cache (``models--ORG--NAME/snapshots/REV`` and ``refs/main``)
    loads with nothing downloaded, and steers as the folder does under one seed.  In a
    fresh process: ``huggingface_hub`` reads ``HF_HUB_CACHE`` when it is imported."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    hub = tmp_path / "hub"
    shutil.copytree(TINY, hub / "models--acme--tiny-gpt" / "snapshots" / "0123abcd")
    (hub / "models--acme--tiny-gpt" / "refs").mkdir()
    (hub / "models--acme--tiny-gpt" / "refs" / "main").write_text("0123abcd")
    code = (
        "import json, sys, torch\n"
        "from qvr.smc import SMCSteering, forbid_tokens\n"
        "from qvr.smc.hf_lm import load_lm\n"
        "out = []\n"
        "for name in sys.argv[1:]:\n"
        "    lm = load_lm(name, prompt='the old dog')\n"
        "    res = SMCSteering(lm, potential=forbid_tokens(lm.eos), num_particles=4,\n"
        "                      max_len=5, generator=torch.Generator().manual_seed(3)).run()\n"
        "    out.append([list(s) for s in res.sequences])\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    got = subprocess.run([sys.executable, "-c", code, "acme/tiny-gpt", str(TINY)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    cached, folder = json.loads(got.stdout.strip().splitlines()[-1])
    assert cached == folder and len(cached) == 4 and all(len(s) == 5 for s in cached)


def test_tokens_past_the_tokenizer_are_never_drawn(gpt):
    class FourTokens:  # a tokenizer that writes 4 of the model's 6 tokens
        eos_token_id, bos_token_id = EOS, None

        def __len__(self):
            return 4
    lm = HFCausalLM(gpt, FourTokens(), prompt=(2,), bos=BOS)
    assert lm.writable == 4 and lm.eos == EOS and lm.bos == BOS
    logits = lm.logits([(), (1,)])
    assert torch.isinf(logits[:, 4:]).all() and torch.isfinite(logits[:, :4]).all()
    draws = lm.sample([(1,)], 500, torch.Generator().manual_seed(0))
    assert int(draws.max()) <= 3
