"""A run record as text a person can read: what `qvr run` prints at the end and what
`qvr show RUN` prints for any saved run (finished, cancelled, failed, interrupted or
running).  Torch-free: it reads the record with `qvr.runs`.

The summary is grouped by site: one row per site with its shape, the range of its
coordinates' posterior means, and its worst diagnostics (max R-hat, min bulk and tail ESS),
worst R-hat first, at most `MAX_ROWS` rows; then one line saying where the full table
(every coordinate) is.  A recorded quantity (``record v = e``) has its row too, its name
followed by `RECORDED_MARK`.  The site rows are those the fit folded from every coordinate
(``summary.json`` ``"sites"``, `qvr.inference.criticism.diagnostics.site_row`); a record without
them (written before they were) is grouped from its coordinate rows, which then may not
cover every coordinate, and the closing line says so.

A record with pointwise terms (after the fit: `qvr.inference.criticism.checks`) ends with a LOO line
(elpd_loo, its SE, p_loo, the rows, the rows with high Pareto k, at most 5 named) and one
line of predictive checks per observed site (each statistic's p-value, ``(extreme)``
outside 0.025..0.975, the LOO-PIT uniformity p-value, extreme groups).
"""
from __future__ import annotations

import math
import re
from typing import Optional

from qvr.runs.layout import LOO, PPC, RECORDED_PREFIX

MAX_ROWS = 20
#: observed sites given a predictive-checks line (`ppc_lines`)
MAX_CHECK_SITES = 8
#: after a recorded quantity's name (``record v = e``, design E9.6) in the summary table
RECORDED_MARK = " (recorded)"
_LABEL = re.compile(r"^(?P<site>[^\[]+)(\[(?P<idx>[0-9,]+)\])?$")


def _nan_last(groups: list[dict]) -> list[dict]:
    groups.sort(key=lambda g: (math.isnan(g["r_hat"]), -g["r_hat"] if not math.isnan(g["r_hat"])
                               else 0.0, g["site"]))
    return groups


def site_groups(sites: dict) -> list[dict]:
    """The rows of ``summary.json`` ``"sites"`` in the form of `group_rows`, worst R-hat
    first."""
    out = []
    for site, row in sites.items():
        def get(k):
            v = row.get(k)
            return float("nan") if v is None else float(v)
        out.append({"site": site, "shape": tuple(row.get("shape") or ()),
                    "n": int(row.get("size", row.get("n", 1)) or 0),
                    "recorded": bool(row.get("recorded")),
                    **{k: get(k) for k in ("mean_lo", "mean_hi", "sd", "q5", "q95",
                                           "ess_bulk", "ess_tail", "r_hat")}})
    return _nan_last(out)


