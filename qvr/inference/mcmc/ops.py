"""Fused tensor steps of the trajectory loop, compiled with TorchScript when available.

The NUTS and HMC loops do a fixed handful of small tensor operations per leapfrog step
(kicks, drifts, energies, the multinomial bookkeeping, U-turn tests).  In eager PyTorch
each costs a Python dispatch of several microseconds, which is as much as a whole gradient
of a small model; grouping them into a few TorchScript functions removes that overhead.
If scripting is unavailable (a PyTorch without TorchScript), the same functions run
eagerly — the arithmetic is identical.

Mass matrices are passed as `inv` (`(C, D)` diagonal — ones for the identity — or
`(C, D, D)` dense) with the flag `dense`.

This module knows nothing of trees or states: it is arithmetic only.
"""
from __future__ import annotations

import warnings
from typing import Tuple

import torch
from torch import Tensor


def velocity(inv: Tensor, p: Tensor, dense: bool) -> Tensor:
    """`M^-1 p` per chain."""
    if dense:
        return torch.bmm(inv, p.unsqueeze(-1)).squeeze(-1)
    return inv * p


def kick_drift(z: Tensor, p: Tensor, g: Tensor, eps: Tensor, inv: Tensor,
               dense: bool) -> Tuple[Tensor, Tensor]:
    """Half momentum step then a full position step (`eps` is `(C, 1)`)."""
    p = p + 0.5 * eps * g
    if dense:
        v = torch.bmm(inv, p.unsqueeze(-1)).squeeze(-1)
    else:
        v = inv * p
    return z + eps * v, p


def kick(p: Tensor, g: Tensor, eps: Tensor) -> Tensor:
    """The closing half momentum step."""
    return p + 0.5 * eps * g


def nuts_leaf(z: Tensor, p_half: Tensor, lp: Tensor, g: Tensor, eps: Tensor, inv: Tensor,
              dense: bool, h0: Tensor, thr: float, running: Tensor, sum_acc: Tensor,
              n_leaves: Tensor, diverged: Tensor, sub_w: Tensor, sz: Tensor, sg: Tensor,
              slp: Tensor, sh: Tensor, log_u: Tensor):
    """Finish a leapfrog step and fold the new leaf into the subtree (see `nuts.py`).

    `lp` must already map non-finite values to `-inf`.  An energy error that is not a
    number counts as `+inf`: such a leaf has acceptance statistic 0, weight 0 and is
    divergent.  Written with as few operations as possible (each costs a dispatch).

    Returns `(p, v, sum_acc, n_leaves, diverged, div, sub_w, sz, sg, slp, sh)`.
    """
    p = p_half + (0.5 * eps) * g
    if dense:
        v = torch.bmm(inv, p.unsqueeze(-1)).squeeze(-1)
    else:
        v = inv * p
    h = 0.5 * (p * v).sum(-1) - lp
    dh = torch.nan_to_num(h - h0, nan=float("inf"))
    sum_acc = sum_acc + torch.exp(-dh.clamp(min=0.0)) * running
    n_leaves = n_leaves + running.to(n_leaves.dtype)
    div = running & (dh > thr)
    diverged = diverged | div
    lw = -dh
    new_w = torch.logaddexp(sub_w, lw)
    take = running & (log_u < lw - new_w)
    tcol = take.unsqueeze(-1)
    sz = torch.where(tcol, z, sz)
    sg = torch.where(tcol, g, sg)
    slp = torch.where(take, lp, slp)
    sh = torch.where(take, h, sh)
    sub_w = torch.where(running, new_w, sub_w)
    return p, v, sum_acc, n_leaves, diverged, div, sub_w, sz, sg, slp, sh


def turning(z: Tensor, v: Tensor, ck_z: Tensor, ck_v: Tensor, direction: Tensor) -> Tensor:
    """U-turn between a checkpoint (subtree start) and the current leaf (its end):
    `(z+ - z-) . v- < 0` or `(z+ - z-) . v+ < 0` (`direction` is `(C, 1)`)."""
    dz = (z - ck_z) * direction
    return ((dz * ck_v).sum(-1) < 0) | ((dz * v).sum(-1) < 0)


