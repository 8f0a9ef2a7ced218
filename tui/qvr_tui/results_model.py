"""Plain data for the Results and Runs panes, built from a run record (`qvr.runs.Run`).

Torch-free (numpy, `qvr.runs`, and the numpy-only `qvr.inference.diagnostics` for runs
that ended before their summary was written).  Nothing here draws; the panes render it.

* `load_results(run) -> Results`: status and message, whether the run is *partial* (no
  ``summary.json``/``samples.npz``: interrupted or killed; then everything is rebuilt from
  the draws chunks and progress events), and per method:
  - MCMC (``hmc``/``nuts``): Stan's five checks (`Check`), the summary grouped by site
    (`SiteRow` with its coordinates `Coord`), per-parameter series (`param_series`),
    posterior mean/sd matrices of 2-D sites (`site_matrix`);
  - SVI: final loss, the loss curve, guide locations/scales per site (`GuideSite`);
    a minibatch fit's batch (run.json's ``batch``: rows, batch size, steps per epoch,
    epochs, processes) as `Results.batch` / `Results.world_size`, said by `batch_facts`;
  - MCMC and SVI: recorded quantities (``record v = e``, design E9.6) as rows of the
    summary like sites, marked `SiteRow.recorded` (listed in `Results.recorded`); MCMC
    draws them like sites (`param_series`, `site_matrix`, the ArviZ posterior), SVI gives
    their posterior mean and sd over the guide's draws (`GuideSite.recorded`); the five
    checks are the sites' only;
  - SMC: top sequences (`SequenceRow`, text through the record's vocabulary), log Z-hat;
  - a prediction (``qvr predict``, method ``predict``) and a ``--method prior`` run: the
    draws' mean and sd per site as `GuideSite` rows; a prediction's source run in
    `Results.predicted_from`, what it is in `Results.note`;
  - any method, a program with attention: `Results.circuits` (`qvr_tui.circuits_model`);
  - a finished fit that recorded them (issue 25): `Results.predictive` (the predictive
    checks) and `Results.loo` (PSIS-LOO), `qvr_tui.predictive_model`; else
    `Results.predictive_note` says why there are none.
* `table_rows(sites, sort, query, expanded)`: what the summary table shows, sorted
  (`SORT_KEYS`) and filtered by a substring.
* `run_rows(runs_dir, program)` → `RunRow`s for the Runs table (status, method, start,
  stale mark, and `run_key_number(run)`: final loss / max R-hat / log Z).
* `curve(run)`: the curve two runs are overlaid by (SVI losses; MCMC mean log density per
  draw over chains).
* `export_arviz(results, path)`: MCMC draws to NetCDF through ArviZ when it is installed,
  else `ArvizMissing` with a message saying how to get it.

Thresholds of the checks (Stan's ``diagnose``/``check_hmc_diagnostics`` and Vehtari et
al. 2021): no divergent transition after warmup; rank-normalised split R-hat ≤ 1.01 for
every coordinate; bulk and tail ESS ≥ 100 per chain (so ≥ 100·chains) for every
coordinate; tree-depth saturation: no draw at the maximum depth (share 0 %: a single hit
means the sampler was cut short, so the check is red); E-BFMI ≥ 0.3 for every chain.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from qvr.inference.diagnostics import EBFMI_MIN, ESS_PER_CHAIN, RHAT_MAX, e_bfmi
from qvr.events import FitFailed, FitProgress, ParticlesSnapshot
from qvr.runs.layout import RECORDED_PREFIX, nothing_sampled

__all__ = ["Check", "Coord", "SiteRow", "ParamSeries", "GuideSite", "squeeze_shape", "SequenceRow", "Results",
           "load_results", "table_rows", "SORT_KEYS", "param_series", "site_matrix",
           "run_key_number", "curve", "export_arviz", "ArvizMissing", "RHAT_MAX",
           "ESS_PER_CHAIN", "EBFMI_MIN", "TREE_DEPTH_SHARE_MAX", "MCMC", "STAT_COLUMNS",
           "RunRow", "run_rows", "TableRow", "recorded_guide_rows", "batch_facts"]

MCMC = ("hmc", "nuts")
TREE_DEPTH_SHARE_MAX = 0.0  # share of draws at the maximum tree depth above which it is red
STAT_COLUMNS = ("mean", "sd", "q5", "q50", "q95", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")


# ---------------------------------------------------------------- records

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


@dataclass(frozen=True)
class Coord:
    """One scalar coordinate of a site (a row of the summary)."""

    site: str
    label: str            # "probs[0,1]" or "mu"
    index: tuple          # (0, 1), () for a scalar site
    stats: dict           # STAT_COLUMNS -> float

    def get(self, key: str) -> float:
        v = self.stats.get(key)
        return float("nan") if v is None else float(v)


@dataclass(frozen=True)
class SiteRow:
    """A site of the summary: its shape and the worst of its coordinates."""

    site: str
    shape: tuple
    coords: tuple  # of Coord, in index order
    order: int     # position in the record
    recorded: bool = False  # a recorded quantity (`record v = e`, E9.6), not a site

    @property
    def shape_text(self) -> str:
        return "scalar" if not self.shape else "×".join(map(str, self.shape))

    def _vals(self, key: str) -> np.ndarray:
        return np.array([c.get(key) for c in self.coords], dtype=float)

    @property
    def worst_r_hat(self) -> float:
        v = self._vals("r_hat")
        if np.isnan(v).any():
            return float("nan")
        return float(v.max()) if v.size else float("nan")

    @property
    def min_ess_bulk(self) -> float:
        return _nanmin(self._vals("ess_bulk"))

    @property
    def min_ess_tail(self) -> float:
        return _nanmin(self._vals("ess_tail"))

    @property
    def mean_range(self) -> tuple[float, float]:
        v = self._vals("mean")
        return (_nanmin(v), _nanmax(v))

    @property
    def max_sd(self) -> float:
        return _nanmax(self._vals("sd"))

    @property
    def max_mcse(self) -> float:
        return _nanmax(self._vals("mcse_mean"))

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2


@dataclass(frozen=True)
class ParamSeries:
    """What the parameter detail plots: per-chain trace, rank histograms, pooled histogram."""

    label: str
    traces: tuple            # one float array per chain (draw index = x)
    rank_counts: np.ndarray  # (chains, bins): counts of each chain's draws in rank bins
    rank_edges: np.ndarray   # (bins + 1,) rank bin edges (ranks 1..N pooled)
    hist_counts: np.ndarray  # (bins,) pooled histogram of the draws
    hist_edges: np.ndarray   # (bins + 1,)
    divergent: tuple         # per chain: int array of divergent draw indices


def squeeze_shape(shape) -> tuple:
    """`shape` without its length-1 axes: the one rule by which a guide's shape is
    compared with its site's (an 8-vector site with an 8×1 guide location has the same
    coordinates; a scalar site with a one-number guide too)."""
    return tuple(int(d) for d in shape if d != 1)


@dataclass(frozen=True)
class GuideSite:
    """An SVI guide site: location and scale (scale = exp(log_scale)) of the fitted normal
    guide.  They live in the site's unconstrained space: for a constrained site (a
    simplex, a positive scale) `loc` may have another shape than the site's value
    (`site_shape`, from the summary; a 3×4 Dirichlet plate has a 3×3 `loc`).

    Shapes are compared without their length-1 axes (`squeeze_shape`): `unconstrained`
    (the guide's coordinates are not the site's), `is_matrix` (two axes longer than 1:
    a heatmap) and the Results table's shape column (`guide_shape_text`) all follow it."""

    site: str
    loc: np.ndarray
    scale: Optional[np.ndarray]
    site_shape: Optional[tuple] = None
    # a recorded quantity (`record v = e`, E9.6): `loc`/`scale` are the posterior mean/sd
    # of its values over the guide's draws (`recorded_guide_rows`), in its own coordinates
    recorded: bool = False

    @property
    def shape(self) -> tuple:
        return tuple(self.loc.shape)

    @property
    def squeezed(self) -> tuple:
        """The guide's shape without length-1 axes."""
        return squeeze_shape(self.shape)

    @property
    def unconstrained(self) -> bool:
        """Whether `loc` is not in the site's own coordinates (its squeezed shape differs
        from the site's)."""
        if self.site_shape is None:
            return False
        return squeeze_shape(self.site_shape) != self.squeezed

    @property
    def is_matrix(self) -> bool:
        """Two axes longer than 1 (an 8×1 location is a vector, not a matrix)."""
        return len(self.squeezed) == 2

    def matrix(self, which: str = "loc") -> Optional[np.ndarray]:
        """The location (or ``"scale"``) as a 2-D array when `is_matrix` (a 1×3×3
        location as 3×3), else None."""
        m = self.loc if which == "loc" else self.scale
        if m is None or not self.is_matrix:
            return None
        return np.asarray(m, dtype=float).reshape(self.squeezed)


