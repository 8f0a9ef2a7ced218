"""A recurrence over a finite state (issue 16, point 4: "`repeat`/`scan` over a finite
state is the forward algorithm").

`scan(cell)` cannot thread a finite state: the language requires the cell's domain and
codomain to be continuous (language spec, table of morphism expressions: `scan(f)` needs
"D and H continuous", QVR304), and the runtime gives a scan's states no density (runtime
spec 4.7: `log_prob` is zeros; only the final state is a value).  So a finite-state
recurrence is written either as one `sample` step per time step, `h_t <- cell(x_t,
h_{t-1})` — what a scan over a finite state would mean, each state a site — which
enumeration sums out by the forward algorithm, or as `repeat(cell, n)` for a finite
endomorphism (the `n`-step transition matrix, exactly).  These tests pin the checker's
message, which says so, and check both written forms against the forward algorithm
computed here with numpy, plus the one-wide-pass evaluation of the enumeration and the
compiled MCMC density of an enumerated chain.
"""
import numpy as np
import pytest
import torch

import qvr
from qvr.analysis import Document
from qvr.inference import trace
from qvr.inference.enumeration.discrete import infer_discrete
from qvr.inference.enumeration.enumerate import enumerated_log_joint, log_partition, prepare
from qvr.inference.mcmc.potential import make_target
from qvr.runtime.errors import CompileError

HINT = ("; `scan` does not thread a finite state: write one `sample` step per time step "
        "(`sample h2 <- {c}(x2, h1)`, `sample h3 <- {c}(x3, h2)`, ...; inference sums the "
        "states out by the forward algorithm)")
ENDO_HINT = ("; `scan` does not thread a finite state: `repeat({c}, n)` applies a finite "
             "endomorphism n times")


def diagnostics(text):
    return [(d.code, d.message) for d in Document(text, "scan.qvr").diagnostics()]


@pytest.mark.parametrize("sig,shown,hint", [
    # finite input and state (a lookup table)
    ("Symbol * Regime -> Regime [role=kernel]", "Symbol * Regime -> Regime", HINT),
    # Real input, finite state (a Categorical kernel)
    ("Level * Regime -> Regime [role=kernel] ~ Categorical", "Level * Regime -> Regime", HINT),
    # one factor, finite: a finite endomorphism, which `repeat` applies
    ("Regime -> Regime [role=kernel]", "Regime -> Regime", ENDO_HINT),
    # not a cell at all (the output is not the state): no advice
    ("Symbol * Regime -> Symbol [role=kernel]", "Symbol * Regime -> Symbol", ""),
])
def test_scan_over_a_finite_state_is_qvr304_saying_what_to_write(sig, shown, hint):
    text = (f"object Regime : FinSet 4\nobject Symbol : FinSet 10\nobject Level : Real 1\n"
            f"morphism trans : {sig}\nlet run = scan(trans)\n")
    assert diagnostics(text) == [(
        "QVR304", f"`scan` needs a cell of type `A * H -> H` over Real spaces, got `{shown}`"
        + hint.format(c="trans"))]


def test_scan_with_a_real_state_and_a_finite_input_keeps_the_plain_message():
    # the state is Real: nothing finite is threaded, so no finite-state advice
    text = ("object Tok : FinSet 8\nobject State : Real 4\n"
            "morphism cell : Tok * State -> State [role=kernel] ~ Normal\n"
            "let run = scan(cell)\n")
    assert diagnostics(text) == [(
        "QVR304", "`scan` needs a cell of type `A * H -> H` over Real spaces, got "
        "`Tok * State -> State`")]


def test_loading_a_finite_state_scan_is_a_compile_error_with_the_advice():
    text = ("object Regime : FinSet 4\nobject Symbol : FinSet 10\n"
            "morphism step : Symbol * Regime -> Regime [role=kernel]\n"
            "let run = scan(step)\nexport run\n")
    with pytest.raises(CompileError) as ei:
        qvr.loads(text)
    assert "`scan` does not thread a finite state" in str(ei.value)
    assert "`sample h2 <- step(x2, h1)`" in str(ei.value)


# ------------------------------------------------------------------ the chain form

K, S, R = 3, 4, 5  # regimes, input symbols, readings


