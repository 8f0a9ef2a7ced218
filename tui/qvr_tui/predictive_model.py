"""Plain data for the dashboard's predictive checks, PSIS-LOO and run comparison (issue 25).

Torch-free; nothing here draws.  The record's ``ppc.json`` and ``loo.json``
(`qvr.runs.Run.ppc`, `Run.loo`; their fields are `qvr.inference.criticism.checks`'s) are read into:

* `Predictive` — the kind of check (posterior / prior / guide), the number of draws, and
  per observed site a `SiteChecks`: the test statistics (`StatCheck`: observed value, the
  replicates' mean/sd/q5/q50/q95, the p-value, extreme or not), the per-group summaries
  (`GroupSummary`: how many groups are extreme, the worst few `GroupRow`s), the
  histogram of observed against replicated values (`Hist`) and the LOO-PIT (`Pit`: the
  ECDF of the PIT values as a difference from the uniform's, with its band);
* `LooView` — elpd_loo, SE, p_loo, rows, draws, the Pareto-k per row, the threshold and
  the rows above it (`HighK`), or the error the file holds;
* `Comparison` — `qvr.inference.criticism.checks.compare`'s rows (`CompareRow`) and verdict, or the
  refusal (runs on different data).

`load_predictive(run)` gives ``(Predictive | None, LooView | None, note)``: the note says
why there is nothing to show.  It reads the checks of a finished run only (a run being
written gets them when it ends; a live fit and a reopened run read the same record); a
record without the files but with pointwise terms has them computed by the reader (in the
Results pane's worker thread).  Every field of the files is optional: a missing one shows
as blank, never as an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["StatCheck", "GroupRow", "GroupSummary", "Hist", "Pit", "SiteChecks",
           "Predictive", "HighK", "LooView", "CompareRow", "Comparison", "NO_CHECKS",
           "STAT_ORDER", "WORST_GROUPS", "predictive_view", "loo_view", "comparison_view",
           "load_predictive", "compare_runs", "is_extreme_p", "fmt_p", "fmt_num"]

#: the one-line message of a record without predictive checks
NO_CHECKS = ("this run has no predictive checks: fitted before qvr recorded them, or a "
             "method that does not record them")
STAT_ORDER = ("mean", "sd", "min", "max", "zeros")
WORST_GROUPS = 3  # groups listed per grouping (the most extreme first)
EXTREME_P = 0.025  # two-sided: p < 0.025 or p > 0.975 when the file does not say
#                    (`qvr.inference.criticism.checks`'s rule)


# ---------------------------------------------------------------- small readers

def _num(v: Any) -> Optional[float]:
    """`v` as a float, None when absent or not a number (NaN kept as NaN)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _int(v: Any) -> Optional[int]:
    f = _num(v)
    return None if f is None or not math.isfinite(f) else int(f)


def _arr(v: Any) -> Optional[np.ndarray]:
    """A list of numbers as a float array (None entries NaN); None when not one."""
    if v is None:
        return None
    try:
        a = np.asarray([np.nan if x is None else x for x in v], dtype=float)
    except (TypeError, ValueError):
        return None
    return a.reshape(-1)


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def is_extreme_p(p: Optional[float]) -> bool:
    """A two-sided p-value in the tails (p < 0.025 or p > 0.975)."""
    return p is not None and math.isfinite(p) and (p < EXTREME_P or p > 1 - EXTREME_P)


def fmt_num(v: Optional[float], digits: int = 4) -> str:
    """A number in at most about `digits` significant digits ("" when absent)."""
    if v is None:
        return ""
    if not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.{digits}g}"


def fmt_p(p: Optional[float]) -> str:
    """A p-value: three decimals, ``<0.001`` / ``>0.999`` at the ends."""
    if p is None or not math.isfinite(p):
        return ""
    if p < 0.001:
        return "<0.001"
    if p > 0.999:
        return ">0.999"
    return f"{p:.3f}"


# ---------------------------------------------------------------- predictive checks

@dataclass(frozen=True)
class StatCheck:
    """One test statistic of a site: observed value against its replicates."""

    name: str                    # "mean", "sd", "min", "max", "zeros", ...
    observed: Optional[float]
    mean: Optional[float]        # of the replicated statistic
    sd: Optional[float]
    q5: Optional[float]
    q50: Optional[float]
    q95: Optional[float]
    p_value: Optional[float]
    extreme: bool


