"""Convergence diagnostics and summaries of MCMC draws (numpy; vectorised over parameters).

Draws are arrays of shape `(chains, draws, *param_shape)`.

* `split_rhat_basic`, `ess_basic` — the formulas of runtime spec 6.6.2 (what
  `MCMCResult.r_hat` / `.ess` hold): split-R-hat from within/between variances, and an
  FFT autocovariance ESS summing positive pairs of autocorrelations.
* `split_rhat` — rank-normalised split-R-hat, the maximum of the bulk (rank-normalised)
  and tail (rank-normalised folded) values; `ess_bulk` — ESS of the rank-normalised split
  chains; `ess_tail` — the smaller ESS of the 5% and 95% quantile indicators; `ess_mean`
  and `mcse_mean` for the mean.  These follow Vehtari et al. (2021) with Geyer's initial
  monotone sequence, as Stan and ArviZ do.
* `summary(draws)` — a `Summary` table (mean, sd, 5/50/95% quantiles, MCSE, bulk and
  tail ESS, R-hat) per scalar coordinate, printable, and one row per site folded from all
  its coordinates (`Summary.sites`: shape, range of the means, worst ESS and R-hat).
* `to_arviz(result)` — an ArviZ `InferenceData`/`DataTree` when ArviZ is installed;
  `run_to_arviz(run)` — a run record as an `arviz_base` `DataTree` (posterior, sample
  statistics, log-likelihood, predictive replicates, observed data).

Why our own code rather than a library: ArviZ's statistics (`arviz-stats`) need scipy and,
on Python 3.11, resolve to a pre-1.0 API; the formulas are short and are checked against
textbook cases (and against `arviz_stats` when it is importable) in the tests.

References:
  Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), Rank-normalization, folding, and
  localization: an improved R-hat for assessing convergence of MCMC, Bayesian Analysis.
  Geyer (1992), Practical Markov chain Monte Carlo, Statistical Science.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from qvr.runs.layout import RECORDED_PREFIX


# ---------------------------------------------------------------- helpers


def _as_chains(x) -> np.ndarray:
    """`(chains, draws, *shape)` -> float64 `(P, chains, draws)` with P = prod(shape)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    m, n = a.shape[:2]
    return np.moveaxis(a.reshape(m, n, -1), -1, 0)


def _param_shape(x) -> tuple:
    a = np.asarray(x)
    return tuple(a.shape[2:]) if a.ndim >= 2 else ()


def _split(a: np.ndarray) -> np.ndarray:
    """`(P, m, n)` -> `(P, 2m, n//2)`: first and second halves of every chain."""
    h = a.shape[-1] // 2
    return np.concatenate([a[..., :h], a[..., a.shape[-1] - h:]], axis=1) if h else a[..., :0]


def _autocov(a: np.ndarray) -> np.ndarray:
    """Biased autocovariance (divided by n) along the last axis, by FFT."""
    n = a.shape[-1]
    size = 1 << max(1, (2 * n - 1).bit_length())
    c = a - a.mean(-1, keepdims=True)
    f = np.fft.rfft(c, n=size)
    acov = np.fft.irfft(f * np.conjugate(f), n=size)[..., :n]
    return acov / n


def _ndtri(p: np.ndarray) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is None:  # a torch-free process (the dashboard's UI): Wichura's AS241
        return _ndtri_as241(np.asarray(p, dtype=np.float64))
    return torch.special.ndtri(torch.from_numpy(np.asarray(p, dtype=np.float64))).numpy()


def _poly(coefs, r):
    out = np.zeros_like(r)
    for c in coefs:
        out = out * r + c
    return out


