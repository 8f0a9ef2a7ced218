"""Runtime throughput: compiled QVR transformers against hand-written torch modules.

Two parts, each in the same run and with the same parameters as a hand-written torch
module that computes the same thing with plain tensor code (the bench first checks that
both give the same numbers under the same seed), printing throughput (tokens per second)
and the ratio compiled/hand-written:

* `transformer_lm` (goal <= 1.3): `rsample` and the log-density (`log_joint` with `h` and
  `next_token` supplied, which includes the Monte-Carlo estimate of the backbone's density
  with 100 prefix draws per distinct token, runtime spec 4.1) at batch 256 x sequence 16;
* `decoder_lm` (issue 17, goal <= 1.2): `rsample`, the log-density forward alone and
  forward + backward (an SVI step: `log_joint` with `next_token` supplied, the
  per-sequence estimator of design E6 with `--draws` joint draws and common random
  numbers) at batch 64 x sequence 128.  The example's position table (64) is widened to
  the sequence length (`decoder_program`); nothing else changes.  The hand-written
  attention is timed both ways (explicit matmul-softmax-matmul, and
  `scaled_dot_product_attention` on 4-D inputs, which reaches torch's fused kernel) and
  the ratio is taken against the faster.

Measure with `--threads 1` on a shared machine: with more threads than free cores the
intra-op threads wait on each other and every figure (both sides alike) collapses by
10-50x and scatters.

Usage: PYTHONPATH=. python bench/runtime.py [--only decoder|transformer] [--threads 1]
       [--reps 7] [--batch 256 --seq 16] [--dec-batch 64 --dec-seq 128 --draws 8]
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
EPS = 1e-7
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class HandMLP(nn.Module):
    def __init__(self, w_in, hidden, w_out):
        super().__init__()
        self.l0, self.l2, self.l4 = nn.Linear(w_in, hidden), nn.Linear(hidden, hidden), \
            nn.Linear(hidden, w_out)

    def forward(self, x):
        return self.l4(torch.tanh(self.l2(torch.tanh(self.l0(x)))))


class HandNormal(nn.Module):
    """A Normal kernel: loc and log-scale from an MLP."""

    def __init__(self, w_in, d, hidden=64):
        super().__init__()
        self.d = d
        self.net = HandMLP(w_in, hidden, 2 * d)

    def params(self, x):
        raw = self.net(x)
        return raw[..., :self.d], torch.exp(raw[..., self.d:]).clamp(min=EPS)

    def rsample(self, x, shape=()):
        loc, scale = self.params(x)
        return loc + scale * torch.randn(tuple(shape) + tuple(loc.shape))

    def log_prob(self, x, y):
        loc, scale = self.params(x)
        z = (y - loc) / scale
        return (-0.5 * z * z - torch.log(scale) - LOG_SQRT_2PI).sum(-1)


class HandHeads(nn.Module):
    """Four Normal heads 16 -> 4 evaluated as one batched matmul per layer."""

    def __init__(self, heads=4, w_in=16, d=4, hidden=64):
        super().__init__()
        self.k, self.d = heads, d
        self.w0 = nn.Parameter(torch.empty(heads * hidden, w_in))
        self.b0 = nn.Parameter(torch.empty(heads * hidden))
        self.w2 = nn.Parameter(torch.empty(heads, hidden, hidden))
        self.b2 = nn.Parameter(torch.empty(heads, hidden))
        self.w4 = nn.Parameter(torch.empty(heads, 2 * d, hidden))
        self.b4 = nn.Parameter(torch.empty(heads, 2 * d))

    def rsample(self, x, shape=()):
        lead = x.shape[:-1]
        h = torch.tanh(torch.nn.functional.linear(x, self.w0, self.b0))
        h = h.reshape(-1, self.k, self.w2.shape[1]).transpose(0, 1)  # (k, N, hidden)
        h = torch.tanh(torch.baddbmm(self.b2.unsqueeze(1), h, self.w2.transpose(1, 2)))
        raw = torch.baddbmm(self.b4.unsqueeze(1), h, self.w4.transpose(1, 2)).transpose(0, 1)
        raw = raw.reshape(*lead, self.k, 2 * self.d)
        loc, scale = raw[..., :self.d], torch.exp(raw[..., self.d:]).clamp(min=EPS)
        y = loc + scale * torch.randn(tuple(shape) + tuple(loc.shape))
        return y.reshape(*shape, *lead, self.k * self.d)


class HandTransformer(nn.Module):
    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.centers = nn.Parameter(torch.empty(vocab, d))
        self.log_sigma = nn.Parameter(torch.empty(vocab, d))
        self.layers = nn.ModuleList()
        for _ in range(2):
            self.layers.append(nn.ModuleDict(dict(
                heads=HandHeads(), attn_proj=HandNormal(d, d), residual_attn=HandNormal(d, d),
                ff_up=HandNormal(d, 32), ff_down=HandNormal(32, d), residual_ff=HandNormal(d, d))))
        self.lm_head = HandMLP(d, 64, vocab)

    def embed(self, x, shape=()):
        mu, sigma = self.centers[x], torch.exp(self.log_sigma[x]).clamp(min=EPS)
        return mu + sigma * torch.randn(tuple(shape) + tuple(mu.shape))

    def backbone(self, x, shape=(), skip_last=False):
        h = self.embed(x, shape)
        for i, layer in enumerate(self.layers):
            h = layer["heads"].rsample(h)
            for name in ("attn_proj", "residual_attn", "ff_up", "ff_down", "residual_ff"):
                if skip_last and i == 1 and name == "residual_ff":
                    return h
                h = layer[name].rsample(h)
        return h

    def rsample(self, x):
        h = self.backbone(x)
        logits = self.lm_head(h)
        u = torch.rand(logits.shape).clamp(min=1e-20)
        return torch.argmax(logits - torch.log((-torch.log(u)).clamp(min=1e-20)), dim=-1)

    def log_joint(self, x, h, y, n=100):
        """The runtime's estimator (`chain_log_prob`): `n` prefix draws per distinct token
        (rows with equal tokens share them), the last kernel's parameters computed on those
        draws and gathered to the rows."""
        uniq, inv = torch.unique(x.reshape(-1), return_inverse=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            ys = self.backbone(uniq, (n,), skip_last=True)  # (n, U, d)
        loc, scale = self.layers[1]["residual_ff"].params(ys)

        def rows(p):  # (n, U, ...) -> (n, B, L, ...)
            return p.index_select(1, inv).reshape(n, *x.shape, *p.shape[2:])

        # what does not depend on h is computed per distinct token, then gathered
        log_norm = rows((torch.log(scale) + LOG_SQRT_2PI).sum(-1))
        z = (h - rows(loc)) * rows(torch.reciprocal(scale))
        lp = -0.5 * (z * z).sum(-1) - log_norm  # (n, B, L)
        lp_h = torch.logsumexp(lp, 0) - math.log(n)
        logp = torch.log_softmax(self.lm_head(h), -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        return (lp_h + logp).sum(-1)


def copy_parameters(model, hand: HandTransformer) -> None:
    """Copy the compiled transformer's parameters into the hand-written module."""
    links = model._step_h.links()
    embed, rest = links[0], links[1:]
    with torch.no_grad():
        hand.centers.copy_(embed.centers)
        hand.log_sigma.copy_(embed.log_sigma)
        for i, layer in enumerate(hand.layers):
            fan, *kernels = rest[6 * i:6 * i + 6]
            heads = [p.param_source.net for p in fan.parts]
            H = layer["heads"]
            H.w0.copy_(torch.cat([h[0].weight for h in heads]))
            H.b0.copy_(torch.cat([h[0].bias for h in heads]))
            H.w2.copy_(torch.stack([h[2].weight for h in heads]))
            H.b2.copy_(torch.stack([h[2].bias for h in heads]))
            H.w4.copy_(torch.stack([h[4].weight for h in heads]))
            H.b4.copy_(torch.stack([h[4].bias for h in heads]))
            for name, k in zip(("attn_proj", "residual_attn", "ff_up", "ff_down", "residual_ff"),
                               kernels):
                net = k.param_source.net
                dst = layer[name].net
                for a, b in ((dst.l0, net[0]), (dst.l2, net[2]), (dst.l4, net[4])):
                    a.weight.copy_(b.weight)
                    a.bias.copy_(b.bias)
        net = model._step_next_token.param_source.net
        for a, b in ((hand.lm_head.l0, net[0]), (hand.lm_head.l2, net[2]),
                     (hand.lm_head.l4, net[4])):
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)