@dataclass(frozen=True)
class GroupRow:
    group: str
    observed: Optional[float]    # the group's mean
    q5: Optional[float]
    q95: Optional[float]
    p_value: Optional[float]
    flagged: Optional[bool] = None  # the file's ``extreme`` (else from the p-value)
    n: Optional[int] = None

    @property
    def extreme(self) -> bool:
        return self.flagged if self.flagged is not None else is_extreme_p(self.p_value)

    @property
    def tail(self) -> float:
        """How far in a tail (smaller: more extreme); NaN p last."""
        p = self.p_value
        return 1.0 if p is None or not math.isfinite(p) else min(p, 1.0 - p)


@dataclass(frozen=True)
class GroupSummary:
    """One grouping (a host-data index such as ``hour_of``): groups, extreme ones, the
    worst few (most extreme p-value first)."""

    name: str
    n_groups: int
    extreme: int
    worst: tuple                 # GroupRow, at most WORST_GROUPS
    truncated: bool = False      # the file lists only some of the groups


@dataclass(frozen=True)
class Hist:
    """Observed values against replicates over common bins: counts per bin."""

    edges: np.ndarray
    observed: np.ndarray
    rep_mean: Optional[np.ndarray]
    rep_q5: Optional[np.ndarray]
    rep_q95: Optional[np.ndarray]

    @property
    def centres(self) -> np.ndarray:
        e = self.edges
        if len(e) == len(self.observed) + 1:
            return (e[:-1] + e[1:]) / 2
        return np.arange(len(self.observed), dtype=float)  # edges missing or odd

    @property
    def width(self) -> float:
        c = self.centres
        return float(np.diff(c).min()) if len(c) > 1 else 1.0


@dataclass(frozen=True)
class Pit:
    """LOO-PIT: the ECDF of the PIT values minus the uniform's (x in [0, 1]), the band it
    stays in when calibrated (as differences too), the p-value, whether it leaves the
    band."""

    x: np.ndarray
    diff: np.ndarray
    band_lower: Optional[np.ndarray]
    band_upper: Optional[np.ndarray]
    p_value: Optional[float]
    outside: Optional[bool]
    n: int                       # PIT values (0 when the file gives only the ECDF)

    @property
    def verdict(self) -> str:
        p = f" (p {fmt_p(self.p_value)})" if self.p_value is not None else ""
        if self.outside is None:
            return f"LOO-PIT{p}"
        if self.outside:
            return f"LOO-PIT outside band{p}"
        return f"LOO-PIT within band{p}"


@dataclass(frozen=True)
class SiteChecks:
    site: str
    discrete: bool
    stats: tuple                 # StatCheck, in STAT_ORDER then the others
    groups: tuple                # GroupSummary
    hist: Optional[Hist]
    pit: Optional[Pit]
    pit_note: str = ""           # why there is no LOO-PIT (the file's ``loo_pit_note``)
    error: str = ""              # the site could not be checked
    n: Optional[int] = None      # observed elements checked

    @property
    def extreme(self) -> int:
        """The extreme statistics and extreme groups (0: nothing stands out)."""
        return sum(s.extreme for s in self.stats) + sum(g.extreme for g in self.groups)


@dataclass(frozen=True)
class Predictive:
    kind: str                    # "posterior", "prior", "guide" ("" unknown)
    draws: Optional[int]
    sites: tuple                 # SiteChecks
    error: str = ""

    @property
    def title(self) -> str:
        kind = {"guide": "posterior (guide)"}.get(self.kind, self.kind)
        t = f"{kind} predictive checks".strip()
        return t[0].upper() + t[1:]


def _stat(name: str, d: dict) -> StatCheck:
    rep = d.get("replicated")
    rep = rep if isinstance(rep, dict) else {"mean": rep} if _num(rep) is not None else {}
    p = _num(d.get("p_value"))
    ext = d.get("extreme")
    return StatCheck(name=name, observed=_num(d.get("observed")), mean=_num(rep.get("mean")),
                     sd=_num(rep.get("sd")), q5=_num(rep.get("q5")), q50=_num(rep.get("q50")),
                     q95=_num(rep.get("q95")), p_value=p,
                     extreme=bool(ext) if ext is not None else is_extreme_p(p))


