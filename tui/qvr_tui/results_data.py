"""The plain data of the Results pane: a run's `Results` and its rows.

Torch-free.  `Results` is built by `qvr_tui.results_model.load_results`; its rows:
`SiteRow`s of the MCMC summary with their coordinates (`Coord`, labels parsed by
`parse_label`), the SVI guide's `GuideSite`s (shapes compared by `squeeze_shape`) and
SMC's top `SequenceRow`s.  The checks are `qvr_tui.mcmc_checks.Check`s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["Coord", "SiteRow", "GuideSite", "squeeze_shape", "SequenceRow", "Results",
           "parse_label", "nanmin", "nanmax", "MCMC", "STAT_COLUMNS"]

MCMC = ("hmc", "nuts")
STAT_COLUMNS = ("mean", "sd", "q5", "q50", "q95", "mcse_mean", "ess_bulk", "ess_tail", "r_hat")


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
        return nanmin(self._vals("ess_bulk"))

    @property
    def min_ess_tail(self) -> float:
        return nanmin(self._vals("ess_tail"))

    @property
    def mean_range(self) -> tuple[float, float]:
        v = self._vals("mean")
        return (nanmin(v), nanmax(v))

    @property
    def max_sd(self) -> float:
        return nanmax(self._vals("sd"))

    @property
    def max_mcse(self) -> float:
        return nanmax(self._vals("mcse_mean"))

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2



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
    lm: Optional[str] = None                # a pretrained LM steered (``--lm``)
    prompt: str = ""                        # ... and the prompt its sequences continue
    potentials: tuple = ()                  # ... and the program's score steps (E10)
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
    # an approximation's Pareto k-hat (SVI, Laplace, Pathfinder; any method whose stats
    # hold it): its line, and above 0.7 the run's warning (`khat_text`); else ""
    khat: str = ""
    khat_warning: str = ""
    # HMC/NUTS on a diagonal metric with a strongly correlated pair of coordinates: the
    # note that a dense metric would sample it faster (`criticism.correlation`); else ""
    metric_note: str = ""

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


def nanmin(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.min()) if v.size else float("nan")


def nanmax(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else float("nan")


def parse_label(label: str) -> tuple[str, tuple]:
    """(site, index) of a coordinate label: ``"probs[0,1]"`` -> ``("probs", (0, 1))``."""
    if label.endswith("]") and "[" in label:
        name, _, rest = label[:-1].partition("[")
        try:
            return name, tuple(int(x) for x in rest.split(","))
        except ValueError:
            return label, ()
    return label, ()
