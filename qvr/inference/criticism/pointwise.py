"""After the fit: the pointwise log-likelihood and predictive replicates of every draw.

`record(ctx, result, writer)` runs once a fit has draws of its latent sites — HMC/NUTS's
chains, S draws of SVI's fitted guide (`GUIDE_DRAWS`, 1,000), the prior draws of
``--method prior`` — and writes, in chunks (`qvr.runs.layout`, "After the fit"):

* ``log_lik.SITE`` — for every observed element, ``log p(y_i | theta_s)``: per draw and per
  observed row (a row-wise ``observe``), per plate element, or one term (a global
  ``observe``).  A ``marginalize`` block's rows are its exact marginals
  ``log sum_c p(c) p(y_i | c, theta)`` (named by the block's observed sites).  A program
  whose finite latents are summed out by enumeration (`qvr.inference.enumeration.enumerate`) keeps
  them summed out: its term per row is the enumerated log joint of the row minus the
  row-attributed prior terms of the continuous latents, ``log p(y_row | theta)`` (one term
  per row, named by the observed sites joined with ``+``).  A *global* finite latent
  (one value for all rows) makes the rows dependent: its row terms are then even shares
  of the joint marginal (runtime spec 5.5's attribution), not ``log p(y_i | theta)``, and
  LOO over them is not leave-one-out — a limit, not a bug;
* ``y_rep.SITE`` — one replicate of the observed values per draw: the program run forward
  from the draw with the observed values left out (the generative model; as NumPyro's and
  PyMC's predictive functions do), so a finite latent is drawn from its prior given the
  draw, and a series whose later steps read earlier observed values reads the replicated
  ones.  Where the program cannot run without its observed values (a ``data`` step reads
  them), each site is drawn from its own conditional given the draw and the observed
  values of the others, and the record says so (``"replicates": "conditional"``);
* SVI also ``log_p`` and ``log_q`` per draw (the log joint and the guide's log density):
  PSIS-LOO reweights the guide's draws towards the posterior (Magnusson et al. 2019).
  An SVI run with ``--resample psis`` whose draws were resampled (``stats["resampled"]``)
  uses those draws instead, as posterior draws (kind ``posterior``, no ``log_q``).

Computed with `torch.func.vmap` over chunks of draws (``randomness="different"``), or
one program run per draw when vmap cannot run the program.  Then `qvr.inference.criticism.checks
.write_checks` writes ``loo.json`` and ``ppc.json``.

Cost: the phase times `PROBE_DRAWS` draws (vmapped: later calls take as many draws as
fit in `CALL_SECONDS`, at least as many as were timed) and keeps every draw that fits in
`BUDGET_SHARE` of the fit's wall time (at least `BUDGET_MIN_SECONDS`), else every k-th
draw (evenly thinned, at least `MIN_DRAWS` in all); ``FitConfig.pointwise_draws`` fixes the
number, ``pointwise=False`` (``--no-pointwise``) skips the phase.  A 12-step SVI of
``transformer_lm`` spent over 9 minutes on 1,000 guide draws before this (0.13 s a draw);
it keeps 100 now.

A failure here never fails the fit: it becomes a `FitWarning` and the record keeps what it
had.
"""
from __future__ import annotations

import hashlib
import time
from typing import Optional

import numpy as np
import torch

from qvr.runs import layout

#: draws of the fitted guide an SVI run's pointwise terms are made of
GUIDE_DRAWS = 1000
#: float32 elements per chunk file (log_lik + y_rep of all sites): ~32 MB
CHUNK_ELEMENTS = 4_000_000
#: the pointwise phase's time budget (unless `FitConfig.pointwise_draws` says how many
#: draws): this share of the fit's wall time, and at least this many seconds; past it the
#: draws are thinned evenly, keeping at least `MIN_DRAWS` over all chains
BUDGET_SHARE = 0.1
#: (10 s until 2026-12-07: a 12-step SVI of `transformer_lm`, 7 s on its own, then spent 11 s
#: on 250 draws (0.04 s each) of LOO terms whose k-hat said they were unreliable; with 4 s
#: it keeps `MIN_DRAWS` of them and the whole run takes 12 s)
BUDGET_MIN_SECONDS = 4.0
MIN_DRAWS = 100
#: draws timed to estimate the cost of one
PROBE_DRAWS = 8
#: seconds one vmapped call should take at most: a program whose draw is dear (a language
#: model) runs in vmapped chunks of `PROBE_DRAWS`, as timed, not of `Pointwise.chunk` (the
#: seed LM's 200 guide draws vmapped at once cost 0.12 s a draw against 0.05 s in chunks
#: of 8: the intermediates of 200 forward passes fall out of the caches, and the
#: budget, set by the probe, was overrun 2.4 times)
CALL_SECONDS = 0.1