def _groups(name: str, d: Any) -> GroupSummary:
    d = _dict(d) if not isinstance(d, list) else {"groups": d}
    rows = []
    for g in d.get("groups") or ():
        if not isinstance(g, dict):
            continue
        ext = g.get("extreme")
        rows.append(GroupRow(group=str(g.get("group", "?")), observed=_num(g.get("observed")),
                             q5=_num(g.get("q5")), q95=_num(g.get("q95")),
                             p_value=_num(g.get("p_value")),
                             flagged=bool(ext) if ext is not None else None,
                             n=_int(g.get("n"))))
    n_ext = _int(d.get("n_extreme", d.get("extreme")))
    if n_ext is None:
        n_ext = sum(r.extreme for r in rows)
    worst = sorted(rows, key=lambda r: (not r.extreme, r.tail))[:WORST_GROUPS]
    return GroupSummary(name=name, n_groups=_int(d.get("n_groups")) or len(rows),
                        extreme=n_ext, worst=tuple(worst), truncated=bool(d.get("truncated")))


def _hist(d: Any) -> Optional[Hist]:
    d = _dict(d)
    obs = _arr(d.get("observed"))
    if obs is None or not len(obs):
        return None
    edges = _arr(d.get("edges"))
    return Hist(edges=edges if edges is not None else np.arange(len(obs) + 1, dtype=float),
                observed=obs, rep_mean=_arr(d.get("replicated_mean")),
                rep_q5=_arr(d.get("replicated_q5")), rep_q95=_arr(d.get("replicated_q95")))


def _is_ecdf(y: np.ndarray) -> bool:
    """An ECDF itself (non-decreasing in [0, 1], ending near 1), not its difference from
    the uniform's (which starts and ends near 0)."""
    y = y[np.isfinite(y)]
    return bool(len(y) > 1 and y.min() >= -1e-9 and y.max() <= 1 + 1e-9
                and np.all(np.diff(y) >= -1e-9) and y[-1] >= 0.9)


def _xy(v: Any) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """ECDF points as (x, y): ``[[x, y], ...]``, ``{"x": [...], "y": [...]}`` or the y
    values alone (x then spread evenly over (0, 1])."""
    if isinstance(v, dict):
        return _arr(v.get("x")), _arr(v.get("y"))
    if isinstance(v, list) and v and isinstance(v[0], (list, tuple)):
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            return None, None
        if a.ndim == 2 and a.shape[1] == 2:
            return a[:, 0], a[:, 1]
        if a.ndim == 2 and a.shape[0] == 2:
            return a[0], a[1]
        return None, None
    return None, _arr(v)


def _pit(d: Any) -> Optional[Pit]:
    """The LOO-PIT of a site: ``x`` and ``ecdf`` (the ECDF at x) with the band on the
    ECDF's scale, as `qvr.inference.criticism.checks` writes it; also the ECDF as ``[[x, y]]`` or
    ``{"x", "y"}`` points, or already as differences, or only the PIT ``values``."""
    d = _dict(d)
    if not d:
        return None
    values = _arr(d.get("values"))
    x, y = _xy(d.get("ecdf"))
    given_x = _arr(d.get("x"))
    absolute = None  # the arrays are ECDF values (then the uniform's x is subtracted)
    if x is None and given_x is not None and y is not None and len(given_x) == len(y):
        x, absolute = given_x, True
    if y is None or not len(y):
        if values is None or not len(values):
            return None
        v = np.sort(values[np.isfinite(values)])  # the ECDF of the values, at each value
        x, y = v, np.arange(1, len(v) + 1, dtype=float) / max(1, len(v))
        absolute = True
    if x is None or len(x) != len(y):
        x = np.arange(1, len(y) + 1, dtype=float) / len(y)
    if absolute is None:
        absolute = _is_ecdf(y)
    diff = y - x if absolute else y

    def band(b):
        b = _arr(b)
        if b is None or len(b) != len(x):
            return None
        return b - x if absolute else b

    lo, hi = band(d.get("band_lower")), band(d.get("band_upper"))
    outside = d.get("outside")
    n = _int(d.get("n"))
    return Pit(x=x, diff=diff, band_lower=lo, band_upper=hi, p_value=_num(d.get("p_value")),
               outside=bool(outside) if outside is not None else None,
               n=n if n is not None else len(values) if values is not None else 0)


def _site(name: str, d: Any) -> SiteChecks:
    d = _dict(d)
    stats_d = _dict(d.get("stats"))
    names = [n for n in STAT_ORDER if n in stats_d] + \
        [n for n in stats_d if n not in STAT_ORDER]
    stats = tuple(_stat(n, _dict(stats_d[n])) for n in names)
    groups = tuple(_groups(str(g), v) for g, v in _dict(d.get("groups")).items())
    return SiteChecks(site=str(name), discrete=bool(d.get("discrete", False)), stats=stats,
                      groups=groups, hist=_hist(d.get("hist")), pit=_pit(d.get("loo_pit")),
                      pit_note=str(d.get("loo_pit_note") or ""),
                      error=str(d.get("error") or ""), n=_int(d.get("n")))