def group_rows(parameters: dict, shapes: Optional[dict] = None) -> list[dict]:
    """Summary rows (``{"site[i,j]": {column: value}}``) grouped by site: one dict per site
    with ``site``, ``shape``, ``n`` (coordinates summarised), ``mean_lo``/``mean_hi``,
    ``sd`` (median), ``q5`` (min), ``q95`` (max), ``ess_bulk``/``ess_tail`` (min),
    ``r_hat`` (max), sorted worst R-hat first (NaN last), then by site."""
    groups: dict[str, list] = {}
    idx_max: dict[str, list] = {}
    for label, row in parameters.items():
        m = _LABEL.match(label)
        site = m.group("site") if m else label
        groups.setdefault(site, []).append(row)
        if m and m.group("idx"):
            idx = [int(i) for i in m.group("idx").split(",")]
            prev = idx_max.setdefault(site, [0] * len(idx))
            idx_max[site] = [max(a, b) for a, b in zip(prev, idx)]
    out = []
    for site, rows in groups.items():
        if shapes and site in shapes:
            shape = tuple(shapes[site])
        elif site in idx_max:
            shape = tuple(i + 1 for i in idx_max[site])
        else:
            shape = ()
        def col(c):
            return [r[c] for r in rows if c in r and r[c] is not None and
                    not (isinstance(r[c], float) and math.isnan(r[c]))]
        def agg(c, f):
            v = col(c)
            return f(v) if v else float("nan")
        sds = sorted(col("sd"))
        out.append({"site": site, "shape": shape, "n": len(rows),
                    "mean_lo": agg("mean", min), "mean_hi": agg("mean", max),
                    "sd": sds[len(sds) // 2] if sds else float("nan"),
                    "q5": agg("q5", min), "q95": agg("q95", max),
                    "ess_bulk": agg("ess_bulk", min), "ess_tail": agg("ess_tail", min),
                    "r_hat": agg("r_hat", max)})
    return _nan_last(out)


def _f(v, spec=".3g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def _shape(shape) -> str:
    if not shape or tuple(shape) == (1,):
        return "scalar"
    return "×".join(map(str, shape))


def summary_table(parameters: dict, shapes: Optional[dict] = None,
                  max_rows: int = MAX_ROWS, sites: Optional[dict] = None) -> tuple[str, int]:
    """The grouped table as text, and the number of sites not shown: the `sites` rows
    when given (``summary.json`` ``"sites"``), else `parameters` grouped by site."""
    groups = site_groups(sites) if sites else group_rows(parameters, shapes)
    if not groups:
        return "(no latent sites)", 0
    has_diag = any(not math.isnan(g["r_hat"]) for g in groups)
    head = ["site", "shape", "mean", "sd", "5%", "95%"] + \
        (["ess_bulk", "ess_tail", "r_hat"] if has_diag else [])
    rows = []
    for g in groups[:max_rows]:
        mean = _f(g["mean_lo"]) if g["n"] == 1 else \
            f"{_f(g['mean_lo'])} .. {_f(g['mean_hi'])}"
        name = g["site"] + (RECORDED_MARK if g.get("recorded") else "")
        row = [name, _shape(g["shape"]), mean, _f(g["sd"]), _f(g["q5"]), _f(g["q95"])]
        if has_diag:
            row += [_f(g["ess_bulk"], ".0f"), _f(g["ess_tail"], ".0f"), _f(g["r_hat"], ".3f")]
        rows.append(row)
    return "\n".join(_aligned(head, rows, left=3)), max(0, len(groups) - max_rows)


def _aligned(head: list, rows: list, left: int) -> list[str]:
    """`head` and `rows` as lines of columns, the first `left` ones left-aligned, the
    rest right-aligned."""
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
    return ["  ".join(c.ljust(w) if i < left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))) for r in [head, *rows]]


def _site_shapes(run) -> dict:
    try:
        samples = run.samples()
    except Exception:
        return {}
    return {k[len(RECORDED_PREFIX):] if k.startswith(RECORDED_PREFIX) else k: tuple(v.shape[2:])
            for k, v in samples.items() if not k.startswith("sample_stats.") and v.ndim >= 2}


def _stopped_before_drawing(summary: Optional[dict], status: str) -> bool:
    """An MCMC run cancelled (or cut short) before its first draw."""
    return status != "finished" and (summary or {}).get("stats", {}).get("num_samples") == 0