@dataclass(frozen=True)
class SequenceRow:
    tokens: tuple
    weight: float
    text: Optional[str]


@dataclass
class Results:
    """Everything the Results pane shows about one run (see the module docstring)."""

    path: Path
    method: str
    status: str
    message: str = ""
    partial: bool = False      # built from draws chunks / events: no summary or samples
    partial_note: str = ""
    note: str = ""             # what the run did instead (e.g. nothing to sample)
    source_sha256: Optional[str] = None
    program_path: Optional[str] = None
    stats: dict = field(default_factory=dict)
    # MCMC
    checks: tuple = ()
    sites: tuple = ()                       # SiteRow
    draws: dict = field(default_factory=dict)          # site -> (chains, draws, *shape)
    sample_stats: dict = field(default_factory=dict)   # name -> array
    num_chains: int = 0
    num_draws: int = 0
    truncated: int = 0                      # coordinates the summary does not list
    # SVI
    final_loss: Optional[float] = None
    losses: Optional[np.ndarray] = None
    guide: tuple = ()                       # GuideSite
    batch: dict = field(default_factory=dict)  # run.json's "batch" (minibatch SVI)
    world_size: int = 1                     # processes of a torchrun launch
    # SMC
    sequences: tuple = ()                   # SequenceRow
    log_Z: Optional[float] = None
    vocab: Optional[list] = None
    # attention circuits (any method; `qvr_tui.circuits_model`), None without them
    circuits: Optional[object] = None
    # recorded quantities (`record v = e`, E9.6): names in `sites`/`draws`/`guide`
    recorded: tuple = ()
    # after the fit (issue 25; `qvr_tui.predictive_model`): None when the record has none,
    # `predictive_note` then says why
    predictive: Optional[object] = None     # predictive_model.Predictive
    loo: Optional[object] = None            # predictive_model.LooView
    predictive_note: str = ""
    # a prediction (`qvr predict`): the run its draws came from (run id), else ""
    predicted_from: str = ""

    @property
    def has_checks(self) -> bool:
        """The record holds predictive checks or PSIS-LOO (issue 25)."""
        return self.predictive is not None or self.loo is not None

    @property
    def is_mcmc(self) -> bool:
        return self.method in MCMC

    def site(self, name: str) -> Optional[SiteRow]:
        return next((s for s in self.sites if s.site == name), None)

    @property
    def final_elbo(self) -> Optional[float]:
        return None if self.final_loss is None else -self.final_loss