def io_chain_source(T: int) -> str:
    """`h_t <- step(s_t, h_{t-1})` for t = 2..T with a reading per step: the finite-state
    scan of the inputs `s_1..s_T`, one sample step per time step."""
    ins = ", ".join(f"s{t}" for t in range(1, T + 1))
    dom = " * ".join(["Symbol"] * T)
    lines = [f"object Regime : FinSet {K}", f"object Symbol : FinSet {S}",
             f"object Reading : FinSet {R}",
             "morphism start : Symbol -> Regime [role=kernel]",
             "morphism step : Symbol * Regime -> Regime [role=kernel]",
             "morphism emission : Regime -> Reading [role=kernel]",
             f"program io_chain({ins}) : {dom} -> Regime",
             "    sample h1 <- start(s1)",
             "    observe o1 <- emission(h1)"]
    for t in range(2, T + 1):
        lines += [f"    sample h{t} <- step(s{t}, h{t - 1})",
                  f"    observe o{t} <- emission(h{t})"]
    lines += [f"    return h{T}", "export io_chain", ""]
    return "\n".join(lines)


def make_io_chain(T, B=4, seed=0):
    torch.manual_seed(seed)
    model = qvr.loads(io_chain_source(T)).morphism
    with torch.no_grad():  # tables away from their uniform start
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.randint(0, S, (B, T))
    with torch.no_grad():
        tr = trace(model, x)
    obs = {k: s.value for k, s in tr.sites.items() if s.kind == "observe"}
    return model, x, obs


def io_tables(model):
    """start (S, K), step (S, K, K) = p(h_t = k | s_t, h_{t-1} = j), emission (K, R)."""
    with torch.no_grad():
        ks = torch.arange(K)
        start = torch.stack([model._step_h1.log_prob(torch.full((K,), s), ks)
                             for s in range(S)]).exp()
        step = torch.zeros(S, K, K)
        for s in range(S):
            for j in range(K):
                inp = torch.tensor([[float(s), float(j)]]).expand(K, 2)
                step[s, j] = model._step_h2.log_prob(inp, ks).exp()
        emit = torch.stack([model._step_o1.log_prob(ks, torch.full((K,), r))
                            for r in range(R)], -1).exp()
    return start.double().numpy(), step.double().numpy(), emit.double().numpy()


def io_forward_backward(start, step, emit, s, o):
    """Per row: log p(o | s) and p(h_t = k | o, s), by the forward-backward algorithm."""
    B, T = s.shape
    logz, margs = [], []
    for n in range(B):
        alpha = np.zeros((T, K))
        alpha[0] = start[s[n, 0]] * emit[:, o[n, 0]]
        for t in range(1, T):
            alpha[t] = (alpha[t - 1] @ step[s[n, t]]) * emit[:, o[n, t]]
        beta = np.ones((T, K))
        for t in range(T - 2, -1, -1):
            beta[t] = step[s[n, t + 1]] @ (emit[:, o[n, t + 1]] * beta[t + 1])
        z = alpha[-1].sum()
        logz.append(np.log(z))
        margs.append(alpha * beta / z)
    return np.array(logz), np.stack(margs)


def observed_matrix(obs, T):
    return np.stack([obs[f"o{t}"].reshape(-1).numpy() for t in range(1, T + 1)], 1)


@pytest.mark.parametrize("T", [2, 5, 30])
def test_finite_state_chain_of_an_input_sequence_is_the_forward_algorithm(T):
    model, x, obs = make_io_chain(T)
    st = prepare(model, x, obs)
    assert list(st.sites) == [f"h{t}" for t in range(1, T + 1)]
    assert len(st.passes) == (K * K if T > 1 else K)  # K^2 passes, not K^T
    got = enumerated_log_joint(model, x, obs).detach().double().numpy()
    ref, _ = io_forward_backward(*io_tables(model), x.numpy(), observed_matrix(obs, T))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_finite_state_chain_posterior_marginals_are_forward_backward():
    T = 6
    model, x, obs = make_io_chain(T, seed=2)
    _, margs = io_forward_backward(*io_tables(model), x.numpy(), observed_matrix(obs, T))
    post = infer_discrete(model, x, obs)
    for t in range(1, T + 1):
        got = post.marginals[f"h{t}"].double().numpy()
        assert got.shape == (4, K)
        np.testing.assert_allclose(got, margs[:, t - 1], atol=1e-5)


# ------------------------------------------------------------------ the repeat form

