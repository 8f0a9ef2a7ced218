"""`ProgramLM` on decoder-only transformer programs (causal ``role=attention``, design 17,
issue 17): the key/value cache (`qvr.smc.kv_cache`) against the recomputation from stored
noise, resampling copies, unbiased `Ẑ` on a program small enough to enumerate, and the
refusals (non-causal attention, a sequence past the learned positions).

Every test is seeded; the statistical tolerances come from Monte Carlo standard errors.
"""
import math

import numpy as np
import pytest
import torch

import qvr
from qvr.runtime.errors import PositionLimitError
from qvr.smc import ProgramLM, SMCSteering, forbid_patterns, forbid_tokens
from qvr.smc.kv_cache import NotCausalError, NotIncrementalError, StaleStateError
from smc_helpers import chi_square_pvalue
from smc_helpers import one_torch_thread  # noqa: F401  (autouse fixture)

BOS, EOS = 0, 1


ONE_SITE = """
let decoder = tok_embed >> stack(block, 2) >> layer_norm(Latent) >> lm_head

program lm : Token -> Token
    observe next_token : Token <- decoder
    return next_token
"""

#: the same chain split over two sites (the hidden value sampled, then the head)
TWO_SITES = """
let backbone = tok_embed >> stack(block, 2)

program lm : Token -> Token
    sample h <- backbone
    observe next_token : Token <- lm_head(h)
    return next_token
"""


def decoder_source(*, vocab=8, positions=16, attention="causal, scale=0.1] ~ Normal",
                   ff="ff_up >> ff_down", extra="", program=ONE_SITE):
    """The decoder of the issue: token + position embedding, two pre-norm blocks
    (attention, then a two-kernel feed-forward), a final norm, a Categorical head."""
    return f"""
object Token : FinSet {vocab}
object Latent : Real 16
object FFHidden : Real 32
object Half : Real 8

morphism tok_embed : Token -> Latent [role=embed, positions={positions}]
morphism attn : Latent -> Latent [role=attention, heads=4, {attention}
morphism ff_up : Latent -> FFHidden [role=kernel] ~ Normal
morphism ff_down : FFHidden -> Latent [role=kernel, scale=0.1] ~ Normal
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical
{extra}
let block = residual(layer_norm(Latent) >> attn) >> residual(layer_norm(Latent) >> {ff})
{program}
export lm
"""


def load(source: str, seed: int = 0):
    torch.manual_seed(seed)
    return qvr.loads(source)


#: the draws of every program below: Normal attention; Laplace attention and a Cauchy
#: kernel (uniform-block noise); a fan of kernels (drawn through its own rsample); the
#: chain over two sites
PROGRAMS = {
    "normal": decoder_source(),
    "two-sites": decoder_source(program=TWO_SITES),
    "laplace-cauchy": decoder_source(
        attention="causal, scale=0.1] ~ Laplace",
        ff="ff_up >> ff_mid >> ff_down",
        extra="morphism ff_mid : FFHidden -> FFHidden [role=kernel, scale=0.1] ~ Cauchy"),
    "fan": decoder_source(
        ff="ff_up >> ff_down >> fan(half)",
        extra="morphism half : Latent -> Half [role=kernel, replicate=2, scale=0.1] ~ Normal"),
    # `causal=strict`: a position's query sees the earlier keys only, the first none (0)
    "strict": decoder_source(attention="causal=strict, scale=0.1] ~ Normal"),
}


@pytest.fixture(scope="module")
def decoder():
    return load(PROGRAMS["normal"])


def soft_no_eos(parent, child, t):
    """The end token forbidden (every particle grows to `max_len`), token 2 halved."""
    a = child[-1]
    return 0.0 if a == EOS else (0.5 if a == 2 else 1.0)


def run(program, cache, *, n=16, k=4, max_len=12, seed=1, potential=soft_no_eos):
    lm = ProgramLM(program, BOS, EOS, cache=cache)
    return SMCSteering(lm, potential=potential, num_particles=n, expansion=k,
                       max_len=max_len, generator=torch.Generator().manual_seed(seed)).run()


