"""``python -m qvr.inference.mcmc.compile_worker JOB``: compile a NUTS transition into the
disk cache in a process of its own (`transition_cache.BackgroundCompile`, issue 37.4).

JOB is a file written by `torch.save` holding the density's FX graph, an initial position
and the transition's settings; the worker runs `transition_cache.compile_transition` on them
(one thread, at a lower priority than the run beside it), writes the package where the
run will look for it, and its note (what it did, or why it could not) to
``KEY.compile-note`` beside it; it deletes JOB, and the run's ``KEY.compiling`` when that
names it.  Exit status 0 when a package was built.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_path = Path(argv[0])
    try:
        os.nice(5)  # the run beside it keeps its priority
    except OSError:
        pass
    import torch
    torch.set_num_threads(1)
    from qvr.inference.mcmc import transition_cache as transitions
    job = torch.load(job_path, weights_only=False)
    job_path.unlink(missing_ok=True)
    directory = Path(job["directory"])
    z0 = job["z0"].to(job["device"])
    dense, thr, uturn, K, biased, T = job["settings"]
    graph = job["graph"]
    key = transitions.cache_key(graph, z0, dense, thr, uturn, K, biased, T)
    compiled, note = transitions.compile_transition(graph, z0, dense, thr, uturn, K,
                                                    biased, T, directory=directory)
    transitions.write_aside(directory / f"{key}.compile-note",
                            lambda tmp: Path(tmp).write_text(note))
    _release(directory / f"{key}.compiling")
    return 0 if compiled is not None else 1


def _release(lock: Path) -> None:
    """Remove the run's `KEY.compiling` when it names this worker: a run that ended before
    the compile leaves it behind, and its pid, once reused by another process, would
    make every later run of the model wait for a compile that is not running."""
    try:
        if int(lock.read_text().strip()) == os.getpid():
            lock.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
