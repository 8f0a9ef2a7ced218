"""The shared-prefix KV cache of `HFCausalLM` (`qvr.smc.hf_cache`, issue 40 point 2):
logits equal to recomputing the whole prefix at every step of runs with resampling (the
shipped 2-layer GPT-2 and a random Llama-style model with grouped key/value heads and
rotary positions), the same SMC draws as recomputing and as the `DynamicCache` under one
generator, no copy of the prompt or of a prefix when advancing (storage pointers and exact
byte counts), duplicated rows getting their parent's suffix, the model's own attention
implementation put back, and the fallback to the `DynamicCache` (with its reason) for
models the shared cache cannot serve.  Skipped without transformers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

transformers = pytest.importorskip("transformers")

from qvr.smc import SMCSteering, forbid_tokens  # noqa: E402
from qvr.smc import hf_cache  # noqa: E402
from qvr.smc.hf_lm import HFCausalLM, load_lm  # noqa: E402

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny_lm"


@pytest.fixture(scope="module")
def tiny():
    return load_lm(str(TINY)).model  # a 2-layer GPT-2: 4 heads of 16, 64 positions


@pytest.fixture(scope="module")
def llama():
    """A random Llama-style model: 4 query heads over 2 key/value heads (of 8), rotary."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=12, hidden_size=32, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=2,
                                   intermediate_size=64, max_position_embeddings=64,
                                   eos_token_id=0, bos_token_id=1)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper next-token laws than the init's near-uniform ones
        model.lm_head.weight.mul_(20.0)
    return model


def lm_of(model, cache=True, **kw):
    if isinstance(model, transformers.GPT2LMHeadModel):
        return HFCausalLM(model, None, prompt=(30, 16, 45, 39), eos=0, bos=0, cache=cache,
                          **kw)
    return HFCausalLM(model, None, prompt=(2, 3, 5), eos=0, bos=1, cache=cache, **kw)


def walk(lm, steps, n, seed, max_len=None):
    """Advance `n` particles `steps` times with random resampling rows (duplicates, and
    the population shrinking and growing back), comparing the cached logits with
    recomputing every prefix; returns the last state and the prefixes."""
    g = torch.Generator().manual_seed(seed)
    state, prefixes = lm.start(n, max_len=max_len), [()] * n
    writable = lm.writable
    for step in range(steps):
        m = n if step % 3 else max(2, n - 2)  # some steps keep fewer rows
        rows = torch.randint(0, len(prefixes), (m,), generator=g) if step else \
            torch.arange(n)
        m = rows.numel()
        toks = torch.randint(1, writable, (m,), generator=g)
        prefixes = [prefixes[r] + (int(t),) for r, t in zip(rows.tolist(), toks)]
        state = lm.advance(state, rows, toks, prefixes)
        torch.testing.assert_close(state[1], lm.logits(prefixes), atol=1e-5, rtol=1e-5)
    return state, prefixes


@pytest.mark.parametrize("name", ["tiny", "llama"])
def test_logits_equal_recomputing_at_every_step_with_resampling(name, request):
    model = request.getfixturevalue(name)
    lm = lm_of(model)
    state, _ = walk(lm, 12, 6, seed=1, max_len=12)
    assert lm.cache_kind == "shared-prefix"
    assert isinstance(state[0], hf_cache.SharedPrefixCache)
    assert state[0].get_seq_length() == len(lm.head) + 12
    assert model.config._attn_implementation == "sdpa"  # put back after every forward