# ---------------------------------------------------------------- decoder_lm (issue 17)

class HandDecoder(nn.Module):
    """`examples/decoder_lm.qvr` written by hand: token + position embedding (Normal), two
    pre-norm blocks (causal multi-head attention with Normal output noise, a Normal
    feed-forward kernel, each in a residual branch), a final layer norm and a Categorical
    head.  Batched throughout: one matmul for Q, K and V of all heads, batched matmuls (or
    `scaled_dot_product_attention`, `attention="sdpa"`) over every draw, sequence and head;
    no Python loop over positions or draws.  Random numbers are drawn in the order the
    runtime draws them (embedding noise, then per block the attention's and the kernel's
    noise, then the Gumbel noise of the head), so both give the same numbers."""

    def __init__(self, vocab=32, d=32, positions=128, heads=4, head_dim=8, hidden=64,
                 layers=2, attention="explicit"):
        super().__init__()
        self.heads, self.head_dim, self.attention = heads, head_dim, attention
        self.centers = nn.Parameter(torch.empty(vocab, d))
        self.log_sigma = nn.Parameter(torch.empty(vocab, d))
        self.pos = nn.Parameter(torch.empty(positions, d))
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), w_qkv=nn.Linear(d, 3 * heads * head_dim, bias=False),
                w_o=nn.Linear(heads * head_dim, d, bias=False), ln2=nn.LayerNorm(d),
                ff=HandMLP(d, hidden, 2 * d))))
            self.blocks[-1].attn_log_scale = nn.Parameter(torch.empty(d))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = HandMLP(d, 64, vocab)
        self.register_buffer("mask", torch.ones(positions, positions, dtype=torch.bool).triu(1),
                             persistent=False)

    def attend(self, block, a):
        """Causal multi-head self-attention of `a (..., T, d)`: `(..., T, d)`."""
        H, k, T = self.heads, self.head_dim, a.shape[-2]
        q, kk, v = block["w_qkv"](a).unflatten(-1, (3, H, k)).movedim(-4, -2).unbind(-4)
        if self.attention == "sdpa":
            # 4-D (draws and batch merged, a view): torch's fused CPU kernel takes 4-D only
            lead = q.shape[:-3]
            o = F.scaled_dot_product_attention(q.flatten(0, -4), kk.flatten(0, -4),
                                               v.flatten(0, -4), is_causal=True)
            o = o.unflatten(0, lead)
        else:
            s = torch.matmul(q, kk.transpose(-1, -2)) * (1.0 / math.sqrt(k))
            s = s.masked_fill(self.mask[:T, :T], -math.inf)
            o = torch.matmul(torch.softmax(s, -1), v)
        return block["w_o"](o.movedim(-3, -2).flatten(-2))

    def backbone(self, x, shape=(), generator=None):
        """Draws of the final layer norm's output `(*shape, B, T, d)` for tokens `x (B, T)`."""
        def randn(like):
            return torch.randn(like.shape, generator=generator)

        mu = self.centers[x] + self.pos[:x.shape[-1]]
        sigma = torch.exp(self.log_sigma[x]).clamp(min=EPS)
        h = mu + sigma * torch.randn(tuple(shape) + tuple(mu.shape), generator=generator)
        for block in self.blocks:
            m = self.attend(block, block["ln1"](h))
            h = h + (m + torch.exp(block.attn_log_scale).clamp(min=1e-6) * randn(m))
            loc, raw = block["ff"](block["ln2"](h)).chunk(2, -1)
            h = h + (loc + torch.exp(raw).clamp(min=EPS) * randn(loc))
        return self.ln_f(h)

    def rsample(self, x):
        logits = self.lm_head(self.backbone(x))
        u = torch.rand(logits.shape).clamp(min=1e-20)
        return torch.argmax(logits - torch.log((-torch.log(u)).clamp(min=1e-20)), dim=-1)

    def log_joint(self, x, y, n=8, seed=0):
        """Per-sequence estimator `log (1/n) sum_s prod_t p(y_t | h_s)` from `n` joint draws
        of the backbone (common random numbers: a generator seeded with `seed`), `(B,)`."""
        g = torch.Generator().manual_seed(seed)
        h = self.backbone(x, (n,), generator=g)
        logp = torch.log_softmax(self.lm_head(h), -1)
        lp = logp.gather(-1, y.expand(n, *y.shape).unsqueeze(-1)).squeeze(-1)  # (n, B, T)
        return torch.logsumexp(lp.sum(-1), 0) - math.log(n)


