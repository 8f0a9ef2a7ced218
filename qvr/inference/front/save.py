"""What a fit leaves in its run record besides the events (`qvr.runs.layout`): the
summary, the fitted parameters, the draws with their sampler statistics, the losses,
the SMC sequences and the attention circuits and patterns.  Called by `fit` for every
status, so a cancelled or failed fit keeps what it had.

The summary is complete: ``summary.json`` holds every coordinate's row and one row per
site folded from all of its coordinates (``"sites"``), ``summary.txt`` the table of every
coordinate.  Why complete: a site's row must fold all its coordinates (its shape, its
worst R-hat), and the files are small beside the draws.  Measured (one torch thread, two
shared cores): transformer_lm SVI on its shipped data, 7,296 coordinates of 1,000 guide
draws: the summary 0.32 s (0.02 s for the first 200), writing ``summary.json`` (1.2 MB,
one line per row) and ``summary.txt`` (0.46 MB) 0.05 s; NUTS, 4 chains x 500 draws of
3,001 coordinates: the summary 2.6 s (0.10 s for 200; the ESS autocovariance FFTs are most
of it), writing 0.04 s (0.85 MB).  The cost is linear in the number of coordinates (a
rank normalisation shared by bulk ESS and R-hat and `ndtri` looked up per rank halved it:
3,000 coordinates x 4 chains x 500 draws 5.5 -> 2.7 s on a loaded machine, the same
numbers bit for bit)."""
from __future__ import annotations

import json

import numpy as np

from qvr.inference.criticism.khat import was_resampled
from qvr.runs import layout
from qvr.runs.writer import json_default


def summary_rows(summary) -> dict:
    """Every coordinate's row (``{"site[i,j]": {column: value}}``)."""
    return summary.to_dict() if summary is not None else {}


def summary_sites(summary) -> dict:
    """One row per site over all its coordinates (``{site: {"shape", "size", "n",
    "mean_lo", "mean_hi", "sd", ..., "r_hat"}}``, `qvr.inference.criticism.diagnostics.site_row`)."""
    return summary.sites_dict() if summary is not None else {}


def summary_json(obj: dict) -> str:
    """``summary.json``'s text: indented, but one line per site and per coordinate row
    (a record of thousands of coordinates stays a few hundred bytes per row, and its
    readers parse it as fast as compact JSON)."""
    def dump(v):
        return json.dumps(v, allow_nan=True, default=json_default)
    parts = []
    for key, value in obj.items():
        if key in ("sites", "parameters") and isinstance(value, dict) and value:
            rows = ",\n".join(f"    {dump(k)}: {dump(v)}" for k, v in value.items())
            parts.append(f"  {dump(key)}: {{\n{rows}\n  }}")
        else:
            text = json.dumps(value, indent=2, allow_nan=True, default=json_default)
            parts.append(f"  {dump(key)}: " + text.replace("\n", "\n  "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def save_results(writer, result, status: str, message: str) -> None:
    stats = {k: v for k, v in (result.stats or {}).items()}
    writer.write_text(layout.SUMMARY, summary_json(
        {"status": status, "message": message, "method": result.method, "stats": stats,
         "sites": summary_sites(result.summary),
         "recorded": list(getattr(result.summary, "recorded", None) or []),  # E9.6
         "parameters": summary_rows(result.summary),
         "truncated": getattr(result.summary, "truncated", 0)}))
    if result.params:
        writer.save_arrays(layout.PARAMS, result.params)
    if result.losses:
        writer.save_array(layout.LOSSES, np.asarray(result.losses, dtype=np.float64))
    if result.mcmc is not None:
        r = result.mcmc
        stats_arrays = {"sample_stats.log_density": r.log_densities,
                        "sample_stats.diverging": r.diverging,
                        "sample_stats.accept_prob": r.accept_probs,
                        "sample_stats.tree_depth": r.tree_depths,
                        "sample_stats.num_steps": r.num_steps,
                        "sample_stats.step_size": r.step_sizes,
                        "sample_stats.energy": r.energies}
        writer.save_arrays(layout.SAMPLES, {
            **result.samples,
            **{k: v.detach().cpu().numpy() for k, v in stats_arrays.items() if v is not None}})
    elif (result.method in ("prior", "pathfinder") or was_resampled(result.method, stats)) \
            and result.samples:
        # the prior draws (methods/prior.py), Pathfinder's resampled draws (one chain),
        # SVI's draws resampled by --resample psis (methods/guide_resample.py)
        writer.save_arrays(layout.SAMPLES, result.samples)
    # SVI's draws from the fitted guide are not saved: `params.npz` holds the guide (its
    # locations and scales), from which they are drawn again at will, and the draws of a
    # model with many local latents are large (writing them cost ~10% of a short fit);
    # resampled ones cannot be drawn again, so they are
    if result.sequences is not None:
        writer.write_json(layout.SEQUENCES, result.sequences)
    if result.circuits is not None:  # a program with attention (methods/circuits.py)
        writer.save_arrays(layout.CIRCUITS, result.circuits.circuit_arrays())
        writer.save_arrays(layout.PATTERNS, result.circuits.patterns)
    if result.summary is not None:
        writer.write_text(layout.SUMMARY_TEXT, str(result.summary) + "\n")
