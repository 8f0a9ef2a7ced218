"""The running rank-normalised R-hat and bulk/tail ESS of the live screen
(`rank_diagnostics`), torch-free.

`qvr.inference.criticism.diagnostics.split_rhat`/`ess_bulk` rank-normalise with torch's `ndtri`,
which the UI process must not import; the same statistics are computed here with a
numpy inverse normal CDF (Acklam's rational approximation, relative error < 1.2e-9,
refined by one Halley step) and that module's numpy cores.
"""
from __future__ import annotations

import math

__all__ = ["ndtri", "rank_diagnostics"]

_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
      1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
      6.680131188771972e+01, -1.328068155288572e+01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
      -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
      3.754408661907416e+00)


def ndtri(p):
    """The standard normal quantile of `p` (numpy; 0 < p < 1)."""
    import numpy as np
    p = np.asarray(p, dtype=np.float64)
    x = np.empty_like(p)
    lo = p < 0.02425
    hi = p > 1 - 0.02425
    mid = ~(lo | hi)
    q = p[mid] - 0.5
    r = q * q
    num = ((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]
    den = ((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1
    x[mid] = num * q / den
    for mask, sign, pp in ((lo, 1.0, p[lo]), (hi, -1.0, 1 - p[hi])):
        q = np.sqrt(-2 * np.log(pp))
        num = ((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]
        den = (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1
        x[mask] = sign * num / den
    # one Halley step on Phi(x) - p (Phi through erfc, vectorised with math.erfc)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    e = 0.5 * erfc(-x / math.sqrt(2)) - p
    u = e * math.sqrt(2 * math.pi) * np.exp(x * x / 2)
    return x - u / (1 + x * u / 2)


def rank_diagnostics(a):
    """``(split R-hat, bulk ESS, tail ESS)`` per column of draws ``(chains, draws, P)``,
    as `qvr.inference.criticism.diagnostics.split_rhat`, `ess_bulk` and `ess_tail` define them."""
    import numpy as np
    from qvr.inference.criticism import diagnostics as dg
    s = dg._split(dg._as_chains(a))  # (P, 2m, n/2)
    P = s.shape[0]
    if s.shape[-1] < 2:
        nan = np.full(P, np.nan)
        return nan, nan, nan

    def rank_norm(x):
        S = x.shape[-1] * x.shape[-2]
        return ndtri((dg._ranks(x) - 3.0 / 8.0) / (S + 0.25))

    bulk = dg._rhat_core(rank_norm(s))
    folded = np.abs(s - np.median(s.reshape(P, -1), axis=1)[:, None, None])
    tail = dg._rhat_core(rank_norm(folded))
    rhat = np.fmax(bulk, tail)
    ess_b = dg._ess_core(rank_norm(s))
    ess_t = np.atleast_1d(dg.ess_tail(a)).reshape(-1)
    return np.atleast_1d(rhat).reshape(-1), np.atleast_1d(ess_b).reshape(-1), ess_t