def headline(run, summary: Optional[dict]) -> str:
    method = run.method
    status = run.status
    stats = (summary or {}).get("stats", {})
    state = "" if status == "finished" else f" [{status}]"
    if method == "svi":
        batch = ""
        if stats.get("batch_size"):  # minibatch SVI (qvr.inference.data.minibatch)
            batch = (f", batches of {stats['batch_size']:,} of {stats.get('rows', 0):,} rows "
                     f"({_f(stats.get('epochs'), '.4g')} epochs)")
        if int(stats.get("world_size", 1) or 1) > 1:
            batch += f", {stats['world_size']} processes"
        return (f"svi: {stats.get('steps', '?')} steps, final loss "
                f"{_f(stats.get('final_loss'), '.6g')}{batch}{state}")
    if method == "pathfinder" and "paths" in stats:
        failed = int(stats.get("failed_paths", 0) or 0)
        elbo = [e for e in stats.get("elbo") or [] if e is not None]
        return (f"pathfinder: {stats['paths']} paths" + (f" ({failed} failed)" if failed else "")
                + f", {stats.get('gradient_evaluations', '?')} gradient evaluations, "
                f"{stats.get('draws', '?')} draws"
                + (" resampled (adaptive importance sampling)" if stats.get("amis_resampled")
                   else " resampled (PSIS)" if stats.get("resampled") else "")
                + (f", best ELBO {_f(max(elbo), '.6g')}" if elbo else "") + state)
    if method == "prior":
        return (f"prior: {stats.get('num_samples', '?')} draws from the prior predictive "
                f"(nothing fitted){state}")
    if method == "predict":  # `qvr predict` (qvr.inference.front.predict)
        return predict_headline(run, summary) + state
    if method == "smc" and "log_Z" in stats:
        return (f"smc: log Z = {_f(stats.get('log_Z'), '.6f')}, {stats.get('num_steps', '?')} "
                f"steps, {stats.get('num_finished', '?')} finished, "
                f"{stats.get('num_truncated', '?')} truncated{state}")
    if not stats:
        return f"{method}: no summary{state}"
    if "log_marginal_likelihood" in stats:
        if str(stats.get("note", "")).startswith("an exported morphism"):
            return (f"{method}: an exported morphism has no latent site to sample (fit its "
                    f"parameters with SVI); log-likelihood of the data "
                    f"{_f(stats['log_marginal_likelihood'], '.6g')}{state}")
        return (f"{method}: no continuous latent site to sample (finite latents summed out); "
                f"log marginal likelihood {_f(stats['log_marginal_likelihood'], '.6g')}{state}")
    if _stopped_before_drawing(summary, status):
        return (f"{method}: {stats.get('num_chains', '?')} chains, stopped before the first "
                f"draw{state}")
    eps = ", ".join(_f(v) for v in stats.get("step_sizes", []))
    compiled = {"inductor": ", steps compiled by Inductor",
                "transition": ", transitions compiled (C++ loop)"}.get(stats.get("compiler"), "")
    return (f"{method}: {stats.get('num_chains', '?')} chains x {stats.get('num_samples', '?')} "
            f"draws, acceptance {_f(stats.get('mean_acceptance'), '.3f')}, divergences "
            f"{stats.get('total_divergences', '?')}, step sizes {eps}, min bulk ESS "
            f"{_f(stats.get('min_ess_bulk'), '.0f')}, max R-hat "
            f"{_f(stats.get('max_r_hat'), '.3f')}{compiled}{state}")


def render_run(run, max_rows: int = MAX_ROWS) -> str:
    """The text of a run: headline, grouped summary (or SMC sequences), where the rest is."""
    summary = run.summary
    out = [headline(run, summary)]
    status = run.status
    if status == "failed":
        out.append(f"failed: {failure_message(run, summary)}")
    if summary is None:
        out.append(_partial(run, status))
    elif run.method == "predict":
        out += predict_lines(run, summary, max_rows)
        return "\n".join(out)
    elif run.method == "smc":
        if run.sequences is not None:
            out.append(_sequences(run))
        elif status != "failed":  # a failed run said what happened above
            out.append(f"no sequences were recorded ({status})")
    else:
        params = summary.get("parameters", {})
        sites = summary.get("sites")
        truncated = int(summary.get("truncated", 0) or 0)
        table, hidden = summary_table(params, None if sites else _site_shapes(run), max_rows,
                                      sites=sites)
        if not params and not sites and _stopped_before_drawing(summary, status):
            table = "(no draws to summarise)"
        out.append(table)
        n = len(params) + truncated
        more = f"{hidden} more sites; " if hidden else ""
        if params and truncated:  # a record from before summaries were complete
            out.append(f"({more}the first {len(params)} of {n} coordinates in "
                       f"{run.path / 'summary.txt'}; the rows above cover those only)")
        elif params:
            out.append(f"({more}every coordinate ({n}) in {run.path / 'summary.txt'})")
    fallback = (summary or {}).get("stats", {}).get("compile_fallback")
    if fallback:  # NUTS's transition did not compile: the run went on leaf by leaf
        out.append(f"note: {fallback}")
    out += khat_lines(run, summary)  # SVI, Laplace, Pathfinder: how good the approximation is
    if run.method in ("hmc", "nuts") and summary is not None and status == "finished":
        from qvr.inference.criticism.diagnostics import check_warnings
        out += [f"warning: {w}" for w in check_warnings(
            summary.get("stats", {}), run.method, (run.config or {}).get("mass_matrix"))]
    if run.method != "smc":
        out += checks_lines(run)
    return "\n".join(out)


