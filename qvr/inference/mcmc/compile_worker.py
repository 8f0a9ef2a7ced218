"""``python -m qvr.inference.mcmc.compile_worker JOB``: compile a NUTS transition into the
disk cache in a process of its own (`transition_cache.BackgroundCompile`, issue 37.4).

JOB is a file written by `torch.save` holding the density's FX graph, an initial position
and the transition's settings; the worker runs `transition_cache.compile_transition` on them
(one thread, at a lower priority than the run beside it), writes the package where the
run will look for it, and its note (what it did, or why it could not) to
``KEY.compile-note`` beside it; it deletes JOB, and the run's ``KEY.compiling`` when that
names it.  Exit status 0 when a package was built.  A job with probes (``rows``:
`transition_rows.probes`) then starts a second worker, on a copy of it marked
``rows_only``, that builds the package for every row count (`transition_rows.build`).
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
    if job.get("rows_only"):
        return _rows(job, z0)
    dense, thr, uturn, K, biased, T = job["settings"]
    graph = job["graph"]
    key = transitions.cache_key(graph, z0, dense, thr, uturn, K, biased, T)
    compiled, note = transitions.compile_transition(graph, z0, dense, thr, uturn, K,
                                                    biased, T, directory=directory)
    transitions.write_aside(directory / f"{key}.compile-note",
                            lambda tmp: Path(tmp).write_text(note))
    _release(directory / f"{key}.compiling")
    if compiled is not None and job.get("rows"):
        _start_rows(job, job_path)
    return 0 if compiled is not None else 1


def _start_rows(job: dict, job_path: Path) -> None:
    """Start the worker that builds the package for every row count
    (`transition_rows.build`) from `job`'s probes, in a process of its own: the run waits
    for this one to end, and must not wait for that one."""
    import subprocess
    import torch
    rows_job = job_path.with_name(job_path.name.replace(".job.", ".rows-job."))
    torch.save({**job, "rows_only": True}, rows_job)
    subprocess.Popen([sys.executable, "-m", "qvr.inference.mcmc.compile_worker",
                      str(rows_job)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def _rows(job: dict, z0) -> int:
    """Build the package for every row count (`transition_rows.build`)."""
    from qvr.inference.mcmc import transition_rows
    dense, thr, uturn, K, biased, T = job["settings"]
    graphs, sizes = job["rows"]
    path, _ = transition_rows.build(graphs, sizes, z0, dense, thr, uturn, K, biased, T,
                                    directory=Path(job["directory"]))
    return 0 if path is not None else 1


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