def test_kind_and_modes(decoder):
    cached, recomputed = ProgramLM(decoder, BOS, EOS), ProgramLM(decoder, BOS, EOS, cache=False)
    assert (cached.kind, cached.mode) == ("attention", "kv-cache")
    assert (recomputed.kind, recomputed.mode) == ("attention", "recompute")
    names = [type(layer).__name__ for layer in cached.kv.body.layers]
    assert names == ["EmbedLayer"] + ["ResidualLayer"] * 4 + ["DeterministicLayer"]
    # the stateless interface stays the program's per-call law: (prefixes, n) tokens
    out = cached.sample([(2, 3), (4, 5)], 5, torch.Generator().manual_seed(0))
    assert out.shape == (2, 5) and int(out.min()) >= 0 and int(out.max()) < 8


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_cached_and_recomputed_runs_make_the_same_draws(name):
    """N = 16, K = 4, length 12, one seed: the same strings, weights and `Ẑ` (the
    recomputation rebuilds each particle from its stored noise, so it is the same run)."""
    program = load(PROGRAMS[name])
    a, b = run(program, True), run(program, False)
    assert a.sequences == b.sequences
    assert all(len(s) == 12 for s in a.sequences)
    assert torch.allclose(a.log_weights, b.log_weights, rtol=0, atol=1e-9)
    assert a.log_Z == pytest.approx(b.log_Z, abs=1e-9)
    assert torch.equal(a.truncated, b.truncated)
    # the run is not trivial: resampling at every step, unequal weights, several strings
    assert all(h["resampled"] == 1.0 for h in a.history)
    assert len(set(a.sequences)) > 4
    assert float(a.log_weights.max() - a.log_weights.min()) > 0.1 or a.log_Z < -0.5


@pytest.mark.parametrize("cache", [True, False])
def test_runs_are_reproducible_and_leave_the_global_rng_alone(cache):
    program = load(PROGRAMS["fan"])  # the fan draws through the (seeded) global RNG
    torch.manual_seed(9)
    before = torch.random.get_rng_state()
    r1, r2 = run(program, cache, n=6, k=2, max_len=5), run(program, cache, n=6, k=2, max_len=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert r1.sequences == r2.sequences and torch.equal(r1.log_weights, r2.log_weights)


class Recorder:
    """A stateful model that records the rows of each advance (resampling copies)."""

    def __init__(self, lm):
        self.lm, self.eos, self.rows = lm, lm.eos, []

    def start(self, num, generator=None):
        return self.lm.start(num, generator)

    def draw(self, state, n, generator=None):
        return self.lm.draw(state, n, generator)

    def advance(self, state, rows, tokens, prefixes, generator=None):
        self.rows.append(rows.clone())
        return self.lm.advance(state, rows, tokens, prefixes, generator)


def test_resampling_copies_caches_by_index(decoder, monkeypatch):
    """Resampling at every step duplicates particles; the cached run copies their buffers
    (never running an attention over the prefix) and equals the recomputed run."""
    from qvr.runtime.morphisms.attention import Attention
    calls = {"mean": 0}
    mean = Attention.mean

    def counting_mean(self, *args, **kw):
        calls["mean"] += 1
        return mean(self, *args, **kw)

    monkeypatch.setattr(Attention, "mean", counting_mean)
    results = {}
    for cache in (True, False):
        calls["mean"] = 0
        rec = Recorder(ProgramLM(decoder, BOS, EOS, cache=cache))
        results[cache] = SMCSteering(rec, potential=soft_no_eos, num_particles=16,
                                     expansion=4, max_len=12,
                                     generator=torch.Generator().manual_seed(3)).run()
        results[cache, "calls"], results[cache, "rows"] = calls["mean"], rec.rows
    assert results[True, "calls"] == 0  # cached: one position at a time, nothing recomputed
    assert results[False, "calls"] == 2 * 12  # recomputed: both layers over the prefix
    dup = [len(r) - len(torch.unique(r)) for r in results[True, "rows"]]
    assert sum(d > 0 for d in dup) >= 8, dup  # particles duplicated at most steps
    assert all(h["resampled"] == 1.0 for h in results[True].history)
    assert results[True].sequences == results[False].sequences
    assert torch.allclose(results[True].log_weights, results[False].log_weights, atol=1e-9)


def _states_agree(cached, recomputed, sc, sr, atol=1e-5):
    hc = sc["h"].index_select(0, torch.from_numpy(sc["slots"]))
    assert sc["t"] == sr["t"]
    assert torch.allclose(hc, sr["h"], atol=atol), (hc - sr["h"]).abs().max()
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    assert torch.equal(cached.draw(sc, 3, g1), recomputed.draw(sr, 3, g2))


def test_select_with_repeated_rows_matches_the_recomputation(decoder):
    """Particle copies (repeated rows) and shrinking populations (finished particles
    leave) give the recomputed hidden values; a cached state advanced twice is refused
    (its buffers were updated in place), a recomputed one may branch."""
    cached = ProgramLM(decoder, BOS, EOS)
    recomputed = ProgramLM(decoder, BOS, EOS, cache=False)
    sc = cached.start(6, torch.Generator().manual_seed(4))
    sr = recomputed.start(6, torch.Generator().manual_seed(4))
    _states_agree(cached, recomputed, sc, sr)
    g = torch.Generator().manual_seed(5)
    plans = [[3, 3, 0, 3, 1, 5], [0, 1, 1, 2, 2, 2], [5, 4, 3], [0, 0, 2], [1, 2, 0, 0]]
    for i, rows in enumerate(plans):
        rows = torch.tensor(rows)
        toks = torch.randint(2, 8, (len(rows),), generator=g)
        seed = 100 + i
        new_sc = cached.advance(sc, rows, toks, None, torch.Generator().manual_seed(seed))
        new_sr = recomputed.advance(sr, rows, toks, None, torch.Generator().manual_seed(seed))
        if i == 3:
            with pytest.raises(StaleStateError, match="can be advanced once"):
                cached.advance(sc, rows, toks, None)
            recomputed.advance(sr, rows, toks, None)  # branching from a state is fine
        sc, sr = new_sc, new_sr
        _states_agree(cached, recomputed, sc, sr)
    # the duplicated particles' caches were copied, yet each copy drew its own noise
    assert not torch.allclose(sr["h"][2], sr["h"][3])
    # more particles than the run started with (not an SMC step): the buffers are gathered
    rows = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0])
    toks = torch.arange(9) % 8
    sc = cached.advance(sc, rows, toks, None, torch.Generator().manual_seed(200))
    sr = recomputed.advance(sr, rows, toks, None, torch.Generator().manual_seed(200))
    _states_agree(cached, recomputed, sc, sr)