def khat_lines(run, summary: Optional[dict]) -> list[str]:
    """The Pareto k-hat of an approximation's draws against the model
    (`qvr.inference.criticism.khat_text.khat_line`), then above 0.7 the warning the run
    emitted (``warning: Pareto k-hat 0.98 > 0.7: ...``, with the usual advice); nothing for
    a record without a k-hat (MCMC, SMC, or written before k-hat was recorded)."""
    from qvr.inference.criticism.khat_text import khat_line, recorded_khat_warning
    stats = (summary or {}).get("stats") or {}
    line = khat_line(stats)
    if line is None:
        return []
    events = ()
    if recorded_khat_warning(stats, run.method) is not None:  # only then: read the events
        try:
            events = run.events(load_draws=False)
        except Exception:  # a damaged events file: the warning is made again from stats
            events = ()
    warning = recorded_khat_warning(stats, run.method, (run.config or {}).get("guide"),
                                    events)
    return [line] + ([f"warning: {warning}"] if warning else [])


def checks_lines(run, max_sites: int = MAX_CHECK_SITES) -> list[str]:
    """The LOO line and one predictive-checks line per observed site (`loo_line`,
    `ppc_lines`) of a record with pointwise terms (``loo.json``/``ppc.json``, computed by
    `qvr.runs.Run.loo`/`ppc` when missing); none for a record without them."""
    lines = []
    try:
        if run.pointwise_meta is None and not (run.path / LOO).exists() and \
                not (run.path / PPC).exists():
            return []
        found = run.loo()
        if found is not None:
            lines.append(loo_line(found))
        checked = run.ppc()
        if checked is not None:
            lines += ppc_lines(checked, max_sites)
        for name, why in ((run.pointwise_meta or {}).get("no_replicates") or {}).items():
            lines.append(f"  {name}: no predictive check: {why}")  # E9.7 element scores
    except Exception as exc:  # a damaged record: say so, show the rest
        lines.append(f"checks: unreadable ({type(exc).__name__}: {exc})")
    return lines


def loo_line(found: dict) -> str:
    """``LOO: elpd_loo -1234.5 (SE 20.1), p_loo 12.3, 72 rows; Pareto k: ...``."""
    if "error" in found:
        return f"LOO: failed: {found['error']}"
    good = found.get("good_k", 0.7)
    n_high = int(found.get("n_high_k", len(found.get("high_k", []))))
    if not n_high:
        k_text = f"all below {good:.2f}"
    else:
        shown = ", ".join(f"{h['label']} {h['k']:.2f}" for h in found.get("high_k", [])[:5])
        more = f", {n_high - 5} more" if n_high > 5 else ""
        k_text = f"{n_high} row{'s' if n_high != 1 else ''} above {good:.2f} ({shown}{more})"
    guide = " (guide draws, PSIS-corrected)" if found.get("method") == "psis-guide" else ""
    return (f"LOO: elpd_loo {_f(found.get('elpd_loo'), '.1f')} (SE "
            f"{_f(found.get('se'), '.1f')}), p_loo {_f(found.get('p_loo'), '.1f')}, "
            f"{found.get('n_rows', '?')} {'rows' if found.get('rows') == 'row' else 'terms'}"
            f"{guide}; Pareto k: {k_text}")


def ppc_lines(checked: dict, max_sites: int = MAX_CHECK_SITES) -> list[str]:
    """``Predictive checks (posterior, 4000 draws):`` then per site ``y: mean p=0.48, sd
    p=0.01 (extreme), ...; LOO-PIT uniformity p=0.32; hour_of: 3 of 24 groups extreme``."""
    if "error" in checked:
        return [f"Predictive checks: failed: {checked['error']}"]
    sites = checked.get("sites") or {}
    if not sites:
        return []
    lines = [f"Predictive checks ({checked.get('kind', 'posterior')}, "
             f"{checked.get('draws', '?')} draws):"]
    for name, site in list(sites.items())[:max_sites]:
        if "error" in site:
            lines.append(f"  {name}: failed: {site['error']}")
            continue
        parts = [f"{k} p={_f(v.get('p_value'), '.2f')}" + (" (extreme)" if v.get("extreme")
                                                          else "")
                 for k, v in (site.get("stats") or {}).items()]
        text = f"  {name}: " + ", ".join(parts)
        pit = site.get("loo_pit")
        if pit:
            text += (f"; LOO-PIT uniformity p={_f(pit.get('p_value'), '.2f')}"
                     + (" (outside the band)" if pit.get("outside") else ""))
        for gname, g in (site.get("groups") or {}).items():
            text += f"; {gname}: {g.get('n_extreme', 0)} of {g.get('n_groups', 0)} groups extreme"
        lines.append(text)
    if len(sites) > max_sites:
        lines.append(f"  ({len(sites) - max_sites} more sites in ppc.json)")
    return lines