@pytest.mark.parametrize("name", ["tiny", "llama"])
def test_smc_makes_the_same_draws_as_recomputing_and_the_dynamic_cache(name, request):
    model = request.getfixturevalue(name)
    runs = {}
    for cache in (True, "dynamic", False):
        lm = lm_of(model, cache=cache)
        runs[cache] = SMCSteering(lm, potential=forbid_tokens(3), num_particles=16,
                                  expansion=3, max_len=10,
                                  generator=torch.Generator().manual_seed(5)).run()
        assert lm.cache_kind == {True: "shared-prefix", "dynamic": "dynamic",
                                 False: None}[cache]
    ref = runs[False]
    assert max(len(s) for s in ref.sequences) == 10  # the runs do grow long
    for r in (runs[True], runs["dynamic"]):
        assert r.sequences == ref.sequences
        assert torch.equal(r.log_weights, ref.log_weights) and r.log_Z == ref.log_Z


def test_advancing_copies_neither_the_prompt_nor_a_prefix(tiny):
    lm = lm_of(tiny)
    n, cap = 8, 10
    state = lm.start(n, max_len=cap)
    cache = state[0]
    prompt = [(l.prompt_keys, l.prompt_values) for l in cache.layers]
    ptrs = [(k.data_ptr(), v.data_ptr()) for k, v in prompt]
    buffers = [b.data_ptr() for b in cache.buffers]
    p, layers, heads, width = len(lm.head), 2, 4, 16
    # one prompt row per layer, whatever the number of particles
    assert all(k.shape == v.shape == (1, heads, p, width) for k, v in prompt)
    # bytes: the prompt once + N·cap positions per layer, keys and values, float32
    expect = layers * 2 * heads * width * 4 * (p + n * cap)
    assert HFCausalLM.cache_bytes(state) == expect
    assert cache.bytes_per_position == layers * 2 * heads * width * 4
    prefixes = [()] * n
    for step in range(cap):  # no resampling: the survivors are the parents in order
        toks = torch.arange(n) % 5 + 1 + step
        prefixes = [x + (int(t),) for x, t in zip(prefixes, toks)]
        state = lm.advance(state, torch.arange(n), toks, prefixes)
        assert state[0] is cache
        assert [b.data_ptr() for b in cache.buffers] == buffers
        assert [(l.prompt_keys.data_ptr(), l.prompt_values.data_ptr())
                for l in cache.layers] == ptrs
        assert all(l.prompt_keys is k for l, (k, _) in zip(cache.layers, prompt))
        # each layer's suffix is a view of the one buffer, written in place
        assert cache.layers[0].keys.data_ptr() == buffers[0]
        assert HFCausalLM.cache_bytes(state) == expect
    torch.testing.assert_close(state[1], lm.logits(prefixes), atol=1e-5, rtol=1e-5)
    assert cache.length == cap and cache.get_seq_length() == p + cap


def test_resampling_gives_duplicated_rows_their_parents_suffix(tiny):
    lm = lm_of(tiny)
    state, prefixes = lm.start(4, max_len=6), [()] * 4
    cache = state[0]
    buffers = [b.data_ptr() for b in cache.buffers]
    steps = (([0, 1, 2, 3], [5, 6, 7, 8]),
             ([2, 0, 0, 3], [1, 4, 2, 2]),   # parent 0 twice, parent 1 dropped
             ([1, 1, 1, 1], [9, 9, 3, 4]),   # one parent four times
             ([3, 2], [4, 4]),               # two rows left
             ([1, 0, 1], [6, 7, 8]))         # and three again
    slots = [[0, 1, 2, 3], [2, 0, 1, 3], [0, 1, 2, 3], [0, 1], [1, 0, 2]]
    for (rows, toks), want in zip(steps, slots):
        prefixes = [prefixes[r] + (t,) for r, t in zip(rows, toks)]
        state = lm.advance(state, torch.tensor(rows), torch.tensor(toks), prefixes)
        torch.testing.assert_close(state[1], lm.logits(prefixes), atol=1e-5, rtol=1e-5)
        # each parent's first survivor keeps the parent's buffer row (no copy); the
        # further copies take free rows
        assert cache.slot_of.tolist() == want, (rows, cache.slot_of)
    assert [b.data_ptr() for b in cache.buffers] == buffers  # resampling is in place