def test_strict_cache_matches_the_recomputation_and_the_whole_sequence_forward():
    """`causal=strict` under the cache: a new position's query sees only the earlier cached
    keys (the first position none: the attention adds 0 before its noise).  The cached
    hidden values equal the recomputation's (the layers' whole-sequence `mean`, SDPA with
    the strict mask) through copies and shrinking populations; with the noise floored,
    the cached next-token law equals the program's whole-sequence forward, and differs
    from the same weights read with the bare `causal` (the diagonal matters)."""
    program = load(PROGRAMS["strict"])
    attn = [m for m in program.morphism.modules() if type(m).__name__ == "Attention"]
    assert len(attn) == 2 and all(a.strict and a.causal for a in attn)
    cached = ProgramLM(program, BOS, EOS)
    recomputed = ProgramLM(program, BOS, EOS, cache=False)
    sc = cached.start(6, torch.Generator().manual_seed(4))
    sr = recomputed.start(6, torch.Generator().manual_seed(4))
    _states_agree(cached, recomputed, sc, sr)
    g = torch.Generator().manual_seed(5)
    for i, rows in enumerate([[3, 3, 0, 3, 1, 5], [0, 1, 1, 2, 2, 2], [5, 4, 3], [0, 0, 2]]):
        rows = torch.tensor(rows)
        toks = torch.randint(2, 8, (len(rows),), generator=g)
        sc = cached.advance(sc, rows, toks, None, torch.Generator().manual_seed(100 + i))
        sr = recomputed.advance(sr, rows, toks, None, torch.Generator().manual_seed(100 + i))
        _states_agree(cached, recomputed, sc, sr)