def _nanmin(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.min()) if v.size else float("nan")


def _nanmax(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else float("nan")


# ---------------------------------------------------------------- loading

def load_results(run) -> Results:
    """The `Results` of a `qvr.runs.Run` (any status; a partial record gives what it can)."""
    summary = run.summary
    losses = run.losses() if run.method == "svi" else None  # read once: both need it
    events = _events_kept(run, keep_progress=run.method == "svi" and losses is None)
    status = run.status
    message = ""
    if summary is not None:
        message = summary.get("message") or ""
    failed = next((e for e in events if isinstance(e, FitFailed)), None)
    if failed is not None and not message:
        message = failed.message
    if status == "failed" and not message:
        lines = (run.error or "").strip().splitlines()
        message = lines[-1] if lines else "the fit failed (no message recorded)"
    res = Results(path=Path(run.path), method=run.method, status=status, message=message,
                  source_sha256=run.source_sha256, program_path=run.program.get("path"),
                  stats=dict((summary or {}).get("stats") or {}))
    if summary is None:
        res.partial = True
    meta = getattr(run, "meta", None) or {}
    batch = meta.get("batch")
    res.batch = dict(batch) if isinstance(batch, dict) else {}
    ws = res.batch.get("world_size", meta.get("world_size"))
    res.world_size = int(ws) if isinstance(ws, (int, float)) and ws >= 1 else 1
    if res.is_mcmc:
        _load_mcmc(run, res, summary, events)
    elif res.method in ("svi", "prior", "predict"):  # prior / predicted draws: a table of
        _load_svi(run, res, events, losses)           # their means and sds, as SVI's guide
        if res.method == "predict":
            res.predicted_from = str((meta.get("predicted_from") or {}).get("run_id") or "")
            data = meta.get("data") or {}
            where = Path(data["path"]).name if data.get("path") else data.get("name")
            rows = res.stats.get("rows", "?")
            res.note = (f"prediction at {rows} new row{'' if rows == 1 else 's'}"
                        + (f" of {where}" if where else "") + f": "
                        f"{res.stats.get('num_chains', '?')} x "
                        f"{res.stats.get('num_samples', '?')} draws of "
                        f"{res.predicted_from or '?'}")
    elif res.method == "smc":
        _load_smc(run, res, events)
    if res.partial and not res.partial_note:
        res.partial_note = _partial_note(res)
    from qvr_tui.circuits_model import load_circuits
    res.circuits = load_circuits(run, res.program_path)
    from qvr_tui.predictive_model import load_predictive
    res.predictive, res.loo, res.predictive_note = load_predictive(run)
    return res


def _events_kept(run, chunk_bytes: int = 1 << 20,
                 keep_progress: Optional[bool] = None) -> list:
    """The record's events that `load_results` reads, parsed a megabyte at a time: every
    event but progress, of which only the last per (phase, chain, metric names) is kept
    (what the loaders read of it), except an SVI record without ``losses.npy`` (its loss
    curve is its progress events: `keep_progress`, found out here when None).  A record of
    100,000 progress events parsed at once left the UI process ~90 MB larger for good
    (fragmented by the objects); see `qvr_tui.state.fold_record`."""
    if keep_progress is None:
        keep_progress = run.method == "svi" and run.losses() is None
    tail = run.tail(load_draws=False)
    kept: list = []
    last: dict = {}  # (phase, chain, metric names) -> index in kept of its last progress
    for events in tail.pieces(chunk_bytes):
        for e in events:
            if isinstance(e, FitProgress) and not keep_progress:
                key = (e.phase, e.chain, tuple(sorted(e.metrics)))
                if key in last:
                    kept[last[key]] = None
                last[key] = len(kept)
            kept.append(e)
    return [e for e in kept if e is not None]


def _partial_note(res: Results) -> str:
    what = {"interrupted": "the worker stopped without finishing",
            "running": "the fit is still running",
            "cancelled": "the fit was cancelled",
            "failed": "the fit failed"}.get(res.status, "no summary was written")
    if res.status == "failed" and not (res.draws or (res.losses is not None and len(res.losses))
                                       or res.sequences):
        return "the fit failed before its first step: nothing else was recorded"
    if res.is_mcmc:
        return (f"partial: {what}; built from {res.num_draws} draws per chain in the "
                f"draws chunks")
    if res.method == "svi":
        n = 0 if res.losses is None else len(res.losses)
        return f"partial: {what}; losses from {n} progress events"
    return f"partial: {what}; particles from the last snapshot"


def _progress_last(events, phase: str) -> dict[int, dict]:
    """The metrics of the last progress event of `phase`, per chain."""
    out: dict[int, dict] = {}
    for e in events:
        if isinstance(e, FitProgress) and e.phase == phase:
            out[int(e.chain or 0)] = dict(e.metrics, _step=e.step)
    return out


def _load_mcmc(run, res: Results, summary: Optional[dict], events) -> None:
    if nothing_sampled(res.stats):
        # no continuous latent site (finite ones summed out): no chain ran, no draw, no
        # check applies; the run's result is the log marginal likelihood
        lml = float(res.stats["log_marginal_likelihood"])
        if str(res.stats.get("note", "")).startswith("an exported morphism"):
            res.note = (f"nothing to sample (an exported morphism: parameters, no latent "
                        f"site; fit them with SVI): log-likelihood of the data {lml:.6g}")
        else:
            res.note = (f"nothing to sample (no continuous latent site): log marginal "
                        f"likelihood {lml:.6g}")
        return
    if res.stats.get("compile_fallback"):  # NUTS's transition did not compile
        res.note = str(res.stats["compile_fallback"])
    samples = run.samples()
    draws = {_plain(k): v for k, v in samples.items() if not k.startswith("sample_stats.")}
    res.sample_stats = {k.split(".", 1)[1]: v for k, v in samples.items()
                        if k.startswith("sample_stats.")}
    res.recorded = tuple(_plain(k) for k in samples if k.startswith(RECORDED_PREFIX))
    if not draws:
        res.partial = True
        draws = run.draws()  # recorded quantities under their own names
        res.recorded = tuple(run.recorded_names())
    res.draws = {k: np.asarray(v) for k, v in draws.items()}
    first = next(iter(res.draws.values()), None)
    res.num_chains = int(first.shape[0]) if first is not None else int(
        res.stats.get("num_chains") or run.config.get("num_chains") or 0)
    res.num_draws = int(first.shape[1]) if first is not None else 0
    params = dict((summary or {}).get("parameters") or {})
    res.truncated = int((summary or {}).get("truncated") or 0)
    if (not params or res.truncated) and res.draws and res.num_draws >= 4:
        from qvr.inference.diagnostics import summary as diag_summary
        params = diag_summary(res.draws, max_coordinates=None).rows
        res.truncated = 0
    res.sites = _mark_recorded(_group(params, res.draws), res.recorded)
    res.checks = mcmc_checks(res, _progress_last(events, "sampling"), run.config)


def _plain(k: str) -> str:
    """A draws key without the recorded-quantity prefix (``recorded.theta`` -> ``theta``)."""
    return k[len(RECORDED_PREFIX):] if k.startswith(RECORDED_PREFIX) else k


def _mark_recorded(sites: tuple, recorded) -> tuple:
    names = set(recorded)
    return tuple(replace(s, recorded=True) if s.site in names else s for s in sites)


def recorded_guide_rows(sites, every: bool = False) -> tuple:
    """SVI: a `GuideSite` per recorded quantity of `sites` (`recorded=True`), its `loc`
    and `scale` the posterior mean and sd of each coordinate (the summary's rows);
    `every`: every site so (a ``--method prior`` run: the prior draws' mean and sd)."""
    out = []
    for s in sites:
        if not (s.recorded or every):
            continue
        shape = tuple(s.shape) or (1,)
        loc, sd = np.full(shape, np.nan), np.full(shape, np.nan)
        for c in s.coords:
            at = c.index if c.index else (0,) * len(shape)
            loc[at], sd[at] = c.get("mean"), c.get("sd")
        out.append(GuideSite(site=s.site, loc=loc, scale=sd, site_shape=tuple(s.shape),
                             recorded=s.recorded))
    return tuple(out)


def _site_shape(name: str, draws: dict, coords: list) -> tuple:
    if name in draws:
        shape = tuple(int(s) for s in np.asarray(draws[name]).shape[2:])
        return () if shape in ((), (1,)) else shape
    idx = [c.index for c in coords if c.index]
    if not idx:
        return ()
    return tuple(max(i[k] for i in idx) + 1 for k in range(len(idx[0])))


def _parse_label(label: str) -> tuple[str, tuple]:
    if label.endswith("]") and "[" in label:
        name, _, rest = label[:-1].partition("[")
        try:
            return name, tuple(int(x) for x in rest.split(","))
        except ValueError:
            return label, ()
    return label, ()


def _group(params: dict, draws: dict) -> tuple:
    by_site: dict[str, list] = {}
    for label, row in params.items():
        name, index = _parse_label(label)
        by_site.setdefault(name, []).append(
            Coord(site=name, label=label, index=index,
                  stats={k: float(row[k]) if row.get(k) is not None else float("nan")
                         for k in STAT_COLUMNS}))
    out = []
    for order, (name, coords) in enumerate(by_site.items()):
        coords.sort(key=lambda c: c.index)
        out.append(SiteRow(site=name, shape=_site_shape(name, draws, coords),
                           coords=tuple(coords), order=order))
    return tuple(out)


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
        b, t = _nanmin(np.array(eb)), _nanmin(np.array(et))
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


def batch_facts(res: Results) -> str:
    """A minibatch fit's facts, from run.json's ``batch`` (``{"rows", "batch_size",
    "steps_per_epoch", "epochs", "world_size"}``; the epochs done, when run.json has
    none, from the summary's ``stats``): ``batch 256 of 1,000,000 rows · 3 epochs of
    3,907 steps · 2 processes``; empty for a full-batch fit in one process."""
    b = res.batch
    parts = []

    def num(key):
        v = b.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    size, rows, k, epochs = num("batch_size"), num("rows"), num("steps_per_epoch"), \
        num("epochs")
    if epochs is None and b:  # not in run.json: the summary's stats say it
        e = res.stats.get("epochs")
        epochs = e if isinstance(e, (int, float)) and not isinstance(e, bool) else None
    if size is not None:
        parts.append(f"batch {size:,}" + (f" of {rows:,} rows" if rows is not None else ""))
    if epochs is not None:
        e = f"{int(epochs):,}" if float(epochs).is_integer() else f"{epochs:,.2f}"
        parts.append(f"{e} epoch{'' if epochs == 1 else 's'}"
                     + (f" of {k:,} step{'' if k == 1 else 's'}" if k is not None else ""))
    elif k is not None:
        parts.append(f"{k:,} steps per epoch")
    if res.world_size > 1:
        parts.append(f"{res.world_size} processes")
    return " · ".join(parts)


def _load_svi(run, res: Results, events, losses) -> None:
    """`losses`: the record's ``losses.npy`` (`Run.losses()`, read by the caller)."""
    if losses is None:
        # no losses.npy: the curve is the progress events'.  Partial only without a
        # summary: a run cancelled before its first step has a summary and no loss.
        vals = [e.metrics.get("loss") for e in events
                if isinstance(e, FitProgress) and e.phase == "optimization"]
        losses = np.array([v for v in vals if v is not None], dtype=float) if vals else None
        if run.summary is None:
            res.partial = True
    res.losses = None if losses is None else np.asarray(losses, dtype=float)
    fl = res.stats.get("final_loss")
    if fl is None and res.losses is not None and len(res.losses):
        fl = float(res.losses[-1])
    if fl is not None and math.isnan(float(fl)) and (res.losses is None or not len(res.losses)):
        fl = None  # no step was taken: there is no loss (the summary says NaN)
    res.final_loss = None if fl is None else float(fl)
    summary = run.summary or {}
    res.recorded = tuple(summary.get("recorded") or ())
    res.sites = _mark_recorded(_group(dict(summary.get("parameters") or {}), {}), res.recorded)
    shapes = {s.site: s.shape for s in res.sites}
    params = run.params()
    # records written before summaries were complete kept only their first 200
    # coordinates: an unconstrained site's full shape is its guide location's
    for k, v in params.items():
        name = k[4:] if k.startswith("loc_") else None
        if name and (name not in shapes or
                     int(np.prod(shapes[name] or (1,))) < int(np.size(v))):
            shapes[name] = tuple(np.shape(v))
    guide = []
    for k, v in params.items():
        if k.startswith("loc_"):
            name = k[4:]
            ls = params.get("log_scale_" + name)
            guide.append(GuideSite(site=name, loc=np.asarray(v, dtype=float),
                                   scale=None if ls is None else np.exp(np.asarray(ls, float)),
                                   site_shape=shapes.get(name)))
    res.guide = tuple(guide) + recorded_guide_rows(res.sites,
                                                    every=run.method in ("prior", "predict"))


def _text(tokens, vocab) -> Optional[str]:
    if not vocab:
        return None
    try:
        return "".join(vocab[int(t)] for t in tokens)
    except (IndexError, ValueError, TypeError):
        return None


def _load_smc(run, res: Results, events) -> None:
    seqs = run.sequences
    if seqs is not None:
        res.vocab = seqs.get("vocab")
        res.log_Z = seqs.get("log_Z", res.stats.get("log_Z"))
        eos = seqs.get("eos")
        rows = []
        for t in seqs.get("top") or []:
            toks = tuple(int(x) for x in t.get("tokens", ()))
            text = t.get("text")
            if text is None:
                body = toks[:-1] if toks and eos is not None and toks[-1] == eos else toks
                text = _text(body, res.vocab)
            rows.append(SequenceRow(toks, float(t.get("weight", float("nan"))), text))
        res.sequences = tuple(rows)
        return
    res.partial = True
    snap = None
    for e in events:
        if isinstance(e, ParticlesSnapshot):
            snap = e
        if isinstance(e, FitProgress) and e.phase == "smc" and "log_Z" in e.metrics:
            res.log_Z = float(e.metrics["log_Z"])
    if snap is None:
        return
    lw = np.array(snap.log_weights, dtype=float)
    w = np.exp(lw - lw.max()) if lw.size and np.isfinite(lw.max()) else np.zeros_like(lw)
    w = w / w.sum() if w.sum() > 0 else w
    order = np.argsort(-w, kind="stable")
    res.sequences = tuple(SequenceRow(tuple(snap.sequences[i]), float(w[i]), None)
                          for i in order)


# ---------------------------------------------------------------- the summary table

def _worst_high(v: float) -> float:
    """Ascending sort key putting the largest values first, and NaN (no value: worst)
    before them."""
    return -math.inf if math.isnan(v) else -v


SORT_KEYS: dict[str, tuple[str, Callable]] = {
    # key: (label, function of a SiteRow or Coord giving an ascending sort key)
    "order": ("record order", lambda r: getattr(r, "order", 0)),
    "r_hat": ("worst R-hat first",
              lambda r: _worst_high(r.worst_r_hat if isinstance(r, SiteRow)
                                    else r.get("r_hat"))),
    "ess_bulk": ("lowest bulk ESS first",
                 lambda r: _nan_first(r.min_ess_bulk if isinstance(r, SiteRow)
                                      else r.get("ess_bulk"))),
    "ess_tail": ("lowest tail ESS first",
                 lambda r: _nan_first(r.min_ess_tail if isinstance(r, SiteRow)
                                      else r.get("ess_tail"))),
    "name": ("by name", lambda r: r.site if isinstance(r, SiteRow) else r.label),
}


def _nan_first(v: float) -> float:
    return -math.inf if math.isnan(v) else v


@dataclass(frozen=True)
class TableRow:
    key: str            # site name, or coordinate label
    site: str
    coord: Optional[Coord]   # None for a site row
    row: Optional[SiteRow]
    depth: int          # 0 site, 1 coordinate


def table_rows(sites: Sequence[SiteRow], sort: str = "order", query: str = "",
               expanded: frozenset | set = frozenset()) -> list[TableRow]:
    """The rows the summary table shows: sites sorted by `sort` (a `SORT_KEYS` key), each
    expanded site followed by its coordinates (sorted the same way; the sort within a site
    keeps index order for "order"/"name").  `query` keeps the sites whose name contains it
    (case-insensitive), or those with a coordinate label containing it — then only the
    matching coordinates are listed, as if expanded."""
    fn = SORT_KEYS.get(sort, SORT_KEYS["order"])[1]
    q = query.strip().lower()
    out = []
    for s in sorted(sites, key=lambda r: (fn(r), r.order)):
        if q and q not in s.site.lower():
            hits = [c for c in s.coords if q in c.label.lower()]
            if not hits:
                continue
            coords, show = hits, True
        else:
            coords, show = list(s.coords), s.site in expanded
        out.append(TableRow(s.site, s.site, None, s, 0))
        if show and s.shape:
            if sort not in ("order", "name"):
                coords = sorted(coords, key=lambda c: (fn(c), c.index))
            out.extend(TableRow(c.label, s.site, c, s, 1) for c in coords)
    return out


# ---------------------------------------------------------------- per-parameter series

def _coord_draws(res: Results, site: str, index: tuple) -> Optional[np.ndarray]:
    a = res.draws.get(site)
    if a is None:
        return None
    a = np.asarray(a, dtype=float)
    if a.ndim == 2:
        return a
    flat = a.reshape(a.shape[0], a.shape[1], -1)
    if not index:
        return flat[..., 0]
    k = int(np.ravel_multi_index(index, a.shape[2:]))
    return flat[..., k]


def param_series(res: Results, label: str, bins: int = 20) -> Optional[ParamSeries]:
    """Trace, rank plot and histogram data of coordinate `label` ("probs[0,1]", "mu"), or
    None when the record holds no draws for it."""
    site, index = _parse_label(label)
    x = _coord_draws(res, site, index)
    if x is None or x.size == 0:
        return None
    C, N = x.shape
    flat = x.reshape(-1)
    ranks = np.argsort(np.argsort(flat, kind="stable"), kind="stable").reshape(C, N) + 1
    nb = max(1, min(bins, N // 5 if N >= 10 else 1))
    rank_edges = np.linspace(0.5, C * N + 0.5, nb + 1)
    rank_counts = np.stack([np.histogram(r, bins=rank_edges)[0] for r in ranks])
    finite = flat[np.isfinite(flat)]
    hb = max(1, min(bins, int(math.sqrt(max(finite.size, 1)))))
    if finite.size:
        hist_counts, hist_edges = np.histogram(finite, bins=hb)
    else:
        hist_counts, hist_edges = np.zeros(1, int), np.array([0.0, 1.0])
    div = res.sample_stats.get("diverging")
    if div is not None:
        d = np.asarray(div).astype(bool)[:, :N]
        divergent = tuple(np.flatnonzero(row) for row in d)
    else:
        divergent = tuple(np.zeros(0, int) for _ in range(C))
    return ParamSeries(label=label, traces=tuple(x[c] for c in range(C)),
                       rank_counts=rank_counts, rank_edges=rank_edges,
                       hist_counts=hist_counts, hist_edges=hist_edges, divergent=divergent)


def site_matrix(res: Results, site: str, stat: str = "mean") -> Optional[np.ndarray]:
    """Posterior mean or sd (`stat`) of a 2-D site as a matrix (MCMC: over all draws, or
    from the summary rows when draws are missing; SVI: the guide's loc or scale)."""
    if res.method == "svi":
        g = next((g for g in res.guide if g.site == site), None)
        if g is None:
            return None
        return g.matrix("loc" if stat == "mean" else "scale")
    a = res.draws.get(site)
    if a is not None and np.asarray(a).ndim == 4:
        a = np.asarray(a, dtype=float)
        pooled = a.reshape(-1, *a.shape[2:])
        if stat == "mean":
            return pooled.mean(axis=0)
        return pooled.std(axis=0, ddof=1) if pooled.shape[0] > 1 else np.full(a.shape[2:], np.nan)
    row = res.site(site)
    if row is None or len(row.shape) != 2:
        return None
    m = np.full(row.shape, np.nan)
    for c in row.coords:
        m[c.index] = c.get("mean" if stat == "mean" else "sd")
    return m


# ---------------------------------------------------------------- runs table and overlays

def run_key_number(run) -> tuple[str, Optional[float]]:
    """The Runs table's number: ("loss", final loss) for SVI, ("R-hat", max) for MCMC
    (("log ML", log marginal likelihood) for one with nothing to sample), ("log Z", value)
    for SMC; the value is None when the record does not have it yet."""
    method = run.method
    stats = ((run.summary or {}).get("stats") or {}) if _safe_summary(run) else {}
    if method == "svi":
        v = stats.get("final_loss")
        if v is None:
            ls = run.losses()
            if ls is not None and len(ls):
                v = float(ls[-1])
        if v is None:
            v = _last_metric(run, "optimization", "loss")
        return "loss", None if v is None else float(v)
    if method in MCMC:
        v = stats.get("max_r_hat")
        if v is None and nothing_sampled(stats):  # its result: no R-hat
            return "log ML", float(stats["log_marginal_likelihood"])
        return "R-hat", None if v is None else float(v)
    if method == "smc":
        v = stats.get("log_Z")
        if v is None:
            v = _last_metric(run, "smc", "log_Z")
        return "log Z", None if v is None else float(v)
    if method == "prior":
        v = stats.get("num_samples")
        return "draws", None if v is None else float(v)
    if method == "predict":  # `qvr predict`: the fit's draws used, over all chains
        v, c = stats.get("num_samples"), stats.get("num_chains") or 1
        return "draws", None if v is None else float(v) * float(c)
    return "", None


def _safe_summary(run) -> bool:
    try:
        run.summary
    except ValueError:
        return False
    return True


def _last_metric(run, phase: str, key: str) -> Optional[float]:
    v = None
    for e in run.events(load_draws=False):
        if isinstance(e, FitProgress) and e.phase == phase and key in e.metrics:
            v = e.metrics[key]
    return v


def curve(run) -> tuple[str, np.ndarray, np.ndarray]:
    """(label, x, y) of the run's curve for overlays: SVI loss per step; MCMC log density
    per draw (mean over chains, sampling phase) from ``samples.npz``, else the progress
    events' log density per step (warmup then sampling); SMC log Z-hat per step."""
    m = run.method
    if m == "svi":
        ls = run.losses()
        if ls is not None and len(ls):
            y = np.asarray(ls, dtype=float)
            return "loss", np.arange(1, len(y) + 1, dtype=float), y
        pts = [(e.step, e.metrics["loss"]) for e in run.events(load_draws=False)
               if isinstance(e, FitProgress) and "loss" in e.metrics]
        return "loss", np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    if m in MCMC:
        lp = run.samples().get("sample_stats.log_density")
        if lp is not None and np.asarray(lp).size:
            y = np.asarray(lp, dtype=float).mean(axis=0)
            return "log density", np.arange(len(y), dtype=float), y
        per: dict[tuple, list] = {}
        for e in run.events(load_draws=False):
            if isinstance(e, FitProgress) and e.phase == "sampling" \
                    and "log_density" in e.metrics:
                per.setdefault(e.step, []).append(e.metrics["log_density"])
        steps = sorted(per)
        return "log density", np.array(steps, float), \
            np.array([np.mean(per[s]) for s in steps], float)
    pts = [(e.step, e.metrics["log_Z"]) for e in run.events(load_draws=False)
           if isinstance(e, FitProgress) and "log_Z" in e.metrics]
    return "log Z", np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)


# ---------------------------------------------------------------- ArviZ export

class ArvizMissing(RuntimeError):
    """ArviZ is not installed (the message says how to install it)."""


ARVIZ_MISSING = "Export to ArviZ needs the arviz package: pip install arviz (into .venv)."


def export_arviz(res: Results, path=None, importer: Callable = None) -> Path:
    """Write the MCMC draws and sampler statistics to NetCDF through ArviZ
    (``RUN/posterior.nc`` by default) and return the path.  Raises `ArvizMissing` when
    ArviZ cannot be imported, ValueError when the run has no draws."""
    if not res.is_mcmc:
        raise ValueError(f"{res.path}: only MCMC draws can be exported to ArviZ "
                         f"(this run used {res.method})")
    if not res.draws:
        raise ValueError(f"{res.path}: the run has no draws to export")
    if importer is None:
        import importlib
        importer = importlib.import_module
    try:
        az = importer("arviz")
    except ImportError:
        raise ArvizMissing(ARVIZ_MISSING) from None
    posterior = {k: (v[..., 0] if v.ndim == 3 and v.shape[2] == 1 else v)
                 for k, v in res.draws.items()}
    names = {"log_density": "lp", "diverging": "diverging", "accept_prob": "acceptance_rate",
             "tree_depth": "tree_depth", "num_steps": "n_steps", "energy": "energy"}
    stats = {names[k]: np.asarray(v) for k, v in res.sample_stats.items()
             if k in names and np.asarray(v).ndim == 2}
    if "diverging" in stats:
        stats["diverging"] = stats["diverging"].astype(bool)
    try:
        data = az.from_dict(posterior=posterior, sample_stats=stats or None)
    except TypeError:  # ArviZ >= 1.0: one dict of groups
        groups = {"posterior": posterior}
        if stats:
            groups["sample_stats"] = stats
        data = az.from_dict(groups)
    out = Path(path) if path is not None else res.path / "posterior.nc"
    data.to_netcdf(str(out))
    return out


# ---------------------------------------------------------------- the runs table

@dataclass(frozen=True)
class RunRow:
    """One past run of a program as the Runs table shows it."""

    path: Path
    name: str
    status: str
    method: str
    started: str            # "2026-11-24 13:45:01" (UTC, as recorded)
    key_label: str          # "loss", "R-hat", "log Z"
    key_value: Optional[float]
    stale: bool             # made from another text of the program

    @property
    def key_text(self) -> str:
        if self.key_value is None:
            return ""
        return f"{self.key_label} {self.key_value:.4g}"


def run_rows(runs_dir, program_path) -> list[RunRow]:
    """The runs of `program_path` under `runs_dir`, newest first (`qvr.runs.list_runs`)."""
    from qvr.runs import list_runs
    try:
        from qvr_tui.program_model import read_program, source_sha256
        current = source_sha256(read_program(program_path))
    except (OSError, UnicodeDecodeError):
        current = None
    out = []
    for run in list_runs(runs_dir, program=str(program_path)):
        try:
            label, value = run_key_number(run)
            status = run.status
        except (ValueError, OSError):
            label, value, status = "", None, "unreadable"
        started = (run.started or "")[:19].replace("T", " ")
        out.append(RunRow(path=Path(run.path), name=Path(run.path).name, status=status,
                          method=run.method, started=started, key_label=label,
                          key_value=value,
                          stale=bool(current and run.source_sha256
                                     and run.source_sha256 != current)))
    return out