def failure_message(run, summary: Optional[dict] = None) -> str:
    """Why a failed run failed, from the record: the summary's message, else the
    `FitFailed` event's, else the last line of ``error.txt``."""
    if summary and summary.get("message"):
        return str(summary["message"])
    for ev in reversed(run.events(load_draws=False)):
        if type(ev).__name__ == "FitFailed" and ev.message:
            return ev.message
    lines = (run.error or "").strip().splitlines()
    return lines[-1] if lines else "no message was recorded"


def _partial(run, status: str) -> str:
    events = run.events(load_draws=False)
    steps = [e for e in events if type(e).__name__ == "FitProgress"]
    if not steps:
        return f"no step was recorded ({status})"
    last = steps[-1]
    per = run.draws_per_chain() if run.method in ("hmc", "nuts") else {}
    draws = f", draws per chain {dict(sorted(per.items()))}" if per else ""
    return (f"{status}: last recorded step {last.step}/{last.total} ({last.phase}){draws}; "
            f"no summary was written")


def _sequences(run) -> str:
    seqs = run.sequences or {}
    top = seqs.get("top", [])[:int(run.config.get("top", 10) or 10)]
    # E10: a steering program's score steps (said also when they ruled everything out)
    said = [f"potentials: {', '.join(seqs['potentials'])} (from the program)"] \
        if seqs.get("potentials") else []
    if not top:
        return "\n".join(said + ["no sequence has positive weight (every particle was "
                                  "ruled out)"])
    lines = [f"{'weight':>10}  {'len':>4}  sequence"]
    if seqs.get("lm"):  # a pretrained LM (--lm): the texts continue the prompt
        lines.insert(0, f"{seqs['lm']}, continuing {seqs.get('prompt', '')!r}:")
    lines[:0] = said
    for item in top:
        end = "" if item.get("ends_with_eos") else "  [max length]"
        text = item["text"] if item.get("text") is not None else \
            " ".join(map(str, item.get("tokens", [])))
        text = text if text != "" else "(empty: the end token first)"
        lines.append(f"{item.get('weight', 0.0):10.6f}  {len(item.get('tokens', [])):4d}  "
                     f"{text}{end}")
    return "\n".join(lines)


def predict_headline(run, summary: Optional[dict]) -> str:
    """``predict: kid_score at 5 new rows, 2 chains x 50 draws of RUN (nuts)``."""
    stats = (summary or {}).get("stats", {})
    source = run.meta.get("predicted_from") or {}
    names = list((summary or {}).get("predicted") or []) + list(
        (summary or {}).get("recorded") or [])
    what = ", ".join(names) if names else "the observed sites"
    rows = stats.get("rows")
    at = f" at {rows} new row{'s' if rows != 1 else ''}" if rows is not None else ""
    thinned = f" (every {stats['stride']}th)" if (stats.get("stride") or 1) > 1 else ""
    return (f"predict: {what}{at}, {stats.get('num_chains', '?')} chains x "
            f"{stats.get('num_samples', '?')} draws{thinned} of "
            f"{source.get('run_id', '?')} ({source.get('method', '?')})")


def predict_lines(run, summary: dict, max_rows: int = MAX_ROWS) -> list[str]:
    """A prediction's table: one row per element (mean, sd, 5/50/95 %), at most
    `max_rows`, then where the rest is (`qvr.inference.front.predict`)."""
    params = summary.get("parameters") or {}
    recorded = set(summary.get("recorded") or [])
    lines = []
    data = (run.meta.get("data") or {})
    if data.get("path") or data.get("name"):
        lines.append(f"new data: {data.get('path') or data.get('name')}")
    if not params:
        return lines + ["(nothing was predicted)"]
    head = ["element", "mean", "sd", "5%", "50%", "95%"]
    rows = []
    for label, row in list(params.items())[:max_rows]:
        site = _LABEL.match(label)
        name = label + (RECORDED_MARK if site and site.group("site") in recorded else "")
        rows.append([name] + [_f(row.get(c)) for c in ("mean", "sd", "q5", "q50", "q95")])
    lines += _aligned(head, rows, left=1)
    hidden = len(params) - len(rows)
    more = f"{hidden} more elements; " if hidden > 0 else ""
    lines.append(f"({more}every element ({len(params)}) in {run.path / 'summary.txt'}, "
                 f"the draws in {run.path / 'samples.npz'})")
    return lines