def test_strict_cached_law_is_the_whole_sequence_forward():
    program = load(TINY.replace("heads=2, causal]", "heads=2, causal=strict]"), seed=3)
    links = program.morphism._step_next_token.links()
    with torch.no_grad():
        links[0].log_sigma.fill_(-40.0)
        links[0].centers.mul_(4.0)
        attn = next(x for x in program.morphism.modules() if type(x).__name__ == "Attention")
        assert attn.strict
        for w in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
            w.mul_(3.0)
        links[-1].param_source.net[4].weight.mul_(4.0)
    lm = ProgramLM(program, T_BOS, T_EOS)
    prefixes = [(1, 1, 2), (0, 0, 2), (3, 0, 2)]
    # the first position ([bos] alone): the attention sees nothing and adds 0
    state = lm.start(3)
    h0 = state["h"].index_select(0, torch.from_numpy(state["slots"]))
    first = torch.log_softmax(lm.kv.head.link.params(h0)[0].double(), -1)
    assert torch.allclose(first, exact_logits(program, ()).expand(3, 4), atol=1e-5)
    cached, exact = cached_and_exact(lm, program, prefixes, state)
    assert torch.allclose(cached, exact, atol=1e-5)
    # the same weights with the bare `causal` (the last position sees itself) differ
    attn.strict = False
    inclusive = torch.stack([exact_logits(program, p) for p in prefixes])
    attn.strict = True
    assert float((inclusive - exact).abs().max()) > 1e-2


def test_first_position_has_the_program_law(decoder):
    """At the first position a particle's hidden values are fresh draws, so the cached
    model's law is the program's per-call law for ``[bos]`` (chi-square)."""
    lm = ProgramLM(decoder, BOS, EOS)
    m = 6000
    state = lm.start(m, torch.Generator().manual_seed(6))
    a = lm.draw(state, 1, torch.Generator().manual_seed(7)).flatten()
    b = lm.sample([()], m, torch.Generator().manual_seed(8)).flatten()
    ca, cb = (torch.bincount(x, minlength=8).double() for x in (a, b))
    keep = (ca + cb) > 0
    tot = ca[keep] + cb[keep]
    stat = float(((ca[keep] - tot / 2) ** 2 / (tot / 2) + (cb[keep] - tot / 2) ** 2
                  / (tot / 2)).sum())
    assert chi_square_pvalue(stat, int(keep.sum()) - 1) > 1e-3
    assert int(keep.sum()) >= 4  # not degenerate


# ---------------------------------------------------------------------- unbiased Ẑ
TINY = """
object Token : FinSet 4
object Latent : Real 8

morphism tok_embed : Token -> Latent [role=embed, positions=8]
morphism attn : Latent -> Latent [role=attention, heads=2, causal]
morphism lm_head : Latent -> Token [role=kernel] ~ Categorical

let decoder = tok_embed >> residual(layer_norm(Latent) >> attn) >> layer_norm(Latent) >> lm_head

program tiny : Token -> Token
    observe next_token : Token <- decoder
    return next_token

export tiny
"""
T_BOS, T_EOS, T_A = 0, 3, 1
MAX_LEN, RUNS = 4, 2000


@pytest.fixture(scope="module")
def tiny():
    """A vocabulary of 4 whose hidden values are deterministic given the tokens (the
    attention has no family; the embedding's scale is floored at 1e-7), so the exact
    next-token law of every prefix is the program's whole-sequence forward."""
    program = load(TINY, seed=3)
    links = program.morphism._step_next_token.links()
    with torch.no_grad():
        embed = links[0]
        embed.log_sigma.fill_(-40.0)
        embed.centers.mul_(4.0)
        attn = next(x for x in program.morphism.modules() if type(x).__name__ == "Attention")
        for w in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
            w.mul_(3.0)
        links[-1].param_source.net[4].weight.mul_(4.0)
    return program


def exact_logits(program, prefix):
    """Next-token log-probabilities of ``[bos] + prefix`` by the program's own forward
    (every link but the head on the whole sequence, then the head's logits)."""
    from qvr.runtime.combinators import chain_rsample
    tokens = torch.tensor([(T_BOS,) + tuple(prefix)])
    links = program.morphism._step_next_token.links()
    with torch.no_grad():
        h = chain_rsample(links[:-1], tokens)
        return torch.log_softmax(links[-1].params(h)[0][0, -1].double(), -1)



def cached_and_exact(lm, program, prefixes, state):
    """Next-token log-probabilities after `prefixes` (one per particle), from the KV cache
    advanced token by token from `state`, and from the whole-sequence forward."""
    for i in range(len(prefixes[0])):
        state = lm.advance(state, torch.arange(len(prefixes)),
                           torch.tensor([p[i] for p in prefixes]), None)
    h = state["h"].index_select(0, torch.from_numpy(state["slots"]))
    cached = torch.log_softmax(lm.kv.head.link.params(h)[0].double(), -1)
    return cached, torch.stack([exact_logits(program, p) for p in prefixes])

