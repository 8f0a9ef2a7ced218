"""A run record (`qvr.runs.Run`) read into the Results pane's `Results`
(`qvr_tui.results_data`): `load_results`.

Torch-free (numpy, `qvr.runs`, and the numpy-only `qvr.inference.criticism.diagnostics` for runs
that ended before their summary was written).  Nothing here draws; the panes render it.

`load_results(run) -> Results`: status and message, whether the run is *partial* (no
``summary.json``/``samples.npz``: interrupted or killed; then everything is rebuilt from
the draws chunks and progress events), and per method:
  - MCMC (``hmc``/``nuts``): Stan's five checks (`qvr_tui.mcmc_checks`), the summary
    grouped by site (`SiteRow` with its coordinates `Coord`); per-parameter series and
    matrices of 2-D sites are `qvr_tui.plots_model`'s;
  - SVI: final loss, the loss curve, guide locations/scales per site (`GuideSite`);
    a minibatch fit's batch (run.json's ``batch``: rows, batch size, steps per epoch,
    epochs, processes) as `Results.batch` / `Results.world_size`, said by `batch_facts`;
  - MCMC and SVI: recorded quantities (``record v = e``, design E9.6) as rows of the
    summary like sites, marked `SiteRow.recorded` (listed in `Results.recorded`); MCMC
    draws them like sites (`param_series`, `site_matrix`, the ArviZ posterior), SVI gives
    their posterior mean and sd over the guide's draws (`GuideSite.recorded`,
    `recorded_guide_rows`); the five checks are the sites' only;
  - SMC: top sequences (`SequenceRow`, text through the record's vocabulary, or the
    record's own text when it steered a pretrained LM: `Results.lm`, `Results.prompt`),
    log Z-hat;
  - a prediction (``qvr predict``, method ``predict``) and a ``--method prior`` run: the
    draws' mean and sd per site as `GuideSite` rows; a prediction's source run in
    `Results.predicted_from`, what it is in `Results.note`;
  - any method whose stats hold a Pareto k-hat (SVI, Laplace, Pathfinder): its line and,
    above 0.7, the run's warning (`Results.khat`, `Results.khat_warning`;
    `qvr.inference.criticism.khat_text`);
  - any method, a program with attention: `Results.circuits` (`qvr_tui.circuits_model`);
  - a finished fit that recorded them (issue 25): `Results.predictive` (the predictive
    checks) and `Results.loo` (PSIS-LOO), `qvr_tui.predictive_model`; else
    `Results.predictive_note` says why there are none.

The rest of the Results and Runs panes' data: `qvr_tui.table_model` (the summary table's
rows), `qvr_tui.plots_model` (per-parameter series, matrices), `qvr_tui.runs_model` (the
Runs table, overlay curves), `qvr_tui.arviz_export`.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np

from qvr.events import FitFailed, FitProgress, ParticlesSnapshot
from qvr.runs.layout import RECORDED_PREFIX, nothing_sampled
from qvr_tui.mcmc_checks import mcmc_checks
from qvr_tui.results_data import (STAT_COLUMNS, Coord, GuideSite, Results, SequenceRow,
                                  SiteRow, parse_label)

__all__ = ["load_results", "recorded_guide_rows", "batch_facts"]


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
    elif res.method in ("svi", "prior", "predict", "pathfinder"):  # draws: a table of
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
    from qvr.inference.criticism.khat_text import khat_line, recorded_khat_warning
    res.khat = khat_line(res.stats) or ""  # how good the approximation is, any method
    res.khat_warning = recorded_khat_warning(res.stats, res.method,
                                             (run.config or {}).get("guide"), events) or ""
    from qvr.inference.criticism.correlation import recorded_note
    res.metric_note = recorded_note(res.stats)  # HMC/NUTS: a dense metric would do better
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
        from qvr.inference.criticism.diagnostics import summary as diag_summary
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


def _group(params: dict, draws: dict) -> tuple:
    by_site: dict[str, list] = {}
    for label, row in params.items():
        name, index = parse_label(label)
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
                                                    every=run.method in ("prior", "predict",
                                                                         "pathfinder"))


def _text(tokens, vocab) -> Optional[str]:
    if not vocab:
        return None
    try:
        return "".join(vocab[int(t)] for t in tokens)
    except (IndexError, ValueError, TypeError):
        return None


def _load_smc(run, res: Results, events) -> None:
    try:
        config = run.config or {}
    except (ValueError, OSError):
        config = {}
    res.lm, res.prompt = config.get("lm"), config.get("prompt") or ""
    seqs = run.sequences
    if seqs is not None:
        res.vocab = seqs.get("vocab")
        res.potentials = tuple(str(p) for p in seqs.get("potentials") or ())
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
    texts = snap.texts if len(snap.texts) == len(snap.sequences) else None  # --lm's
    res.sequences = tuple(SequenceRow(tuple(snap.sequences[i]), float(w[i]),
                                      texts[i] if texts else None)
                          for i in order)
