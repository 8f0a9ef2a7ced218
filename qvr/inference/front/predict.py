"""Prediction for new data: the posterior predictive of a fitted run at new covariates
(`qvr predict RUN --data new.json`, `qvr.runs.Run.predict(data)`; PyMC's
``sample_posterior_predictive`` after ``set_data``, Stan's standalone generated
quantities).

`predict(run, data)` takes the draws of a finished fit — HMC/NUTS chains (``samples.npz``,
else the draws chunks of a run that ended early), S draws of an SVI run's fitted guide
(rebuilt from ``params.npz``), the draws of a ``--method prior`` or Pathfinder run, and
the saved draws of an SVI or Laplace run whose draws ``--resample psis`` resampled
(``stats["resampled"]``: see below) — and, for each draw
(every k-th with ``draws=K``: K draws in all, evenly spaced, at least one per chain), binds
the latent values and runs the program forward on the new data with its observed sites
drawn, not conditioned: the generative replicates of `qvr.inference.criticism.pointwise.Pointwise`
(vmapped over draws when the program allows it, one run per draw otherwise), here for
every ``observe`` site of the program and every recorded quantity (``record v = e``,
computed on the new data with the drawn observations).

What is bound: the global and plate latents of the fit (its parameters).  Row latents (a
``local`` site, one value per data row) belong to the fit's rows, not to new ones: they
are drawn afresh from the program given the draw (as a new row's random effect is), and
so are finite latents the fit summed out.  The model's parameters (``model.NAME``) are
the run's.

A run fitted with ``--resample psis`` (SVI with any guide, ``--guide laplace``) whose
draws were resampled (``summary.json``'s ``stats["resampled"]`` true,
`qvr.inference.criticism.khat.was_resampled`) predicts from those draws
(``samples.npz``, one chain of 1,000), read as MCMC's and Pathfinder's are: its summary,
checks and predictions then describe the same draws.  The guide is not drawn from at
all, so a joint guide (fullrank, lowrank, flow) over row latents predicts new rows too.
Decision for what the draws cannot give: row latents (``local`` sites and the sites of a
data-sized object) are drawn afresh from the program given each bound draw, exactly as
for an MCMC run and as before for guide draws, and the prediction's notes say so in one
line (``the fit's row latents `u` (one value per fitted row) are drawn afresh for the
new rows``).  A resampled run without its ``samples.npz`` is refused (its draws cannot
be drawn again); a run not resampled (``resampled`` false: k-hat too high, or no
``--resample``) predicts from fresh draws of its guide.  `Prediction.draws_from` (and
the prediction record's ``stats["draws_from"]``) says which: ``"samples"`` (the run's
saved draws) or ``"guide"``.

The new data holds the covariates (host data) the program reads, and the input
(``x``/``@input``) when the program has one.  Without an input, the rows are the leading
size of the row-wise host data (the arrays that had one entry per data row in the fit);
a program with a fixed size elsewhere (a plate, a ``FinSet`` other than its domain) runs
only at its own sizes, and other sizes are an error that says so.  Keys the program does
not read are left out with a note; observed values in the new data are not used (the
prediction draws them), also said in a note.

Errors (`PredictError`, naming the data file and the cause): a run without draws (failed
before sampling, SMC, an SVI run without a guide, a resampled run without its
``samples.npz``), data missing a covariate the program
reads (named), shapes that do not fit the program, new sizes of a program whose sizes are
fixed.

The record (`qvr.runs`, method ``predict``): ``run.json`` names the source run
(``predicted_from``: path, run id, method, source hash) and the new data; ``samples.npz``
holds ``{site: (chains, draws, *shape)}`` per observed site and ``recorded.v`` per recorded
quantity; ``summary.json`` their mean, sd and 5/50/95 % quantiles per element (no ESS or
R-hat: the draws are the fit's, already judged); `qvr show` and the dashboard read it as
any record.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from qvr.inference.data.fit_data import DataError, INPUT_KEY, input_key, load_data_file, \
    message_of, reads_host
from qvr.inference.criticism.pointwise import Pointwise, _kept_draws
from qvr.runs import layout
from qvr.runtime.computed import replicating

#: the methods whose runs have draws to predict from
METHODS = ("hmc", "nuts", "svi", "prior", "pathfinder")
#: draws of an SVI run's fitted guide (as its pointwise terms use)
GUIDE_DRAWS = 1000
#: the statistics of a prediction's summary (independent of how the draws were made)
COLUMNS = ("mean", "sd", "q5", "q50", "q95")


class PredictError(DataError):
    """The run or the new data cannot give a prediction (names the file and the cause)."""


@dataclass
class Prediction:
    """What `predict` made.

    Attributes:
      draws: ``{site: (chains, draws, *shape)}`` for every observe site of the program.
      recorded: ``{name: (chains, draws, *shape)}`` for every recorded quantity.
      summary: `qvr.inference.criticism.diagnostics.Summary` of both (mean, sd, quantiles).
      rows: the rows of the new data; chains, per_chain: the draws' layout; stride: every
        stride-th draw of the fit was used; notes: what the user should know.
      draws_from: where the bound latents came from: ``"samples"`` (the run's saved draws:
        MCMC, Pathfinder, prior, or an SVI/Laplace run resampled by ``--resample psis``)
        or ``"guide"`` (fresh draws of an SVI run's fitted guide).
      run_dir: the prediction's run record, when one was written.
    """

    draws: dict = field(default_factory=dict)
    recorded: dict = field(default_factory=dict)
    summary: Any = None
    rows: int = 0
    chains: int = 0
    per_chain: int = 0
    stride: int = 1
    notes: list = field(default_factory=list)
    source: str = ""
    run_dir: Optional[str] = None
    seed: Optional[int] = None
    draws_from: str = "samples"


class Predictive(Pointwise):
    """`Pointwise`'s forward machinery for new data: every observe site drawn, with the
    recorded quantities of the same run, no log-likelihood."""

    def __init__(self, model, x, host: dict, latent, chunk: int = 128):
        self.model = getattr(model, "morphism", model)
        self.x = x
        self.observations = dict(host)
        self.host = dict(host)
        self.observed = [i.name for i in self.model.site_infos()
                         if i.step == "observe" and not i.in_marginalize]
        self.recorded = list(getattr(self.model, "recorded_names", None) or [])
        self.latent = list(latent)
        self.enumerated = []  # finite latents are drawn forward, never summed out here
        self.chunk = max(1, int(chunk))
        self.vmap_failed = self.rep_vmap_failed = self._vmapping = False
        self.with_log_p = False
        self.replicates = "generative"
        self.rows = {}

    def replicate(self, values: dict) -> dict:
        # E9.7: an `observe v = e <- F` is drawn from F, not computed from the new data
        with replicating():
            ex = self.model.execute(self.x, {**self.host, **values}, score=False)
        out = {n: torch.as_tensor(ex.sites[n].value) for n in self.observed}
        out.update({layout.RECORDED_PREFIX + n: torch.as_tensor(ex.sites[n].value)
                    for n in self.recorded if n in ex.sites})
        return out

    def _terms(self, values: dict) -> dict:
        return {}

    def _replicates(self, values: dict) -> dict:
        return self.replicate(values)


# ---------------------------------------------------------------- the source run

def _open(run):
    from qvr.runs import Run, RunRecordError, open_run
    if isinstance(run, Run):
        return run
    try:
        return open_run(run)
    except RunRecordError as exc:
        raise PredictError(str(exc)) from None


def load_program(run, program=None, values: Optional[dict] = None, where: str = ""):
    """The fitted program of `run` (`model_of` its export at its ``args``), with the run's
    model parameters; `program` (a `qvr.load` result or an export) instead of the
    record's file when given.  A program whose sizes are read from the data (`object Row
    : FinSet N`, `qvr.runtime.sizes`) is bound with the new data `values`.  Returns
    ``(model, notes)``."""
    import hashlib

    from qvr.inference.front.fitting import model_of
    from qvr.inference.data.fit_data import relations_for
    from qvr.inference.front.start import StartError, StartState
    from qvr.runtime.load import load
    info = run.program
    notes = []
    if program is None:
        path = info.get("path")
        if not path or str(path).startswith("<") or not Path(path).is_file():
            raise PredictError(f"{run.path}: the program of this run ({path}) is not a file "
                               f"here: give the program (`program=`)")
        text = Path(path).read_text(encoding="utf-8")
        if info.get("sha256") and hashlib.sha256(text.encode("utf-8")).hexdigest() \
                != info["sha256"]:
            notes.append(f"{path} has changed since the run: predicting with its current "
                         f"text")
        data_file = (run.meta.get("data") or {}).get("path")
        try:
            program = load(Path(path), data=relations_for(path, data_file) or None)
        except Exception as exc:
            raise PredictError(f"{path}: {message_of(exc)}") from None
    program = _bind_new_sizes(program, values, where)
    try:
        model = model_of(program, run.config.get("args") or None, info.get("export"))
    except DataError as exc:
        raise PredictError(f"{run.path}: {exc}") from None
    model.to(dtype=torch.get_default_dtype())
    params = {k[len("model."):]: v for k, v in run.params().items() if k.startswith("model.")}
    try:
        StartState(run, model_params=params).apply_to_model(model)
    except StartError as exc:
        raise PredictError(str(exc).replace("start from", "predict from")) from None
    return model, notes


def _size_names(model) -> set:
    """The sizes the program reads from the data (`object Row : FinSet N`: ``{"N"}``):
    a data entry `N` is read (it binds the size), not left out."""
    from qvr.inference.front.fitting import typed_of
    from qvr.runtime.sizes import size_objects
    typed = typed_of(model)
    return set(size_objects(typed)) if typed is not None else set()


def _bind_new_sizes(program, values: Optional[dict], where: str):
    """`program` bound to the sizes of the new data (`qvr.runtime.load.bind_sizes`: its
    ``N`` entry, or the values typed by the objects of size ``N``); as it is when its
    sizes are fixed."""
    from qvr.runtime.load import bind_sizes
    from qvr.runtime.sizes import SizeError, size_objects
    from qvr.inference.front.fitting import typed_of
    typed = typed_of(program)
    if typed is None or not size_objects(typed):
        return program
    try:
        return bind_sizes(program, dict(values or {}))
    except SizeError as exc:
        raise PredictError(f"{where}: {message_of(exc)}") from None


def row_sites(model) -> set:
    """The sites with one value per element of an object whose size is read from the
    data (`object Row : FinSet N`): rows of the fit, drawn afresh for the new rows."""
    from qvr.runtime.sizes import size_objects
    from qvr.runtime.steps import SiteStep
    typed = getattr(getattr(model, "qvr_binding", None), "typed", None)
    sized = {o for objs in (size_objects(typed) if typed is not None else {}).values()
             for o in objs}
    walk = getattr(model, "_walk", None)
    if not sized or not callable(walk):
        return set()
    return {s.name for s, _ in walk() if isinstance(s, SiteStep)
            and getattr(s, "plate_name", None) in sized}


def _site_draws(samples: dict) -> dict:
    return {k: np.asarray(v) for k, v in samples.items()
            if not k.startswith(("sample_stats.", layout.RECORDED_PREFIX))
            and np.asarray(v).ndim >= 2}


def _no_draws(run, why: str) -> PredictError:
    return PredictError(f"{run.path}: the run has no draws to predict from: {why}")


def draws_source(run) -> str:
    """Where `run`'s latents to bind come from: ``"guide"`` (fresh draws of an SVI run's
    fitted guide) or ``"samples"`` (its saved draws: every other method, and an SVI or
    Laplace run whose draws ``--resample psis`` resampled)."""
    from qvr.inference.criticism.khat import was_resampled
    if run.method != "svi" or was_resampled(run.method, (run.summary or {}).get("stats")):
        return "samples"
    return "guide"


def source_draws(run, model, x, host: dict) -> tuple[list, list]:
    """``(per_chain, redrawn)``: the fit's draws of the latents to bind, one ``{site: (N,
    *shape)}`` per chain, and the sites whose draws are not bound (row latents, drawn
    afresh for the new rows: see the module docstring).  An SVI run's come from its
    guide, unless ``--resample psis`` resampled its draws: then from them (`draws_source`),
    through the same path as MCMC's and Pathfinder's saved draws."""
    method = run.method
    if method not in METHODS:
        raise _no_draws(run, f"a --method {method} run has no posterior draws (predict from "
                             f"an HMC, NUTS, SVI, Pathfinder or prior run)")
    if run.status == "running":
        raise PredictError(f"{run.path}: the run is still running")
    if draws_source(run) == "guide":
        per_chain = [_guide_draws(run, model, x, host)]
    else:
        found = _site_draws(run.samples())
        if not found and method == "svi":  # resampled: the draws are in samples.npz only
            raise _no_draws(run, "its draws were resampled by --resample psis, and its "
                                 "samples.npz, which holds them, is missing or empty (they "
                                 "cannot be drawn again)")
        if not found:
            found = _site_draws(run.draws())
        if not found or any(v.shape[1] == 0 for v in found.values()):
            if run.method in ("hmc", "nuts") and nothing_sampled(run):
                raise _no_draws(run, "every latent of the program is finite and was summed "
                                     "out (nothing was sampled)")
            raise _no_draws(run, f"it recorded none (status {run.status}"
                                 + (", stopped before its first draw" if
                                    run.status != "finished" else "") + ")")
        dtype = torch.get_default_dtype()
        C = next(iter(found.values())).shape[0]
        per_chain = [{k: torch.as_tensor(v[c]).to(dtype if np.issubdtype(v.dtype, np.floating)
                                                  else torch.long)
                      for k, v in found.items()} for c in range(C)]
    kinds = {i.name: i.site_kind for i in model.site_infos()}
    rows = row_sites(model)
    keep = [k for k in per_chain[0] if kinds.get(k) in ("global", "plate") and k not in rows]
    redrawn = [k for k in per_chain[0] if k not in keep and k in kinds]
    return [{k: d[k] for k in keep} for d in per_chain], redrawn


def nothing_sampled(run) -> bool:
    return layout.nothing_sampled(((run.summary or {}).get("stats") or {}))


def _guide_draws(run, model, x, host: dict) -> dict:
    """`GUIDE_DRAWS` draws of an SVI run's fitted guide, rebuilt from its config's
    ``guide`` (mean-field for runs made before the option) and its saved parameters
    (`qvr.inference.vi.guide_choice.rebuild_guide`)."""
    from qvr.inference.vi.guide_choice import GuideError, rebuild_guide, run_guide
    params = {k: v for k, v in run.params().items() if not k.startswith("model.")}
    if not params:
        raise _no_draws(run, f"the SVI run saved no guide (status {run.status})")
    observed = {i.name for i in model.site_infos() if i.step == "observe"}
    rows = row_sites(model)  # one value per fitted row: redrawn, their guide not used
    spec = run_guide(run.config)
    try:
        guide = rebuild_guide(spec, model, observed, params, x, host, skip_sites=rows,
                              where=str(run.path))
    except GuideError as exc:
        latent_rows = sorted(r for r in rows if r not in observed)
        if spec != "meanfield" and latent_rows:
            raise PredictError(f"{run.path}: the {spec} guide covers the fitted rows of "
                               f"{', '.join(f'`{r}`' for r in latent_rows)} jointly with "
                               f"the other latents and cannot draw them for a new number "
                               f"of rows (predict from a meanfield or NUTS fit)") from None
        raise PredictError(str(exc)) from None
    with torch.no_grad():
        kinds = {i.name: i.site_kind for i in model.site_infos()}
        if not any(kinds.get(n) in ("global", "plate") for n in guide.latent_names):
            return {}
        try:
            draws = guide.rsample(x, host, sample_shape=(GUIDE_DRAWS,))
        except Exception as exc:
            raise PredictError(f"{run.path}: drawing from the fitted guide at the new data "
                               f"failed: {message_of(exc)}") from None
    return {k: v.detach() for k, v in draws.items()}


# ---------------------------------------------------------------- the new data

def read_data(data, data_path: Optional[str] = None) -> tuple[dict, str]:
    """``(values, where)``: a data file (path) read, or a mapping as given."""
    if isinstance(data, (str, Path)):
        return load_data_file(data), str(data)
    if not isinstance(data, dict):
        raise PredictError(f"the new data must be a data file or a mapping of arrays by "
                           f"name, not a {type(data).__name__}")
    return dict(data), data_path or "the new data"


def _host_names(model) -> list:
    names = []
    for m in (model.modules() if hasattr(model, "modules") else [model]):
        for n in sorted(getattr(m, "host_names", ()) or ()):
            if n not in names:
                names.append(n)
    return names


def fit_rows(run, observed=(), old: Optional[dict] = None) -> Optional[int]:
    """The fit's row count: the leading size of its observed values (``observed.npz``, or
    the sites `observed` in its data file, `old` when already read); None when the record
    does not tell."""
    try:
        found = run.observed()
    except Exception:
        found = {}
    for k, v in found.items():
        if not k.startswith(layout.GROUP_PREFIX) and np.ndim(v) >= 1:
            return int(np.shape(v)[0])
    if old is None:
        old = _fit_values(run) if observed else {}
    for k in observed:
        if k in old and np.ndim(old[k]) >= 1:
            return int(np.shape(old[k])[0])
    return None


def _fit_values(run) -> dict:
    """The fit's data (file, shipped or synthetic), {} when the record does not keep it."""
    source = run.meta.get("data") or {}
    try:
        if source.get("kind") in ("file", "shipped") and source.get("path") and \
                Path(source["path"]).exists():
            return load_data_file(source["path"])
        if source.get("kind") == "synthetic":
            return {k[5:]: v for k, v in run.truth().items() if k.startswith("data.")}
    except Exception:
        return {}
    return {}


def split_new(run, model, values: dict, where: str, device="cpu") -> tuple:
    """``(x, host, notes)`` of the new data: the input, the covariates the program reads
    (every one present: `PredictError` naming a missing one), notes on what was left
    out.  Rows: see the module docstring."""
    from qvr.inference.data.fit_data import split_data
    notes = []
    key = input_key(model, values)
    host_names = _host_names(model)
    observed = _observe_names(model)
    given_obs = [k for k in values if k in observed]
    if given_obs:
        notes.append(f"{where}: the observed {_names(given_obs)} "
                     f"{'is' if len(given_obs) == 1 else 'are'} not used: the prediction "
                     f"draws {'it' if len(given_obs) == 1 else 'them'}")
    sizes = _size_names(model)  # once, not per key
    unused = [k for k in values if k not in host_names and k not in observed
              and k not in (key, INPUT_KEY) and k not in sizes]
    if unused:
        notes.append(f"{where}: {_names(unused)} {'is' if len(unused) == 1 else 'are'} not "
                     f"read by the program: left out")
    missing = [n for n in host_names if n not in values]
    if missing:
        raise PredictError(f"{where}: the program reads {_names(missing)} (host data), which "
                           f"the data does not give")
    kept = {k: v for k, v in values.items() if k in host_names or k == key}
    try:
        x, host = split_data(model, kept, device)
    except DataError as exc:
        raise PredictError(f"{where}: {exc}") from None
    if key is None:
        x = torch.zeros(_new_rows(run, model, host, where), 1, device=device)
    return x, host, notes


def _new_rows(run, model, host: dict, where: str) -> int:
    """The rows of new data without an input: the new leading size of the host data that
    was row-wise in the fit (or, when the fit's data is not at hand, of every host array),
    the fit's row count when there is none."""
    old = _fit_values(run)  # read once: fit_rows looks in it too
    before = fit_rows(run, _observe_names(model), old)
    sizes = {}
    for k, v in host.items():
        if not isinstance(v, torch.Tensor) or v.dim() == 0:
            continue
        if old:
            was = old.get(k)
            if before is None or np.ndim(was) == 0 or np.shape(was)[0] != before:
                continue
        sizes[k] = int(v.shape[0])
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"`{k}` {n}" for k, n in sizes.items())
        raise PredictError(f"{where}: the row-wise host data disagree on the number of rows "
                           f"({shown})")
    if sizes:
        return next(iter(sizes.values()))
    return before or 1


def _observe_names(model) -> list:
    return [i.name for i in model.site_infos() if i.step == "observe"]


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


# ---------------------------------------------------------------- prediction

def predict(run, data, *, draws: Optional[int] = None, seed: Optional[int] = None,
            run_dir=None, program=None, data_path: Optional[str] = None,
            on_event: Optional[Callable] = None) -> Prediction:
    """The posterior predictive of `run` (a run folder or `qvr.runs.Run`) at `data` (a data
    file or a mapping of arrays): see the module docstring.

    Args:
      draws: use K draws of the fit in all (evenly spaced over each chain); all by default.
      seed: the seed of the forward draws (recorded; a fresh one when None).
      run_dir: write a run record there (method ``predict``, `qvr.runs`).
      program: the program to run instead of the record's file (a `qvr.load` result).
      data_path: how to name a mapping `data` in messages and in the record.
      on_event: called with each event (`qvr.events`) as it is recorded.
    """
    from qvr.inference.front.fitting import fit_dtype
    run = _open(run)
    seed = random.SystemRandom().randrange(2 ** 31) if seed is None else int(seed)
    dtype = (run.config or {}).get("dtype") or "float32"
    with fit_dtype(dtype):
        return _predict(run, data, draws, seed, run_dir, program, data_path, on_event)


def _predict(run, data, draws, seed, run_dir, program, data_path, on_event) -> Prediction:
    from qvr.events import FitFinished, FitNote, FitProgress, FitStarted, \
        FitWarning
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    values, where = read_data(data, data_path)
    model, notes = load_program(run, program, values, where)
    x, host, more = split_new(run, model, values, where)
    notes += more
    per_chain, redrawn = source_draws(run, model, x, host)
    if redrawn:
        notes.append(f"the fit's row latents {_names(redrawn)} (one value per fitted row) are "
                     f"drawn afresh for the new rows")
    pred = Predictive(model, x, host, list(per_chain[0]))
    if not pred.observed and not pred.recorded:
        raise PredictError(f"{run.path}: the program has no observe site and no recorded "
                           f"quantity: there is nothing to predict")
    total = int(next(iter(per_chain[0].values())).shape[0]) if per_chain[0] else \
        int(draws or GUIDE_DRAWS)  # nothing to bind: forward runs from the prior alone
    C = len(per_chain)
    if not per_chain[0]:  # nothing bound (every latent redrawn): one forward run per draw
        per_chain = [{"__draw__": torch.zeros(total)} for _ in range(C)]
    asked = None if draws is None else max(1, -(-int(draws) // C))
    N, stride = _kept_draws(total, C, 0.0, asked if asked is not None else total, 0.0)
    per_chain = [{k: v[::stride][:N] for k, v in d.items()} for d in per_chain]
    _check_forward(pred, per_chain[0], run, where, x)
    result = Prediction(rows=int(x.shape[0]) if x.dim() else 1, chains=C, per_chain=N,
                        stride=stride, notes=notes, source=str(run.path), seed=seed,
                        draws_from=draws_source(run))
    writer = None
    if run_dir is not None:
        writer = _writer(run, run_dir, values, data, where, draws, seed)
        result.run_dir = str(writer.path)

    def report(ev):
        if writer is not None:
            writer.write(ev)
        if on_event is not None:
            on_event(ev)
    try:
        report(FitStarted(method="predict", total_steps=N, num_chains=C,
                          config={"draws": draws, "seed": seed},
                          run_dir=result.run_dir))
        for n in notes:
            report(FitWarning(n))
        report(FitNote(f"predicting {_names(pred.observed + pred.recorded)} at "
                       f"{result.rows} rows of {where} from {C} x {N} draws of {run.path}"
                       + (f" (every {stride}th of {total})" if stride > 1 else "")
                       + _from_text(run, result.draws_from)))
        out: dict = {}
        for c, d in enumerate(per_chain):
            got = pred.many({k: v for k, v in d.items() if k != "__draw__"}) if \
                "__draw__" not in d else _unbound(pred, N)
            for k, v in got.items():
                out.setdefault(k, []).append(v.cpu().numpy())
            report(FitProgress(method="predict", phase="predicting", step=N, total=N,
                               chain=c, elapsed=time.perf_counter() - t0))
        stacked = {k: np.stack(v) for k, v in out.items()}
        result.draws = {k: v for k, v in stacked.items()
                        if not k.startswith(layout.RECORDED_PREFIX)}
        result.recorded = {k[len(layout.RECORDED_PREFIX):]: v for k, v in stacked.items()
                           if k.startswith(layout.RECORDED_PREFIX)}
        from qvr.inference.criticism.diagnostics import summary
        result.summary = summary(stacked, columns=COLUMNS)
        elapsed = time.perf_counter() - t0
        stats = {"num_chains": C, "num_samples": N, "rows": result.rows,
                 "stride": stride, "draws_from": result.draws_from, "elapsed": elapsed}
        if writer is not None:
            _save(writer, result, stacked, stats)
        report(FitFinished(summary=stats, elapsed=elapsed))
    except BaseException as exc:
        if writer is not None:
            from qvr.events import FitFailed
            writer.write(FitFailed(message=message_of(exc), error_type=type(exc).__name__,
                                   elapsed=time.perf_counter() - t0))
        raise
    finally:
        if writer is not None:
            writer.close()
    return result


def _from_text(run, draws_from: str) -> str:
    """What an SVI run's draws are, for the prediction's note ('' for other methods)."""
    if run.method != "svi":
        return ""
    return ": its draws resampled by --resample psis (samples.npz)" \
        if draws_from == "samples" else ": fresh draws of its fitted guide"


def _unbound(pred: Predictive, n: int) -> dict:
    """`n` forward runs with nothing bound (a fit whose latents are all row latents)."""
    rows = [pred.replicate({}) for _ in range(n)]
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


def _check_forward(pred: Predictive, draws: dict, run, where: str, x) -> None:
    """One forward run at the first draw, its failure said plainly (the data's shapes, a
    program whose sizes are fixed)."""
    from qvr.runtime.errors import QvrRuntimeError
    one = {k: v[0] for k, v in draws.items() if k != "__draw__"}
    try:
        with torch.no_grad():
            pred.replicate(one)
    except (QvrRuntimeError, KeyError, ValueError, TypeError, IndexError,
            RuntimeError) as exc:
        rows, before = int(x.shape[0]) if x.dim() else 1, fit_rows(run)
        why = message_of(exc)
        if before is not None and rows != before and "one row per input row" not in why:
            raise PredictError(f"{where}: the program's sizes are fixed: it was fitted on "
                               f"{before} rows and cannot run on the {rows} rows of the new "
                               f"data ({why}); an object whose size is a name (`object Row : "
                               f"FinSet N`) takes its size from the data") from None
        raise PredictError(f"{where}: the data does not fit the program: {why}") from None


