"""Driving the Results and Runs panes (open, sort, filter, plots, heatmap, overlay) never
imports torch: checked in a fresh interpreter."""
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent("""
    import asyncio, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, {here!r})
    from conftest import Harness
    from results_fixtures import copy_runs
    from qvr_tui.screens.results import ResultsPane
    from qvr_tui.screens.runs import RunsPane

    async def main():
        runs, program = copy_runs(Path(tempfile.mkdtemp()))
        res, lst = ResultsPane(runs / "nuts", program_path=program), RunsPane(program, runs)
        app = Harness(res, lst)
        async with app.run_test(size=(100, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            res.query_one("#summary").focus()
            await pilot.press("s", "down", "enter", "down", "h", "m")
            for name in ("interrupted", "svi", "failed"):
                res.show_run(runs / name)
                await app.workers.wait_for_complete()
            res.show_run(Path({smc!r}))
            await app.workers.wait_for_complete()
            assert res.results is not None and res.results.method == "smc", res.load_error
            lst.overlay([runs / "nuts", runs / "interrupted"])
            await pilot.pause()
            assert len(lst.overlay_series) == 2, lst.overlay_series
        bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        print("TORCH" if bad else "CLEAN", bad[:5])

    asyncio.run(main())
""")


def test_panes_never_import_torch():
    code = SCRIPT.format(here=str(HERE), smc=str(HERE / "fixtures" / "runs" / "smc"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "CLEAN []"