def turning_rho(v: Tensor, rho: Tensor, ck_v: Tensor) -> Tensor:
    """Generalised U-turn (Betancourt 2013) of a subtree whose end velocities are `ck_v`
    and `v` and whose momenta sum to `rho`: `v- . rho <= 0` or `v+ . rho <= 0`."""
    return ((ck_v * rho).sum(-1) <= 0) | ((v * rho).sum(-1) <= 0)


def turning_dz(dz: Tensor, p_a: Tensor, p_b: Tensor) -> Tensor:
    """Hoffman and Gelman's U-turn in the metric's own coordinates: a (sub)tree from leaf
    `a` to leaf `b` (trajectory order; `dz = z_b - z_a`, momenta in the forward
    orientation) turns when `dz . p_a <= 0` or `dz . p_b <= 0`.  The momenta, not the
    velocities: with `M^-1 = L L^T`, `y = L^-1 z` and `q = L^T p`, `dy . q = dz . p`, so the
    test is the one NUTS makes on a standard Normal, whatever the metric."""
    return ((dz * p_a).sum(-1) <= 0) | ((dz * p_b).sum(-1) <= 0)


def turning_dz_across(z: Tensor, p: Tensor, z_k: Tensor, p_k: Tensor, z_n: Tensor,
                      p_n: Tensor, z_l: Tensor, p_l: Tensor, direction: Tensor) -> Tensor:
    """`turning_across` for the displacement criterion (`turning_dz`): the sub-subtree
    starts at checkpoint `k` (position `z_k`, momentum `p_k`), its right half at
    checkpoint `k + 1` (`z_n`, `p_n`); `z_l`, `p_l` are the left half's last leaf, `z`,
    `p` the current leaf; `direction` `(C, 1)` orients the differences as the trajectory
    runs."""
    return turning_dz((z_n - z_k) * direction, p_k, p_n) \
        | turning_dz((z - z_l) * direction, p_l, p)


def turning_across(v: Tensor, psum: Tensor, a_k: Tensor, v_k: Tensor, a_n: Tensor,
                   v_n: Tensor, p_n: Tensor, p_l: Tensor, v_l: Tensor) -> Tensor:
    """Stan's checks across the two halves of a sub-subtree of 4 leaves or more (Stan
    2.23's `base_nuts`, also in nuts-rs): the left half with the right half's first leaf,
    and the left half's last leaf with the right half, must not turn either.  The
    sub-subtree starts at checkpoint `k` (momentum sum before it `a_k`, velocity `v_k`),
    its right half at checkpoint `k + 1` (`a_n`, `v_n`, momentum `p_n`); `p_l`, `v_l` are
    the momentum and velocity of the left half's last leaf, `v` and `psum` the current
    leaf's velocity and the momentum sum through it."""
    left = a_n - a_k + p_n
    right = psum - a_n + p_l
    return (((v_k * left).sum(-1) <= 0) | ((v_n * left).sum(-1) <= 0)
            | ((v_l * right).sum(-1) <= 0) | ((v * right).sum(-1) <= 0))


#: NUTS termination criteria (`NUTSKernel(uturn=...)`): `turning_dz` with Stan's checks
#: across merges, `turning_rho` with them, the spec's `turning` without
UTURNS = ("displacement", "momentum", "position")


