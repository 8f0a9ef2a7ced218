"""Stan's five checks of an MCMC run (`mcmc_checks`), each a `Check` the Results pane
shows green, red or grey (the record cannot tell).  Torch-free.

Thresholds (Stan's ``diagnose``/``check_hmc_diagnostics`` and Vehtari et al. 2021): no
divergent transition after warmup; rank-normalised split R-hat ≤ 1.01 for every
coordinate; bulk and tail ESS ≥ 100 per chain (so ≥ 100·chains) for every coordinate;
tree-depth saturation: no draw at the maximum depth (share 0 %: a single hit means the
sampler was cut short, so the check is red); E-BFMI ≥ 0.3 for every chain.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from qvr.inference.criticism.diagnostics import EBFMI_MIN, ESS_PER_CHAIN, RHAT_MAX, e_bfmi
from qvr_tui.results_data import Results, nanmin

__all__ = ["Check", "mcmc_checks", "RHAT_MAX", "ESS_PER_CHAIN", "EBFMI_MIN",
           "TREE_DEPTH_SHARE_MAX"]

TREE_DEPTH_SHARE_MAX = 0.0  # share of draws at the maximum tree depth above which it is red


@dataclass(frozen=True)
class Check:
    """One of the five MCMC checks. `ok` is None when the record cannot tell (n/a)."""

    key: str            # "divergences", "r_hat", "ess", "tree_depth", "e_bfmi"
    name: str           # shown: "Divergences"
    ok: Optional[bool]
    value: str          # shown, short: "0/120", "1.044", "78/30"
    threshold: str      # shown: "= 0", "≤ 1.01"
    per_chain: tuple = ()   # the per-chain numbers behind `value`, when per chain
    detail: str = ""    # a longer line (worst coordinate, per-chain values)

    @property
    def colour(self) -> str:
        return "grey" if self.ok is None else ("green" if self.ok else "red")



def mcmc_checks(res: Results, sampling_progress: dict, config: dict) -> tuple:
    """Stan's five checks of an MCMC run (thresholds in the module docstring)."""
    C = res.num_chains or 1
    N = res.num_draws
    st = res.stats
    ss = res.sample_stats
    # the sampler's checks are about the sites: recorded quantities (functions of them,
    # possibly constant) have their own R-hat and ESS in the table, not in the checks
    sites = tuple(s for s in res.sites if not s.recorded)
    checks = []
    # 1. divergences after warmup
    if "diverging" in ss:
        per = tuple(int(x) for x in np.asarray(ss["diverging"]).astype(bool).sum(axis=1))
    elif st.get("divergence_counts") is not None:
        per = tuple(int(x) for x in st["divergence_counts"])
    elif sampling_progress:
        per = tuple(int(sampling_progress[c].get("divergences", 0))
                    for c in sorted(sampling_progress))
    else:
        per = ()
    if per:
        total = sum(per)
        checks.append(Check("divergences", "Divergences", total == 0,
                            f"{total}/{C * N}" if N else f"{total}", "= 0", per,
                            "divergent draws after warmup per chain: "
                            + ", ".join(map(str, per))))
    else:
        checks.append(Check("divergences", "Divergences", None, "n/a", "= 0"))
    # 2. R-hat
    rh = [c.get("r_hat") for s in sites for c in s.coords]
    if rh:
        arr = np.array(rh, dtype=float)
        worst = float("inf") if np.isnan(arr).any() else float(arr.max())
        worst_label = _worst_label(sites, "r_hat", largest=True)
        checks.append(Check("r_hat", "R-hat", bool(worst <= RHAT_MAX),
                            f"{worst:.3f}" if math.isfinite(worst) else "n/a",
                            f"≤ {RHAT_MAX}", (),
                            f"worst R-hat: {worst_label}" if worst_label else ""))
    else:
        checks.append(Check("r_hat", "R-hat", None, "n/a", f"≤ {RHAT_MAX}"))
    # 3. bulk and tail ESS
    need = ESS_PER_CHAIN * C
    eb = [c.get("ess_bulk") for s in sites for c in s.coords]
    et = [c.get("ess_tail") for s in sites for c in s.coords]
    if eb:
        b, t = nanmin(np.array(eb)), nanmin(np.array(et))
        ok = bool(not math.isnan(b) and not math.isnan(t) and b >= need and t >= need
                  and not np.isnan(np.array(eb + et, dtype=float)).any())
        checks.append(Check("ess", "ESS (b/t)", ok,
                            f"{_fmt0(b)}/{_fmt0(t)}",
                            f"≥ {need:.0f}", (b / C, t / C),
                            f"lowest bulk ESS {_fmt0(b)} ({_worst_label(sites, 'ess_bulk', False)}), "
                            f"tail {_fmt0(t)} ({_worst_label(sites, 'ess_tail', False)}); "
                            f"need {ESS_PER_CHAIN:.0f} per chain × {C} chains"))
    else:
        checks.append(Check("ess", "ESS (b/t)", None, "n/a",
                            f"≥ {ESS_PER_CHAIN * C:.0f}"))
    # 4. tree-depth saturation (NUTS only)
    if res.method == "nuts":
        max_depth = int(st.get("max_tree_depth") or config.get("max_tree_depth") or 10)
        if "tree_depth" in ss:
            td = np.asarray(ss["tree_depth"])
            hits = tuple(int(x) for x in (td >= max_depth).sum(axis=1))
        elif sampling_progress:
            hits = tuple(int(sampling_progress[c].get("max_depth_hits", 0))
                         for c in sorted(sampling_progress))
        elif st.get("max_depth_hits") is not None:
            hits = (int(st["max_depth_hits"]),)
        else:
            hits = ()
        if hits and N:
            share = sum(hits) / (C * N)
            checks.append(Check("tree_depth", "Tree depth", share <= TREE_DEPTH_SHARE_MAX,
                                f"{100 * share:.1f}%",
                                f"= {100 * TREE_DEPTH_SHARE_MAX:.0f}%", hits,
                                f"draws at the maximum tree depth {max_depth} per chain: "
                                + ", ".join(map(str, hits))))
        else:
            checks.append(Check("tree_depth", "Tree depth", None, "n/a",
                                f"= {100 * TREE_DEPTH_SHARE_MAX:.0f}%"))
    else:
        checks.append(Check("tree_depth", "Tree depth", None, "n/a", "NUTS only"))
    # 5. E-BFMI per chain
    if st.get("e_bfmi") is not None:  # what the sampler reported
        bf = tuple(float(x) for x in st["e_bfmi"])
    elif "energy" in ss:
        bf = tuple(e_bfmi(np.asarray(ss["energy"])))
    else:
        bf = ()
    # a chain with too few draws to tell (a cut-short run) is NaN: judge the others
    told = [b for b in bf if not math.isnan(b)]
    if told:
        worst = min(told)
        checks.append(Check("e_bfmi", "E-BFMI", bool(all(b >= EBFMI_MIN for b in told)),
                            f"{worst:.2f}", f"≥ {EBFMI_MIN}", bf,
                            "E-BFMI per chain: " + ", ".join(f"{b:.3f}" for b in bf)))
    else:
        checks.append(Check("e_bfmi", "E-BFMI", None, "n/a", f"≥ {EBFMI_MIN}"))
    return tuple(checks)


def _fmt0(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.0f}"


def _worst_label(sites, key: str, largest: bool) -> str:
    best, label = None, ""
    for s in sites:
        for c in s.coords:
            v = c.get(key)
            if math.isnan(v):
                return c.label
            if best is None or (v > best if largest else v < best):
                best, label = v, c.label
    return label



def _fmt0(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.0f}"


def _worst_label(sites, key: str, largest: bool) -> str:
    best, label = None, ""
    for s in sites:
        for c in s.coords:
            v = c.get(key)
            if math.isnan(v):
                return c.label
            if best is None or (v > best if largest else v < best):
                best, label = v, c.label
    return label