def test_slots_copy_only_duplicated_rows():
    k = torch.zeros(1, 1, 1, 1)
    cache = hf_cache.SharedPrefixCache([(k, k)], rows=5, capacity=3)
    buf = cache.buffers[0]  # (keys and values, rows, heads, positions, width)
    rows = torch.arange(5.0).view(5, 1, 1, 1)
    cache.layers[0].update(rows, -rows)
    cache.layers[0].pending = None
    before = buf.clone()
    cache.reorder(np.array([4, 4, 0, 1, 1]))  # parents 2 and 3 die
    assert cache.slot_of.tolist() == [4, 2, 0, 1, 3]  # rows 2 and 3 take the copies
    changed = (buf != before).any(-1).any(-1).any(-1).any(0)
    assert changed.tolist() == [False, False, True, True, False]
    assert buf[0, :, 0, 0, 0].tolist() == [0.0, 1.0, 4.0, 1.0, 4.0]
    assert buf[1, :, 0, 0, 0].tolist() == [-0.0, -1.0, -4.0, -1.0, -4.0]
    # the forward's batch is in slot order and its output back in particle order
    ids = torch.tensor([[40], [41], [42], [43], [44]])
    assert cache.to_slots(ids).flatten().tolist() == [42, 43, 41, 44, 40]
    assert cache.from_slots(cache.to_slots(ids)).flatten().tolist() == [40, 41, 42, 43, 44]


@pytest.mark.parametrize("name", ["tiny", "llama"])
def test_several_new_positions_at_once_are_causal_among_themselves(name, request):
    lm = lm_of(request.getfixturevalue(name))
    cache = lm.start(2, max_len=6)[0]
    seqs = [(4, 5, 6), (7, 8, 9)]
    with lm._switch.serving(cache):  # three positions per row in one forward
        logits, _ = lm._forward(torch.tensor(seqs), cache, use_cache=True)
    torch.testing.assert_close(logits, lm.logits(seqs), atol=1e-5, rtol=1e-5)
    assert cache.length == 3
    seqs = [(4, 5, 6, 2), (4, 5, 6, 3)]
    state = lm.advance((cache, None, None), torch.tensor([0, 0]), torch.tensor([2, 3]), seqs)
    torch.testing.assert_close(state[1], lm.logits(seqs), atol=1e-5, rtol=1e-5)


def test_layers_of_other_shapes_get_buffers_of_their_own():
    a, b = torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 3)
    cache = hf_cache.SharedPrefixCache([(a, a), (b, b)], rows=3, capacity=2)
    assert [tuple(x.shape) for x in cache.buffers] == [(3, 2, 2, 4)] * 2 + [(3, 1, 2, 3)] * 2
    assert cache.bytes_per_position == (2 * 4 + 3) * 2 * 4
    assert cache.nbytes() == (2 * 4 + 3) * 2 * 4 * (1 + 3 * 2)
    for i, layer in enumerate(cache.layers):
        new = torch.arange(3.0).view(3, 1, 1, 1) + 10 * i
        layer.update(new.expand(3, *layer.keys.shape[1:2], 1, layer.keys.shape[-1]),
                     -new.expand(3, *layer.values.shape[1:2], 1, layer.values.shape[-1]))
        layer.pending = None
    cache.reorder(np.array([2, 2, 2]))
    assert cache.slot_of.tolist() == [2, 0, 1]
    assert cache.layers[1].keys[:, 0, 0, 0].tolist() == [12.0, 12.0, 12.0]
    assert cache.layers[0].values[:, 1, 0, 3].tolist() == [-2.0, -2.0, -2.0]


def test_the_buffer_doubles_when_the_length_is_not_known(tiny):
    lm = lm_of(tiny)
    state, prefixes = walk(lm, 20, 3, seed=4)  # no max_len: 16 positions, then 32
    cache = state[0]
    assert cache.capacity == 32 and cache.length == 20
    p = len(lm.head)
    assert HFCausalLM.cache_bytes(state) == 2 * 2 * 4 * 16 * 4 * (p + 3 * 32)