def uturn_update(z: Tensor, p: Tensor, v: Tensor, div: Tensor, running: Tensor,
                 psum: Tensor, ck_a: Tensor, ck_v: Tensor, ck_x: Tensor, store: Tensor,
                 check: Tensor, direction: Tensor, uturn: str):
    """Store this leaf's checkpoint and stop the chains whose leaf diverged (`div`) or
    one of whose sub-subtrees ending here turns (see `tick.py`).  Traced into the
    Inductor tick; the same tests as the `turning*` functions, on every slot.

    `ck_a`, `ck_v` are `(K, C, D)` checkpoint stacks; `store` `(K, 1, 1)` marks the slot
    this leaf goes to, `check` `(K, 1)` the slots to test.  `ck_x` is `(3K, C, D)`: per
    slot a first row, then two rows about the last leaf at which the slot's sub-subtree
    was checked, which is the left half's last leaf when the sub-subtree twice that size
    is checked (the checks across its halves; the right half starts at slot `k + 1`).
    By criterion (`UTURNS`):

    * ``"displacement"``: `ck_a` positions, `ck_v` momenta; `ck_x`'s last-leaf rows its
      position and momentum (`turning_dz`, `turning_dz_across`);
    * ``"momentum"``: `ck_a` the momentum sum *before* the checkpoint leaf (so the
      sub-subtree from slot `k` to this leaf sums to `psum - ck_a[k]`), `ck_v`
      velocities; `ck_x` the checkpoint leaf's momentum, then the last leaf's momentum
      and velocity (`turning_rho`, `turning_across`);
    * ``"position"``: `ck_a` positions, `ck_v` velocities, no checks across halves
      (`turning`); `ck_x` passed through.

    Returns `(psum, ck_a, ck_v, ck_x, running)`.
    """
    K = ck_a.shape[0]
    # slot k + 1 beside slot k (the last row wraps round and is masked out by `halves`)
    halves = check & torch.cat([check[1:], torch.zeros_like(check[:1])], 0)
    chk = check.unsqueeze(-1)
    if uturn == "displacement":
        ck_a = torch.where(store, z, ck_a)
        ck_v = torch.where(store, p, ck_v)
        z_last, p_last = ck_x[K:2 * K], ck_x[2 * K:]
        turns = turning_dz((z - ck_a) * direction, ck_v, p)
        z_n = torch.cat([ck_a[1:], ck_a[:1]], 0)
        p_n = torch.cat([ck_v[1:], ck_v[:1]], 0)
        across = turning_dz_across(z, p, ck_a, ck_v, z_n, p_n, z_last, p_last, direction)
        turns = (turns & check) | (across & halves)
        ck_x = torch.cat([ck_x[:K], torch.where(chk, z, z_last), torch.where(chk, p, p_last)],
                         0)
    elif uturn == "momentum":
        ck_a = torch.where(store, psum, ck_a)
        ck_v = torch.where(store, v, ck_v)
        p_ck = torch.where(store, p, ck_x[:K])
        p_last, v_last = ck_x[K:2 * K], ck_x[2 * K:]
        psum = psum + p
        rho = psum - ck_a
        turns = ((ck_v * rho).sum(-1) <= 0) | ((v * rho).sum(-1) <= 0)
        a_n = torch.cat([ck_a[1:], ck_a[:1]], 0)
        v_n = torch.cat([ck_v[1:], ck_v[:1]], 0)
        p_n = torch.cat([p_ck[1:], p_ck[:1]], 0)
        across = turning_across(v, psum, ck_a, ck_v, a_n, v_n, p_n, p_last, v_last)
        turns = (turns & check) | (across & halves)
        ck_x = torch.cat([p_ck, torch.where(chk, p, p_last), torch.where(chk, v, v_last)], 0)
    else:
        ck_a = torch.where(store, z, ck_a)
        ck_v = torch.where(store, v, ck_v)
        dz = (z - ck_a) * direction
        turns = (((dz * ck_v).sum(-1) < 0) | ((dz * v).sum(-1) < 0)) & check
    stop = div | turns.any(0)
    return psum, ck_a, ck_v, ck_x, running & ~stop


def _script(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.jit.script(fn)
    except Exception:  # pragma: no cover - depends on the PyTorch build
        return fn


class _Lazy:
    """Scripts every function on first use (keeps `import` cheap)."""

    _names = ("velocity", "kick_drift", "kick", "nuts_leaf", "turning", "turning_rho",
              "turning_across", "turning_dz", "turning_dz_across")

    def __init__(self):
        self._done = False

    def __getattr__(self, name):
        if name not in self._names:
            raise AttributeError(name)
        for n in self._names:
            self.__dict__[n] = _script(globals()[n])
        return self.__dict__[name]


#: the compiled functions: `fused.nuts_leaf(...)`, ...
fused = _Lazy()