# Wichura (1988), Algorithm AS241 (PPND16): the normal quantile to about 1e-16 (the
# coefficients of CPython's statistics.NormalDist.inv_cdf), highest degree first
_AS241 = {
    "a": (2.5090809287301226727e+3, 3.3430575583588128105e+4, 6.7265770927008700853e+4,
          4.5921953931549871457e+4, 1.3731693765509461125e+4, 1.9715909503065514427e+3,
          1.3314166789178437745e+2, 3.3871328727963666080e+0),
    "b": (5.2264952788528545610e+3, 2.8729085735721942674e+4, 3.9307895800092710610e+4,
          2.1213794301586595867e+4, 5.3941960214247511077e+3, 6.8718700749205790830e+2,
          4.2313330701600911252e+1, 1.0),
    "c": (7.7454501427834140764e-4, 2.2723844989269184583e-2, 2.4178072517745061177e-1,
          1.2704582524523683826e+0, 3.6478483247632046050e+0, 5.7694972214606914055e+0,
          4.6303378461565452959e+0, 1.4234371107496835773e+0),
    "d": (1.0507500716444168432e-9, 5.4759380849953449460e-4, 1.5198666563616457197e-2,
          1.4810397642748007459e-1, 6.8976733498510000455e-1, 1.6763848301838038494e+0,
          2.0531916266377588219e+0, 1.0),
    "e": (2.0103343992922881327e-7, 2.7115555687434875782e-5, 1.2426609473880784386e-3,
          2.6532189526576123093e-2, 2.9656057182850489123e-1, 1.7848265399172913358e+0,
          5.4637849111641143699e+0, 6.6579046435011037772e+0),
    "f": (2.0442631033899397856e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5,
          7.8686913114561325910e-4, 1.4875361290850614853e-2, 1.3692988092273580531e-1,
          5.9983220655588793769e-1, 1.0),
}


def _ndtri_as241(p: np.ndarray) -> np.ndarray:
    q = p - 0.5
    out = np.empty_like(p)
    central = np.abs(q) <= 0.425
    r = 0.180625 - q[central] ** 2
    out[central] = q[central] * _poly(_AS241["a"], r) / _poly(_AS241["b"], r)
    tail = ~central
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(-np.log(np.where(q[tail] <= 0.0, p[tail], 1.0 - p[tail])))
    near = r <= 5.0
    x = np.where(near, _poly(_AS241["c"], r - 1.6) / _poly(_AS241["d"], r - 1.6),
                 _poly(_AS241["e"], r - 5.0) / _poly(_AS241["f"], r - 5.0))
    out[tail] = np.where(q[tail] < 0.0, -x, x)
    return out


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) over the last two axes of `(P, m, n)`."""
    P = a.shape[0]
    flat = a.reshape(P, -1)
    S = flat.shape[1]
    order = np.argsort(flat, axis=1)  # ties get their mean rank below: no stable sort needed
    sorted_vals = np.take_along_axis(flat, order, axis=1)
    ranks_sorted = np.broadcast_to(np.arange(1, S + 1, dtype=np.float64), (P, S)).copy()
    # average ties: a run of equal values gets the run's mean rank.  Vectorised over the
    # rows (runs numbered over the flattened rows, each row starting a new run): folded
    # draws tie in nearly every row (the two draws either side of an even-sized median),
    # and a loop over the rows cost seconds for a few thousand coordinates
    if S > 1:
        new = np.ones((P, S), dtype=bool)
        new[:, 1:] = sorted_vals[:, 1:] != sorted_vals[:, :-1]
        if not new.all():
            run = np.cumsum(new.ravel()) - 1
            mean_rank = np.bincount(run, weights=ranks_sorted.ravel()) / np.bincount(run)
            ranks_sorted = mean_rank[run].reshape(P, S)
    ranks = np.empty_like(ranks_sorted)
    np.put_along_axis(ranks, order, ranks_sorted, axis=1)
    return ranks.reshape(a.shape)


def _rank_normalize(a: np.ndarray) -> np.ndarray:
    """`ndtri((rank - 3/8) / (S + 1/4))` of each draw (Vehtari et al. 2021).  An average
    rank over ties is always a whole or half number (the mean of consecutive integers), so
    `ndtri` is evaluated once per possible rank (2S - 1 values) and looked up: the same
    numbers, without evaluating it for every draw of every coordinate (most of the cost
    of a summary of thousands of coordinates)."""
    S = a.shape[-1] * a.shape[-2]
    table = _ndtri((np.arange(2, 2 * S + 1) / 2.0 - 3.0 / 8.0) / (S + 0.25))
    return table[np.rint(2.0 * _ranks(a)).astype(np.intp) - 2]


def _rhat_core(a: np.ndarray) -> np.ndarray:
    """Potential scale reduction of `(P, m, n)` chains (already split)."""
    m, n = a.shape[1], a.shape[2]
    out = np.full(a.shape[0], np.nan)
    if n < 2 or m < 2:
        return out
    w = a.var(axis=-1, ddof=1).mean(axis=-1)
    b = n * a.mean(axis=-1).var(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.sqrt(((n - 1) / n * w + b / n) / w)
    return np.where(w > 0, r, np.nan)


def _ess_core(a: np.ndarray) -> np.ndarray:
    """ESS of `(P, m, n)` chains: Geyer's initial positive + monotone sequence (Stan)."""
    P, m, n = a.shape
    out = np.full(P, np.nan)
    if n < 4:
        return out
    acov = _autocov(a)  # (P, m, n)
    mean_var = acov[..., 0].mean(-1) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if m > 1:
        var_plus = var_plus + a.mean(-1).var(-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov.mean(1)) / var_plus[:, None]
    rho[:, 0] = 1.0
    K = n // 2
    pairs = rho[:, 0:2 * K:2] + rho[:, 1:2 * K:2]  # (P, K)
    positive = np.cumprod(pairs > 0, axis=1).astype(bool)
    mono = np.minimum.accumulate(np.where(positive, pairs, np.inf), axis=1)
    mono = np.where(positive, mono, 0.0)
    tau = -1.0 + 2.0 * mono.sum(1)
    # ArviZ/Stan: add the even autocorrelation right after the cut when positive
    k_stop = positive.sum(1)
    idx = np.minimum(2 * k_stop, n - 1)
    tail = rho[np.arange(P), idx]
    tau = tau + np.where((2 * k_stop < n) & (tail > 0), tail, 0.0)
    total = m * n
    tau = np.maximum(tau, 1.0 / math.log10(total)) if total > 1 else tau
    ess = total / tau
    const = (a.max(axis=(1, 2)) - a.min(axis=(1, 2))) < np.finfo(float).resolution
    ess = np.where(const, float(total), ess)
    ess = np.where(np.isfinite(var_plus) & (var_plus > 0) | const, ess, np.nan)
    return ess


