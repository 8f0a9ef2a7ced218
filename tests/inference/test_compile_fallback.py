"""A NUTS transition that does not compile says so where the user looks (issue 36.10):
a `FitNote` (the console's progress output, the dashboard), the run record's compiler
notes and `compile_fallback`, and the summary `qvr run` / `qvr show` print."""
import torch

import qvr
from qvr.inference import FitConfig, fit
from qvr.events import FitNote
from qvr.inference.mcmc import nuts
from qvr.inference.mcmc import transition as TR
from qvr.inference.mcmc import transition_cache as TC
from qvr.inference.mcmc import transition_graph as TG

SRC = """
object Obs : FinSet 3
program m : Obs -> Obs
    sample mu <- Normal(0.0, 1.0)
    observe y : Obs <- Normal(mu, 1.0)
    return y
export m
"""

WHY = ("the transition did not compile: RuntimeError: Expected positional argument for "
       "parameter arg46_1, but one was not passed in!")
NOTE = WHY + "; NUTS goes on without it, leaf by leaf (slower)"


def test_a_failed_compile_is_said_in_the_events_the_record_and_the_summary(
        monkeypatch, tmp_path):
    import torch._inductor

    def build(*a, **k):  # the C++ build fails as gp_regr's did
        raise RuntimeError("Expected positional argument for parameter arg46_1, but one "
                           "was not passed in!")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", build)
    monkeypatch.setattr(TC, "cache_dir", lambda: tmp_path / "transitions")
    monkeypatch.setenv("QVR_MCMC_COMPILER", "transition")
    events = []
    res = fit(qvr.loads(SRC), {"y": [0.3, -0.2, 0.9]},
              FitConfig(method="nuts", num_warmup=20, num_samples=20, num_chains=2, seed=0),
              on_event=events.append, run_dir=tmp_path / "run")
    assert res.status == "finished"
    notes = [e.message for e in events if isinstance(e, FitNote)]
    assert notes[:2] == ["compiling NUTS to C++ (once per model: tens of seconds)", NOTE]
    assert nuts.fallback_note(WHY) == NOTE
    assert res.stats["compiler"] == "torchscript"
    assert res.stats["compiler_notes"] == [NOTE]
    assert res.stats["compile_fallback"] == NOTE
    from qvr.commands.report import render_run
    from qvr.runs import open_run
    run = open_run(tmp_path / "run")
    assert run.summary["stats"]["compile_fallback"] == NOTE
    assert run.summary["stats"]["compiler_notes"] == [NOTE]
    recorded = [e.message for e in run.events() if isinstance(e, FitNote)]
    assert recorded == notes
    lines = render_run(run).splitlines()
    assert f"note: {NOTE}" in lines
    # the dashboard's results pane (its `ⓘ` line)
    from qvr_tui.results_model import load_results
    assert load_results(run).note == NOTE
    # the console's plain progress (a pipe, CI, the dashboard's worker) prints the note
    import io
    from qvr.commands.progress import Progress
    out = io.StringIO()
    progress = Progress(out, force=False)
    for e in events:
        progress.update(e)
    assert f"qvr run: {NOTE}\n" in out.getvalue()


def test_a_compiled_run_has_no_fallback(monkeypatch):
    monkeypatch.setenv("QVR_MCMC_COMPILER", "torchscript")
    res = fit(qvr.loads(SRC), {"y": [0.3, -0.2, 0.9]},
              FitConfig(method="nuts", num_warmup=10, num_samples=10, num_chains=2, seed=0))
    assert res.stats["compile_fallback"] is None
