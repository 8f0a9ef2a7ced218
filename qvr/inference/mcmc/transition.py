"""Many NUTS transitions as one compiled call: no Python per leaf, none per iteration
(issue 24).

`nuts.py` builds the tree from Python, one batched leaf per call (`tick.py`), all chains
in lockstep through each subtree.  Here one transition is a single flat
`torch.while_loop` (`transition_function`) whose every pass is one leaf for every chain
that is still building, and in which each chain advances on its own: when a chain's
subtree ends (its `2^j` leaves are built, or a leaf diverged or turned) it is merged into
that chain's trajectory, the whole trajectory is checked for a U-turn and the chain's next
subtree starts at the next pass, whatever the other chains are doing.  A transition
costs the *longest* chain's leaves, not the sum of the slowest chain's subtrees as in
lockstep.  A block of up to `T` transitions (`block_function`) is an outer
`torch.while_loop` around it that records each transition and adapts: the driver gets
64 iterations from one call.

The algorithm is `nuts.py`'s exactly (multinomial, iterative, NumPyro's checkpoint
scheme; `transition="biased"` or ``"uniform"`` merges, ``"displacement"``,
``"momentum"`` or ``"position"`` U-turns), written with masks (`torch.where`) instead of
branches:

* per chain, the carried state is the subtree's depth `j` and leaf index `n`, a `done`
  flag, the trajectory's two ends, its proposal and log weight, the summed momenta
  `rho`, and the subtree's record (`tick.TickState`'s fields, the `(K, C, D)`
  checkpoint stacks included), packed into three tensors (`_Layout`: a loop pass
  allocates a buffer per carried tensor);
* the checkpoints a leaf stores and checks come from two tables indexed by `n`
  (`tick.checkpoint_masks` for every `n`), gathered per chain;
* the random numbers are drawn outside the loop: `(T, C, D)` momenta and a
  `(T, C, 2^K + 2K)` table of uniforms (per transition one per leaf, indexed by the
  chain's leaf count; one per subtree for its direction and one for its merge, indexed
  by `j`): the compiled code draws nothing, so it is deterministic and the same tables
  give the same draws whichever way the function runs (eagerly, or compiled; up to
  float rounding);
* warmup adaptation runs in the outer loop, per chain after each transition: dual
  averaging of the step size and the Welford mean and M2 of the positions in a slow
  window, exactly as `adaptation.DualAveraging` / `Welford`; a block never runs past
  the end of a slow window or of warmup, where the kernel sets the new metric and
  searches a step size in Python (`HMCBase._adapt_window`).

`transition_cache.compile_transition` exports `block_function` (`torch.export`, through
the density's FX graph as `transition_graph` rewrites it: the data lifted to inputs, the
linear-algebra error checks made NaN log densities) and builds it with AOTInductor into a
package whose loops are C++, kept on disk, or compiles it in a worker process while the
run goes on leaf by leaf (`transition_cache.BackgroundCompile`).

Measured (2-core x86 VM, one thread; eight schools, 4 chains): a pass costs ~30 us, of
which the arithmetic is a fraction; the rest is the C++ wrapper creating a tensor (handle
and allocation) for each of ~30 intermediate values and each carried input per pass
(glibc's allocator and c10's tensor creation lead a profile).  Inductor's stack
allocation would remove them but does not compile with a while loop in PyTorch 2.13 (the
wrapper assigns a stack tensor to a heap handle).  A flat block was tried and dropped:
one loop for all `T` transitions in which a chain starts its next transition as soon as
its last ends took 25-45% fewer passes, but its record, restart and adaptation ran on
every pass and made a pass ~2x dearer (eight schools 57 us against 31 us; a 10-D funnel
2.5x dearer per chain-leaf and 1.7x slower end to end).  So was a block of two nested
loops that restarts finished chains only when they have waited a set number of passes
(the restart outside the leaf loop, so a pass costs what it costs here; each chain's
draws the same as here): on the funnel, 4 x (1000 + 1000), passes fell 74.2 -> 62.6 per
iteration but a pass rose 34 -> 39 us with the restarts (4.85 s against 5.07 s, seed
0; eight schools 1.32 s against 1.28 s).  The bound is the chains' own spread: over the
funnel's 1,000 draws the busiest chain of each 64-draw block builds 58,256 leaves, a
transition's longest chain summed 72,679, the mean chain 29,232 — chains stay in the
neck or the mouth for many transitions, so no scheduling of chains that share a loop
comes near the mean.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from qvr.inference.mcmc import ops
from qvr.inference.mcmc.tick import checkpoint_masks


#: ``compiler="auto"`` compiles the whole transition for runs of at least this many
#: iterations (warmup + draws).  Re-costed for blocks (2-core VM): a cold compile costs
#: ~30-50 s once per model, a cached load under a second; the ticks cost ~0.3-0.5 ms per
#: batched leaf against ~30 us a pass, and a block has no Python per iteration (eight
#: schools, 4 x (200 + 200): ~3 s on ticks, ~0.3 s from the cache).  The rule looks at the
#: run's length only, never at the cache, so that a seeded run's draws do not depend on
#: what ran before it; 400 iterations keeps short exploratory runs off the compiler.
AUTO_MIN_ITERATIONS = 400


class TransitionOut(NamedTuple):
    """What one compiled transition returns, per chain (`C`)."""

    z: Tensor  # (C, D) the new position (the proposal)
    log_density: Tensor  # (C,)
    grad: Tensor  # (C, D)
    accept_prob: Tensor  # (C,) mean acceptance statistic over the leaves built
    diverged: Tensor  # (C,) bool
    num_steps: Tensor  # (C,) long: leaves built
    depth: Tensor  # (C,) long: tree depth
    energy: Tensor  # (C,) Hamiltonian at the proposal
    passes: Tensor  # () long: loop passes (batched density evaluations)


def mask_tables(K: int, device=None) -> tuple:
    """`(store, check)`: `(2^(K-1), K)` boolean tables, row `n` the checkpoint slot leaf
    `n` is stored in and the slots whose sub-subtrees end at leaf `n`."""
    rows = max(2 ** (K - 1), 1)
    store = torch.zeros(rows, K, dtype=torch.bool, device=device)
    check = torch.zeros(rows, K, dtype=torch.bool, device=device)
    for n in range(rows):
        s, c = checkpoint_masks(n, K, device)
        store[n], check[n] = s.view(K), c.view(K)
    return store, check


def table_width(K: int) -> int:
    """Uniforms per chain and transition: a leaf's `2^K - 1` at most, plus a direction
    and a merge per subtree (`transition_function`'s), plus the step size's jitter (the
    last column, `block_function`'s)."""
    return 2 ** K + 2 * K + 1


def transition_function(density: Callable, dense: bool, thr: float, uturn: str,
                        K: int, biased: bool, loop: Callable = None) -> Callable:
    """The NUTS transition as a function of tensors only:

        f(z0, lp0, g0, p0, inv, eps, u, store_tab, check_tab) -> TransitionOut fields

    `density(z)` returns raw `(grad, log_density)` (a compiled density: non-finite values
    are mapped here); `z0, g0, p0` are `(C, D)`, `lp0`, `eps` `(C,)`, `inv` the inverse
    mass matrices, `u` the `(C, table_width(K))` uniforms, the tables `mask_tables(K)`.
    `loop` is `torch.while_loop` (for compiling) or `eager_loop` (the default: Python).
    """
    loop = loop or eager_loop

    def velocity(inv, p):
        return ops.velocity(inv, p, dense)

    def f(z0, lp0, g0, p0, inv, eps, u, store_tab, check_tab):
        C, D = z0.shape
        dtype = z0.dtype
        h0 = -lp0 + 0.5 * (p0 * velocity(inv, p0)).sum(-1)
        lead = 2 ** K  # columns: leaves [0, 2^K), directions [2^K, 2^K + K), merges
        last_row = store_tab.shape[0] - 1
        zeros = torch.zeros(C, dtype=dtype, device=z0.device)
        izeros = torch.zeros(C, dtype=torch.long, device=z0.device)
        neg_inf = zeros - math.inf
        done = ~torch.isfinite(h0)
        # the first subtree's direction
        direction = torch.where(u[:, lead] < 0.5, -1.0, 1.0).to(dtype).unsqueeze(-1)
        state = dict(
            j=izeros, n=izeros, done=done,
            zl=z0, pl=p0, gl=g0,  # the backward end
            zr=z0, pr=p0, gr=g0,  # the forward end
            zp=z0, gp=g0, lpp=lp0, hp=h0,  # the proposal
            log_w=zeros,  # the trajectory's log weight (relative to H0)
            rho=p0,  # momenta summed over the trajectory
            depth=izeros,
            z=z0, p=p0, g=g0, lp=lp0,  # the last leaf of the subtree being built
            sum_acc=zeros, n_leaves=izeros, diverged=torch.zeros_like(done),
            sub_w=neg_inf, sz=z0, sg=g0, slp=lp0, sh=h0,  # the subtree's weight, proposal
            psum=torch.zeros_like(z0),
            ck_a=z0.new_zeros(K, C, D), ck_v=z0.new_zeros(K, C, D),  # checkpoints
            ck_x=z0.new_zeros(3 * K, C, D),
            direction=direction,  # (C, 1)
            passes=izeros)
        layout = _Layout(C, D, K)

        def cond(F, I, CK):
            return (I[:, _INTS.index("done")] == 0).any()

        def packed_body(F, I, CK):
            return layout.pack(body(**layout.unpack(F, I, CK)))

        def body(j, n, done, zl, pl, gl, zr, pr, gr, zp, gp, lpp, hp, log_w, rho, depth,
                 z, p, g, lp, sum_acc, n_leaves, diverged, sub_w, sz, sg, slp, sh, psum,
                 ck_a, ck_v, ck_x, direction, passes):
            # one pass: a leaf for every chain still building (named tensors in and out)
            live = ~done
            lcol = live.unsqueeze(-1)
            step = eps.unsqueeze(-1) * direction
            # ---- the leaf (as tick.leaf_function with raw=True)
            u_leaf = torch.gather(u, 1, n_leaves.clamp(max=lead - 1).unsqueeze(-1)).squeeze(-1)
            z1, p_half = ops.kick_drift(z, p, g, step, inv, dense)
            g1, lp1 = density(z1)
            lp1 = torch.nan_to_num(lp1, nan=-math.inf, posinf=-math.inf)
            g1 = torch.nan_to_num(g1, nan=0.0, posinf=0.0, neginf=0.0)
            (p1, v, sum_acc, n_leaves, diverged, div, sub_w, sz, sg, slp,
             sh) = ops.nuts_leaf(z1, p_half, lp1, g1, step, inv, dense, h0, thr, live,
                                 sum_acc, n_leaves, diverged, sub_w, sz, sg, slp, sh,
                                 torch.log(u_leaf))
            z = torch.where(lcol, z1, z)
            p = torch.where(lcol, p1, p)
            g = torch.where(lcol, g1, g)
            lp = torch.where(live, lp1, lp)
            # ---- the checkpoints of leaf n and the U-turns of the sub-subtrees ending here
            row = n.clamp(max=last_row)
            store = (store_tab[row] & lcol).t().unsqueeze(-1)  # (K, C, 1)
            check = check_tab[row].t()  # (K, C)
            psum, ck_a, ck_v, ck_x, still = ops.uturn_update(
                z, p, v, div, live, psum, ck_a, ck_v, ck_x, store, check, direction,
                uturn)
            n = n + live.to(n.dtype)
            # ---- a subtree that ended is merged into its chain's trajectory
            ended = live & ((n >= torch.ones_like(j) << j) | ~still)
            completed = ended & still
            u_merge = torch.gather(u, 1, (lead + K + j).clamp(max=lead + 2 * K - 1)
                                   .unsqueeze(-1)).squeeze(-1)
            new_log_w = torch.logaddexp(log_w, sub_w)
            against = log_w if biased else new_log_w
            take = completed & (torch.log(u_merge) < sub_w - against)
            tcol = take.unsqueeze(-1)
            zp = torch.where(tcol, sz, zp)
            gp = torch.where(tcol, sg, gp)
            lpp = torch.where(take, slp, lpp)
            hp = torch.where(take, sh, hp)
            log_w = torch.where(completed, new_log_w, log_w)
            fwd = direction.squeeze(-1) > 0
            # the old trajectory's end beside the subtree, and its other end
            p_near = torch.where(direction > 0, pr, pl)
            p_far = torch.where(direction > 0, pl, pr)
            z_near = torch.where(direction > 0, zr, zl)
            z_far = torch.where(direction > 0, zl, zr)
            right = (completed & fwd).unsqueeze(-1)
            left = (completed & ~fwd).unsqueeze(-1)
            zr, pr, gr = torch.where(right, z, zr), torch.where(right, p, pr), \
                torch.where(right, g, gr)
            zl, pl, gl = torch.where(left, z, zl), torch.where(left, p, pl), \
                torch.where(left, g, gl)
            j = j + ended.to(j.dtype)
            depth = torch.where(ended, j, depth)
            if uturn == "displacement":
                # the whole trajectory, then Stan's checks across the merge (as
                # `NUTSKernel._build`): the old trajectory with the subtree's first leaf
                # (checkpoint slot 0), its end beside the subtree with the subtree
                turned = ops.turning_dz(zr - zl, pl, pr) \
                    | ops.turning_dz((ck_a[0] - z_far) * direction, p_far, ck_v[0]) \
                    | ops.turning_dz((z - z_near) * direction, p_near, p)
            elif uturn == "momentum":  # as above, on summed momenta
                p_first = ck_x[0]
                rho_new = rho + psum
                turned = ops.turning_rho(velocity(inv, pr), rho_new, velocity(inv, pl)) \
                    | ops.turning_rho(velocity(inv, p_first), rho + p_first,
                                      velocity(inv, p_far)) \
                    | ops.turning_rho(velocity(inv, p), psum + p_near, velocity(inv, p_near))
                rho = torch.where(completed.unsqueeze(-1), rho_new, rho)
            else:
                dz = zr - zl
                turned = ((dz * velocity(inv, pl)).sum(-1) < 0) | \
                    ((dz * velocity(inv, pr)).sum(-1) < 0)
            done = done | (ended & (~completed | turned | (j >= K)))
            # ---- the next subtree of a chain whose subtree ended and that goes on
            start = ended & ~done
            scol = start.unsqueeze(-1)
            u_dir = torch.gather(u, 1, (lead + j).clamp(max=lead + 2 * K - 1)
                                 .unsqueeze(-1)).squeeze(-1)
            new_dir = torch.where(u_dir < 0.5, -1.0, 1.0).to(dtype).unsqueeze(-1)
            direction = torch.where(scol, new_dir, direction)
            nfwd = direction > 0
            z = torch.where(scol, torch.where(nfwd, zr, zl), z)
            p = torch.where(scol, torch.where(nfwd, pr, pl), p)
            g = torch.where(scol, torch.where(nfwd, gr, gl), g)
            sub_w = torch.where(start, neg_inf, sub_w)
            psum = torch.where(scol, torch.zeros_like(psum), psum)
            n = torch.where(start, torch.zeros_like(n), n)
            return dict(j=j, n=n, done=done, zl=zl, pl=pl, gl=gl, zr=zr, pr=pr, gr=gr, zp=zp,
                        gp=gp, lpp=lpp, hp=hp, log_w=log_w, rho=rho, depth=depth, z=z, p=p,
                        g=g, lp=lp, sum_acc=sum_acc, n_leaves=n_leaves, diverged=diverged,
                        sub_w=sub_w, sz=sz, sg=sg, slp=slp, sh=sh, psum=psum, ck_a=ck_a,
                        ck_v=ck_v, ck_x=ck_x, direction=direction, passes=passes + 1)

        out = layout.unpack(*loop(cond, packed_body, layout.pack(state)))
        zp, gp, lpp, hp, depth = out["zp"], out["gp"], out["lpp"], out["hp"], out["depth"]
        sum_acc, n_leaves, diverged = out["sum_acc"], out["n_leaves"], out["diverged"]
        passes = out["passes"][0]
        accept_prob = sum_acc / n_leaves.clamp(min=1).to(dtype)
        return zp, lpp, gp, accept_prob, diverged, n_leaves, depth, hp, passes

    return f


#: the carried state, packed into three tensors (a loop pass allocates a buffer per
#: carried tensor: 33 separate tensors cost ~25 us a pass in allocations alone)
_VECTORS = ("zl", "pl", "gl", "zr", "pr", "gr", "zp", "gp", "rho", "z", "p", "g", "sz",
            "sg", "psum")  # (C, D) each
_SCALARS = ("lpp", "hp", "log_w", "lp", "sum_acc", "sub_w", "slp", "sh")  # (C,) each
_INTS = ("j", "n", "depth", "n_leaves", "done", "diverged", "passes")  # (C,) long each
_BOOLS = ("done", "diverged")


class _Layout:
    """Packs the named state into `F` (C, 15 D + 9) floats (the `direction` column
    last), `I` (C, 7) longs and `CK` (5K, C, D) checkpoints (`ck_a`, `ck_v`, `ck_x`), and
    unpacks it (views)."""

    def __init__(self, C: int, D: int, K: int):
        self.C, self.D, self.K = C, D, K

    def pack(self, s: dict) -> tuple:
        F = torch.cat([s[k] for k in _VECTORS] + [s[k].unsqueeze(-1) for k in _SCALARS]
                      + [s["direction"]], -1)
        I = torch.stack([s[k].to(torch.long) if k in _BOOLS else s[k] for k in _INTS], -1)
        if I.shape[0] != self.C:  # pragma: no cover - shapes are fixed by construction
            raise ValueError("bad state")
        CK = torch.cat([s["ck_a"], s["ck_v"], s["ck_x"]], 0)
        return F, I, CK

    def unpack(self, F, I, CK) -> dict:
        D, K = self.D, self.K
        out = {k: F[:, i * D:(i + 1) * D] for i, k in enumerate(_VECTORS)}
        base = len(_VECTORS) * D
        out.update({k: F[:, base + i] for i, k in enumerate(_SCALARS)})
        out["direction"] = F[:, base + len(_SCALARS):base + len(_SCALARS) + 1]
        out.update({k: (I[:, i] != 0) if k in _BOOLS else I[:, i]
                    for i, k in enumerate(_INTS)})
        out["ck_a"], out["ck_v"], out["ck_x"] = CK[:K], CK[K:2 * K], CK[2 * K:]
        return out


class BlockOut(NamedTuple):
    """What `block_function` returns (`C` chains, `T` transitions at most)."""

    z: Tensor  # (C, D) the position after the last transition
    log_density: Tensor  # (C,)
    grad: Tensor  # (C, D)
    rec: Tensor  # (T, C, 2 D + 6): per transition z, log density, acceptance statistic,
    #              energy, diverged, leaves, depth (see `REC_COLUMNS`), then the gradient
    #              at z (for the Fisher metric adaptation); rows >= limit zero
    da: Tensor  # (C, 6) dual averaging: log step, log averaged step, h-bar, mu, updates,
    #            updates in the average
    eps: Tensor  # (C,) the step size after the block (changed only by dual averaging)
    welford: Tensor  # (C, D + M) running mean and M2 (M = D, or D * D when dense)
    welford_n: Tensor  # (C,) positions folded in
    passes: Tensor  # () long: loop passes (batched density evaluations)


#: the columns of a block's record after the `D` position columns (the `D` gradient
#: columns follow them)
REC_COLUMNS = ("log_density", "accept_prob", "energy", "diverged", "num_steps", "depth")


def idle_adaptation(C: int, D: int, dense: bool, dtype, device) -> list:
    """`block_function`'s adaptation inputs that adapt nothing (dual averaging and the
    Welford window both empty)."""
    M = D * D if dense else D
    return [torch.zeros(C, 6, dtype=dtype, device=device),
            torch.zeros(C, D + M, dtype=dtype, device=device),
            torch.zeros(C, dtype=dtype, device=device),
            torch.tensor([0, 0, 0, -1], dtype=torch.long, device=device),
            torch.tensor([0.8, 0.05, 10.0, 0.75, 0.0], dtype=dtype, device=device)]


def block_function(density: Callable, dense: bool, thr: float, uturn: str, K: int,
                   biased: bool, loop: Callable = None) -> Callable:
    """Up to `T` NUTS transitions as one loop (many transitions per call):

        f(z0, lp0, g0, inv, eps, P, U, limit, store_tab, check_tab,
          da, welford, welford_n, sched, hyper) -> BlockOut fields

    `P` `(T, C, D)` are the momenta and `U` `(T, C, table_width(K))` the uniforms of
    each transition, drawn outside; `limit` (a long scalar, `<= T`) the transitions to
    run.  An outer loop over the transitions runs `transition_function`'s loop (a leaf per
    pass for every chain still building) for each, writes its row of the record, and
    adapts, per chain (the run's iteration `sched[0] + t`): dual averaging (Hoffman &
    Gelman's Algorithm 5, as `adaptation.DualAveraging`; `da` `(C, 6)`: log step, log
    averaged step, h-bar, mu, updates, updates in the average; `hyper`: target, gamma,
    t0, kappa, and the step's jitter) while the iteration is below `sched[1]`, the next
    transition then using `exp(log step)`; the Welford mean and M2 of the positions (as `adaptation.Welford`)
    while it is within `[sched[2], sched[3]]`. What happens at a window's end (a new
    metric, a step-size search) is the caller's: a block never runs past one.  Each
    transition steps by `eps * (1 + jitter * (2 u - 1))` (`hyper[4]` the jitter, `u` the
    last column of its row of `U`), as `NUTSKernel`'s ticks; dual averaging adapts the
    unjittered step.
    """
    loop = loop or eager_loop
    one = transition_function(density, dense, thr, uturn, K, biased, loop)

    def f(z0, lp0, g0, inv, eps0, P, U, limit, store_tab, check_tab, da, wf, wn, sched,
          hyper):
        T, C, D = P.shape
        M = wf.shape[1] - D
        dtype, device = z0.dtype, z0.device
        b = 3 * D + M  # F: z, grad, Welford mean and M2, then the scalars below
        F0 = torch.cat([z0, g0, wf, lp0.unsqueeze(-1), eps0.unsqueeze(-1), da,
                        wn.unsqueeze(-1)], -1)
        I0 = torch.zeros(2, dtype=torch.long, device=device)  # t, passes
        R0 = z0.new_zeros(T, C, 2 * D + len(REC_COLUMNS))

        def cond(F, I, R):
            return I[0] < limit

        def body(F, I, R):
            t = I[0]
            z, g = F[:, :D], F[:, D:2 * D]
            wmean, wm2 = F[:, 2 * D:3 * D], F[:, 3 * D:b]
            lp, eps = F[:, b], F[:, b + 1]
            log_step, log_avg, h_bar, mu, da_t, da_ta, n = (F[:, b + 2 + i] for i in range(7))
            row = t.reshape(1)
            u_t = U.index_select(0, row).squeeze(0)
            jitter = hyper[4]
            zp, lpp, gp, acc, div, leaves, depth, hp, passes = one(
                z, lp, g, P.index_select(0, row).squeeze(0), inv,
                eps * (1.0 + jitter * (2.0 * u_t[:, -1] - 1.0)), u_t, store_tab, check_tab)
            line = torch.cat([zp, lpp.unsqueeze(-1), acc.unsqueeze(-1), hp.unsqueeze(-1),
                              div.to(dtype).unsqueeze(-1), leaves.to(dtype).unsqueeze(-1),
                              depth.to(dtype).unsqueeze(-1), gp], -1)
            rows = torch.arange(T, device=device).view(T, 1, 1)
            R = torch.where(rows == t, line.unsqueeze(0), R)
            i0, w_da, lo, hi = sched.unbind()
            target, gamma, t0, kappa = hyper[0], hyper[1], hyper[2], hyper[3]
            it = i0 + t
            # dual averaging (adaptation.DualAveraging.update)
            on = it < w_da
            stat = torch.where(torch.isfinite(acc), acc, torch.zeros_like(acc)).clamp(0.0, 1.0)
            tt = da_t + 1.0
            w = 1.0 / (tt + t0)
            h_new = (1.0 - w) * h_bar + w * (target - stat)
            ls_new = mu - torch.sqrt(tt) / gamma * h_new
            eta = torch.pow(da_ta + 1.0, -kappa)
            avg_new = eta * ls_new + (1.0 - eta) * log_avg
            h_bar = torch.where(on, h_new, h_bar)
            log_step = torch.where(on, ls_new, log_step)
            log_avg = torch.where(on, avg_new, log_avg)
            da_t = torch.where(on, tt, da_t)
            da_ta = torch.where(on, da_ta + 1.0, da_ta)
            eps = torch.where(on, torch.exp(ls_new), eps)
            # the Welford window (adaptation.Welford.update)
            won = (lo <= it) & (it <= hi)
            n1 = n + 1.0
            delta = zp - wmean
            mean_new = wmean + delta / n1.unsqueeze(-1)
            delta2 = zp - mean_new
            if M == D:
                m2_new = wm2 + delta * delta2
            else:
                m2_new = wm2 + (delta.unsqueeze(-1) * delta2.unsqueeze(-2)).reshape(C, M)
            wmean = torch.where(won, mean_new, wmean)
            wm2 = torch.where(won, m2_new, wm2)
            n = torch.where(won, n1, n)
            F = torch.cat([zp, gp, wmean, wm2] + [v.unsqueeze(-1) for v in (
                lpp, eps, log_step, log_avg, h_bar, mu, da_t, da_ta, n)], -1)
            return F, torch.stack([t + 1, I[1] + passes]), R

        F, I, R = loop(cond, body, (F0, I0, R0))
        return (F[:, :D], F[:, b], F[:, D:2 * D], R, F[:, b + 2:b + 8], F[:, b + 1],
                F[:, 2 * D:b], F[:, b + 8], I[1])

    return f


def eager_loop(cond, body, carry):
    """`torch.while_loop`'s semantics in plain Python (the reference the compiled
    function is checked against, and the path when no compiler is wanted)."""
    carry = tuple(carry)
    while bool(cond(*carry)):
        carry = tuple(body(*carry))
    return carry


def block_size(C: int, D: int, K: int) -> int:
    """Transitions per compiled call (`T`, fixed by the shapes so that a seeded run's
    draws never depend on timing): up to 64, fewer when the record each transition
    rewrites (`T x C x (2 D + 6)` values) or the uniform table (`T x C x table_width(K)`)
    grows large; a call of 64 eight-schools transitions takes a few milliseconds, of 64 GARCH
    ones about a second (the driver's progress, draws and stop checks come between
    calls)."""
    per = C * (2 * D + len(REC_COLUMNS))
    return int(max(1, min(64, 8192 // per, (1 << 20) // (C * table_width(K)))))


class CompiledTransition:
    """A compiled block of transitions for fixed shapes (an AOTInductor package loaded in
    this process): `ct(z0, lp0, g0, inv, eps, P, U, limit, da, welford, welford_n,
    sched, hyper) -> BlockOut` (`block_function`'s inputs without the mask tables; the
    density's data, `consts`, are passed after them: `lift_constants`)."""

    def __init__(self, runner, K: int, T: int, device, seconds: float, cached: bool,
                 consts=()):
        self._run = runner
        # the package's loader called with the flat list of tensors: the public wrapper
        # parses its input and output tree specs from JSON at every call (~100 us of a
        # ~1 ms eight-schools iteration); the outputs are a flat tuple here anyway
        loader = getattr(runner, "loader", None)
        boxed = getattr(loader, "boxed_run", None)
        if callable(boxed):
            self._run = lambda *args: boxed(list(args))
        self.K, self.T = K, T
        self.store_tab, self.check_tab = mask_tables(K, device)
        self.seconds = seconds  # what compiling (or loading) took
        self.cached = cached  # loaded from the disk cache
        self.consts = list(consts)  # this target's data (the package's last inputs)

    def __call__(self, z0, lp0, g0, inv, eps, P, U, limit, da, wf, wn, sched,
                 hyper) -> BlockOut:
        return BlockOut(*self._run(z0, lp0, g0, inv, eps, P, U, limit, self.store_tab,
                                   self.check_tab, da, wf, wn, sched, hyper, *self.consts))


def blocks_agree(want: BlockOut, got: BlockOut) -> bool:
    """Whether two runs of a block agree: the same passes, leaves, depths and divergences
    exactly, every float within float32 rounding accumulated over a trajectory (a
    63-leaf eight-schools trajectory differs by ~3e-5 between PyTorch and the compiled
    loop: `tick._agree`'s 1e-5 is for a single leaf)."""
    if int(want.passes) != int(got.passes):
        return False
    D = want.z.shape[-1]
    exact = slice(D + 3, D + len(REC_COLUMNS))  # diverged, leaves, depth
    if not torch.equal(want.rec[..., exact], got.rec[..., exact]):
        return False
    for a, b in zip(want, got):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return False
            continue
        fa, fb = torch.isfinite(a), torch.isfinite(b)
        if not torch.equal(fa, fb) or not torch.equal(a[~fa], b[~fb]):
            return False
        if not torch.allclose(a[fa], b[fb], rtol=1e-3, atol=1e-4):
            return False
    return True


def example_inputs(density, z0: Tensor, dense: bool, K: int, T: int, seed: int = 5,
                   limit: int = None) -> list:
    """Representative `block_function` inputs at `z0`: momenta, step sizes, uniforms and
    a warmup's adaptation state from a fixed generator (for tracing and checking)."""
    C, D = z0.shape
    dtype, device = z0.dtype, z0.device
    gen = torch.Generator(device=device).manual_seed(seed)
    g0, lp0 = density(z0)
    g0 = torch.nan_to_num(g0).detach().clone()
    lp0 = torch.nan_to_num(lp0).detach().clone()
    P = torch.randn(T, C, D, generator=gen, dtype=dtype, device=device)
    inv = (torch.eye(D, dtype=dtype, device=device).expand(C, D, D).clone() if dense
           else torch.ones(C, D, dtype=dtype, device=device))
    eps = torch.full((C,), 0.1, dtype=dtype, device=device)
    U = torch.rand(T, C, table_width(K), generator=gen, dtype=dtype, device=device)
    store, check = mask_tables(K, device)
    da, wf, wn, _, hyper = idle_adaptation(C, D, dense, dtype, device)
    hyper[4] = 0.1  # a jittered step, as NUTS's default
    da[:, 0] = math.log(0.1)
    da[:, 3] = math.log(1.0)
    limit = T if limit is None else limit
    # dual averaging for the whole block, the Welford window from its second transition
    sched = torch.tensor([3, 3 + T, 4, 3 + T], dtype=torch.long, device=device)
    return [z0.detach().clone(), lp0, g0, inv, eps, P, U,
            torch.tensor(limit, dtype=torch.long, device=device), store, check, da, wf, wn,
            sched, hyper]