def predictive_view(d: Any) -> Optional[Predictive]:
    """`Predictive` of a ``ppc.json`` dict (None for None; an ``{"error"}`` file gives
    one with its `error`)."""
    if d is None:
        return None
    d = _dict(d)
    if d.get("error") and not d.get("sites"):
        return Predictive(kind=str(d.get("kind") or ""), draws=_int(d.get("draws")),
                          sites=(), error=str(d["error"]))
    sites = tuple(_site(k, v) for k, v in _dict(d.get("sites")).items())
    return Predictive(kind=str(d.get("kind") or ""), draws=_int(d.get("draws")), sites=sites,
                      error=str(d.get("error") or ""))


# ---------------------------------------------------------------- PSIS-LOO

@dataclass(frozen=True)
class HighK:
    row: int
    label: str
    k: float


@dataclass(frozen=True)
class LooView:
    elpd_loo: Optional[float] = None
    se: Optional[float] = None
    p_loo: Optional[float] = None
    n_rows: Optional[int] = None
    n_draws: Optional[int] = None
    good_k: Optional[float] = None
    pareto_k: Optional[np.ndarray] = None
    high_k: tuple = ()           # HighK, largest k first (the file may list only some)
    n_high_k: Optional[int] = None  # every row above the threshold (the file's count)
    warning: bool = False
    method: str = ""
    var: str = ""
    kind: str = ""
    error: str = ""

    @property
    def n_high(self) -> int:
        if self.n_high_k is not None:
            return self.n_high_k
        if self.pareto_k is not None and self.good_k is not None:
            k = self.pareto_k[np.isfinite(self.pareto_k)]
            return int((k > self.good_k).sum())
        return len(self.high_k)

    @property
    def headline(self) -> str:
        """``elpd_loo -123.4 ± 5.6 · p_loo 3.2 · 100 rows × 400 draws · psis``."""
        if self.error:
            return f"PSIS-LOO: {self.error}"
        parts = []
        if self.elpd_loo is not None:
            se = f" ± {fmt_num(self.se)}" if self.se is not None else ""
            parts.append(f"elpd_loo {fmt_num(self.elpd_loo, 5)}{se}")
        if self.p_loo is not None:
            parts.append(f"p_loo {fmt_num(self.p_loo, 3)}")
        size = []
        if self.n_rows is not None:
            size.append(f"{self.n_rows} rows")
        if self.n_draws is not None:
            size.append(f"{self.n_draws} draws")
        if size:
            parts.append(" × ".join(size))
        if self.method:
            parts.append(self.method)
        return " · ".join(parts) or "PSIS-LOO"


def loo_view(d: Any) -> Optional[LooView]:
    """`LooView` of a ``loo.json`` dict (None for None)."""
    if d is None:
        return None
    d = _dict(d)
    if d.get("error") and d.get("elpd_loo") is None:
        return LooView(error=str(d["error"]))
    high = []
    for h in d.get("high_k") or ():
        if isinstance(h, dict):
            k = _num(h.get("k"))
            row = _int(h.get("row"))
            high.append(HighK(row=row if row is not None else -1,
                              label=str(h.get("label") if h.get("label") is not None
                                        else row), k=k if k is not None else float("nan")))
    high.sort(key=lambda h: -h.k if math.isfinite(h.k) else math.inf)
    k = _arr(d.get("pareto_k"))
    good = _num(d.get("good_k"))
    if not high and k is not None and good is not None:  # the file named none: derive
        idx = [i for i in np.argsort(-np.nan_to_num(k, nan=-np.inf)) if k[i] > good]
        high = [HighK(row=int(i), label=str(int(i)), k=float(k[i])) for i in idx]
    return LooView(elpd_loo=_num(d.get("elpd_loo")), se=_num(d.get("se")),
                   p_loo=_num(d.get("p_loo")), n_rows=_int(d.get("n_rows")),
                   n_draws=_int(d.get("n_draws")), good_k=good, pareto_k=k,
                   high_k=tuple(high), n_high_k=_int(d.get("n_high_k")),
                   warning=bool(d.get("warning", False)),
                   method=str(d.get("method") or ""), var=str(d.get("var") or ""),
                   kind=str(d.get("kind") or ""), error=str(d.get("error") or ""))


# ---------------------------------------------------------------- loading

def _note_for_status(status: str) -> str:
    if status == "running":
        return "the predictive checks are computed when the fit finishes"
    return (f"this run has no predictive checks: they come after a fit that finishes "
            f"(this one is {status})")