def enumerate_z(program, log_g):
    z = 0.0

    def walk(prefix, mass):
        nonlocal z
        probs = exact_logits(program, prefix).exp()
        for a in range(4):
            child = prefix + (a,)
            m = mass * float(probs[a]) * math.exp(log_g(prefix, child))
            if m == 0.0:
                continue
            if a == T_EOS or len(child) == MAX_LEN:
                z += m
            else:
                walk(child, m)

    walk((), 1.0)
    return z


def half_on_a(parent, child, t):
    return 0.5 if child[-1] == T_A else 1.0


FORBID_A2 = forbid_patterns((T_A, 2))


def forbid_a2(parent, child, t):
    return math.exp(FORBID_A2.log_potential([parent], [child], t)[0].item())


def _log(potential):
    def lg(parent, child):
        g = potential(parent, child, len(child))
        return -math.inf if g == 0 else math.log(g)
    return lg


def test_tiny_program_depends_on_more_than_the_last_token(tiny):
    """The cached next-token law equals the whole-sequence forward for fixed prefixes, and
    it depends on earlier tokens (a last-token model would not pass the Z test)."""
    lm = ProgramLM(tiny, T_BOS, T_EOS)
    prefixes = [(1, 1, 2), (0, 0, 2), (3, 0, 2)]
    cached, exact = cached_and_exact(lm, tiny, prefixes, lm.start(3))
    assert torch.allclose(cached, exact, atol=1e-5)
    assert float((exact[0].exp() - exact[1].exp()).abs().max()) > 0.05  # same last token


@pytest.mark.parametrize("potential,n,k", [(half_on_a, 4, 3), (forbid_a2, 4, 3),
                                           (forbid_a2, 1, 3)],
                         ids=["half_on_a-N4-K3", "forbid_a2-N4-K3", "forbid_a2-N1-K3"])
def test_z_hat_is_unbiased_on_a_tiny_attention_program(tiny, potential, n, k):
    z = enumerate_z(tiny, _log(potential))
    lm = ProgramLM(tiny, T_BOS, T_EOS)
    smc = SMCSteering(lm, potential=potential, num_particles=n, expansion=k, max_len=MAX_LEN,
                      generator=torch.Generator().manual_seed(1000 * n + k))
    zs = np.array([smc.run().Z for _ in range(RUNS)])
    se = zs.std(ddof=1) / math.sqrt(RUNS)
    assert abs(zs.mean() - z) <= 4 * se, (zs.mean(), z, se)
    assert 0 < se < 0.1 * z  # the check has power


# ---------------------------------------------------------------------- refusals
def test_non_causal_attention_is_refused():
    program = load(decoder_source(attention="scale=0.1] ~ Normal"))
    for cache in (True, False):
        with pytest.raises(NotCausalError) as info:
            ProgramLM(program, BOS, EOS, cache=cache)
        assert "`attn` is not causal: SMC steering needs a causal next-token model" \
            in str(info.value)
        assert "declare the attention with `causal`" in str(info.value)
        assert isinstance(info.value, ValueError) and info.value.morphism == "attn"


@pytest.mark.parametrize("cache", [True, False])
def test_a_string_past_the_learned_positions_is_a_position_limit_error(cache):
    program = load(decoder_source(positions=4))
    lm = ProgramLM(program, BOS, EOS, cache=cache)
    smc = SMCSteering(lm, potential=forbid_tokens(EOS), num_particles=4, expansion=2,
                      max_len=6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(PositionLimitError) as info:
        smc.run()
    assert info.value.morphism == "tok_embed" and info.value.limit == 4
    assert info.value.length == 5  # [bos] + 4 tokens


def test_a_program_that_is_not_a_chain_of_sites_is_refused():
    source = decoder_source().replace(
        "    observe next_token : Token <- decoder",
        "    sample g <- tok_embed\n    observe next_token : Token <- decoder")
    program = load(source)
    with pytest.raises(NotIncrementalError, match="chain of morphism sites"):
        ProgramLM(program, BOS, EOS)
