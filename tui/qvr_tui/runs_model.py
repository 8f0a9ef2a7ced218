"""The Runs pane's data: a program's past runs as `RunRow`s (`run_rows`), each with its key
number (`run_key_number`: final loss, max R-hat, log Z) and, for SMC steering a
pretrained LM, the model (`RunRow.lm`); and the curve two runs are overlaid by (`curve`:
SVI losses; MCMC mean log density per draw over chains; SMC log Z-hat per step).
Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from qvr.events import FitProgress
from qvr.runs.layout import nothing_sampled
from qvr_tui.results_data import MCMC

__all__ = ["RunRow", "run_rows", "run_key_number", "curve"]


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
    if method == "pathfinder":  # the best path's ELBO
        v = [e for e in stats.get("elbo") or [] if e is not None]
        return "ELBO", max(v) if v else None
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
    lm: str = ""            # SMC steering a pretrained LM: its name as given (``--lm``)

    @property
    def key_text(self) -> str:
        if self.key_value is None or self.key_value != self.key_value:
            return ""  # not there yet, or not defined (R-hat of a run cancelled before a draw)
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
            lm = str(run.config.get("lm") or "") if run.method == "smc" else ""
        except (ValueError, OSError):
            label, value, status, lm = "", None, "unreadable", ""
        started = (run.started or "")[:19].replace("T", " ")
        out.append(RunRow(path=Path(run.path), name=Path(run.path).name, status=status,
                          method=run.method, started=started, key_label=label,
                          key_value=value, lm=lm,
                          stale=bool(current and run.source_sha256
                                     and run.source_sha256 != current)))
    return out