def copy_decoder_parameters(model, hand: HandDecoder) -> None:
    """Copy the compiled decoder's parameters into the hand-written module."""
    links = model._step_next_token.links()
    embed, *residuals, ln_f, head = links
    with torch.no_grad():
        hand.centers.copy_(embed.centers)
        hand.log_sigma.copy_(embed.log_sigma)
        hand.pos.copy_(embed.pos[:hand.pos.shape[0]])
        for i, block in enumerate(hand.blocks):
            (ln1, attn), (ln2, ff) = (r.inner.links() for r in residuals[2 * i:2 * i + 2])
            for dst, src in ((block["ln1"], ln1), (block["ln2"], ln2)):
                dst.weight.copy_(src.gain)
                dst.bias.copy_(src.bias)
            H, k, dA = attn.w_q.shape
            block["w_qkv"].weight.copy_(torch.cat([attn.w_q, attn.w_k, attn.w_v])
                                        .reshape(3 * H * k, dA))
            block["w_o"].weight.copy_(attn.w_o)
            block.attn_log_scale.copy_(attn.log_scale)
            _copy_mlp(block["ff"], ff.param_source.net)
        hand.ln_f.weight.copy_(ln_f.gain)
        hand.ln_f.bias.copy_(ln_f.bias)
        _copy_mlp(hand.lm_head, head.param_source.net)


