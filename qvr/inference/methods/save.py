"""What a fit leaves in its run record besides the events (`qvr.runs.layout`): the
summary, the fitted parameters, the draws with their sampler statistics, the losses,
the SMC sequences and the attention circuits and patterns.  Called by `fit` for every status, so a cancelled or failed fit keeps
what it had."""
from __future__ import annotations

import numpy as np

from qvr.runs import layout


def summary_rows(summary) -> dict:
    return summary.to_dict() if summary is not None else {}


def save_results(writer, result, status: str, message: str) -> None:
    stats = {k: v for k, v in (result.stats or {}).items()}
    writer.write_json(layout.SUMMARY, {"status": status, "message": message,
                                       "method": result.method, "stats": stats,
                                       "parameters": summary_rows(result.summary),
                                       "truncated": getattr(result.summary, "truncated", 0)})
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
    # SVI's draws from the fitted guide are not saved: `params.npz` holds the guide (its
    # locations and scales), from which they are drawn again at will, and the draws of a
    # model with many local latents are large (writing them cost ~10% of a short fit)
    if result.sequences is not None:
        writer.write_json(layout.SEQUENCES, result.sequences)
    if result.circuits is not None:  # a program with attention (methods/circuits.py)
        writer.save_arrays(layout.CIRCUITS, result.circuits.circuit_arrays())
        writer.save_arrays(layout.PATTERNS, result.circuits.patterns)
    if result.summary is not None:
        writer.write_text("summary.txt", str(result.summary) + "\n")
