"""The Pareto k-hat of an approximation in what `qvr run` prints at the end and `qvr show`
prints for a saved run (`qvr.commands.report.khat_lines`): one line with the verdict,
above 0.7 the run's warning with its advice; nothing for a record without a k-hat; the
live display on a terminal keeps the fit's warnings below its table."""
import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from helpers import FUNNEL  # noqa: E402  (Neal's funnel, shared with the k-hat tests)

from qvr.cli import main  # noqa: E402
from qvr.commands.report import render_run  # noqa: E402
from qvr.runs import open_run  # noqa: E402

ADVICE = ("try a richer guide (--guide fullrank, lowrank:K or flow), Pathfinder "
          "(--method pathfinder), or NUTS")


def _warning(k: float) -> str:
    return (f"Pareto k-hat {k:.2f} > 0.7: the mean-field guide is too far from the "
            f"posterior for its draws to be trusted; {ADVICE}")


@pytest.fixture(scope="module")
def funnel_run(tmp_path_factory):
    """`qvr run funnel.qvr --method svi` (the mean-field guide: k-hat above 0.7, see
    tests/inference/test_khat.py): (stdout, stderr, run folder)."""
    tmp = tmp_path_factory.mktemp("khat")
    prog = tmp / "funnel.qvr"
    prog.write_text(FUNNEL)
    import contextlib
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["run", str(prog), "--method", "svi", "--steps", "1500", "--lr", "0.02",
                   "--seed", "1", "--runs-dir", str(tmp / "runs")])
    assert rc == 0, err.getvalue()
    (folder,) = (tmp / "runs").iterdir()
    return out.getvalue(), err.getvalue(), folder


def test_qvr_run_prints_the_khat_line_and_the_warning(funnel_run):
    out, err, folder = funnel_run
    stats = json.loads((folder / "summary.json").read_text())["stats"]
    k = stats["khat"]
    assert k > 0.7 and stats["khat_draws"] == 1000
    lines = out.splitlines()
    assert lines[0].startswith("svi: 1500 steps, final loss ")
    at = lines.index(f"Pareto k-hat {k:.2f} (1000 draws): unreliable (above 0.7)")
    assert lines[at + 1] == f"warning: {_warning(k)}"
    # without a terminal the fit's warning is also one line on stderr, when it came
    assert f"qvr run: warning: {_warning(k)}\n" in err


def test_qvr_show_prints_the_same_lines(funnel_run, capsys):
    out, _, folder = funnel_run
    assert main(["show", str(folder)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1] == "options: seed 1, steps 1500, lr 0.02"
    assert shown[2:] == out.splitlines()


DROP = object()  # `_copy`: take the key out of the stats


def _copy(folder: Path, tmp_path: Path, **stats_edit) -> Path:
    import shutil
    dst = tmp_path / folder.name
    shutil.copytree(folder, dst)
    summary = json.loads((dst / "summary.json").read_text())
    for key, value in stats_edit.items():
        if value is DROP:
            summary["stats"].pop(key, None)
        else:
            summary["stats"][key] = value
    (dst / "summary.json").write_text(json.dumps(summary))
    return dst


def test_a_record_without_khat_has_no_line(funnel_run, tmp_path):
    """A run written before k-hat was recorded (or an MCMC run): no line, no error."""
    _, _, folder = funnel_run
    old = _copy(folder, tmp_path, khat=DROP, khat_draws=DROP)
    text = render_run(open_run(old))
    assert "k-hat" not in text
    assert text.splitlines()[0].startswith("svi: 1500 steps, final loss ")


@pytest.mark.parametrize("edit, lines", [
    ({"khat": 0.31}, ["Pareto k-hat 0.31 (1000 draws): good (below 0.5)"]),
    ({"khat": 0.6405, "khat_draws": 400}, ["Pareto k-hat 0.64 (400 draws): usable (0.5 to 0.7)"]),
    ({"khat": None}, ["Pareto k-hat: none (1000 draws), no tail to fit"]),
    ({"khat": DROP, "khat_draws": DROP, "khat_note": "not computed across ranks"},
     ["Pareto k-hat not computed across ranks"]),
])
def test_the_line_of_each_verdict(funnel_run, tmp_path, edit, lines):
    _, _, folder = funnel_run
    text = render_run(open_run(_copy(folder, tmp_path, **edit))).splitlines()
    assert [ln for ln in text if "k-hat" in ln] == lines


def test_the_warning_is_made_again_when_the_events_lack_it(funnel_run, tmp_path):
    """A record whose events file lost the warning (or never had one: e.g. written by a
    method that does not emit it) still warns, from its stats and its guide option."""
    _, _, folder = funnel_run
    copy = _copy(folder, tmp_path, khat=1.234)
    events = copy / "events.jsonl"
    events.write_text("".join(ln + "\n" for ln in events.read_text().splitlines()
                              if '"type":"warning"' not in ln.replace(" ", "")))
    text = render_run(open_run(copy)).splitlines()
    at = text.index("Pareto k-hat 1.23 (1000 draws): unreliable (above 0.7)")
    assert text[at + 1] == f"warning: {_warning(1.234)}"


def test_on_a_terminal_the_warnings_stay_below_the_live_table():
    from rich.console import Console

    from qvr.commands.progress import Progress
    from qvr.events import FitProgress, FitStarted, FitWarning
    p = Progress(io.StringIO(), force=True)
    p.update(FitStarted("svi", 10, 1, {}))
    p.update(FitProgress("svi", "optimization", 10, 10, 0, {"loss": 1.0}, 1.0))
    p.update(FitWarning("Pareto k-hat 0.98 > 0.7: too far"))
    screen = io.StringIO()
    Console(file=screen, width=120, color_system=None).print(p._render())
    lines = screen.getvalue().splitlines()
    assert lines[-1] == "warning: Pareto k-hat 0.98 > 0.7: too far"
    assert "10/10" in lines[-2]
    before = Progress(io.StringIO(), force=True)  # a warning before the fit started
    before.update(FitWarning("drew 200 synthetic rows instead of 20"))
    screen = io.StringIO()
    Console(file=screen, width=120, color_system=None).print(before._render())
    assert screen.getvalue().strip() == "warning: drew 200 synthetic rows instead of 20"