def data_sha256(x, observations: dict) -> str:
    """sha256 over `x` (when given) and the arrays of `observations` (keys sorted; shape
    included; floats as float32 and integers as int64, so that a float32 and a float64
    fit of the same data agree): equal for two fits on the same data.  A memory-mapped
    value (`qvr.mapped_arrays.MappedArray`) is hashed block by block, never read whole, to
    the same digest as the same data in memory."""
    from qvr.mapped_arrays import MappedArray
    h = hashlib.sha256()

    def converted(a):
        if a.dtype.kind == "f":  # a float32 and a float64 fit of the same data agree
            return a.astype(np.float32)
        if a.dtype.kind in "iub":
            return a.astype(np.int64)
        return a

    def add(name, v):
        if isinstance(v, MappedArray):  # sha256 streams: header, then each block's bytes
            dtype = converted(np.empty(0, v.dtype)).dtype
            shape = tuple(v.shape) or (1,)  # as np.ascontiguousarray has it
            h.update(f"{name}|{dtype.str}|{shape}|".encode())
            row = max(1, v.row_nbytes // max(1, v.dtype.itemsize)) * dtype.itemsize
            for block in v.chunks(max(1, (16 << 20) // row)):  # ~16 MB converted
                h.update(np.ascontiguousarray(converted(block)))  # its bytes, uncopied
            return
        a = np.ascontiguousarray(v.detach().cpu().numpy() if isinstance(v, torch.Tensor)
                                 else np.asarray(v))
        a = converted(a)
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    if x is not None:
        add("@x", x)
    for k in sorted(observations or {}):
        add(k, observations[k])
    return h.hexdigest()


def _model(model):
    return getattr(model, "morphism", model)


def observed_sites(model, observations: dict) -> list[str]:
    """The program's observe sites that the data gives, in program order."""
    m = _model(model)
    names = [i.name for i in m.site_infos() if i.step == "observe"]
    return [n for n in names if n in observations]


def element_scores(model) -> list[str]:
    """E9.7: the `score v : T = e` steps (one term per element of T), in program order;
    their terms are log-likelihood terms (``log_lik.v``), without replicates."""
    from qvr.runtime.steps import LetStep
    return [s.name for s in getattr(_model(model), "steps", ())
            if isinstance(s, LetStep) and s.score and s.per is not None]


#: why an element score has no predictive replicate (the run record and `qvr show` say it)
NO_REPLICATE = ("a `score` has no predictive replicate (it is a log-density term, not a "
                "value drawn from a family); observe the value (`observe v = e <- F(…)`) "
                "for a predictive check")


class Pointwise:
    """The pointwise terms of `model` at input `x` with `observations` (observed values
    and host data), for draws of the latent sites `latent` (the fit's)."""

    def __init__(self, model, x, observations: dict, latent, chunk: int = 128):
        from qvr.inference.enumeration.enumerate import enumerated_names, prepare
        self.model = _model(model)
        self.x = x
        self.observations = dict(observations)
        self.observed = observed_sites(self.model, self.observations)
        self.scores = element_scores(self.model)  # E9.7
        self.host = {k: v for k, v in self.observations.items() if k not in self.observed}
        self.latent = list(latent)
        given = {**self.observations, **{n: None for n in self.latent}}
        self.enumerated = enumerated_names(self.model, given)
        if self.enumerated:
            prepare(self.model, x, self.observations, missing=self.enumerated)
        self.chunk = max(1, int(chunk))
        self.vmap_failed = False
        self.rep_vmap_failed = False  # replicates one draw at a time (see `_part`)
        self._vmapping = False  # inside `_part`'s vmap of `one`
        self.with_log_p = False  # SVI's PSIS: the log joint at each draw too (`log_p`)
        self._log_p = None
        self.replicates = "generative"
        self.rows: dict = {}  # site -> local | plate | global | enumerated | marginalized

    # ------------------------------------------------------------ one draw
    def log_lik(self, values: dict) -> dict:
        """`{site: terms}` at one draw (`values`: the latent sites' values)."""
        m = self.model
        full = {**self.observations, **values}
        ex = m.execute(self.x, full, score=True, record=True)
        if self.enumerated:
            from qvr.inference.enumeration.enumerate import enumerated_log_joint
            total = enumerated_log_joint(m, self.x, full)
            prior = torch.zeros_like(total)
            for n, r in ex.sites.items():
                if r.step == "sample" and n in values and r.log_prob is not None:
                    prior = prior + r.log_prob
            name = "+".join(self.observed)
            self.rows[name] = "enumerated"
            if self.with_log_p:
                self._log_p = total.sum()
            return {name: total - prior}
        if self.with_log_p:
            self._log_p = ex.log_joint.sum()
        out = {}
        for n, r in ex.sites.items():
            if r.step == "observe" and n in self.observed:
                c = r.contribution
                if r.site_kind == "plate" and r.distribution is not None:
                    c = r.distribution.log_prob(r.value)
                    self.rows[n] = "plate"
                else:
                    self.rows[n] = "local" if r.site_kind != "global" else "global"
                out[n] = torch.as_tensor(c)
            elif r.step == "score" and n in self.scores:  # E9.7: one term per element
                out[n] = torch.as_tensor(r.value)
                self.rows[n] = "score"
            elif r.step == "marginalize":
                body = [s.name for s in self._marg_body(n)]
                name = "+".join(body) or n
                out[name] = torch.as_tensor(r.value)
                self.rows[name] = "marginalized"
        return out

    def _marg_body(self, site_name: str) -> list:
        from qvr.runtime.steps import MarginalizeStep, SiteStep
        for s in self.model.steps:
            if isinstance(s, MarginalizeStep) and s.site_name == site_name:
                return [b for b in s.body if isinstance(b, SiteStep) and b.observe
                        and b.name in self.observations]
        return []

    def replicate(self, values: dict) -> dict:
        """`{site: value}`: one replicate of the observed values at one draw."""
        m = self.model
        if self.replicates == "generative":
            try:
                from qvr.runtime.computed import replicating
                with replicating():  # E9.7: a computed observe is drawn, not computed
                    ex = m.execute(self.x, {**self.host, **values}, score=False)
                return {n: torch.as_tensor(ex.sites[n].value) for n in self.observed}
            except Exception:
                if self._vmapping:  # `_part` tells a vmap failure from the program's
                    raise
                self.replicates = "conditional"
        ex = m.execute(self.x, {**self.observations, **values}, score=True)
        out = {}
        for n in self.observed:
            r = ex.sites[n]
            if r.distribution is None:  # a morphism target: its input is not recorded
                raise ValueError(f"`{n}` cannot be replicated: the program does not run "
                                 f"without its observed values, and `{n}` is observed "
                                 f"through a morphism")
            out[n] = r.distribution.sample()
        return out

    def one(self, values: dict) -> dict:
        return {**self._terms(values), **self._replicates(values)}

    # ------------------------------------------------------------ many draws
    def many(self, values: dict) -> dict:
        """`{site: (N, *shape)}` draws -> `{key: (N, *shape)}` (keys as in the chunks)."""
        n = int(next(iter(values.values())).shape[0]) if values else 0
        parts = []
        for start in range(0, n, self.chunk):
            part = {k: v[start:start + self.chunk] for k, v in values.items()}
            parts.append(self._part(part))
        keys = parts[0].keys() if parts else ()
        return {k: torch.cat([p[k] for p in parts]) for k in keys}

    def _part(self, part: dict) -> dict:
        """One chunk of draws: the log-likelihood vmapped when the program allows it, the
        replicates too — or, where torch's samplers draw in place into an unbatched
        tensor (``Normal.rsample``: vmap refuses "different inplace randomness"), one
        forward run per draw."""
        with torch.no_grad():
            n = int(next(iter(part.values())).shape[0])
            if self.vmap_failed or self.enumerated:
                rows = [self.one({k: v[i] for k, v in part.items()}) for i in range(n)]
                return {k: torch.stack([r[k] for r in rows]).detach() for k in rows[0]}
            from torch.func import vmap
            out = None
            if not self.rep_vmap_failed:
                self._vmapping = True
                try:
                    out = vmap(self.one, randomness="different")(part)
                except Exception:
                    self.rep_vmap_failed = True
                finally:
                    self._vmapping = False
            if out is None:
                try:
                    out = vmap(self._terms, randomness="error")(part)
                except Exception:
                    self.vmap_failed = True
                    return self._part(part)
                reps = [self._replicates({k: v[i] for k, v in part.items()})
                        for i in range(n)]
                out.update({k: torch.stack([r[k] for r in reps]) for k in reps[0]})
            return {k: v.detach() for k, v in out.items()}

    def _terms(self, values: dict) -> dict:
        out = {layout.LOG_LIK_PREFIX + k: v for k, v in self.log_lik(values).items()}
        if self.with_log_p:
            out["log_p"] = self._log_p
        return out

    def _replicates(self, values: dict) -> dict:
        return {layout.Y_REP_PREFIX + k: v for k, v in self.replicate(values).items()}


def _latent_draws(samples: dict) -> dict:
    """The latent sites' draws of a fit's flat samples dict (no recorded quantities, no
    sampler statistics)."""
    return {k: v for k, v in samples.items()
            if not k.startswith(layout.RECORDED_PREFIX) and not k.startswith("sample_stats.")}


def _groups(model, x, observations: dict, observed: list) -> dict:
    """Integer host data with one entry per data row that reads as a grouping index
    (``hour_of``): values in ``[0, B)`` with repeats.  An integer covariate (eight
    schools' standard errors ``sigma``: 15, 10, 16, ... over 8 rows) is not one."""
    B = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() else None
    out = {}
    for k, v in observations.items():
        if k in observed:
            continue
        t = torch.as_tensor(v)
        if t.dim() == 1 and not t.is_floating_point() and B is not None and t.shape[0] == B \
                and t.numel() and int(t.min()) >= 0 and int(t.max()) < B \
                and int(torch.unique(t).numel()) < B:
            out[layout.GROUP_PREFIX + k] = t.cpu().numpy()
    return out


def record(ctx, result, writer, kind: Optional[str] = None) -> Optional[str]:
    """Write the pointwise terms of a finished fit into `writer`'s record, then the
    checks (``loo.json``, ``ppc.json``).  Returns a warning text, or None."""
    from qvr.events import FitNote
    model, x, observations = ctx.model, ctx.x, ctx.observations
    if model is None or not observations:
        return None
    observed = observed_sites(model, observations)
    per_element = element_scores(model)  # E9.7
    if not observed and not per_element:
        scored = [s.name for s in getattr(_model(model), "steps", ())
                  if getattr(s, "score", False)]
        if scored:  # the likelihood is a sum: it has no terms per observation
            return (f"no pointwise log-likelihood: the program has no `observe` site (its "
                    f"likelihood is the `score` {', '.join(f'`{n}`' for n in scored)}, a "
                    f"sum over the data), so there is no LOO and no predictive check; "
                    f"write the likelihood as an `observe` step, or as a score with one "
                    f"term per element (`score lik : T = …`), to get them")
        return None
    method = ctx.config.method
    # `--resample psis` (methods/guide_resample.py): the run's draws are the guide's
    # draws resampled towards the posterior, read as posterior draws (as Pathfinder's)
    from qvr.inference.criticism.khat import was_resampled
    resampled = was_resampled(method, result.stats)
    kind = kind or ("posterior" if resampled else
                    {"svi": "guide", "prior": "prior"}.get(method, "posterior"))
    importance = None
    if method == "svi" and not resampled:
        guide = result.guide
        if guide is None or not guide.latent_names:
            return None
        if getattr(guide, "point_estimate", False):  # --guide map: one point, no density
            ctx.report(FitNote("no pointwise log-likelihood, LOO or predictive checks: a "
                               "MAP fit is one point, not draws (use --guide laplace)"))
            return None
        with torch.no_grad():
            draws = guide.rsample(x, observations, sample_shape=(GUIDE_DRAWS,))
            log_q = guide.log_prob(x, draws, batch_ndims=1)
        per_chain = [{k: v.detach() for k, v in draws.items()}]
        importance = [log_q.detach()]
    else:
        latent = _latent_draws(result.samples or {})
        if not latent:
            return None
        C = int(next(iter(latent.values())).shape[0])
        dtype = torch.get_default_dtype()
        per_chain = [{k: torch.as_tensor(v[c]).to(device=x.device,
                                                   dtype=dtype if np.issubdtype(
                                                       np.asarray(v).dtype, np.floating)
                                                   else torch.long)
                      for k, v in latent.items()} for c in range(C)]
    names = list(per_chain[0])
    pw = Pointwise(model, x, observations, names)
    pw.with_log_p = importance is not None
    total = int(next(iter(per_chain[0].values())).shape[0])
    writer.save_arrays(layout.OBSERVED, {
        **{n: _np(observations[n]) for n in observed},
        **_groups(model, x, observations, observed)})
    what = ("the prior predictive replicates" if kind == "prior" else
            "the pointwise log-likelihood and predictive replicates")
    # the cost of a draw, measured on a few (vmapped when the program allows it), sets
    # how many draws fit the budget: kept draws are evenly spaced (thinned), never cut
    k = min(total, PROBE_DRAWS)
    t0 = time.perf_counter()
    probe_out = pw.many({n: v[:k] for n, v in per_chain[0].items()})
    cost = (time.perf_counter() - t0) / k
    pw.chunk = _vmap_chunk(cost, pw.chunk)
    N, stride = _kept_draws(total, len(per_chain), cost, ctx.config.pointwise_draws,
                            float(getattr(result, "elapsed", 0.0) or 0.0))
    if stride > 1:
        per_chain = [{n: v[::stride][:N] for n, v in d.items()} for d in per_chain]
        if importance is not None:
            importance = [q[::stride][:N] for q in importance]
    ctx.report(FitNote(f"recording {what} ({len(per_chain)} x {N} draws"
                       + (f", every {_ordinal(stride)} of {total}" if stride > 1 else "") + ")"))
    probe = {n: v[0] for n, v in probe_out.items()}
    elements = sum(int(v.numel()) for v in probe.values())
    size = max(1, min(N, CHUNK_ELEMENTS // max(1, elements)))
    log_lik = {k[len(layout.LOG_LIK_PREFIX):]: list(v.shape) for k, v in probe.items()
               if k.startswith(layout.LOG_LIK_PREFIX)}
    y_rep = {k[len(layout.Y_REP_PREFIX):]: list(v.shape) for k, v in probe.items()
             if k.startswith(layout.Y_REP_PREFIX)}
    writer.meta["pointwise"] = {"kind": kind, "chains": len(per_chain), "draws": N,
                                "thinned_from": total if stride > 1 else None,
                                "stride": stride, "seconds_per_draw": cost,
                                "log_lik": log_lik if kind != "prior" else {},
                                "y_rep": y_rep, "rows": dict(pw.rows),
                                "importance": importance is not None,
                                "replicates": pw.replicates,
                                "no_replicates": {n: NO_REPLICATE for n in per_element}}
    writer.write_json(layout.RUN_JSON, writer.meta)
    for c, draws in enumerate(per_chain):
        for start in range(0, N, size):
            if ctx.stop():
                return "the pointwise terms were stopped early: the record keeps the " \
                       "chunks written"
            part = {k: v[start:start + size] for k, v in draws.items()}
            out = pw.many(part)
            arrays = {k: v.float().cpu().numpy() for k, v in out.items()
                      if not (kind == "prior" and k.startswith(layout.LOG_LIK_PREFIX))}
            if importance is not None:
                arrays["log_q"] = importance[c][start:start + size].float().cpu().numpy()
            writer.save_arrays(layout.pointwise_file(c, start), arrays)
    if pw.replicates != writer.meta["pointwise"]["replicates"]:
        writer.meta["pointwise"]["replicates"] = pw.replicates
        writer.write_json(layout.RUN_JSON, writer.meta)
    from qvr.inference.criticism import checks
    checks.write_checks(writer.path)
    return None


def _vmap_chunk(cost: float, chunk: int) -> int:
    """Draws per vmapped call for draws of `cost` seconds each (as timed on
    `PROBE_DRAWS`): as many as take `CALL_SECONDS`, between `PROBE_DRAWS` and `chunk`."""
    return max(PROBE_DRAWS, min(chunk, int(CALL_SECONDS / max(cost, 1e-9))))


def _kept_draws(total: int, chains: int, cost: float, asked, fit_seconds: float) \
        -> tuple[int, int]:
    """`(draws kept per chain, stride)`: all of them when `asked` (the config's
    ``pointwise_draws``) allows it or, unasked, when they fit the budget — `BUDGET_SHARE`
    of the fit's time, at least `BUDGET_MIN_SECONDS`; else every stride-th draw, at
    least `MIN_DRAWS` in all (a few are better than none: PSIS's k says how reliable)."""
    if asked is not None:
        keep = max(1, min(total, int(asked)))
    else:
        budget = max(BUDGET_MIN_SECONDS, BUDGET_SHARE * fit_seconds)
        keep = int(budget / max(cost, 1e-9) / max(chains, 1))
        keep = max(min(total, -(-MIN_DRAWS // max(chains, 1))), min(total, keep))
    stride = -(-total // keep)
    return len(range(0, total, stride)), stride


def _np(v):
    return v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)


def _ordinal(n: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st ..."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
