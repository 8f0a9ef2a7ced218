"""Runtime throughput: compiled `transformer_lm` against a hand-written torch module.

Measures, in the same run and with the same parameters, the throughput (tokens per second)
of `rsample` and of the log-density (`log_joint` with `h` and `next_token` supplied, which
includes the Monte-Carlo estimate of the backbone's density with 100 prefix draws, runtime
spec 4.1) at batch 256 x sequence 16, and prints the ratio compiled/hand-written (goal:
<= 1.3).  The hand-written module computes the same thing with plain tensor code; the
bench also checks that both give the same numbers under the same seed.

Usage: PYTHONPATH=. python bench/runtime.py [--batch 256] [--seq 16] [--reps 5]
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            ys = self.backbone(x, (n,), skip_last=True)
        lp_h = torch.logsumexp(self.layers[1]["residual_ff"].log_prob(ys, h), 0) - math.log(n)
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
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
    return t_rs / t_rs_hand, t_lj / t_lj_hand


if __name__ == "__main__":
    main()