def _copy_mlp(dst: HandMLP, net) -> None:
    for a, b in ((dst.l0, net[0]), (dst.l2, net[2]), (dst.l4, net[4])):
        a.weight.copy_(b.weight)
        a.bias.copy_(b.bias)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(compiled, hand, reps):
    """Best times of both and the median of paired ratios, measured alternately so that
    machine load hits both alike."""
    compiled(), hand()  # warm-up
    tc, th = [], []
    for _ in range(reps):
        tc.append(timed(compiled))
        th.append(timed(hand))
    ratios = sorted(c / h for c, h in zip(tc, th))
    return min(tc), min(th), ratios[len(ratios) // 2]


def bench_transformer(args):
    """`examples/transformer_lm.qvr` against `HandTransformer` (batch x sequence of the
    arguments; log-density with the spec's 100 prefix draws)."""
    from qvr import load

    torch.manual_seed(0)
    prog = load(str(ROOT / "examples" / "transformer_lm.qvr"))
    model = prog.morphism
    hand = HandTransformer()
    copy_parameters(model, hand)
    B, L = args.batch, args.seq
    x = torch.randint(0, 32, (B, L))
    with torch.no_grad():
        h = model._step_h.rsample(x)
        y = model.rsample(x)
        values = {"h": h, "next_token": y}
        # same numbers: same seed, same draw order
        torch.manual_seed(1)
        a = model.rsample(x)
        torch.manual_seed(1)
        b = hand.rsample(x)
        same_sample = bool((a == b).all())
        la = model.log_joint(x, values)
        lb = hand.log_joint(x, h, y)
        same_density = float((la - lb).abs().max())
        t_rs, t_rs_hand, r_rs = compare(lambda: model.rsample(x), lambda: hand.rsample(x),
                                        args.reps)
        t_lj, t_lj_hand, r_lj = compare(lambda: model.log_joint(x, values),
                                        lambda: hand.log_joint(x, h, y), max(3, args.reps // 2))
    tok = B * L
    print(f"transformer_lm, batch {B} x sequence {L}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"  identical draws under one seed: {same_sample}; "
          f"max |log-density difference|: {same_density:.2e}")
    print("  (best of each; ratio = compiled time / hand-written time, best times and the "
          "median of paired runs)")
    print(f"  rsample:     compiled {tok / t_rs:10.0f} tok/s   hand {tok / t_rs_hand:10.0f} tok/s"
          f"   ratio {t_rs / t_rs_hand:.2f}x (paired median {r_rs:.2f}x)")
    print(f"  log-density: compiled {tok / t_lj:10.0f} tok/s   hand {tok / t_lj_hand:10.0f} tok/s"
          f"   ratio {t_lj / t_lj_hand:.2f}x (paired median {r_lj:.2f}x)")
    return {"rsample": t_rs / t_rs_hand, "log-density": t_lj / t_lj_hand}


def decoder_program(seq: int):
    """`examples/decoder_lm.qvr`, its position table widened to `seq` when the file's
    (64) is shorter (the bench's default sequence is 128; nothing else changes)."""
    from qvr import load

    src = (ROOT / "examples" / "decoder_lm.qvr").read_text()
    if seq > 64:
        src = src.replace("positions=64", f"positions={seq}")
    return load(src)


def bench_decoder(args):
    """`examples/decoder_lm.qvr` against `HandDecoder` (the same parameters, the same
    per-sequence estimator with `args.draws` joint draws and common random numbers):
    rsample, the log-density forward alone and forward + backward (an SVI step's work:
    `-log_joint(x, {next_token}).sum()` and its gradient), at `args.dec_batch` x
    `args.dec_seq`.  The hand-written attention is timed both as an explicit
    matmul-softmax-matmul and with `scaled_dot_product_attention`; ratios are against
    the faster of the two."""
    from qvr.inference.front.fitting import set_draws

    torch.manual_seed(0)
    B, T, n = args.dec_batch, args.dec_seq, args.draws
    prog = decoder_program(T)
    model = prog.morphism
    set_draws(model, n)
    hands = {}
    for kind in ("explicit", "sdpa"):
        hands[kind] = HandDecoder(positions=max(64, T), attention=kind)
        copy_decoder_parameters(model, hands[kind])
    x = torch.randint(0, 32, (B, T))
    with torch.no_grad():
        y = model.rsample(x)
    values = {"next_token": y}
    # the same numbers: the same seed and draw order
    checks = {}
    with torch.no_grad():
        torch.manual_seed(1)
        a = model.rsample(x)
        la = model.log_joint(x, values)
        for kind, hand in hands.items():
            torch.manual_seed(1)
            b = hand.rsample(x)
            lb = hand.log_joint(x, y, n)
            checks[kind] = (float((a == b).double().mean()), float((la - lb).abs().max()),
                            float(la.abs().max()))
    for kind, hand in hands.items():
        model.zero_grad(set_to_none=True)
        hand.zero_grad(set_to_none=True)
        (-model.log_joint(x, values).sum()).backward()
        (-hand.log_joint(x, y, n).sum()).backward()
        worst = 0.0
        for name, gc, gh in _decoder_grads(model, hand):
            worst = max(worst, float((gc - gh).abs().max() / gh.abs().max().clamp(min=1e-12)))
        checks[kind] += (worst,)
    for kind, (same, diff, scale, grad) in checks.items():
        # timing two different computations would compare nothing: stop here instead
        if same < 1.0 or diff > 1e-3 * max(scale, 1.0) or grad > 1e-4:
            raise SystemExit(f"bench/runtime.py: the hand-written decoder ({kind}) disagrees "
                             f"with the compiled one: draws equal {100 * same:.1f}%, "
                             f"log-density off by {diff:.3g} (of {scale:.3g}), gradients "
                             f"off by {grad:.3g} (relative)")

    def fwd_bwd(f):
        def run():
            f.zero_grad(set_to_none=True)
            (-(f.log_joint(x, values) if f is model else f.log_joint(x, y, n)).sum()).backward()
        return run

    def nograd(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    cases = {
        "rsample": (nograd(lambda: model.rsample(x)),
                    {k: nograd(lambda h=h: h.rsample(x)) for k, h in hands.items()}),
        "log-density": (nograd(lambda: model.log_joint(x, values)),
                        {k: nograd(lambda h=h: h.log_joint(x, y, n)) for k, h in hands.items()}),
        "fwd+bwd": (fwd_bwd(model), {k: fwd_bwd(h) for k, h in hands.items()}),
    }
    print(f"decoder_lm, batch {B} x sequence {T}, {n} joint draws per sequence, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for kind, (same, diff, scale, grad) in checks.items():
        print(f"  hand ({kind}): identical draws under one seed {same:.4%}; max |log-density "
              f"difference| {diff:.2e} (of {scale:.1f}); max relative gradient difference "
              f"{grad:.2e}")
    print("  (best of each; ratio = compiled / faster hand-written; paired = median of "
          "paired runs)")
    ratios = {}
    for name, (compiled, hand_fns) in cases.items():
        reps = args.reps if name == "rsample" else max(3, args.reps // 2)
        best = timed_group({"compiled": compiled, **hand_fns}, reps)
        fast = min(hand_fns, key=lambda k: best[k][0])
        t_c, t_h = best["compiled"][0], best[fast][0]
        paired = _median([c / h for c, h in zip(best["compiled"][1], best[fast][1])])
        ratios[name] = t_c / t_h
        tok = B * T
        others = "  ".join(f"{k} {tok / best[k][0]:8.0f}" for k in hand_fns)
        print(f"  {name:12s} compiled {tok / t_c:8.0f} tok/s   hand: {others} tok/s   "
              f"ratio {t_c / t_h:.2f}x vs {fast} (paired {paired:.2f}x)")
    return ratios


def _decoder_grads(model, hand):
    """`(name, compiled gradient, hand gradient)` of corresponding parameters (the hand
    module's Q, K, V weights are one matrix: compared as such)."""
    links = model._step_next_token.links()
    embed, *residuals, ln_f, head = links
    out = [("centers", embed.centers.grad, hand.centers.grad),
           ("pos", embed.pos.grad[:hand.pos.shape[0]], hand.pos.grad)]
    for i, block in enumerate(hand.blocks):
        (ln1, attn), (ln2, ff) = (r.inner.links() for r in residuals[2 * i:2 * i + 2])
        H, k, dA = attn.w_q.shape
        qkv = torch.cat([attn.w_q.grad, attn.w_k.grad, attn.w_v.grad]).reshape(3 * H * k, dA)
        out += [(f"qkv{i}", qkv, block["w_qkv"].weight.grad),
                (f"w_o{i}", attn.w_o.grad, block["w_o"].weight.grad),
                (f"log_scale{i}", attn.log_scale.grad, block.attn_log_scale.grad),
                (f"ln1.{i}", ln1.gain.grad, block["ln1"].weight.grad),
                (f"ff{i}", ff.param_source.net[0].weight.grad, block["ff"].l0.weight.grad)]
    out.append(("head", head.param_source.net[4].weight.grad, hand.lm_head.l4.weight.grad))
    return out


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def timed_group(fns: dict, reps: int) -> dict:
    """`{name: (best time, [times])}`, the functions run alternately (one warm-up each) so
    that machine load hits them alike."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            times[k].append(timed(fn))
    return {k: (min(v), v) for k, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("decoder", "transformer"), default=None,
                    help="run one part (default both)")
    ap.add_argument("--batch", type=int, default=256, help="transformer_lm batch")
    ap.add_argument("--seq", type=int, default=16, help="transformer_lm sequence length")
    ap.add_argument("--dec-batch", type=int, default=64, help="decoder_lm batch")
    ap.add_argument("--dec-seq", type=int, default=128, help="decoder_lm sequence length")
    ap.add_argument("--draws", type=int, default=8,
                    help="decoder_lm: joint draws per sequence of the estimator (default 8, "
                         "the example's `--draws 8`)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = {}
    if args.only in (None, "transformer"):
        out["transformer"] = bench_transformer(args)
    if args.only in (None, "decoder"):
        out["decoder"] = bench_decoder(args)
    return out


if __name__ == "__main__":
    main()