def _writer(run, run_dir, values, data, where, draws, seed):
    from qvr.runs import RunWriter
    source = {"kind": "file", "path": str(Path(data).resolve())} \
        if isinstance(data, (str, Path)) else \
        {"kind": "given", **({"name": where} if where != "the new data" else {})}
    meta = {"program": run.program, "method": "predict",
            "config": {"draws": draws, "seed": seed,
                       "dtype": (run.config or {}).get("dtype") or "float32",
                       "args": (run.config or {}).get("args") or {}},
            "seed": seed, "data": source, "start_from": None,
            "predicted_from": {"path": str(run.path.resolve()), "run_id": run.run_id,
                               "method": run.method, "sha256": run.source_sha256}}
    return RunWriter(run_dir, meta)


def _save(writer, result: Prediction, stacked: dict, stats: dict) -> None:
    from qvr.inference.front.save import summary_json, summary_rows, summary_sites
    writer.save_arrays(layout.SAMPLES, stacked)
    s = result.summary
    writer.write_text(layout.SUMMARY, summary_json(
        {"status": "finished", "message": "", "method": "predict", "stats": stats,
         "sites": summary_sites(s), "recorded": list(getattr(s, "recorded", None) or []),
         "predicted": list(result.draws), "parameters": summary_rows(s),
         "truncated": getattr(s, "truncated", 0)}))
    writer.write_text(layout.SUMMARY_TEXT, str(s) + "\n")