def load_predictive(run) -> tuple[Optional[Predictive], Optional[LooView], str]:
    """``(predictive, loo, note)`` of a `qvr.runs.Run`; `note` says why one is missing
    ("" when both are there)."""
    from qvr.runs import layout
    path = Path(run.path)
    status = run.status
    if status != "finished":  # (a fit writes them before its terminal event)
        return None, None, _note_for_status(status)
    files = (path / layout.PPC).exists() or (path / layout.LOO).exists()
    pointwise = bool(getattr(run, "pointwise_meta", None)) or \
        (path / layout.POINTWISE_DIR).is_dir()
    if not files and not pointwise:
        return None, None, NO_CHECKS
    notes = []
    ppc = loo = None
    try:
        ppc = predictive_view(run.ppc())
    except Exception as exc:  # a bad file or a failed computation: said, never a crash
        notes.append(f"predictive checks unreadable: {type(exc).__name__}: {exc}")
    prior = (getattr(run, "pointwise_meta", None) or {}).get("kind") == "prior"
    try:
        loo = None if prior else loo_view(run.loo())  # a prior run has no LOO
    except Exception as exc:
        notes.append(f"PSIS-LOO unreadable: {type(exc).__name__}: {exc}")
    if ppc is None and loo is None and not notes:
        notes.append(NO_CHECKS)
    return ppc, loo, "; ".join(notes)


# ---------------------------------------------------------------- comparison

@dataclass(frozen=True)
class CompareRow:
    name: str                    # how the comparison names the run (export, program, id)
    run_id: str
    program: str
    export: str
    rank: Optional[int]
    elpd_loo: Optional[float]
    se: Optional[float]
    elpd_diff: Optional[float]
    dse: Optional[float]
    p_loo: Optional[float]
    weight: Optional[float]
    warning: bool
    path: str = ""
    n_high_k: Optional[int] = None


@dataclass(frozen=True)
class Comparison:
    rows: tuple = ()             # CompareRow, best first
    verdict: str = ""
    error: str = ""              # the refusal (runs on different data) or a failure
    paths: tuple = ()            # the run folders compared


def comparison_view(d: Any, paths: Sequence = ()) -> Comparison:
    """`Comparison` of `qvr.inference.criticism.checks.compare`'s dict (rows under ``runs``, or
    ``rows``)."""
    d = _dict(d)
    rows = []
    for r in d.get("runs") or d.get("rows") or ():
        if not isinstance(r, dict):
            continue
        rows.append(CompareRow(name=str(r.get("name") or r.get("run_id") or ""),
                               run_id=str(r.get("run_id") or ""),
                               path=str(r.get("path") or ""),
                               n_high_k=_int(r.get("n_high_k")),
                               program=str(r.get("program") or ""),
                               export=str(r.get("export") or ""), rank=_int(r.get("rank")),
                               elpd_loo=_num(r.get("elpd_loo")), se=_num(r.get("se")),
                               elpd_diff=_num(r.get("elpd_diff")), dse=_num(r.get("dse")),
                               p_loo=_num(r.get("p_loo")), weight=_num(r.get("weight")),
                               warning=bool(r.get("warning", False))))
    rows.sort(key=lambda r: (r.rank if r.rank is not None else 1 << 30))
    return Comparison(rows=tuple(rows), verdict=str(d.get("verdict") or ""),
                      error=str(d.get("error") or ""), paths=tuple(Path(p) for p in paths))


def compare_runs(paths: Sequence) -> Comparison:
    """Compare the runs in `paths` by PSIS-LOO (`qvr.inference.criticism.checks.compare`; slow: it
    imports arviz-stats — call it off the UI thread).  A refusal (runs on different data)
    or any failure comes back as `Comparison.error`, never raised."""
    paths = tuple(Path(p) for p in paths)
    try:
        from qvr.runs import open_run
        runs = [open_run(p) for p in paths]
    except (ValueError, OSError) as exc:
        return Comparison(error=f"cannot compare: {exc}", paths=paths)
    try:
        from qvr.inference.criticism import checks
    except ImportError as exc:
        return Comparison(error=f"cannot compare: the checks are not available ({exc})",
                          paths=paths)
    try:
        out = checks.compare(runs)
    except ValueError as exc:  # CompareError: runs on different data, no LOO, ...
        return Comparison(error=str(exc), paths=paths)
    except Exception as exc:  # a bug: said in the pane, never a crash of the app
        return Comparison(error=f"cannot compare: {type(exc).__name__}: {exc}", paths=paths)
    return comparison_view(out, paths)