def test_check_length_sizes_the_buffer(llama):
    lm = lm_of(llama)
    lm.check_length(7)
    cache = lm.start(5)[0]
    # 2 layers, keys and values, 2 key/value heads of 8, float32
    assert cache.capacity == 7 and cache.buffers[0].shape == (4, 5, 2, 7, 8)
    assert HFCausalLM.cache_bytes((cache,)) == 2 * 2 * 2 * 8 * 4 * (4 + 5 * 7)


def test_a_model_without_the_attention_interface_keeps_the_dynamic_cache(tiny):
    class OwnAttention(transformers.GPT2LMHeadModel):
        _supports_attention_backend = False
    model = OwnAttention(tiny.config)
    model.load_state_dict(tiny.state_dict())
    lm = lm_of(model.eval())
    assert lm.cache_kind == ("dynamic (OwnAttention does not route its attention through "
                             "transformers' AttentionInterface)")
    state, _ = walk(lm, 4, 3, seed=2)
    assert isinstance(state[0], transformers.DynamicCache)


def test_a_sliding_window_model_falls_back_with_its_reason():
    torch.manual_seed(1)
    cfg = transformers.MistralConfig(vocab_size=12, hidden_size=32, num_attention_heads=4,
                                     num_key_value_heads=2, num_hidden_layers=2,
                                     intermediate_size=64, max_position_embeddings=64,
                                     sliding_window=4, eos_token_id=0, bos_token_id=1)
    model = transformers.MistralForCausalLM(cfg).eval()
    lm = lm_of(model)
    assert lm.cache_kind == "shared-prefix"  # decided by the first start
    state, _ = walk(lm, 6, 3, seed=3)
    assert lm.cache_kind == "dynamic (the model's cache layers are not plain key/value " \
                            "layers)"
    assert isinstance(state[0], transformers.DynamicCache)
    assert model.config._attn_implementation == "sdpa"


def test_the_probe_compares_with_the_models_own_logits(tiny):
    lm = lm_of(tiny)
    logits, past = lm._forward(torch.tensor([lm.head]), use_cache=True)
    prompt = [(l.keys, l.values) for l in past.layers]
    reference, _ = lm._forward(torch.tensor([[7]]), past, use_cache=True)

    def forward(ids, cache):
        return lm._forward(ids, cache, use_cache=True)[0]
    assert hf_cache.probe(tiny, prompt, 7, reference, forward) is None
    assert hf_cache.probe(tiny, prompt, 7, reference + 0.01, forward) == \
        "its logits differ from the model's own attention's"
    assert tiny.config._attn_implementation == "sdpa"

    def broken(ids, cache):
        raise RuntimeError("view size is not compatible\nmore")
    assert hf_cache.probe(tiny, prompt, 7, reference, broken) == \
        "its forward fails on the shared-prefix cache: RuntimeError: view size is not compatible"


def test_attention_outside_our_forwards_is_the_models_own(tiny):
    lm = lm_of(tiny)
    before = lm.logits([(5,)])
    state = lm.start(2)
    with pytest.raises(hf_cache.UnsupportedModel, match="used without a SharedPrefixCache"):
        hf_cache.shared_prefix_attention(tiny.transformer.h[0].attn, torch.zeros(2, 4, 1, 16),
                                         torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16),
                                         None)
    # an error inside a served forward still puts the model's implementation back
    with pytest.raises(ValueError, match="the shared-prefix cache holds 2 rows"):
        with lm._switch.serving(state[0]):
            assert tiny.config._attn_implementation == hf_cache.ATTENTION
            lm._forward(torch.tensor([[1], [2], [3]]), state[0], use_cache=True)
    assert tiny.config._attn_implementation == "sdpa"
    assert torch.equal(lm.logits([(5,)]), before)