def _reshape(v: np.ndarray, shape: tuple):
    return v.reshape(shape) if shape else v.reshape(())[()]


# ---------------------------------------------------------------- spec 6.6.2 formulas


def split_rhat_basic(draws) -> np.ndarray:
    """Split-R-hat of spec 6.6.2 per coordinate (NaN if half-chains are shorter than 2 or
    the within-chain variance is 0)."""
    a = _as_chains(draws)
    h = a.shape[-1] // 2
    if h < 2:
        return _reshape(np.full(a.shape[0], np.nan), _param_shape(draws))
    return _reshape(_rhat_core(_split(a)), _param_shape(draws))


def ess_basic(draws) -> np.ndarray:
    """ESS of spec 6.6.2: FFT autocovariance (lag t divided by n - t), averaged over chains,
    positive consecutive pairs summed, `ESS = m n / max(1, tau)`."""
    a = _as_chains(draws)
    P, m, n = a.shape
    if n < 4:
        return _reshape(np.full(P, np.nan), _param_shape(draws))
    size = 1 << max(1, (2 * n - 1).bit_length())
    c = a - a.mean(-1, keepdims=True)
    f = np.fft.rfft(c, n=size)
    acov = np.fft.irfft(f * np.conjugate(f), n=size)[..., :n] / (n - np.arange(n))
    acov = acov.mean(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = acov / acov[:, :1]
    K = n // 2
    pairs = rho[:, 0:2 * K:2] + rho[:, 1:2 * K:2]
    positive = np.cumprod(pairs > 0, axis=1).astype(bool)
    tau = -1.0 + 2.0 * np.where(positive, pairs, 0.0).sum(1)
    ess = m * n / np.maximum(1.0, tau)
    ess = np.where(acov[:, 0] > 0, ess, np.nan)
    return _reshape(ess, _param_shape(draws))


# ---------------------------------------------------------------- rank-normalised


def split_rhat(draws, _bulk_z: Optional[np.ndarray] = None) -> np.ndarray:
    """Rank-normalised split-R-hat: `max(bulk R-hat, folded (tail) R-hat)`.
    (`_bulk_z`: the rank-normalised split chains, when the caller has them already.)"""
    a = _split(_as_chains(draws))
    if a.shape[-1] < 2:
        return _reshape(np.full(a.shape[0], np.nan), _param_shape(draws))
    bulk = _rhat_core(_rank_normalize(a) if _bulk_z is None else _bulk_z)
    folded = np.abs(a - np.median(a.reshape(a.shape[0], -1), axis=1)[:, None, None])
    tail = _rhat_core(_rank_normalize(folded))
    return _reshape(np.fmax(bulk, tail), _param_shape(draws))


def ess_bulk(draws, _bulk_z: Optional[np.ndarray] = None) -> np.ndarray:
    """Bulk ESS: ESS of the rank-normalised split chains (`_bulk_z`, as in `split_rhat`)."""
    a = _split(_as_chains(draws))
    if a.shape[-1] < 2:
        return _reshape(np.full(a.shape[0], np.nan), _param_shape(draws))
    return _reshape(_ess_core(_rank_normalize(a) if _bulk_z is None else _bulk_z),
                    _param_shape(draws))


def _bulk_z(draws) -> Optional[np.ndarray]:
    """The rank-normalised split chains that bulk R-hat and bulk ESS share (None when the
    split chains are too short for either)."""
    a = _split(_as_chains(draws))
    return _rank_normalize(a) if a.shape[-1] >= 2 else None


def ess_tail(draws, prob: float = 0.05) -> np.ndarray:
    """Tail ESS: the smaller ESS of the indicators `x <= q_prob` and `x <= q_(1-prob)`
    (NaN when the split chains are shorter than 2 draws: a run cancelled at its first
    sampling draw)."""
    a = _split(_as_chains(draws))
    if a.shape[-1] < 2:
        return _reshape(np.full(a.shape[0], np.nan), _param_shape(draws))
    flat = a.reshape(a.shape[0], -1)
    lo = np.quantile(flat, prob, axis=1)[:, None, None]
    hi = np.quantile(flat, 1 - prob, axis=1)[:, None, None]
    e_lo = _ess_core((a <= lo).astype(np.float64))
    e_hi = _ess_core((a <= hi).astype(np.float64))
    return _reshape(np.fmin(e_lo, e_hi), _param_shape(draws))


def ess_mean(draws) -> np.ndarray:
    """ESS for the mean: ESS of the (not rank-normalised) split chains."""
    return _reshape(_ess_core(_split(_as_chains(draws))), _param_shape(draws))


def mcse_mean(draws) -> np.ndarray:
    """Monte Carlo standard error of the mean: `sd / sqrt(ess_mean)`."""
    a = _as_chains(draws)
    sd = a.reshape(a.shape[0], -1).std(axis=1, ddof=1)
    return _reshape(sd / np.sqrt(np.asarray(ess_mean(draws)).reshape(-1)), _param_shape(draws))


# ---------------------------------------------------------------- summary table

COLUMNS = ("mean", "sd", "q5", "q50", "q95", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")


# how a site's coordinates are folded into its one row of `Summary.sites` (the grouped
# table of `qvr run`/`qvr show`): the range of the means, the median sd, the widest
# quantiles, the worst MCSE, ESS and R-hat.  NaN coordinates (a constant draw has no
# R-hat) are left out; a site whose every coordinate is NaN gets NaN.
SITE_AGGREGATES = (("mean_lo", "mean", "min"), ("mean_hi", "mean", "max"),
                   ("sd", "sd", "median"), ("q5", "q5", "min"), ("q50", "q50", "median"),
                   ("q95", "q95", "max"), ("mcse_mean", "mcse_mean", "max"),
                   ("ess_bulk", "ess_bulk", "min"), ("ess_tail", "ess_tail", "min"),
                   ("r_hat", "r_hat", "max"))


def site_row(shape: tuple, stats: Mapping[str, np.ndarray], size: Optional[int] = None) \
        -> dict:
    """One site's row of `Summary.sites` from its per-coordinate statistics
    (`{column: (n,)}`): ``shape`` (the site's shape, a list), ``size`` (its coordinates),
    ``n`` (those summarised) and the aggregates of `SITE_AGGREGATES` for the columns
    present."""
    n = len(next(iter(stats.values()))) if stats else 0
    out: dict = {"shape": [int(s) for s in shape],
                 "size": int(size if size is not None else (np.prod(shape) if shape else 1)),
                 "n": int(n)}
    for key, col, how in SITE_AGGREGATES:
        if col not in stats:
            continue
        v = np.asarray(stats[col], dtype=np.float64)
        v = v[~np.isnan(v)]
        out[key] = float(getattr(np, how)(v)) if v.size else float("nan")
    return out


@dataclass
class Summary:
    """Per-coordinate statistics: `rows[name] = {column: float}` in site order, and one
    row per site (`sites[site]`, see `site_row`) folded from all its coordinates.

    `str(summary)` renders a fixed-width table of every row; `worst()` gives the minimum
    ESS and the maximum R-hat over all coordinates.  `truncated` counts the coordinates
    left out when `summary` was asked for fewer (a site cut short has ``n < size`` in
    `sites`, and its aggregates cover its first ``n`` coordinates only).
    """

    rows: dict = field(default_factory=dict)
    truncated: int = 0
    columns: tuple = COLUMNS
    sites: dict = field(default_factory=dict)
    #: recorded quantities (``record v = e``, design E9.6), under their own names: their
    #: `sites` rows say ``"recorded": True``; `worst()` leaves them out
    recorded: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: dict(v) for k, v in self.rows.items()}

    def sites_dict(self) -> dict:
        return {k: dict(v) for k, v in self.sites.items()}

    def worst(self) -> dict:
        """The minimum ESS and maximum R-hat over the sites' coordinates (recorded
        quantities are functions of the sites: the sampler's diagnostics leave them out)."""
        rec = set(self.recorded)

        def pick(col, f):
            vals = [r[col] for k, r in self.rows.items()
                    if k.split("[", 1)[0] not in rec and np.isfinite(r.get(col, np.nan))]
            return float(f(vals)) if vals else float("nan")
        return {"min_ess_bulk": pick("ess_bulk", min), "min_ess_tail": pick("ess_tail", min),
                "max_r_hat": pick("r_hat", max)}

    def __str__(self) -> str:
        if not self.rows:
            return "(no parameters)"
        width = max(12, max(len(k) for k in self.rows) + 1)
        head = f"{'':<{width}}" + "".join(f"{c:>10}" for c in self.columns)
        lines = [head]
        for name, r in self.rows.items():
            cells = []
            for c in self.columns:
                v = r[c]
                if c.startswith("ess"):
                    cells.append(f"{v:>10.0f}" if np.isfinite(v) else f"{'nan':>10}")
                elif c == "r_hat":
                    cells.append(f"{v:>10.3f}" if np.isfinite(v) else f"{'nan':>10}")
                else:
                    cells.append(f"{v:>10.3g}")
            lines.append(f"{name:<{width}}" + "".join(cells))
        if self.truncated:
            lines.append(f"... {self.truncated} more coordinates not shown")
        if self.recorded:
            lines.append("recorded per draw (record v = e): " + ", ".join(self.recorded))
        return "\n".join(lines)


def summary(samples: Mapping[str, Any], max_coordinates: Optional[int] = None,
            columns: tuple = COLUMNS) -> Summary:
    """Statistics of every scalar coordinate of `samples` (`{name: (chains, draws, ...)}`),
    and of every site as a whole (`Summary.sites`).

    Every coordinate by default (what a fit records: the per-site figures and the full
    table must cover the whole site); with `max_coordinates` at most that many rows are
    computed (in site order), the count of the others is kept in `Summary.truncated`.
    `columns` selects the statistics (e.g. only the moments and quantiles for independent
    draws from a fitted guide).
    """
    out = Summary(columns=tuple(columns))
    budget = max_coordinates if max_coordinates is not None else float("inf")
    for name, draws in samples.items():
        recorded = name.startswith(RECORDED_PREFIX)  # `recorded.v`: summarised as `v`
        if recorded:
            name = name[len(RECORDED_PREFIX):]
            out.recorded.append(name)
        a = np.asarray(_to_numpy(draws), dtype=np.float64)
        if a.ndim < 2 or a.shape[0] * a.shape[1] == 0:
            continue  # no draws (a run cancelled during warmup)
        shape = a.shape[2:]
        P = int(np.prod(shape)) if shape else 1
        take = int(min(P, max(0, budget - len(out.rows))))
        if take < P:
            out.truncated += P - take
        if take == 0:
            continue
        flat = a.reshape(a.shape[0], a.shape[1], -1)[..., :take]
        cols = set(out.columns)
        # shared work: the three quantiles in one sort, the bulk rank normalisation once
        # for bulk ESS and R-hat
        qs = np.quantile(flat, (0.05, 0.5, 0.95), axis=(0, 1)) \
            if cols & {"q5", "q50", "q95"} else None
        z = _bulk_z(flat) if cols & {"ess_bulk", "r_hat"} else None
        compute = {
            "mean": lambda: flat.mean(axis=(0, 1)),
            "sd": lambda: flat.reshape(-1, take).std(axis=0, ddof=1)
            if flat.shape[0] * flat.shape[1] > 1 else np.full(take, np.nan),
            "q5": lambda: qs[0],
            "q50": lambda: qs[1],
            "q95": lambda: qs[2],
            "mcse_mean": lambda: np.atleast_1d(mcse_mean(flat)),
            "ess_bulk": lambda: np.atleast_1d(ess_bulk(flat, z)),
            "ess_tail": lambda: np.atleast_1d(ess_tail(flat)),
            "r_hat": lambda: np.atleast_1d(split_rhat(flat, z)),
        }
        stats = {c: np.asarray(compute[c](), dtype=np.float64).reshape(take)
                 for c in out.columns}
        out.sites[name] = site_row(shape, stats, P)
        if recorded:
            out.sites[name]["recorded"] = True
        table = {c: stats[c].tolist() for c in out.columns}  # Python floats, in one pass
        scalar = not shape or shape == (1,)  # scalar sites are recorded with shape (1,)
        if scalar:
            labels = [name]
        else:
            idx = np.stack(np.unravel_index(np.arange(take), shape), axis=1).tolist()
            labels = [f"{name}[{','.join(map(str, i))}]" for i in idx]
        for k, label in enumerate(labels):
            out.rows[label] = {c: table[c][k] for c in out.columns}
    return out


def _to_numpy(x):
    # a tensor exists only once torch is loaded: never import it here (the dashboard's UI
    # process summarises numpy draws and must stay torch-free)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x)


def e_bfmi(energy) -> list:
    """Energy Bayesian fraction of missing information per chain (Betancourt 2016; Stan's
    formula): Σ(E_n - E_{n-1})² / Σ(E_n - Ē)² over the Hamiltonians of a chain's draws,
    `energy` of shape `(chains, draws)` (or one chain).  NaN for a chain with fewer than
    two draws, a constant energy, or non-finite values.  Below 0.3 the momentum resampling
    explores the energy distribution poorly."""
    e = np.asarray(energy, dtype=np.float64)
    if e.ndim == 1:
        e = e[None]
    out = []
    for row in e:
        if row.size < 2 or not np.isfinite(row).all():
            out.append(float("nan"))
            continue
        ss = float(np.sum((row - row.mean()) ** 2))
        out.append(float(np.sum(np.diff(row) ** 2) / ss) if ss > 0 else float("nan"))
    return out


# ---------------------------------------------------------------- the checks of a run

#: the thresholds of the MCMC checks (Stan's ``diagnose`` and Vehtari et al. 2021), shared
#: by the dashboard's check panel and the command line's warnings
RHAT_MAX = 1.01
ESS_PER_CHAIN = 100.0
EBFMI_MIN = 0.3


def check_warnings(stats: Mapping[str, Any], method: str,
                   mass_matrix: Optional[str] = None) -> list:
    """What a finished MCMC run's statistics (``summary.json`` ``"stats"``) say is wrong,
    one sentence each, with the usual remedy: divergences after warmup, R-hat above
    `RHAT_MAX`, bulk or tail ESS below `ESS_PER_CHAIN` per chain, draws at the maximum
    tree depth (NUTS), E-BFMI below `EBFMI_MIN`.  `mass_matrix` is the run's option (HMC
    keeps the identity metric unless told otherwise: the remedy then names it).  Empty
    when all is well or when the stats cannot tell (no draws)."""
    out = []
    chains = int(stats.get("num_chains") or 1)
    draws = int(stats.get("num_samples") or 0)
    if draws == 0:
        return out
    identity = method == "hmc" and mass_matrix in (None, "identity")
    remedy = ("HMC keeps the identity metric unless told: try --mass-matrix diagonal, or "
              "--method nuts" if identity else "try a longer --warmup, or reparameterise")
    div = int(stats.get("total_divergences") or 0)
    if div:
        out.append(f"{div} divergent draw{'s' if div != 1 else ''} after warmup: the "
                   f"sampler could not follow the posterior there, so the draws may be "
                   f"biased; try --target-accept 0.95 (smaller steps), or reparameterise")
    rhat = stats.get("max_r_hat")
    bad_rhat = rhat is not None and not math.isnan(float(rhat)) and float(rhat) > RHAT_MAX
    if bad_rhat:
        out.append(f"max R-hat {float(rhat):.3f} > {RHAT_MAX}: the chains disagree, "
                   f"they have not converged to one posterior; {remedy}")
    need = ESS_PER_CHAIN * chains
    low = [(name, float(stats[key])) for name, key in (("bulk", "min_ess_bulk"),
                                                        ("tail", "min_ess_tail"))
           if stats.get(key) is not None and not math.isnan(float(stats[key]))
           and float(stats[key]) < need]
    if low:
        said = " and ".join(f"{name} {v:.0f}" for name, v in low)
        out.append(f"min ESS {said} < {need:.0f} ({ESS_PER_CHAIN:.0f} per chain): too few "
                   f"effective draws for reliable means and quantiles; "
                   + ("more --samples" if not bad_rhat else "the same remedy"))
    hits = int(stats.get("max_depth_hits") or 0)
    if method == "nuts" and hits:
        depth = stats.get("max_tree_depth") or 10
        out.append(f"{hits} draw{'s' if hits != 1 else ''} at the maximum tree depth "
                   f"{depth}: trajectories were cut short; try --max-tree-depth "
                   f"{int(depth) + 2}, or reparameterise")
    bf = [float(b) for b in stats.get("e_bfmi") or () if b is not None
          and not math.isnan(float(b))]
    if bf and min(bf) < EBFMI_MIN:
        out.append(f"E-BFMI {min(bf):.2f} < {EBFMI_MIN} in a chain: momentum resampling "
                   f"explores the energy poorly (heavy tails, or a funnel); reparameterise")
    return out


# ---------------------------------------------------------------- ArviZ export


def to_arviz(result):
    """The draws and sampler statistics of an `MCMCResult` as ArviZ data; a run record
    (`qvr.runs.Run` or its folder) goes to `run_to_arviz`.

    Raises `ImportError` when ArviZ is not installed (it is optional: ``pip install arviz``).
    """
    if _is_run(result):
        return run_to_arviz(result)
    try:
        import arviz
    except ImportError as exc:
        raise ImportError("to_arviz needs ArviZ (pip install arviz)") from exc
    # recorded quantities (`recorded.v`) go to the posterior under their own names, as
    # ArviZ keeps deterministics
    posterior = {k[len(RECORDED_PREFIX):] if k.startswith(RECORDED_PREFIX) else k:
                 _to_numpy(v) for k, v in result.samples.items()}
    stats = {"lp": _to_numpy(result.log_densities),
             "diverging": _to_numpy(result.diverging).astype(bool),
             "acceptance_rate": _to_numpy(result.accept_probs),
             "tree_depth": _to_numpy(result.tree_depths),
             "n_steps": _to_numpy(result.num_steps)}
    try:
        return arviz.from_dict(posterior=posterior, sample_stats=stats)
    except TypeError:  # ArviZ >= 1.0: one dict of groups
        return arviz.from_dict({"posterior": posterior, "sample_stats": stats})


def _is_run(x) -> bool:
    from pathlib import Path
    from qvr.runs.reader import Run
    return isinstance(x, (Run, str, Path))


#: sampler statistics of ``samples.npz`` under ArviZ's names
_ARVIZ_STATS = {"log_density": "lp", "accept_prob": "acceptance_rate",
                "num_steps": "n_steps"}


def run_to_arviz(run):
    """A run record (`qvr.runs.Run` or folder) as an ArviZ `DataTree` (`arviz_base.from_dict`):

    * ``posterior`` — the draws (``samples.npz``, else the draws chunks; recorded quantities
      under their own names; a scalar site ``(chain, draw, 1)`` as in the record);
    * ``sample_stats`` — the sampler statistics (``lp``, ``diverging`` as booleans,
      ``acceptance_rate``, ``tree_depth``, ``n_steps``, ``step_size``, ``energy``);
    * ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` — the pointwise
      terms, replicates and observed values of the record (after the fit), and
      ``constant_data`` its grouping indices (``group.NAME``, under ``NAME``);
    * a ``--method prior`` run: ``prior`` and ``prior_predictive`` instead of ``posterior``
      and ``posterior_predictive``.

    Groups the record lacks are left out.  Raises `ImportError` without ``arviz-base``.
    """
    try:
        import arviz_base
    except ImportError as exc:
        raise ImportError("run_to_arviz needs arviz-base (pip install arviz-base)") from exc
    from qvr.runs import open_run
    from qvr.runs.layout import GROUP_PREFIX
    from qvr.runs.reader import Run
    rec = run if isinstance(run, Run) else open_run(run)
    samples = rec.samples()
    draws = {k[len(RECORDED_PREFIX):] if k.startswith(RECORDED_PREFIX) else k: np.asarray(v)
             for k, v in samples.items() if not k.startswith("sample_stats.")}
    if not draws:
        draws = {k: np.asarray(v) for k, v in rec.draws().items()}
    stats = {}
    for k, v in samples.items():
        if k.startswith("sample_stats."):
            name = k[len("sample_stats."):]
            v = np.asarray(v)
            if v.ndim == 1 and draws:  # one value per chain (the adapted step size)
                n = next(iter(draws.values())).shape[1]
                v = np.repeat(v[:, None], n, axis=1)
            stats[_ARVIZ_STATS.get(name, name)] = v.astype(bool) if name == "diverging" else v
    meta = rec.pointwise_meta or {}
    prior = meta.get("kind") == "prior"
    observed = rec.observed()
    groups: dict = {}
    if draws:
        groups["prior" if prior else "posterior"] = draws
    if stats:
        groups["sample_stats"] = stats
    log_lik = rec.log_likelihood()
    if log_lik:
        groups["log_likelihood"] = {k: np.asarray(v, dtype=np.float64)
                                    for k, v in log_lik.items()}
    y_rep = rec.predictive()
    if y_rep:
        groups["prior_predictive" if prior else "posterior_predictive"] = \
            {k: np.asarray(v) for k, v in y_rep.items()}
    obs = {k: np.asarray(v) for k, v in observed.items() if not k.startswith(GROUP_PREFIX)}
    if obs:
        groups["observed_data"] = obs
    const = {k[len(GROUP_PREFIX):]: np.asarray(v) for k, v in observed.items()
             if k.startswith(GROUP_PREFIX)}
    if const:
        groups["constant_data"] = const
    # the observed dims named once for every group that holds the site
    dims = {k: [f"{k}_dim_{i}" for i in range(np.ndim(v))] for k, v in obs.items()}
    return arviz_base.from_dict(groups, dims=dims or None)