REPEAT = f"""
object Regime : FinSet {K}
object Reading : FinSet {R}
morphism transition : Regime -> Regime [role=kernel]
morphism emission : Regime -> Reading [role=kernel]
let five = repeat(transition, 5)
program later : Regime -> Reading
    sample h <- five
    observe o <- emission(h)
    return o
export later
"""


def test_repeat_over_a_finite_state_sums_the_intermediate_states_exactly():
    torch.manual_seed(4)
    model = qvr.loads(REPEAT).morphism
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.tensor([0, 1, 2, 1])
    o = torch.tensor([3, 0, 4, 2])
    ks = torch.arange(K)
    base = [m for _, m in model.named_modules() if getattr(m, "label", None) == "transition"]
    assert len(base) == 1  # one table, weight-tied: `repeat` is the same kernel 5 times
    with torch.no_grad():
        A = torch.stack([base[0].log_prob(ks, torch.full((K,), j)) for j in range(K)],
                        -1).exp().double().numpy()
        E = torch.stack([model._step_o.log_prob(ks, torch.full((K,), r)) for r in range(R)],
                        -1).exp().double().numpy()
    A5 = np.linalg.matrix_power(A, 5)
    ref = np.log([(A5[x[n]] * E[:, o[n]]).sum() for n in range(4)])
    got = enumerated_log_joint(model, x, {"o": o}).detach().double().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ one wide pass


def test_one_wide_pass_equals_the_passes_one_by_one():
    model, x, obs = make_io_chain(8, seed=5)
    st = prepare(model, x, obs)
    assert st.wide  # the chain runs as one pass over K^2 x B rows
    wide = log_partition(model, x, obs, st)
    st.wide = False
    try:
        narrow = log_partition(model, x, obs, st)
    finally:
        st.wide = True
    torch.testing.assert_close(wide, narrow, rtol=1e-6, atol=1e-5)


CONTINUOUS_HMM = """
object Regime : FinSet 3
object One : FinSet 1
program hmm : One -> One
    sample mu : Regime <- Normal(0.0, 2.0) [iid_over=Regime]
    sample sigma <- HalfNormal(1.0)
    let p1 = 1.0 * init
    sample r1 <- Categorical(p1)
    let m1 = mu[r1]
    observe y1 <- Normal(m1, sigma)
    let p2 = trans[r1]
    sample r2 <- Categorical(p2)
    let m2 = mu[r2]
    observe y2 <- Normal(m2, sigma)
    let p3 = trans[r2]
    sample r3 <- Categorical(p3)
    let m3 = mu[r3]
    observe y3 <- Normal(m3, sigma)
    return y3
export hmm
"""


def test_enumerated_categorical_chain_density_compiles_and_matches_the_forward_algorithm():
    # the traced MCMC density of a chain of Categorical regimes (index values checked by
    # the runtime in eager calls, not while tracing) against the forward algorithm
    model = qvr.loads(CONTINUOUS_HMM).morphism
    A = torch.tensor([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.25, 0.25, 0.5]])
    y = [0.3, -1.2, 2.0]
    obs = {"init": torch.full((1, 3), 1 / 3), "trans": A,
           **{f"y{t + 1}": torch.tensor([v]) for t, v in enumerate(y)}}
    target = make_target(model, torch.zeros(1, 1), obs)
    assert target.enumeration.wide and target.dim == 4
    z = torch.tensor([[-1.0, 0.0, 1.5, -0.3], [0.5, -0.5, 0.2, 0.4]])
    fn = target.compiled_for(z)
    assert fn is not None, target.compile_notes
    lp, _ = target.log_density_and_grad(z)
    for c in range(2):
        values, logdet = target.registry.unpack(z[c])
        mu, sigma = values["mu"].double(), values["sigma"].double()
        N = torch.distributions.Normal(mu, sigma)
        la = torch.log(torch.full((3,), 1 / 3, dtype=torch.float64)) + N.log_prob(
            torch.tensor(y[0], dtype=torch.float64))
        for t in range(1, 3):
            la = torch.logsumexp(la[:, None] + A.double().log(), 0) + N.log_prob(
                torch.tensor(y[t], dtype=torch.float64))
        ref = (torch.logsumexp(la, 0)
               + torch.distributions.Normal(0.0, 2.0).log_prob(mu).sum()
               + torch.distributions.HalfNormal(1.0).log_prob(sigma) + logdet.double())
        assert abs(lp[c].item() - ref.item()) < 1e-4, (c, lp[c], ref)
